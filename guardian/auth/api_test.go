package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

func TestAdminKeysAPI(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "adam", RoleAdmin)
	srv := e.server(t)
	c := newClient(t, srv)
	require.Equal(t, http.StatusOK, c.login("adam", "adam-password").status)

	r := c.do("POST", "/api/keys", map[string]string{"name": "support", "agentId": "agent-a", "expiresIn": "30d"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var created struct {
		Key    Key    `json:"key"`
		Secret string `json:"secret"`
	}
	require.NoError(t, json.Unmarshal(r.body, &created))
	require.Len(t, created.Secret, keyTextLen)
	require.Equal(t, "agent-a", created.Key.AgentID)
	require.Equal(t, "adam", created.Key.CreatedBy)
	require.Equal(t, "active", created.Key.Status)
	require.Equal(t, e.clock.Now().Add(30*24*time.Hour), *created.Key.ExpiresAt)

	status, _, _, body := rpc(t, srv, created.Secret, "agent-a")
	require.Equal(t, http.StatusOK, status, string(body))

	// The list never shows a key's text.
	r = c.do("GET", "/api/keys", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.NotContains(t, string(r.body), created.Secret)
	var list struct {
		Keys []Key `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(r.body, &list))
	require.Len(t, list.Keys, 1)
	require.Equal(t, created.Key.ID, list.Keys[0].ID)
	require.NotNil(t, list.Keys[0].LastUsedAt)

	r = c.do("POST", "/api/keys/"+created.Key.ID+"/revoke", nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var revoked Key
	require.NoError(t, json.Unmarshal(r.body, &revoked))
	require.Equal(t, "revoked", revoked.Status)
	status, _, _, _ = rpc(t, srv, created.Secret, "agent-a")
	require.Equal(t, http.StatusUnauthorized, status)

	r = c.do("POST", "/api/keys/key_missing/revoke", nil)
	require.Equal(t, http.StatusNotFound, r.status)
	for _, bad := range []map[string]string{
		{"expiresIn": "soon"},
		{"expiresIn": "-5h"},
		{"agentId": " padded "},
		{"name": "line\nbreak"},
	} {
		r = c.do("POST", "/api/keys", bad)
		require.Equal(t, http.StatusBadRequest, r.status, bad)
		require.Equal(t, "bad_request", r.errorCode(t))
	}

	// Every change is in the audit log under the signed-in operator, and was published.
	entries, err := e.db.ListAudit(context.Background(), record.AuditQuery{Type: "key"})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	for _, en := range entries {
		require.Equal(t, "adam", en.Operator)
	}
	var types []string
	for _, ev := range e.events() {
		var en record.AuditEntry
		require.NoError(t, json.Unmarshal(ev.Payload, &en))
		types = append(types, en.Type)
	}
	require.Equal(t, []string{record.AuditUserCreated, record.AuditLogin, record.AuditKeyCreated, record.AuditKeyRevoked}, types)
}

func TestAdminUsersAPI(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "adam", RoleAdmin)
	srv := e.server(t)
	c := newClient(t, srv)
	require.Equal(t, http.StatusOK, c.login("adam", "adam-password").status)

	r := c.do("POST", "/api/users", map[string]string{"name": "rita", "role": "reviewer", "password": "rita-password"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var u User
	require.NoError(t, json.Unmarshal(r.body, &u))
	require.Equal(t, User{Name: "rita", Role: RoleReviewer, CreatedAt: e.clock.Now(), UpdatedAt: e.clock.Now()}, u)
	require.NotContains(t, string(r.body), "password")

	tests := []struct {
		body   map[string]string
		status int
	}{
		{map[string]string{"name": "RITA", "role": "viewer", "password": "whatever-1"}, http.StatusConflict},
		{map[string]string{"name": "sam", "role": "root", "password": "whatever-1"}, http.StatusBadRequest},
		{map[string]string{"name": "sam", "role": "viewer", "password": "short"}, http.StatusBadRequest},
		{map[string]string{"name": "s a m", "role": "viewer", "password": "whatever-1"}, http.StatusBadRequest},
		{map[string]string{"name": "", "role": "viewer", "password": "whatever-1"}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		r := c.do("POST", "/api/users", tt.body)
		require.Equal(t, tt.status, r.status, tt.body)
	}

	r = c.do("GET", "/api/users", nil)
	require.Equal(t, http.StatusOK, r.status)
	var list struct {
		Users []User `json:"users"`
	}
	require.NoError(t, json.Unmarshal(r.body, &list))
	require.Len(t, list.Users, 2)
	require.NotContains(t, string(r.body), "$2a$")

	// The new account works, and removing it ends its session.
	rc := newClient(t, srv)
	require.Equal(t, http.StatusOK, rc.login("rita", "rita-password").status)
	r = c.do("DELETE", "/api/users/rita", nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, http.StatusUnauthorized, rc.do("GET", "/api/sessions", nil).status)
	require.Equal(t, http.StatusNotFound, c.do("DELETE", "/api/users/rita", nil).status)

	// The console cannot remove the last admin.
	r = c.do("DELETE", "/api/users/adam", nil)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "conflict", r.errorCode(t))

	entries, err := e.db.ListAudit(context.Background(), record.AuditQuery{Type: "user", Operator: "adam"})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, record.AuditUserRemoved, entries[0].Type)
	require.Equal(t, record.AuditUserCreated, entries[1].Type)
}

func TestAdminRoutesGuardThemselves(t *testing.T) {
	// Register's routes without ConsoleMiddleware around them still refuse non-admins.
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "vera", RoleViewer)
	mux := http.NewServeMux()
	e.a.Register(mux)
	srv := newTestServer(t, mux)
	c := newClient(t, srv)
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/api/keys", nil).status)
	require.Equal(t, http.StatusOK, c.login("vera", "vera-password").status)
	require.Equal(t, http.StatusForbidden, c.do("GET", "/api/keys", nil).status)
	require.Equal(t, http.StatusForbidden, c.do("POST", "/api/users", map[string]string{}).status)
}

func TestFirstAccountFromOpenConsole(t *testing.T) {
	// In the zero-config console anyone local may create the first account; from then on
	// sign-in is required.
	e := newEnv(t, Config{Loopback: true})
	srv := e.server(t)
	c := newClient(t, srv)
	r := c.do("POST", "/api/users", map[string]string{"name": "adam", "role": "admin",
		"password": "adam-password", "operator": "typed-name"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/api/sessions", nil).status)
	entries, err := e.db.ListAudit(context.Background(), record.AuditQuery{Type: record.AuditUserCreated})
	require.NoError(t, err)
	require.Equal(t, "typed-name", entries[0].Operator)
}

func TestParseLifetime(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true},
		{"never", 0, true},
		{"720h", 720 * time.Hour, true},
		{"30d", 30 * 24 * time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{"-1h", 0, false},
		{"xd", 0, false},
		{"tomorrow", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseLifetime(tt.in)
		if !tt.ok {
			require.ErrorIs(t, err, ErrInvalid, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}
