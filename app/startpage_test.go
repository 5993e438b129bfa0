package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartPageEmbedsURLSafely(t *testing.T) {
	u, err := consoleURL(`http://127.0.0.1:7878/?x=</script><script>alert(1)</script>&y="'`)
	require.NoError(t, err)
	page, err := startPage(`Vigil <b>`, u)
	require.NoError(t, err)
	s := string(page)

	require.Equal(t, 1, strings.Count(s, "</script>"), "the URL must not close the script element")
	require.NotContains(t, s, "<script>alert(1)")
	require.NotContains(t, s, "<b>", "the title is text, not markup")
	require.Contains(t, s, "Vigil &lt;b&gt;")
	require.Contains(t, s, "window.location.replace(target)")
	require.Contains(t, s, "new URL(next).origin === new URL(target).origin", "?next= stays within the console's origin")
	require.Contains(t, s, `<p id="hint" hidden>`)
	require.Contains(t, s, `"http://127.0.0.1:7878/?x=\u003c/script\u003e`)
}

func TestStartPageHandler(t *testing.T) {
	u, err := url.Parse("http://127.0.0.1:7878/")
	require.NoError(t, err)
	h, err := startPageHandler("Vigil", u)
	require.NoError(t, err)

	tests := []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/", http.StatusOK},
		{http.MethodGet, "/index.html", http.StatusOK},
		{http.MethodHead, "/", http.StatusOK},
		{http.MethodGet, "/api/live", http.StatusNotFound},
		{http.MethodGet, "/assets/app.js", http.StatusNotFound},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, "wails://wails"+tt.path, nil))
			require.Equal(t, tt.status, rec.Code)
			if tt.status == http.StatusOK {
				// Wails injects its runtime only into text/html answers.
				require.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
				require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
				body, err := io.ReadAll(rec.Body)
				require.NoError(t, err)
				if tt.method == http.MethodGet {
					require.Contains(t, string(body), `var target = "http://127.0.0.1:7878/"`)
				}
			}
		})
	}
}
