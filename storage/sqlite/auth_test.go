package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func keyHash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func TestAPIKeysLifecycle(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)

	has, err := db.HasAPIKeys(ctx)
	require.NoError(t, err)
	require.False(t, has)

	k := &record.APIKey{ID: "key_1", Name: "support bot", AgentID: "agent-a", Hash: keyHash("one"),
		Prefix: "vgl_abcd", CreatedAt: t0, CreatedBy: "alice", ExpiresAt: t0.Add(time.Hour)}
	audit := &record.AuditEntry{Type: record.AuditKeyCreated, Operator: "alice", Detail: json.RawMessage(`{"keyId":"key_1"}`)}
	ev, err := db.CreateAPIKey(ctx, k, audit)
	require.NoError(t, err)
	require.Equal(t, record.EventAudit, ev.Type)
	require.NotZero(t, audit.ID)
	require.Equal(t, ev.Seq, audit.Seq)

	_, err = db.CreateAPIKey(ctx, &record.APIKey{ID: "key_1", Hash: keyHash("other")}, nil)
	require.ErrorIs(t, err, record.ErrExists)
	_, err = db.CreateAPIKey(ctx, &record.APIKey{ID: "key_2", Hash: keyHash("one")}, nil)
	require.ErrorIs(t, err, record.ErrExists, "a hash is unique too")
	_, err = db.CreateAPIKey(ctx, &record.APIKey{ID: "key_2", Hash: keyHash("two"), CreatedAt: t0.Add(time.Second)}, nil)
	require.NoError(t, err)

	has, err = db.HasAPIKeys(ctx)
	require.NoError(t, err)
	require.True(t, has)

	got, err := db.APIKeyByHash(ctx, keyHash("one"))
	require.NoError(t, err)
	require.Equal(t, *k, got)
	_, err = db.APIKeyByHash(ctx, keyHash("nope"))
	require.ErrorIs(t, err, record.ErrNotFound)
	_, err = db.APIKey(ctx, "key_9")
	require.ErrorIs(t, err, record.ErrNotFound)

	keys, err := db.APIKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, "key_1", keys[0].ID)
	require.Equal(t, "key_2", keys[1].ID)

	// Last use only moves forward.
	require.NoError(t, db.TouchAPIKeys(ctx, map[string]time.Time{"key_1": t0.Add(time.Minute)}))
	require.NoError(t, db.TouchAPIKeys(ctx, map[string]time.Time{"key_1": t0.Add(time.Second), "key_9": t0}))
	got, err = db.APIKey(ctx, "key_1")
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Minute), got.LastUsedAt)

	// Revoking writes the audit entry once; a second revoke keeps the first time.
	revAudit := &record.AuditEntry{Type: record.AuditKeyRevoked, Operator: "bob"}
	rk, ev, err := db.RevokeAPIKey(ctx, "key_1", t0.Add(2*time.Minute), revAudit)
	require.NoError(t, err)
	require.Equal(t, t0.Add(2*time.Minute), rk.RevokedAt)
	require.NotZero(t, ev.Seq)
	again, ev, err := db.RevokeAPIKey(ctx, "key_1", t0.Add(time.Hour), &record.AuditEntry{Type: record.AuditKeyRevoked})
	require.NoError(t, err)
	require.Zero(t, ev.Seq)
	require.Equal(t, rk.RevokedAt, again.RevokedAt)
	_, _, err = db.RevokeAPIKey(ctx, "key_9", time.Time{}, nil)
	require.ErrorIs(t, err, record.ErrNotFound)

	entries, err := db.ListAudit(ctx, record.AuditQuery{Type: "key"})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, record.AuditKeyRevoked, entries[0].Type)
	require.Equal(t, "bob", entries[0].Operator)
}

func TestAPIKeyRejectsIncomplete(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	for _, k := range []*record.APIKey{{Hash: keyHash("x")}, {ID: "k"}} {
		_, err := db.CreateAPIKey(ctx, k, nil)
		require.Error(t, err)
	}
}

func TestUsersLifecycle(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)

	has, err := db.HasUsers(ctx)
	require.NoError(t, err)
	require.False(t, has)

	alice := &record.User{Name: "alice", Role: "admin", PasswordHash: []byte("$2a$hash-a"), CreatedAt: t0}
	_, err = db.CreateUser(ctx, alice, &record.AuditEntry{Type: record.AuditUserCreated, Operator: "cli"})
	require.NoError(t, err)
	_, err = db.CreateUser(ctx, &record.User{Name: "ALICE", Role: "viewer", PasswordHash: []byte("x")}, nil)
	require.ErrorIs(t, err, record.ErrExists, "names compare without case")
	_, err = db.CreateUser(ctx, &record.User{Name: "mallory", Role: "root", PasswordHash: []byte("x")}, nil)
	require.Error(t, err, "roles are checked by the schema")
	_, err = db.CreateUser(ctx, &record.User{Name: "bob", Role: "reviewer", PasswordHash: []byte("$2a$hash-b"), CreatedAt: t0}, nil)
	require.NoError(t, err)

	has, err = db.HasUsers(ctx)
	require.NoError(t, err)
	require.True(t, has)

	u, err := db.User(ctx, "Alice")
	require.NoError(t, err)
	require.Equal(t, *alice, u)
	_, err = db.User(ctx, "carol")
	require.ErrorIs(t, err, record.ErrNotFound)

	users, err := db.Users(ctx)
	require.NoError(t, err)
	require.Len(t, users, 2)
	require.Equal(t, "alice", users[0].Name)

	// A session reads the user's current role and name.
	sess := &record.AuthSession{TokenHash: keyHash("tok-b"), UserName: "BOB", CSRFToken: "csrf",
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	_, err = db.CreateAuthSession(ctx, sess, nil)
	require.NoError(t, err)
	got, err := db.AuthSession(ctx, keyHash("tok-b"))
	require.NoError(t, err)
	require.Equal(t, record.AuthSession{TokenHash: keyHash("tok-b"), UserName: "bob", Role: "reviewer",
		CSRFToken: "csrf", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, got)
	_, err = db.CreateAuthSession(ctx, &record.AuthSession{TokenHash: keyHash("t"), UserName: "ghost",
		CSRFToken: "c", ExpiresAt: t0}, nil)
	require.ErrorIs(t, err, record.ErrNotFound)

	// A new password ends the user's sessions.
	_, err = db.SetUserPassword(ctx, "bob", []byte("$2a$new"), t0.Add(time.Minute), &record.AuditEntry{Type: record.AuditUserPassword})
	require.NoError(t, err)
	_, err = db.AuthSession(ctx, keyHash("tok-b"))
	require.ErrorIs(t, err, record.ErrNotFound)
	u, err = db.User(ctx, "bob")
	require.NoError(t, err)
	require.Equal(t, "$2a$new", string(u.PasswordHash))
	require.Equal(t, t0.Add(time.Minute), u.UpdatedAt)
	_, err = db.SetUserPassword(ctx, "carol", []byte("x"), time.Time{}, nil)
	require.ErrorIs(t, err, record.ErrNotFound)

	// The only admin stays while others remain; removing a user ends their sessions.
	_, _, err = db.DeleteUser(ctx, "alice", nil)
	require.ErrorIs(t, err, record.ErrLastAdmin)
	_, err = db.CreateAuthSession(ctx, &record.AuthSession{TokenHash: keyHash("tok-b2"), UserName: "bob",
		CSRFToken: "c", ExpiresAt: t0.Add(time.Hour)}, nil)
	require.NoError(t, err)
	removed, ev, err := db.DeleteUser(ctx, "bob", &record.AuditEntry{Type: record.AuditUserRemoved, Operator: "alice"})
	require.NoError(t, err)
	require.Equal(t, "bob", removed.Name)
	require.NotZero(t, ev.Seq)
	_, err = db.AuthSession(ctx, keyHash("tok-b2"))
	require.ErrorIs(t, err, record.ErrNotFound)
	_, _, err = db.DeleteUser(ctx, "bob", nil)
	require.ErrorIs(t, err, record.ErrNotFound)
	// Alone, the last admin can go: that returns the database to no accounts at all.
	_, _, err = db.DeleteUser(ctx, "alice", nil)
	require.NoError(t, err)
	has, err = db.HasUsers(ctx)
	require.NoError(t, err)
	require.False(t, has)
}

func TestAuthSessionsDeleteAndExpire(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	_, err := db.CreateUser(ctx, &record.User{Name: "alice", Role: "viewer", PasswordHash: []byte("h")}, nil)
	require.NoError(t, err)
	for i, exp := range []time.Time{t0.Add(-time.Minute), t0, t0.Add(time.Hour)} {
		_, err := db.CreateAuthSession(ctx, &record.AuthSession{TokenHash: keyHash(string(rune('a' + i))),
			UserName: "alice", CSRFToken: "c", CreatedAt: t0.Add(-time.Hour), ExpiresAt: exp}, nil)
		require.NoError(t, err)
	}
	n, err := db.DeleteExpiredAuthSessions(ctx, t0)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	_, err = db.AuthSession(ctx, keyHash("c"))
	require.NoError(t, err)

	audit := &record.AuditEntry{Type: record.AuditLogout, Operator: "alice"}
	found, ev, err := db.DeleteAuthSession(ctx, keyHash("c"), audit)
	require.NoError(t, err)
	require.True(t, found)
	require.NotZero(t, ev.Seq)
	require.Equal(t, ev.Seq, audit.Seq)
	found, ev, err = db.DeleteAuthSession(ctx, keyHash("c"), &record.AuditEntry{Type: record.AuditLogout})
	require.NoError(t, err)
	require.False(t, found)
	require.Zero(t, ev.Seq, "no audit entry for a session that was not there")

	for _, bad := range []*record.AuthSession{
		{UserName: "alice", CSRFToken: "c", ExpiresAt: t0},
		{TokenHash: keyHash("x"), UserName: "alice", ExpiresAt: t0},
		{TokenHash: keyHash("x"), UserName: "alice", CSRFToken: "c"},
	} {
		_, err := db.CreateAuthSession(ctx, bad, nil)
		require.Error(t, err)
	}
}
