package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// authWrite runs write and, when a is not nil, appends a's audit entry in the same
// transaction, returning its event.
func (db *DB) authWrite(ctx context.Context, a *auditArgs, write func(t *seqTx) error) (record.Event, error) {
	var ev record.Event
	err := db.writeTx(ctx, func(t *seqTx) error {
		ev = record.Event{}
		if err := write(t); err != nil {
			return err
		}
		if a == nil {
			return nil
		}
		var err error
		ev, err = appendAudit(t, a)
		return err
	})
	if err != nil {
		return record.Event{}, err
	}
	return ev, nil
}

const apiKeyColumns = `id, name, agent_id, hash, prefix, created_at, created_by, expires_at,
	revoked_at, last_used_at`

// CreateAPIKey stores a new key (ErrExists when its id or hash is taken) and its audit entry.
func (db *DB) CreateAPIKey(ctx context.Context, k *record.APIKey, audit *record.AuditEntry) (_ record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if err := k.CheckNew(); err != nil {
		return record.Event{}, err
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = time.Now()
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt, k.LastUsedAt = norm(k.CreatedAt), norm(k.ExpiresAt), norm(k.RevokedAt), norm(k.LastUsedAt)
	a, err := prepareAudit(audit, k.CreatedAt)
	if err != nil {
		return record.Event{}, err
	}
	row := *k
	ev, err := db.authWrite(ctx, a, func(t *seqTx) error {
		_, err := t.Exec(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			row.ID, row.Name, row.AgentID, row.Hash, row.Prefix, nanos(row.CreatedAt),
			row.CreatedBy, nanos(row.ExpiresAt), nanos(row.RevokedAt), nanos(row.LastUsedAt))
		if pgCode(err) == "23505" {
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

// APIKeys lists every key, oldest first.
func (db *DB) APIKeys(ctx context.Context) (_ []record.APIKey, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	rows, err := db.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
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
func (db *DB) APIKeyByHash(ctx context.Context, hash []byte) (_ record.APIKey, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	k, err := storage.ScanAPIKey(db.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return record.APIKey{}, fmt.Errorf("storage: api key: %w", record.ErrNotFound)
	}
	if err != nil {
		return record.APIKey{}, fmt.Errorf("storage: api key by hash: %w", err)
	}
	return k, nil
}

// APIKey returns one key, or ErrNotFound.
func (db *DB) APIKey(ctx context.Context, id string) (_ record.APIKey, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	k, err := storage.ScanAPIKey(db.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return record.APIKey{}, fmt.Errorf("storage: api key %s: %w", id, record.ErrNotFound)
	}
	if err != nil {
		return record.APIKey{}, fmt.Errorf("storage: api key %s: %w", id, err)
	}
	return k, nil
}

// HasAPIKeys reports whether any key exists.
func (db *DB) HasAPIKeys(ctx context.Context) (_ bool, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	var ok bool
	if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys)`).Scan(&ok); err != nil {
		return false, fmt.Errorf("storage: count api keys: %w", err)
	}
	return ok, nil
}

// RevokeAPIKey revokes a key (once: a revoked key keeps its first revocation and gets no
// second audit entry) and returns it; ErrNotFound for an unknown id.
func (db *DB) RevokeAPIKey(ctx context.Context, id string, at time.Time, audit *record.AuditEntry) (_ record.APIKey, _ record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if at.IsZero() {
		at = time.Now()
	}
	at = norm(at)
	a, err := prepareAudit(audit, at)
	if err != nil {
		return record.APIKey{}, record.Event{}, err
	}
	var (
		k  record.APIKey
		ev record.Event
	)
	err = db.writeTx(ctx, func(t *seqTx) error {
		ev = record.Event{}
		tag, err := t.Exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at = 0`, at.UnixNano(), id)
		if err != nil {
			return fmt.Errorf("storage: revoke api key %s: %w", id, err)
		}
		k, err = storage.ScanAPIKey(t.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("storage: api key %s: %w", id, record.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("storage: revoke api key %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 || a == nil {
			return nil
		}
		ev, err = appendAudit(t, a)
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

// TouchAPIKeys records when keys were last used (never moving a time back).
func (db *DB) TouchAPIKeys(ctx context.Context, used map[string]time.Time) (err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if len(used) == 0 {
		return nil
	}
	ids := make([]string, 0, len(used))
	ats := make([]int64, 0, len(used))
	for id, at := range used {
		ids = append(ids, id)
		ats = append(ats, at.UnixNano())
	}
	return db.plainTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE api_keys k SET last_used_at = u.at
			FROM unnest($1::text[], $2::int8[]) AS u(id, at)
			WHERE k.id = u.id AND k.last_used_at < u.at`, ids, ats); err != nil {
			return fmt.Errorf("storage: touch api keys: %w", err)
		}
		return nil
	})
}

const userColumns = `name, role, password_hash, created_at, updated_at`

// CreateUser stores a new account (ErrExists when the name is taken, ignoring case).
func (db *DB) CreateUser(ctx context.Context, u *record.User, audit *record.AuditEntry) (_ record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if err := u.CheckNew(); err != nil {
		return record.Event{}, err
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = time.Now()
	}
	u.CreatedAt = norm(u.CreatedAt)
	u.UpdatedAt = u.CreatedAt
	a, err := prepareAudit(audit, u.CreatedAt)
	if err != nil {
		return record.Event{}, err
	}
	row := *u
	ev, err := db.authWrite(ctx, a, func(t *seqTx) error {
		_, err := t.Exec(ctx, `INSERT INTO users (`+userColumns+`) VALUES ($1, $2, $3, $4, $5)`,
			row.Name, row.Role, string(row.PasswordHash), row.CreatedAt.UnixNano(), row.UpdatedAt.UnixNano())
		if pgCode(err) == "23505" {
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

// Users lists every account by name.
func (db *DB) Users(ctx context.Context) (_ []record.User, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	rows, err := db.pool.Query(ctx, `SELECT `+userColumns+` FROM users ORDER BY lower(name), name`)
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

// User returns the account named name (ignoring case), or ErrNotFound.
func (db *DB) User(ctx context.Context, name string) (_ record.User, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	u, err := storage.ScanUser(db.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE lower(name) = lower($1)`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return record.User{}, fmt.Errorf("storage: user %q: %w", name, record.ErrNotFound)
	}
	if err != nil {
		return record.User{}, fmt.Errorf("storage: user %q: %w", name, err)
	}
	return u, nil
}

// HasUsers reports whether any account exists.
func (db *DB) HasUsers(ctx context.Context) (_ bool, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	var ok bool
	if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users)`).Scan(&ok); err != nil {
		return false, fmt.Errorf("storage: count users: %w", err)
	}
	return ok, nil
}

// SetUserPassword replaces a user's password hash and ends their console sessions.
func (db *DB) SetUserPassword(ctx context.Context, name string, hash []byte, at time.Time, audit *record.AuditEntry) (_ record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if len(hash) == 0 {
		return record.Event{}, errors.New("storage: empty password hash")
	}
	if at.IsZero() {
		at = time.Now()
	}
	at = norm(at)
	a, err := prepareAudit(audit, at)
	if err != nil {
		return record.Event{}, err
	}
	ev, err := db.authWrite(ctx, a, func(t *seqTx) error {
		var stored string
		err := t.QueryRow(ctx, `UPDATE users SET password_hash = $1, updated_at = $2
			WHERE lower(name) = lower($3) RETURNING name`, string(hash), at.UnixNano(), name).Scan(&stored)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("storage: user %q: %w", name, record.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("storage: set password of %q: %w", name, err)
		}
		if _, err := t.Exec(ctx, `DELETE FROM auth_sessions WHERE user_name = $1`, stored); err != nil {
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

// DeleteUser removes an account and its sessions; ErrLastAdmin when it is the only admin
// and other accounts remain.
func (db *DB) DeleteUser(ctx context.Context, name string, audit *record.AuditEntry) (_ record.User, _ record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	a, err := prepareAudit(audit, time.Now())
	if err != nil {
		return record.User{}, record.Event{}, err
	}
	var u record.User
	ev, err := db.authWrite(ctx, a, func(t *seqTx) error {
		var err error
		u, err = storage.ScanUser(t.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE lower(name) = lower($1) FOR UPDATE`, name))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("storage: user %q: %w", name, record.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("storage: delete user %q: %w", name, err)
		}
		// The seq lock this transaction holds serialises account changes, so two removals
		// cannot each see the other admin and leave none.
		if u.Role == "admin" {
			var admins, others int
			if err := t.QueryRow(ctx, `SELECT count(*) FILTER (WHERE role = 'admin'), count(*)
				FROM users WHERE name <> $1`, u.Name).Scan(&admins, &others); err != nil {
				return fmt.Errorf("storage: delete user %q: %w", name, err)
			}
			if admins == 0 && others > 0 {
				return fmt.Errorf("storage: delete user %q: %w", name, record.ErrLastAdmin)
			}
		}
		if _, err := t.Exec(ctx, `DELETE FROM users WHERE name = $1`, u.Name); err != nil {
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

// CreateAuthSession stores a console session; ErrNotFound when its user does not exist.
func (db *DB) CreateAuthSession(ctx context.Context, s *record.AuthSession, audit *record.AuditEntry) (_ record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if err := s.CheckNew(); err != nil {
		return record.Event{}, err
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = time.Now()
	}
	s.CreatedAt, s.ExpiresAt = norm(s.CreatedAt), norm(s.ExpiresAt)
	a, err := prepareAudit(audit, s.CreatedAt)
	if err != nil {
		return record.Event{}, err
	}
	row := *s
	ev, err := db.authWrite(ctx, a, func(t *seqTx) error {
		tag, err := t.Exec(ctx, `INSERT INTO auth_sessions (token_hash, user_name, csrf_token, created_at, expires_at)
			SELECT $1, name, $3, $4, $5 FROM users WHERE lower(name) = lower($2)`,
			row.TokenHash, row.UserName, row.CSRFToken, row.CreatedAt.UnixNano(), row.ExpiresAt.UnixNano())
		if err != nil {
			return fmt.Errorf("storage: insert session: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("storage: session for user %q: %w", row.UserName, record.ErrNotFound)
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

// AuthSession returns the session with the token hash, with its user's current role.
func (db *DB) AuthSession(ctx context.Context, hash []byte) (_ record.AuthSession, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	var (
		s                record.AuthSession
		created, expires int64
	)
	err = db.pool.QueryRow(ctx, `SELECT s.token_hash, u.name, u.role, s.csrf_token,
		s.created_at, s.expires_at FROM auth_sessions s JOIN users u ON u.name = s.user_name
		WHERE s.token_hash = $1`, hash).Scan(&s.TokenHash, &s.UserName, &s.Role, &s.CSRFToken, &created, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return record.AuthSession{}, fmt.Errorf("storage: session: %w", record.ErrNotFound)
	}
	if err != nil {
		return record.AuthSession{}, fmt.Errorf("storage: session: %w", err)
	}
	s.CreatedAt, s.ExpiresAt = storage.TimeFromNanos(created), storage.TimeFromNanos(expires)
	return s, nil
}

// DeleteAuthSession ends a session, reporting whether it existed; the audit entry is
// written only when it did.
func (db *DB) DeleteAuthSession(ctx context.Context, hash []byte, audit *record.AuditEntry) (_ bool, _ record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	a, err := prepareAudit(audit, time.Now())
	if err != nil {
		return false, record.Event{}, err
	}
	var (
		found bool
		ev    record.Event
	)
	err = db.writeTx(ctx, func(t *seqTx) error {
		found, ev = false, record.Event{}
		tag, err := t.Exec(ctx, `DELETE FROM auth_sessions WHERE token_hash = $1`, hash)
		if err != nil {
			return fmt.Errorf("storage: delete session: %w", err)
		}
		if found = tag.RowsAffected() > 0; !found || a == nil {
			return nil
		}
		ev, err = appendAudit(t, a)
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

// DeleteExpiredAuthSessions removes sessions expired at now and returns how many.
func (db *DB) DeleteExpiredAuthSessions(ctx context.Context, now time.Time) (_ int64, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	var n int64
	err = db.plainTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM auth_sessions WHERE expires_at <= $1`, now.UnixNano())
		if err != nil {
			return fmt.Errorf("storage: delete expired sessions: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return n, err
}
