package guardian_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// TestSecurityHeaders: every answer, the console page and the API alike, refuses to be
// framed and sniffed, leaks no referrer, and carries a policy that allows the console's own
// scripts only; over TLS it also pins HTTPS (HSTS).
func TestSecurityHeaders(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ui := fstest.MapFS{
		"index.html":  {Data: []byte(`<!doctype html><script type="module" src="./assets/a.js"></script>`)},
		"assets/a.js": {Data: []byte(`console.log(1)`)},
	}
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, UI: ui})
	require.NoError(t, err)

	for _, tls := range []bool{false, true} {
		srv := httptest.NewUnstartedServer(g.Handler())
		if tls {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		client := srv.Client()
		for _, tt := range []struct {
			method, path string
			console      bool
		}{
			{"GET", "/", true},
			{"GET", "/sessions/x", true},
			{"GET", "/assets/a.js", true},
			{"GET", "/api/sessions", false},
			{"GET", "/api/nope", false},
			{"POST", "/aos", false},
		} {
			name := tt.method + " " + tt.path
			if tls {
				name = "tls " + name
			}
			t.Run(name, func(t *testing.T) {
				req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader("{}"))
				require.NoError(t, err)
				resp, err := client.Do(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				h := resp.Header
				require.Equal(t, "DENY", h.Get("X-Frame-Options"))
				require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
				require.Equal(t, "no-referrer", h.Get("Referrer-Policy"))
				csp := h.Get("Content-Security-Policy")
				require.Contains(t, csp, "frame-ancestors 'none'")
				if tt.console {
					require.Contains(t, csp, "script-src 'self';")
					require.NotContains(t, csp, "'unsafe-eval'")
					require.Contains(t, csp, "connect-src 'self' ws://"+req.URL.Host+" wss://"+req.URL.Host)
				} else {
					require.Contains(t, csp, "default-src 'none'")
				}
				if tls {
					require.Equal(t, "max-age=31536000", h.Get("Strict-Transport-Security"))
				} else {
					require.Empty(t, h.Get("Strict-Transport-Security"), "HSTS on plain HTTP is ignored and misleading")
				}
			})
		}
		srv.Close()
	}
}
