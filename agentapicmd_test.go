package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/internal/pgtest"
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

// With --agentapi-approvals client the verdicts on approval requests are in the database:
// a client's answer reaching another replica than the one that passed the request on, or
// the guardian restarted, goes up once, and is refused the second time.
func TestAgentAPIApprovalAnswerOnAnotherGuardian(t *testing.T) {
	var answers atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		output := `[{"object":"message","type":"mcp_approval_request","role":"assistant","status":"completed","id":"msg_1",` +
			`"content":[{"object":"content","type":"data","data":{"id":"apr_1","name":"delete_file","server_label":"fs","arguments":"{\"path\":\"/tmp/x\"}"}}]}]`
		if strings.Contains(string(body), "mcp_approval_response") {
			answers.Add(1)
			output = `[]`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sequence_number":null,"object":"response","status":"completed","error":null,"id":"response_1",` +
			`"created_at":1,"completed_at":1,"output":` + output + `,"usage":null,"session_id":"s1"}`))
	}))
	defer up.Close()
	const (
		ask    = `{"input":[{"role":"user","type":"message","content":[{"type":"text","text":"delete /tmp/x"}]}],"session_id":"s1","stream":false}`
		answer = `{"input":[{"type":"mcp_approval_response","role":"user","content":[{"type":"data","data":{"approval_request_id":"apr_1","approve":true}}]}],"session_id":"s1","stream":false}`
	)
	post := func(url, body string) (int, string) {
		resp, err := http.Post(url+"/agentapi/demo/process", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	start := func(db string) *server {
		cfg := testConfig(t, db)
		cfg.AgentAPI, cfg.AgentAPIApprovals = []string{"demo=" + up.URL}, "client"
		srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		return srv
	}
	stop := func(srv *server) { require.NoError(t, srv.Shutdown(5*time.Second)) }

	for _, tt := range []struct {
		name string
		db   func(t *testing.T) string
		// answerOn returns the guardian that gets the answer, given the one that asked.
		answerOn func(t *testing.T, asked *server, db string) *server
	}{
		{"SQLite, restarted", func(t *testing.T) string { return filepath.Join(t.TempDir(), "vigil.db") },
			func(_ *testing.T, asked *server, db string) *server { stop(asked); return start(db) }},
		{"PostgreSQL, another replica", func(t *testing.T) string { return pgtest.Need(t, pgSrv) },
			func(t *testing.T, asked *server, db string) *server {
				t.Cleanup(func() { stop(asked) })
				return start(db)
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			answers.Store(0)
			db := tt.db(t)
			asked := start(db)
			code, body := post(asked.URL, ask)
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `"type":"mcp_approval_request"`, "passed on to the client")
			other := tt.answerOn(t, asked, db)
			defer stop(other)
			code, body = post(other.URL, answer)
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, int32(1), answers.Load(), "the answer went up")
			code, body = post(other.URL, answer)
			require.Equal(t, http.StatusBadRequest, code, body)
			require.Contains(t, body, `approval request \"apr_1\" was answered already`)
			require.Equal(t, int32(1), answers.Load())
		})
	}
}
