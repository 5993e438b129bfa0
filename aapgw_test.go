package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
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

// aapKey creates an agent key in the database at db and returns its secret.
func aapKey(t *testing.T, db, name string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runKeys([]string{"create", "--name", name, "--db", db}, &stdout, &stderr), stderr.String())
	secret := regexp.MustCompile(`vgl_[A-Za-z0-9_-]+`).FindString(stdout.String())
	require.NotEmpty(t, secret, stdout.String())
	return secret
}

// aapRequest sends one request to the AAP gateway with an agent key.
func aapRequest(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("X-Vigil-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// In team mode an AAP session belongs to the key that opened it, from the moment it is
// opened and without seed messages: another key can neither take a turn on it, read it, read
// its history nor delete it (403), before or after a restart of Vigil.
func TestAAPSessionBelongsToCreatingKey(t *testing.T) {
	up := httptest.NewServer(aaptest.New())
	defer up.Close()
	db := filepath.Join(t.TempDir(), "vigil.db")
	k1, k2 := aapKey(t, db, "k1"), aapKey(t, db, "k2")
	start := func() *server { return startAAP(t, db, up.URL) }
	srv := start()
	open := func(key string) string {
		t.Helper()
		status, body := aapRequest(t, "POST", srv.URL+"/aap/demo/sessions", key, `{"agent":{"name":"guarded-agent"}}`)
		require.Equal(t, http.StatusCreated, status, body)
		var created struct{ SessionID string }
		require.NoError(t, json.Unmarshal([]byte(body), &created))
		return created.SessionID
	}
	turn := `{"messages":[{"role":"user","content":"hello"}]}`
	refused := func(id string) {
		t.Helper()
		base := srv.URL + "/aap/demo/sessions/" + id
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/turns", turn}, {"GET", "", ""}, {"GET", "/history", ""}, {"DELETE", "", ""},
		} {
			status, body := aapRequest(t, c.method, base+c.path, k2, c.body)
			require.Equal(t, http.StatusForbidden, status, "%s %s: %s", c.method, c.path, body)
			require.JSONEq(t, `{"error":"the session belongs to another API key"}`, body)
		}
	}
	first, second := open(k1), open(k1)
	refused(first)
	status, body := aapRequest(t, "POST", srv.URL+"/aap/demo/sessions/"+first+"/turns", k1, turn)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "Hi there.")

	// After a restart Vigil has forgotten everything but its database: a session nobody
	// took a turn on is still its opener's.
	require.NoError(t, srv.Shutdown(5*time.Second))
	srv = start()
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
	refused(second)
	refused(first)
	status, body = aapRequest(t, "POST", srv.URL+"/aap/demo/sessions/"+second+"/turns", k1, turn)
	require.Equal(t, http.StatusOK, status, body)
	status, body = aapRequest(t, "DELETE", srv.URL+"/aap/demo/sessions/"+second, k1, "")
	require.Equal(t, http.StatusNoContent, status, body)
}

// With --default-decision deny the opening step is decided like any other: refused until a
// rule allows it, and the rule docs/aap.md gives lets keyed clients open sessions again.
func TestAAPOpeningUnderDefaultDeny(t *testing.T) {
	up := httptest.NewServer(aaptest.New())
	defer up.Close()
	dir := t.TempDir()
	db := filepath.Join(dir, "vigil.db")
	k1 := aapKey(t, db, "k1")
	for _, c := range []struct {
		name, rules string
		want        int
	}{
		{"no rule", "rules: []\n", http.StatusForbidden},
		{"the documented rule", `rules:
  - id: aap-open
    when: 'kind == "trigger" && params.trigger.event.type == "aap.session.open"'
    action: allow
`, http.StatusCreated},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, "rules.yaml")
			require.NoError(t, os.WriteFile(file, []byte(c.rules), 0o600))
			cfg := testConfig(t, db)
			cfg.DefaultDecision, cfg.RulesFile = "deny", file
			require.NoError(t, cfg.AAP.Set("demo="+up.URL))
			srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
			status, body := aapRequest(t, "POST", srv.URL+"/aap/demo/sessions", k1, `{"agent":{"name":"guarded-agent"}}`)
			require.Equal(t, c.want, status, body)
		})
	}
}

// firstOnly pages an AAP upstream's GET /sessions by one session, its next the listed
// session's id (an upstream cursor that would name a session).
func firstOnly(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/sessions" {
			inner.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r)
		var all struct {
			Sessions []struct {
				SessionID string `json:"sessionId"`
			} `json:"sessions"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &all); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		start := 0
		for i, s := range all.Sessions {
			if s.SessionID == r.URL.Query().Get("after") {
				start = i + 1
			}
		}
		out := map[string]any{"sessions": all.Sessions[start:min(start+1, len(all.Sessions))]}
		if start+1 < len(all.Sessions) {
			out["next"] = all.Sessions[start].SessionID
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// The cursors of an AAP gateway's session list are sealed with a key the database keeps:
// a cursor given out before a restart still opens after it, and none tells the upstream's
// cursor.
func TestAAPListCursorSurvivesRestart(t *testing.T) {
	up := httptest.NewServer(firstOnly(aaptest.New()))
	defer up.Close()
	db := filepath.Join(t.TempDir(), "vigil.db")
	k1 := aapKey(t, db, "k1")
	start := func() *server { return startAAP(t, db, up.URL) }
	srv := start()
	for range 3 {
		status, body := aapRequest(t, "POST", srv.URL+"/aap/demo/sessions", k1, `{"agent":{"name":"guarded-agent"}}`)
		require.Equal(t, http.StatusCreated, status, body)
	}
	type page struct {
		Sessions []struct{ SessionID string }
		Next     string
	}
	list := func(srv *server, after string) page {
		t.Helper()
		status, body := aapRequest(t, "GET", srv.URL+"/aap/demo/sessions?after="+url.QueryEscape(after), k1, "")
		if after == "" {
			status, body = aapRequest(t, "GET", srv.URL+"/aap/demo/sessions", k1, "")
		}
		require.Equal(t, http.StatusOK, status, body)
		var p page
		require.NoError(t, json.Unmarshal([]byte(body), &p), body)
		return p
	}
	first := list(srv, "")
	require.Len(t, first.Sessions, 1)
	require.True(t, strings.HasPrefix(first.Next, "vigil2."), "a sealed cursor, not the upstream's: %q", first.Next)

	require.NoError(t, srv.Shutdown(5*time.Second))
	srv = start()
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
	second := list(srv, first.Next)
	require.Len(t, second.Sessions, 1)
	require.NotEqual(t, first.Sessions[0].SessionID, second.Sessions[0].SessionID)
	third := list(srv, second.Next)
	require.Len(t, third.Sessions, 1)
	require.Empty(t, third.Next)
}

// startAAP starts a guardian on the SQLite file db with one AAP gateway, demo, to upstream.
func startAAP(t *testing.T, db, upstream string) *server {
	t.Helper()
	cfg := testConfig(t, db)
	require.NoError(t, cfg.AAP.Set("demo="+upstream))
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return srv
}
