package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

var authCases = []testCase{
	{"APIKeysLifecycle", func(t *testing.T, db storage.Backend) {
		has, err := db.HasAPIKeys(bg())
		require.NoError(t, err)
		require.False(t, has)
		k1 := &record.APIKey{ID: "k1", Name: "ci", AgentID: "agent-1", Hash: []byte{1, 2, 3}, Prefix: "vk_ab",
			CreatedAt: t0, CreatedBy: "ann", ExpiresAt: t0.Add(time.Hour)}
		audit := &record.AuditEntry{Type: record.AuditKeyCreated, Operator: "ann"}
		ev, err := db.CreateAPIKey(bg(), k1, audit)
		require.NoError(t, err)
		require.Equal(t, ev.Seq, audit.Seq)
		k2 := &record.APIKey{ID: "k2", Hash: []byte{4}, CreatedAt: t0.Add(-time.Hour)}
		_, err = db.CreateAPIKey(bg(), k2, nil)
		require.NoError(t, err)
		_, err = db.CreateAPIKey(bg(), &record.APIKey{ID: "k1", Hash: []byte{9}}, nil)
		require.ErrorIs(t, err, record.ErrExists, "same id")
		_, err = db.CreateAPIKey(bg(), &record.APIKey{ID: "k3", Hash: []byte{4}}, nil)
		require.ErrorIs(t, err, record.ErrExists, "same hash")
		for name, k := range map[string]*record.APIKey{"no id": {Hash: []byte{7}}, "no hash": {ID: "k9"}} {
			_, err := db.CreateAPIKey(bg(), k, nil)
			require.Error(t, err, name)
		}

		keys, err := db.APIKeys(bg())
		require.NoError(t, err)
		require.Equal(t, []record.APIKey{*k2, *k1}, keys, "oldest first")
		got, err := db.APIKey(bg(), "k1")
		require.NoError(t, err)
		require.Equal(t, *k1, got)
		got, err = db.APIKeyByHash(bg(), []byte{1, 2, 3})
		require.NoError(t, err)
		require.Equal(t, "k1", got.ID)
		_, err = db.APIKeyByHash(bg(), []byte{0})
		require.ErrorIs(t, err, record.ErrNotFound)
		_, err = db.APIKey(bg(), "nope")
		require.ErrorIs(t, err, record.ErrNotFound)
		has, err = db.HasAPIKeys(bg())
		require.NoError(t, err)
		require.True(t, has)

		require.NoError(t, db.TouchAPIKeys(bg(), map[string]time.Time{"k1": t0.Add(time.Minute), "gone": t0}))
		require.NoError(t, db.TouchAPIKeys(bg(), map[string]time.Time{"k1": t0})) // never back
		got, err = db.APIKey(bg(), "k1")
		require.NoError(t, err)
		require.Equal(t, t0.Add(time.Minute), got.LastUsedAt)

		raudit := &record.AuditEntry{Type: record.AuditKeyRevoked}
		k, ev, err := db.RevokeAPIKey(bg(), "k1", t0.Add(2*time.Minute), raudit)
		require.NoError(t, err)
		require.Equal(t, t0.Add(2*time.Minute), k.RevokedAt)
		require.Positive(t, ev.Seq)
		k, ev, err = db.RevokeAPIKey(bg(), "k1", t0.Add(3*time.Minute), &record.AuditEntry{Type: record.AuditKeyRevoked})
		require.NoError(t, err)
		require.Equal(t, t0.Add(2*time.Minute), k.RevokedAt, "revoked once")
		require.Zero(t, ev.Seq, "no second audit entry")
		_, _, err = db.RevokeAPIKey(bg(), "nope", time.Time{}, nil)
		require.ErrorIs(t, err, record.ErrNotFound)
	}},
	{"UsersLifecycle", func(t *testing.T, db storage.Backend) {
		has, err := db.HasUsers(bg())
		require.NoError(t, err)
		require.False(t, has)
		admin := &record.User{Name: "Alice", Role: "admin", PasswordHash: []byte("$2a$hash"), CreatedAt: t0}
		audit := &record.AuditEntry{Type: record.AuditUserCreated}
		ev, err := db.CreateUser(bg(), admin, audit)
		require.NoError(t, err)
		require.Equal(t, ev.Seq, audit.Seq)
		require.Equal(t, t0, admin.UpdatedAt)
		_, err = db.CreateUser(bg(), &record.User{Name: "alice", Role: "viewer", PasswordHash: []byte("x")}, nil)
		require.ErrorIs(t, err, record.ErrExists, "names ignore case")
		_, err = db.CreateUser(bg(), &record.User{Name: "bob", Role: "reviewer", PasswordHash: []byte("y"), CreatedAt: t0}, nil)
		require.NoError(t, err)
		_, err = db.CreateUser(bg(), &record.User{Name: "eve", Role: "root", PasswordHash: []byte("y")}, nil)
		require.Error(t, err, "unknown role")
		for name, u := range map[string]*record.User{"no name": {Role: "viewer", PasswordHash: []byte("x")}, "no hash": {Name: "z", Role: "viewer"}} {
			_, err := db.CreateUser(bg(), u, nil)
			require.Error(t, err, name)
		}

		_, err = db.CreateUser(bg(), &record.User{Name: "Carl", Role: "viewer", PasswordHash: []byte("z")}, nil)
		require.NoError(t, err)
		users, err := db.Users(bg())
		require.NoError(t, err)
		require.Len(t, users, 3)
		require.Equal(t, *admin, users[0])
		require.Equal(t, []string{"Alice", "bob", "Carl"}, []string{users[0].Name, users[1].Name, users[2].Name}, "by name, ignoring case")
		_, _, err = db.DeleteUser(bg(), "carl", nil)
		require.NoError(t, err)
		u, err := db.User(bg(), "ALICE")
		require.NoError(t, err)
		require.Equal(t, "Alice", u.Name)
		_, err = db.User(bg(), "nobody")
		require.ErrorIs(t, err, record.ErrNotFound)

		// Sessions: created, read with the user's role, ended by a password change.
		sess := &record.AuthSession{TokenHash: []byte("tok1"), UserName: "bob", CSRFToken: "c", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
		_, err = db.CreateAuthSession(bg(), sess, &record.AuditEntry{Type: record.AuditLogin})
		require.NoError(t, err)
		got, err := db.AuthSession(bg(), []byte("tok1"))
		require.NoError(t, err)
		require.Equal(t, record.AuthSession{TokenHash: []byte("tok1"), UserName: "bob", Role: "reviewer", CSRFToken: "c",
			CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, got)
		_, err = db.SetUserPassword(bg(), "BOB", []byte("new"), t0.Add(time.Minute), &record.AuditEntry{Type: record.AuditUserPassword})
		require.NoError(t, err)
		_, err = db.AuthSession(bg(), []byte("tok1"))
		require.ErrorIs(t, err, record.ErrNotFound, "a new password ends the sessions")
		u, err = db.User(bg(), "bob")
		require.NoError(t, err)
		require.Equal(t, "new", string(u.PasswordHash))
		require.Equal(t, t0.Add(time.Minute), u.UpdatedAt)
		_, err = db.SetUserPassword(bg(), "nobody", []byte("x"), time.Time{}, nil)
		require.ErrorIs(t, err, record.ErrNotFound)

		// The last admin stays while others exist.
		_, _, err = db.DeleteUser(bg(), "alice", nil)
		require.ErrorIs(t, err, record.ErrLastAdmin)
		_, err = db.CreateAuthSession(bg(), &record.AuthSession{TokenHash: []byte("tok2"), UserName: "bob", CSRFToken: "c", ExpiresAt: t0.Add(time.Hour)}, nil)
		require.NoError(t, err)
		removed, ev, err := db.DeleteUser(bg(), "Bob", &record.AuditEntry{Type: record.AuditUserRemoved})
		require.NoError(t, err)
		require.Equal(t, "bob", removed.Name)
		require.Positive(t, ev.Seq)
		_, err = db.AuthSession(bg(), []byte("tok2"))
		require.ErrorIs(t, err, record.ErrNotFound, "a removed user's sessions go with them")
		_, _, err = db.DeleteUser(bg(), "alice", nil)
		require.NoError(t, err, "the last account may go")
		_, _, err = db.DeleteUser(bg(), "alice", nil)
		require.ErrorIs(t, err, record.ErrNotFound)
		has, err = db.HasUsers(bg())
		require.NoError(t, err)
		require.False(t, has)
	}},
	{"AuthSessionsDeleteAndExpire", func(t *testing.T, db storage.Backend) {
		_, err := db.CreateUser(bg(), &record.User{Name: "ann", Role: "admin", PasswordHash: []byte("h")}, nil)
		require.NoError(t, err)
		_, err = db.CreateAuthSession(bg(), &record.AuthSession{TokenHash: []byte("x"), UserName: "nobody", CSRFToken: "c", ExpiresAt: t0}, nil)
		require.ErrorIs(t, err, record.ErrNotFound, "unknown user")
		for name, s := range map[string]*record.AuthSession{
			"no token":  {UserName: "ann", CSRFToken: "c", ExpiresAt: t0},
			"no csrf":   {TokenHash: []byte("a"), UserName: "ann", ExpiresAt: t0},
			"no expiry": {TokenHash: []byte("a"), UserName: "ann", CSRFToken: "c"},
		} {
			_, err := db.CreateAuthSession(bg(), s, nil)
			require.Error(t, err, name)
		}
		for i, exp := range []time.Duration{time.Minute, time.Hour, 2 * time.Hour} {
			_, err := db.CreateAuthSession(bg(), &record.AuthSession{TokenHash: []byte{byte(i)}, UserName: "ann", CSRFToken: "c",
				CreatedAt: t0, ExpiresAt: t0.Add(exp)}, nil)
			require.NoError(t, err)
		}
		found, ev, err := db.DeleteAuthSession(bg(), []byte{2}, &record.AuditEntry{Type: record.AuditLogout})
		require.NoError(t, err)
		require.True(t, found)
		require.Positive(t, ev.Seq)
		found, ev, err = db.DeleteAuthSession(bg(), []byte{2}, &record.AuditEntry{Type: record.AuditLogout})
		require.NoError(t, err)
		require.False(t, found)
		require.Zero(t, ev.Seq, "nothing ended, nothing audited")
		n, err := db.DeleteExpiredAuthSessions(bg(), t0.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, int64(2), n, "expiry at now counts as expired")
		_, err = db.AuthSession(bg(), []byte{0})
		require.ErrorIs(t, err, record.ErrNotFound)
	}},
}
