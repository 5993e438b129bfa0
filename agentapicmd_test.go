package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

func TestAgentAPIFlags(t *testing.T) {
	t.Setenv("VIGIL_AGENTAPI", "a=http://127.0.0.1:1, b=https://agents.example/x")
	cfg, err := parseConfig("serve", []string{"--agentapi", "c=http://127.0.0.1:2"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"a=http://127.0.0.1:1", "b=https://agents.example/x", "c=http://127.0.0.1:2"}, cfg.AgentAPI)
	require.Equal(t, "vigil", cfg.AgentAPIApprovals)

	for _, bad := range [][]string{
		{"--agentapi", "http://127.0.0.1:1"},
		{"--agentapi", "a b=http://127.0.0.1:1"},
		{"--agentapi", "a=ftp://x"},
		{"--agentapi-approvals", "maybe"},
	} {
		_, err := parseConfig("serve", bad, io.Discard)
		require.Error(t, err, bad)
	}
	t.Setenv("VIGIL_AGENTAPI", "")
	cfg, err = parseConfig("serve", []string{"--agentapi", "a=http://127.0.0.1:1", "--agentapi", "a=http://127.0.0.1:2"}, io.Discard)
	require.NoError(t, err)
	cfg.DB, cfg.Addr = filepath.Join(t.TempDir(), "vigil.db"), "127.0.0.1:0"
	_, err = startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, `the name "a" is given twice`)
}

// In team mode a gateway route needs an agent key in X-Vigil-Key, and the client's own
// Authorization reaches the upstream untouched.
func TestAgentAPIGatewayTeamMode(t *testing.T) {
	gotAuth := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth <- r.Header.Get("Authorization") + "|" + r.Header.Get("X-Vigil-Key")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sequence_number":null,"object":"response","status":"completed","error":null,"id":"response_1","created_at":1,"completed_at":1,"output":[],"usage":null,"session_id":"s1"}`))
	}))
	defer up.Close()

	db := filepath.Join(t.TempDir(), "vigil.db")
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{})
	require.NoError(t, err)
	az, err := auth.New(context.Background(), auth.Config{Loopback: true}, auth.Options{Store: st})
	require.NoError(t, err)
	_, key, err := az.CreateKey(context.Background(), auth.KeySpec{Name: "gw"}, "test")
	require.NoError(t, err)
	require.NoError(t, st.Close())

	cfg := testConfig(t, db)
	cfg.AgentAPI = []string{"demo=" + up.URL}
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()

	post := func(hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/agentapi/demo/process",
			strings.NewReader(`{"input":[{"role":"user","type":"message","content":[{"type":"text","text":"hi"}]}],"session_id":"s1","stream":false}`))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post(map[string]string{"Authorization": "Bearer sk-upstream"})
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, `"code":"UNAUTHORIZED"`)

	code, body = post(map[string]string{"Authorization": "Bearer sk-upstream", "X-Vigil-Key": key})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "Bearer sk-upstream|", <-gotAuth)
}
