package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap/aaptest"
)

// TestServeAAPGateway runs the whole server with --aap: the gateway answers at /aap/NAME/,
// and once an agent key exists it wants one in X-Vigil-Key (the client's Authorization
// reaching the upstream untouched), refusing without one in the AAP error shape.
func TestServeAAPGateway(t *testing.T) {
	upstream := aaptest.New()
	var (
		mu       sync.Mutex
		seenAuth []string
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenAuth = append(seenAuth, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Vigil-Key"))
		mu.Unlock()
		upstream.ServeHTTP(w, r)
	}))
	defer up.Close()
	cfg := testConfig(t, filepath.Join(t.TempDir(), "vigil.db"))
	require.NoError(t, cfg.AAP.Set("demo="+up.URL))
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()

	get := func(key, authz string) (int, string) {
		req, err := http.NewRequest("GET", srv.URL+"/aap/demo/meta", nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("X-Vigil-Key", key)
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := get("", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, aaptest.Meta, body)

	resp, err := http.Post(srv.URL+"/api/keys", "application/json", strings.NewReader(`{"name":"aap client"}`))
	require.NoError(t, err)
	var created struct{ Secret string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.True(t, strings.HasPrefix(created.Secret, "vgl_"))

	status, body = get("", "Bearer upstream-token")
	require.Equal(t, http.StatusUnauthorized, status)
	var refusal struct{ Error string }
	require.NoError(t, json.Unmarshal([]byte(body), &refusal), body)
	require.Contains(t, refusal.Error, "X-Vigil-Key")

	mu.Lock()
	seenAuth = nil
	mu.Unlock()
	status, _ = get(created.Secret, "Bearer upstream-token")
	require.Equal(t, http.StatusOK, status)
	status, _ = get("", "Bearer "+created.Secret)
	require.Equal(t, http.StatusOK, status)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"Bearer upstream-token|", "|"}, seenAuth, "Vigil's key never reaches the upstream")
}
