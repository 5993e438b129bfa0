package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/record"
)

// auditArgs is an entry validated and copied before it reaches the writer.
type auditArgs struct {
	entry record.AuditEntry
}

// prepareAudit validates e and copies it, defaulting its time to at (or now). A nil e
// returns nil: the write has no audit entry.
func prepareAudit(e *record.AuditEntry, at time.Time) (*auditArgs, error) {
	if e == nil {
		return nil, nil
	}
	if err := e.CheckNew(); err != nil {
		return nil, err
	}
	a := &auditArgs{entry: *e}
	if a.entry.At.IsZero() {
		a.entry.At = at
	}
	if a.entry.At.IsZero() {
		a.entry.At = time.Now()
	}
	a.entry.At = holdTime(a.entry.At)
	if len(a.entry.Diff) == 0 {
		a.entry.Diff = nil
	}
	if len(a.entry.Detail) == 0 {
		a.entry.Detail = nil
	}
	return a, nil
}

// appendAuditTx writes a's entry and its "audit" event inside tx, setting the entry's ID
// and Seq, and returns the event. The payload carries the entry's own seq, so the event is
// written first and its payload filled in once the entry is complete.
func (db *DB) appendAuditTx(tx *sql.Tx, a *auditArgs) (record.Event, error) {
	if db.beside {
		return record.Event{}, queueAuditTx(tx, &a.entry)
	}
	e := &a.entry
	seq, err := db.NextSeqTx(tx, record.EventAudit, e.SessionID, e.At, nil)
	if err != nil {
		return record.Event{}, err
	}
	res, err := tx.Exec(`INSERT INTO audit (seq, at, type, operator, session_id, hold_id,
		rule_id, decision, note, diff, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		seq, e.At.UnixNano(), e.Type, e.Operator, e.SessionID, e.HoldID, e.RuleID, e.Decision,
		e.Note, holdText(e.Diff), holdText(e.Detail))
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: insert audit %s: %w", e.Type, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: insert audit %s: %w", e.Type, err)
	}
	e.ID, e.Seq = id, seq
	payload, err := json.Marshal(e)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: encode audit %s: %w", e.Type, err)
	}
	if _, err := tx.Exec(`UPDATE events SET payload = ? WHERE seq = ?`, string(payload), seq); err != nil {
		return record.Event{}, fmt.Errorf("storage: audit %s event: %w", e.Type, err)
	}
	return record.Event{Seq: seq, Type: record.EventAudit, SessionID: e.SessionID, At: e.At, Payload: payload}, nil
}

// AppendAudit stores e and its "audit" event in one transaction, sets e.ID, e.Seq and e.At
// (a zero At becomes now), and returns the event for publishing.
func (db *DB) AppendAudit(ctx context.Context, e *record.AuditEntry) (record.Event, error) {
	a, err := prepareAudit(e, time.Now())
	if err != nil {
		return record.Event{}, err
	}
	var ev record.Event
	err = db.Exec(ctx, func(tx *sql.Tx) error {
		var err error
		ev, err = db.appendAuditTx(tx, a)
		return err
	})
	if err != nil {
		return record.Event{}, err
	}
	*e = a.entry
	return ev, nil
}

const auditColumns = `id, seq, at, type, operator, session_id, hold_id, rule_id, decision,
	note, diff, detail`

// ListAudit returns audit entries matching q, newest first.
func (db *DB) ListAudit(ctx context.Context, q record.AuditQuery) ([]record.AuditEntry, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	var (
		where []string
		args  []any
	)
	if q.Before > 0 {
		where = append(where, "id < ?")
		args = append(args, q.Before)
	}
	if q.Type != "" {
		if strings.Contains(q.Type, ".") {
			where = append(where, "type = ?")
			args = append(args, q.Type)
		} else {
			// A range rather than LIKE, so the type index serves it.
			where = append(where, "(type = ? OR (type >= ? AND type < ?))")
			args = append(args, q.Type, q.Type+".", q.Type+"/") // '/' sorts right after '.'
		}
	}
	for _, f := range []struct{ col, v string }{
		{"session_id", q.SessionID}, {"operator", q.Operator}, {"hold_id", q.HoldID},
	} {
		switch {
		case f.v == "":
		case q.Prefix:
			// A range, so the column's index serves it; no UTF-8 text has a 0xFF byte.
			where = append(where, "("+f.col+" >= ? AND "+f.col+" < ?)")
			args = append(args, f.v, f.v+"\xff")
		default:
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	query := `SELECT ` + auditColumns + ` FROM audit`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := db.Reader().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("storage: list audit: %w", err)
	}
	defer rows.Close()
	entries := make([]record.AuditEntry, 0, min(limit, 64))
	for rows.Next() {
		var (
			e            record.AuditEntry
			at           int64
			diff, detail sql.NullString
		)
		if err := rows.Scan(&e.ID, &e.Seq, &at, &e.Type, &e.Operator, &e.SessionID, &e.HoldID,
			&e.RuleID, &e.Decision, &e.Note, &diff, &detail); err != nil {
			return nil, fmt.Errorf("storage: list audit: %w", err)
		}
		e.At = time.Unix(0, at).UTC()
		if diff.Valid {
			e.Diff = json.RawMessage(diff.String)
		}
		if detail.Valid {
			e.Detail = json.RawMessage(detail.String)
		}
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: list audit: %w", err)
	}
	return entries, nil
}
