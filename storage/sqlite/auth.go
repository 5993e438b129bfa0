package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// authWrite runs write and, when a is not nil, appends a's audit entry in the same
// transaction, returning the audit event (zero without one).
func (db *DB) authWrite(ctx context.Context, a *auditArgs, write func(tx *sql.Tx) error) (record.Event, error) {
	var ev record.Event
	err := db.Exec(ctx, func(tx *sql.Tx) error {
		ev = record.Event{}
		if err := write(tx); err != nil {
			return err
		}
		if a == nil {
			return nil
		}
		var err error
		ev, err = db.appendAuditTx(tx, a)
		return err
	})
	if err != nil {
		// ev is not read: after a cancelled wait the writer may still be running write.
		return record.Event{}, err
	}
	return ev, nil
}

func authUniqueViolation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// CreateAPIKey stores k and, when audit is not nil, its audit entry in one transaction. A
// zero CreatedAt becomes now; times are normalised to what a read returns. A taken id or
// hash returns ErrExists.
func (db *DB) CreateAPIKey(ctx context.Context, k *record.APIKey, audit *record.AuditEntry) (record.Event, error) {
	if err := k.CheckNew(); err != nil {
		return record.Event{}, err
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = time.Now()
	}
	k.CreatedAt = holdTime(k.CreatedAt)
	k.ExpiresAt = holdTime(k.ExpiresAt)
	k.RevokedAt = holdTime(k.RevokedAt)
	k.LastUsedAt = holdTime(k.LastUsedAt)
	a, err := prepareAudit(audit, k.CreatedAt)
	if err != nil {
		return record.Event{}, err
	}
	row := *k
	ev, err := db.authWrite(ctx, a, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO api_keys (`+apiKeyColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			row.ID, row.Name, row.AgentID, row.Hash, row.Prefix, holdNanos(row.CreatedAt),
			row.CreatedBy, holdNanos(row.ExpiresAt), holdNanos(row.RevokedAt),
			holdNanos(row.LastUsedAt))
		if authUniqueViolation(err) {
			return fmt.Errorf("storage: api key %s: %w", row.ID, record.ErrExists)
		}
		if err != nil {
			return fmt.Errorf("storage: insert api key %s: %w", row.ID, err)
		}
		return nil
	})
	if err != nil {
		return record.Event{}, err
	}
	if a != nil {
		*audit = a.entry
	}
	return ev, nil
}

const apiKeyColumns = `id, name, agent_id, hash, prefix, created_at, created_by, expires_at,
	revoked_at, last_used_at`

// APIKeys returns every key, revoked and expired ones included, oldest first.
func (db *DB) APIKeys(ctx context.Context) ([]record.APIKey, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys
		ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("storage: list api keys: %w", err)
	}
	defer rows.Close()
	keys, err := storage.Collect(rows, nil, storage.ScanAPIKey)
	if err != nil {
		return nil, fmt.Errorf("storage: list api keys: %w", err)
	}
	return keys, nil
}

// APIKeyByHash returns the key whose hash is hash, or ErrNotFound.
func (db *DB) APIKeyByHash(ctx context.Context, hash []byte) (record.APIKey, error) {
	k, err := storage.ScanAPIKey(db.r.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys
		WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return record.APIKey{}, fmt.Errorf("storage: api key: %w", record.ErrNotFound)
	}
	if err != nil {
		return record.APIKey{}, fmt.Errorf("storage: api key by hash: %w", err)
	}
	return k, nil
}

// APIKey returns the key with the given id, or ErrNotFound.
func (db *DB) APIKey(ctx context.Context, id string) (record.APIKey, error) {
	k, err := storage.ScanAPIKey(db.r.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys
		WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return record.APIKey{}, fmt.Errorf("storage: api key %s: %w", id, record.ErrNotFound)
	}
	if err != nil {
		return record.APIKey{}, fmt.Errorf("storage: api key %s: %w", id, err)
	}
	return k, nil
}

// HasAPIKeys reports whether any key was ever created. Revoked keys count: revoking the last
// key must not turn agent authentication off.
func (db *DB) HasAPIKeys(ctx context.Context) (bool, error) {
	var n int
	if err := db.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys)`).Scan(&n); err != nil {
		return false, fmt.Errorf("storage: count api keys: %w", err)
	}
	return n == 1, nil
}

// RevokeAPIKey marks key id revoked at at (zero: now) and returns it as stored. The audit
// entry, when not nil, is written in the same transaction, but only if the key was not
// already revoked; revoking twice keeps the first time and returns a zero Event. An unknown
// id returns ErrNotFound.
func (db *DB) RevokeAPIKey(ctx context.Context, id string, at time.Time, audit *record.AuditEntry) (record.APIKey, record.Event, error) {
	if at.IsZero() {
		at = time.Now()
	}
	at = holdTime(at)
	a, err := prepareAudit(audit, at)
	if err != nil {
		return record.APIKey{}, record.Event{}, err
	}
	var (
		k  record.APIKey
		ev record.Event
	)
	err = db.Exec(ctx, func(tx *sql.Tx) error {
		ev = record.Event{}
		res, err := tx.Exec(`UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at = 0`,
			at.UnixNano(), id)
		if err != nil {
			return fmt.Errorf("storage: revoke api key %s: %w", id, err)
		}
		changed, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("storage: revoke api key %s: %w", id, err)
		}
		k, err = storage.ScanAPIKey(tx.QueryRow(`SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("storage: api key %s: %w", id, record.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("storage: revoke api key %s: %w", id, err)
		}
		if changed == 0 || a == nil {
			return nil
		}
		ev, err = db.appendAuditTx(tx, a)
		return err
	})
	if err != nil {
		return record.APIKey{}, record.Event{}, err
	}
	if a != nil && ev.Seq != 0 {
		*audit = a.entry
	}
	return k, ev, nil
}

// TouchAPIKeys records when keys were last used (key id → time) in one transaction. A time
// older than the stored one is ignored, so flushes from several places cannot go backwards.
func (db *DB) TouchAPIKeys(ctx context.Context, used map[string]time.Time) error {
	if len(used) == 0 {
		return nil
	}
	type touch struct {
		id string
		at int64
	}
	touches := make([]touch, 0, len(used))
	for id, at := range used {
		touches = append(touches, touch{id, at.UnixNano()})
	}
	return db.Exec(ctx, func(tx *sql.Tx) error {
		st, err := tx.Prepare(`UPDATE api_keys SET last_used_at = ? WHERE id = ? AND last_used_at < ?`)
		if err != nil {
			return fmt.Errorf("storage: touch api keys: %w", err)
		}
		defer st.Close()
		for _, t := range touches {
			if _, err := st.Exec(t.at, t.id, t.at); err != nil {
				return fmt.Errorf("storage: touch api key %s: %w", t.id, err)
			}
		}
		return nil
	})
}

const userColumns = `name, role, password_hash, created_at, updated_at`

// CreateUser stores u and, when audit is not nil, its audit entry in one transaction. A
// zero CreatedAt becomes now. A name already taken (compared without case) returns
// ErrExists.
func (db *DB) CreateUser(ctx context.Context, u *record.User, audit *record.AuditEntry) (record.Event, error) {
	if err := u.CheckNew(); err != nil {
		return record.Event{}, err
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = time.Now()
	}
	u.CreatedAt = holdTime(u.CreatedAt)
	u.UpdatedAt = u.CreatedAt
	a, err := prepareAudit(audit, u.CreatedAt)
	if err != nil {
		return record.Event{}, err
	}
	row := *u
	ev, err := db.authWrite(ctx, a, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO users (`+userColumns+`) VALUES (?, ?, ?, ?, ?)`,
			row.Name, row.Role, string(row.PasswordHash), row.CreatedAt.UnixNano(),
			row.UpdatedAt.UnixNano())
		if authUniqueViolation(err) {
			return fmt.Errorf("storage: user %q: %w", row.Name, record.ErrExists)
		}
		if err != nil {
			return fmt.Errorf("storage: insert user %q: %w", row.Name, err)
		}
		return nil
	})
	if err != nil {
		return record.Event{}, err
	}
	if a != nil {
		*audit = a.entry
	}
	return ev, nil
}

// Users returns every account ordered by name.
func (db *DB) Users(ctx context.Context) ([]record.User, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT `+userColumns+` FROM users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("storage: list users: %w", err)
	}
	defer rows.Close()
	users, err := storage.Collect(rows, nil, storage.ScanUser)
	if err != nil {
		return nil, fmt.Errorf("storage: list users: %w", err)
	}
	return users, nil
}

// User returns the account named name (compared without case), or ErrNotFound.
func (db *DB) User(ctx context.Context, name string) (record.User, error) {
	u, err := storage.ScanUser(db.r.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return record.User{}, fmt.Errorf("storage: user %q: %w", name, record.ErrNotFound)
	}
	if err != nil {
		return record.User{}, fmt.Errorf("storage: user %q: %w", name, err)
	}
	return u, nil
}

// HasUsers reports whether any operator account exists.
func (db *DB) HasUsers(ctx context.Context) (bool, error) {
	var n int
	if err := db.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM users)`).Scan(&n); err != nil {
		return false, fmt.Errorf("storage: count users: %w", err)
	}
	return n == 1, nil
}

// SetUserPassword replaces the password hash of user name and ends all of their sessions,
// with the audit entry (when not nil) in the same transaction. An unknown name returns
// ErrNotFound.
func (db *DB) SetUserPassword(ctx context.Context, name string, hash []byte, at time.Time, audit *record.AuditEntry) (record.Event, error) {
	if len(hash) == 0 {
		return record.Event{}, errors.New("storage: empty password hash")
	}
	if at.IsZero() {
		at = time.Now()
	}
	at = holdTime(at)
	a, err := prepareAudit(audit, at)
	if err != nil {
		return record.Event{}, err
	}
	ev, err := db.authWrite(ctx, a, func(tx *sql.Tx) error {
		res, err := tx.Exec(`UPDATE users SET password_hash = ?, updated_at = ? WHERE name = ?`,
			string(hash), at.UnixNano(), name)
		if err != nil {
			return fmt.Errorf("storage: set password of %q: %w", name, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("storage: set password of %q: %w", name, err)
		} else if n == 0 {
			return fmt.Errorf("storage: user %q: %w", name, record.ErrNotFound)
		}
		if _, err := tx.Exec(`DELETE FROM auth_sessions WHERE user_name = ?`, name); err != nil {
			return fmt.Errorf("storage: end sessions of %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return record.Event{}, err
	}
	if a != nil {
		*audit = a.entry
	}
	return ev, nil
}

// DeleteUser removes the account named name with its sessions and returns it as it was,
// with the audit entry (when not nil) in the same transaction. The last admin cannot be
// removed while other accounts remain (ErrLastAdmin); an unknown name returns ErrNotFound.
func (db *DB) DeleteUser(ctx context.Context, name string, audit *record.AuditEntry) (record.User, record.Event, error) {
	a, err := prepareAudit(audit, time.Now())
	if err != nil {
		return record.User{}, record.Event{}, err
	}
	var u record.User
	ev, err := db.authWrite(ctx, a, func(tx *sql.Tx) error {
		var err error
		u, err = storage.ScanUser(tx.QueryRow(`SELECT `+userColumns+` FROM users WHERE name = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("storage: user %q: %w", name, record.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("storage: delete user %q: %w", name, err)
		}
		if u.Role == "admin" {
			var admins, others int
			if err := tx.QueryRow(`SELECT count(*) FILTER (WHERE role = 'admin'), count(*)
				FROM users WHERE name <> ?`, name).Scan(&admins, &others); err != nil {
				return fmt.Errorf("storage: delete user %q: %w", name, err)
			}
			if admins == 0 && others > 0 {
				return fmt.Errorf("storage: delete user %q: %w", name, record.ErrLastAdmin)
			}
		}
		if _, err := tx.Exec(`DELETE FROM users WHERE name = ?`, name); err != nil {
			return fmt.Errorf("storage: delete user %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return record.User{}, record.Event{}, err
	}
	if a != nil {
		*audit = a.entry
	}
	return u, ev, nil
}

// CreateAuthSession stores a new console session and, when audit is not nil, its audit
// entry in one transaction. The user must exist (ErrNotFound otherwise).
func (db *DB) CreateAuthSession(ctx context.Context, s *record.AuthSession, audit *record.AuditEntry) (record.Event, error) {
	if err := s.CheckNew(); err != nil {
		return record.Event{}, err
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = time.Now()
	}
	s.CreatedAt = holdTime(s.CreatedAt)
	s.ExpiresAt = holdTime(s.ExpiresAt)
	a, err := prepareAudit(audit, s.CreatedAt)
	if err != nil {
		return record.Event{}, err
	}
	row := *s
	ev, err := db.authWrite(ctx, a, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO auth_sessions (token_hash, user_name, csrf_token,
			created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
			row.TokenHash, row.UserName, row.CSRFToken, row.CreatedAt.UnixNano(),
			row.ExpiresAt.UnixNano())
		if err != nil && strings.Contains(err.Error(), "FOREIGN KEY constraint failed") {
			return fmt.Errorf("storage: session for user %q: %w", row.UserName, record.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("storage: insert session: %w", err)
		}
		return nil
	})
	if err != nil {
		return record.Event{}, err
	}
	if a != nil {
		*audit = a.entry
	}
	return ev, nil
}

// AuthSession returns the session whose token hash is hash, with its user's current role
// and name as stored, or ErrNotFound. Expired sessions are returned too: the caller decides
// by ExpiresAt, and DeleteExpiredAuthSessions removes them.
func (db *DB) AuthSession(ctx context.Context, hash []byte) (record.AuthSession, error) {
	var (
		s                record.AuthSession
		created, expires int64
	)
	err := db.r.QueryRowContext(ctx, `SELECT s.token_hash, u.name, u.role, s.csrf_token,
		s.created_at, s.expires_at FROM auth_sessions s JOIN users u ON u.name = s.user_name
		WHERE s.token_hash = ?`, hash).Scan(&s.TokenHash, &s.UserName, &s.Role, &s.CSRFToken,
		&created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return record.AuthSession{}, fmt.Errorf("storage: session: %w", record.ErrNotFound)
	}
	if err != nil {
		return record.AuthSession{}, fmt.Errorf("storage: session: %w", err)
	}
	s.CreatedAt = storage.TimeFromNanos(created)
	s.ExpiresAt = storage.TimeFromNanos(expires)
	return s, nil
}

// DeleteAuthSession ends the session whose token hash is hash, with the audit entry (when
// not nil) in the same transaction, written only if the session existed. It reports
// whether there was such a session.
func (db *DB) DeleteAuthSession(ctx context.Context, hash []byte, audit *record.AuditEntry) (bool, record.Event, error) {
	a, err := prepareAudit(audit, time.Now())
	if err != nil {
		return false, record.Event{}, err
	}
	var (
		found bool
		ev    record.Event
	)
	err = db.Exec(ctx, func(tx *sql.Tx) error {
		found, ev = false, record.Event{}
		res, err := tx.Exec(`DELETE FROM auth_sessions WHERE token_hash = ?`, hash)
		if err != nil {
			return fmt.Errorf("storage: delete session: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("storage: delete session: %w", err)
		}
		if found = n > 0; !found || a == nil {
			return nil
		}
		ev, err = db.appendAuditTx(tx, a)
		return err
	})
	if err != nil {
		return false, record.Event{}, err
	}
	if a != nil && ev.Seq != 0 {
		*audit = a.entry
	}
	return found, ev, nil
}

// DeleteExpiredAuthSessions removes sessions that expired before now and returns how many.
func (db *DB) DeleteExpiredAuthSessions(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := db.Exec(ctx, func(tx *sql.Tx) error {
		res, err := tx.Exec(`DELETE FROM auth_sessions WHERE expires_at <= ?`, now.UnixNano())
		if err != nil {
			return fmt.Errorf("storage: delete expired sessions: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
