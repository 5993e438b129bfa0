package sqlite

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"

	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

const sessionColumns = `s.id, s.agent_id, s.agent_name, s.user_id, s.first_seen, s.last_seen,
	s.last_seq, s.steps, s.last_method, s.control, s.decisions, s.key_id,
	s.client_name, s.client_version, s.server_name, s.server_version,
	coalesce((SELECT sum(p.pending) FROM session_pending_holds p
		WHERE p.session_id = s.id), 0)`

// Sessions pages through sessions newest first by last activity, ties broken by id, using
// keyset pagination: q.Before is the Next of the previous page. Limit is clamped to 1..500
// and defaults to 50. Search, when set, keeps sessions whose id, agent id, agent name, user
// id, or client or server name contains it (ASCII case-insensitive). A walk never shows a session twice: one
// that receives a step meanwhile moves to the front, where the next refresh of the first
// page shows it.
func (db *DB) Sessions(ctx context.Context, q record.SessionQuery) (record.SessionPage, error) {
	limit := storage.ClampLimit(q.Limit, 50, 500)
	var (
		where []string
		args  []any
	)
	if q.Before != "" {
		lastSeen, id, err := record.DecodeCursor(q.Before)
		if err != nil {
			return record.SessionPage{}, fmt.Errorf("storage: sessions: %w", err)
		}
		where = append(where, "(s.last_seen, s.id) < (?, ?)")
		args = append(args, lastSeen, id)
	}
	if q.Search != "" {
		pat := "%" + storage.EscapeLike(q.Search) + "%"
		where = append(where, `(s.id LIKE ? ESCAPE '\' OR s.agent_id LIKE ? ESCAPE '\'
			OR s.agent_name LIKE ? ESCAPE '\' OR s.user_id LIKE ? ESCAPE '\'
			OR s.client_name LIKE ? ESCAPE '\' OR s.server_name LIKE ? ESCAPE '\')`)
		args = append(args, pat, pat, pat, pat, pat, pat)
	}
	query := `SELECT ` + sessionColumns + ` FROM sessions s`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY s.last_seen DESC, s.id DESC LIMIT ?`
	args = append(args, limit+1)

	if err := db.Flush(ctx); err != nil {
		return record.SessionPage{}, fmt.Errorf("storage: sessions: %w", err)
	}
	rows, err := db.r.QueryContext(ctx, query, args...)
	if err != nil {
		return record.SessionPage{}, fmt.Errorf("storage: sessions: %w", err)
	}
	defer rows.Close()
	page := record.SessionPage{Sessions: make([]record.Session, 0, min(limit, 64))}
	for rows.Next() {
		s, err := storage.ScanSession(rows)
		if err != nil {
			return record.SessionPage{}, fmt.Errorf("storage: sessions: %w", err)
		}
		page.Sessions = append(page.Sessions, s)
	}
	if err := rows.Err(); err != nil {
		return record.SessionPage{}, fmt.Errorf("storage: sessions: %w", err)
	}
	if len(page.Sessions) > limit {
		page.Sessions = page.Sessions[:limit]
		last := page.Sessions[limit-1]
		page.Next = record.EncodeCursor(last.LastSeen.UnixNano(), last.ID)
	}
	return page, nil
}

// Session returns one session's summary, or ErrNotFound.
func (db *DB) Session(ctx context.Context, id string) (record.Session, error) {
	if err := db.flushSession(ctx, id); err != nil {
		return record.Session{}, fmt.Errorf("storage: session %q: %w", id, err)
	}
	// What its stored steps still owe its row, read before the row (see withOwed).
	owed, isOwed := db.owed.lookup(id)
	row := db.reads.session.QueryRowContext(ctx, id)
	s, err := storage.ScanSession(row)
	if errors.Is(err, sql.ErrNoRows) && isOwed {
		// Its steps are stored but its row not written yet: holds are kept apart.
		err = db.r.QueryRowContext(ctx, `SELECT coalesce(sum(pending), 0)
			FROM session_pending_holds WHERE session_id = ?`, id).Scan(&s.PendingHolds)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return record.Session{}, fmt.Errorf("storage: session %q: %w", id, record.ErrNotFound)
	}
	if err != nil {
		return record.Session{}, fmt.Errorf("storage: session %q: %w", id, err)
	}
	if isOwed {
		s = withOwed(s, &owed)
	}
	return s, nil
}
