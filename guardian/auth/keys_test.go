package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

func TestKeyText(t *testing.T) {
	a, err := newKeyText()
	require.NoError(t, err)
	b, err := newKeyText()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, KeyPrefix))
	require.Len(t, a, keyTextLen)
	require.Equal(t, 47, keyTextLen)
}

func TestKeyStoredOnlyAsHash(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	k, secret := e.createKey(t, "agent-a", 0)
	stored, err := e.db.APIKey(context.Background(), k.ID)
	require.NoError(t, err)
	h := hashKey(secret)
	require.Equal(t, h[:], stored.Hash)
	require.Equal(t, secret[:keyShownChars], stored.Prefix)
	require.Equal(t, k.Prefix, stored.Prefix)

	// Nothing in the database file holds the key's text.
	var n int
	require.NoError(t, e.db.Reader().QueryRow(`SELECT count(*) FROM api_keys
		WHERE instr(CAST(hash AS TEXT), ?) > 0 OR instr(prefix, ?) > 0 OR instr(name, ?) > 0`,
		secret, secret, secret).Scan(&n))
	require.Zero(t, n)
}

func TestAgentMiddlewareKeys(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	srv := e.server(t)

	// No key exists yet: agents on this machine need none.
	status, _, _, body := rpc(t, srv, "", "agent-a")
	require.Equal(t, http.StatusOK, status, string(body))

	// The first key turns authentication on.
	k, secret := e.createKey(t, "agent-a", time.Hour)
	_, otherSecret := e.createKey(t, "", 0)
	wrongSameShape := KeyPrefix + strings.Repeat("A", keyTextLen-len(KeyPrefix))

	tests := []struct {
		name    string
		key     string
		status  int
		message string
	}{
		{"missing", "", http.StatusUnauthorized, "an API key is required"},
		{"malformed", "hunter2", http.StatusUnauthorized, "invalid API key"},
		{"wrong", wrongSameShape, http.StatusUnauthorized, "invalid API key"},
		{"truncated", secret[:len(secret)-1], http.StatusUnauthorized, "invalid API key"},
		{"valid", secret, http.StatusOK, ""},
		{"valid unscoped", otherSecret, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, hdr, resp, body := rpc(t, srv, tt.key, "agent-a")
			require.Equal(t, tt.status, status, string(body))
			if tt.status == http.StatusOK {
				return
			}
			require.NotNil(t, resp.Error, string(body))
			require.Equal(t, aos.CodeUnauthorized, resp.Error.Code)
			require.Contains(t, resp.Error.Message, tt.message)
			require.Equal(t, "null", string(resp.ID))
			require.Equal(t, `Bearer realm="vigil"`, hdr.Get("WWW-Authenticate"))
		})
	}

	// The verified key's scope reaches the handler.
	status, _, _, body = rpc(t, srv, secret, "agent-a")
	require.Equal(t, http.StatusOK, status)
	var got echo
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, echo{Route: "aos", Agent: "agent-a", Scoped: true, KeyID: k.ID}, got)

	// Revocation applies to the very next request.
	_, err := e.a.RevokeKey(context.Background(), k.ID, "test")
	require.NoError(t, err)
	status, _, resp, _ := rpc(t, srv, secret, "agent-a")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "unauthorized: API key revoked", resp.Error.Message)

	// An expired key is refused.
	_, short := e.createKey(t, "agent-b", time.Minute)
	status, _, _, _ = rpc(t, srv, short, "agent-b")
	require.Equal(t, http.StatusOK, status)
	e.clock.Advance(time.Minute)
	status, _, resp, _ = rpc(t, srv, short, "agent-b")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "unauthorized: API key expired", resp.Error.Message)
}

func TestAgentKeysStayRequiredAfterLastRevoked(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	k, _ := e.createKey(t, "", 0)
	_, err := e.a.RevokeKey(context.Background(), k.ID, "test")
	require.NoError(t, err)

	// A fresh server on the same database knows, too.
	e2 := newEnvOn(t, e.db, Config{Loopback: true})
	for _, env := range []*env{e, e2} {
		status, _, resp, _ := rpc(t, env.server(t), "", "a")
		require.Equal(t, http.StatusUnauthorized, status)
		require.Equal(t, aos.CodeUnauthorized, resp.Error.Code)
	}
}

func TestRequireAgentKeysWithoutKeys(t *testing.T) {
	e := newEnv(t, Config{Loopback: true, RequireAgentKeys: true})
	status, _, resp, _ := rpc(t, e.server(t), "", "a")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, aos.CodeUnauthorized, resp.Error.Code)
}

func TestOpenAOSRefusesProxiedRequests(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	status, _, resp, _ := rpc(t, e.server(t), "", "a", "X-Forwarded-For", "203.0.113.9")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, aos.CodeUnauthorized, resp.Error.Code)

	insecure := newEnv(t, Config{Loopback: true, Insecure: true})
	status, _, _, _ = rpc(t, insecure.server(t), "", "a", "X-Forwarded-For", "203.0.113.9")
	require.Equal(t, http.StatusOK, status)
}

func TestCrossAgentKeyUse(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	srv := e.server(t)
	_, scoped := e.createKey(t, "agent-a", 0)
	_, any := e.createKey(t, "", 0)

	tests := []struct {
		name, key, agent string
		denied           bool
	}{
		{"own agent", scoped, "agent-a", false},
		{"other agent", scoped, "agent-b", true},
		{"no agent named", scoped, "", false},
		{"unscoped key, any agent", any, "agent-b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, resp, body := rpc(t, srv, tt.key, tt.agent)
			require.Equal(t, http.StatusOK, status)
			if !tt.denied {
				require.Nil(t, resp.Error, string(body))
				return
			}
			require.NotNil(t, resp.Error, string(body))
			require.Equal(t, aos.CodeUnauthorized, resp.Error.Code)
			require.Equal(t, `unauthorized: key is scoped to agent "agent-a"`, resp.Error.Message)
		})
	}

	// CheckAgent outside HTTP: no key in the context means nothing to check.
	require.NoError(t, CheckAgent(context.Background(), "anyone"))
}

func TestKeysFromAnotherProcess(t *testing.T) {
	// Two Auths on one database: the server, and the CLI creating and revoking keys.
	server := newEnv(t, Config{Loopback: true})
	cli := newEnvOn(t, server.db, Config{})
	srv := server.server(t)

	k, secret := cli.createKey(t, "agent-a", 0)
	// The server does not hold the key yet; the first request finds it in the database.
	status, _, _, body := rpc(t, srv, secret, "agent-a")
	require.Equal(t, http.StatusOK, status, string(body))

	// Once another key exists, the server requires keys (a refresh or a lookup tells it).
	status, _, _, _ = rpc(t, srv, "", "agent-a")
	require.Equal(t, http.StatusUnauthorized, status)

	// A revocation elsewhere takes effect at the server's next refresh.
	_, err := cli.a.RevokeKey(context.Background(), k.ID, "cli")
	require.NoError(t, err)
	require.NoError(t, server.a.refreshKeys(context.Background()))
	status, _, resp, _ := rpc(t, srv, secret, "agent-a")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "unauthorized: API key revoked", resp.Error.Message)
}

func TestUnknownKeyLookupsAreLimited(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	srv := e.server(t)
	e.createKey(t, "", 0)
	// Made-up keys of the right shape each cost a lookup, up to the miss limiter's burst;
	// then they are refused without one. Either way the answer is 401.
	for i := 0; i < 30; i++ {
		fake := KeyPrefix + strings.Repeat(string(rune('A'+i%26)), keyTextLen-len(KeyPrefix))
		status, _, _, _ := rpc(t, srv, fake, "")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	ok, _ := e.a.misses.allow(bucketKey{kind: 'm', id: "127.0.0.1"}, e.clock.Now())
	require.False(t, ok, "the burst of lookups is spent")
}

func TestLastUsedIsFlushedInBatches(t *testing.T) {
	e := newEnv(t, Config{Loopback: true, RefreshInterval: 10 * time.Millisecond, FlushInterval: time.Hour})
	srv := e.server(t)
	k, secret := e.createKey(t, "a", 0)
	status, _, _, _ := rpc(t, srv, secret, "a")
	require.Equal(t, http.StatusOK, status)

	// In memory at once, in the database only after a flush.
	keys, err := e.a.Keys(context.Background())
	require.NoError(t, err)
	require.NotNil(t, keys[0].LastUsedAt)
	require.Equal(t, e.clock.Now(), *keys[0].LastUsedAt)
	stored, err := e.db.APIKey(context.Background(), k.ID)
	require.NoError(t, err)
	require.True(t, stored.LastUsedAt.IsZero())

	// Run writes them when it stops.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.a.Run(ctx)
	}()
	cancel()
	<-done
	stored, err = e.db.APIKey(context.Background(), k.ID)
	require.NoError(t, err)
	require.Equal(t, e.clock.Now(), stored.LastUsedAt)
}

func TestRunRefreshesKeys(t *testing.T) {
	e := newEnv(t, Config{Loopback: true, RefreshInterval: 5 * time.Millisecond})
	k, _, err := e.a.CreateKey(context.Background(), KeySpec{AgentID: "a"}, "t")
	require.NoError(t, err)
	// Revoke behind the server's back, as the CLI would.
	_, _, err = e.db.RevokeAPIKey(context.Background(), k.ID, time.Time{}, nil)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.a.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return e.a.keys.table.Load().byID[k.ID].revoked.Load() },
		5*time.Second, time.Millisecond, "the refresh did not pick up the revocation")
}

func TestKeyAuditAndEvents(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	k, _ := e.createKey(t, "agent-a", 0)
	_, err := e.a.RevokeKey(context.Background(), k.ID, "alice")
	require.NoError(t, err)
	entries, err := e.db.ListAudit(context.Background(), record.AuditQuery{Type: "key"})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, record.AuditKeyRevoked, entries[0].Type)
	require.Equal(t, "alice", entries[0].Operator)
	require.Equal(t, record.AuditKeyCreated, entries[1].Type)
	require.Contains(t, string(entries[1].Detail), `"agentId":"agent-a"`)
	require.Len(t, e.events(), 2)

	_, err = e.a.RevokeKey(context.Background(), "key_nope", "alice")
	require.ErrorIs(t, err, record.ErrNotFound)
}
