package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

const holdColumns = `id, seq, session_id, agent_id, method, kind, tool, rule_id, message,
	request, created_at, deadline, on_timeout, status, decision, decided_by, decided_at, note,
	params`

// CreateHold stores a new pending hold with its hold.created event and, when audit is not
// nil, its audit entry, in one transaction, and returns the events written in seq order.
func (db *DB) CreateHold(ctx context.Context, h *record.Hold, audit *record.AuditEntry) (_ []record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if err := h.CheckNew(); err != nil {
		return nil, err
	}
	h.Status = record.HoldPending
	for _, f := range []*string{&h.ID, &h.SessionID, &h.AgentID, &h.Method, &h.Kind, &h.Tool, &h.RuleID, &h.Message} {
		*f = cleanText(*f)
	}
	h.Request = cleanJSON(h.Request)
	h.CreatedAt = norm(h.CreatedAt)
	if h.CreatedAt.IsZero() {
		h.CreatedAt = norm(time.Now())
	}
	h.Deadline = norm(h.Deadline)
	if len(h.Request) == 0 {
		h.Request = json.RawMessage("null")
	}
	payload, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("storage: encode hold %s: %w", h.ID, err)
	}
	a, err := prepareAudit(audit, h.CreatedAt)
	if err != nil {
		return nil, err
	}
	row := *h
	var events []record.Event
	err = db.writeTx(ctx, func(t *seqTx) error {
		if _, err := t.Exec(ctx, `INSERT INTO holds (`+holdColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`,
			row.ID, row.Seq, row.SessionID, row.AgentID, row.Method, row.Kind, row.Tool,
			row.RuleID, row.Message, nullText(row.Request), nanos(row.CreatedAt),
			nanos(row.Deadline), row.OnTimeout, row.Status, row.Decision, row.DecidedBy,
			nanos(row.DecidedAt), row.Note, nullText(row.Params)); err != nil {
			if pgCode(err) == "23505" {
				return fmt.Errorf("storage: hold %s: %w", row.ID, record.ErrExists)
			}
			return fmt.Errorf("storage: insert hold %s: %w", row.ID, err)
		}
		var err error
		events, err = eventAudit(t, record.EventHoldCreated, row.SessionID, row.CreatedAt, payload, a)
		return err
	})
	if err != nil {
		return nil, err
	}
	if a != nil {
		*audit = a.entry
	}
	return events, nil
}

// ResolveHold ends a pending hold with res and stores its hold.resolved event and audit
// entry in the same transaction. The update is conditional on the hold still being pending,
// so of two replicas resolving one hold the first to commit wins; the other gets
// ErrHoldDecided with the hold as stored. An unknown id returns ErrNotFound.
func (db *DB) ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *record.AuditEntry) (_ record.Hold, _ []record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if err := res.Check(id); err != nil {
		return record.Hold{}, nil, err
	}
	if res.DecidedAt.IsZero() {
		res.DecidedAt = time.Now()
	}
	res.DecidedAt = norm(res.DecidedAt)
	res.DecidedBy, res.Note, res.Params = cleanText(res.DecidedBy), cleanText(res.Note), cleanJSON(res.Params)
	a, err := prepareAudit(audit, res.DecidedAt)
	if err != nil {
		return record.Hold{}, nil, err
	}
	var (
		h      record.Hold
		events []record.Event
	)
	err = db.writeTx(ctx, func(t *seqTx) error {
		var err error
		// Under READ COMMITTED a second resolver blocks on the row until the first commits,
		// then re-checks status = 'pending' against the committed row and updates nothing.
		h, err = scanHold(t.QueryRow(ctx, `UPDATE holds SET status = $1, decision = $2,
			decided_by = $3, decided_at = $4, note = $5, params = $6
			WHERE id = $7 AND status = 'pending' RETURNING `+holdColumns,
			res.Status, res.Decision, res.DecidedBy, nanos(res.DecidedAt), res.Note,
			nullText(res.Params), id))
		if errors.Is(err, pgx.ErrNoRows) {
			h, err = scanHold(t.QueryRow(ctx, `SELECT `+holdColumns+` FROM holds WHERE id = $1`, id))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("storage: hold %s: %w", id, record.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("storage: read hold %s: %w", id, err)
			}
			return fmt.Errorf("storage: hold %s is %s: %w", id, h.Status, record.ErrHoldDecided)
		}
		if err != nil {
			return fmt.Errorf("storage: resolve hold %s: %w", id, err)
		}
		var ac *auditArgs
		if a != nil {
			cp := *a // a retried transaction starts from the caller's entry again
			ac = &cp
		}
		events, err = resolvedEvents(t, h, ac)
		if ac != nil {
			*a = *ac
		}
		return err
	})
	if errors.Is(err, record.ErrHoldDecided) {
		return h, nil, err
	}
	if err != nil {
		return record.Hold{}, nil, err
	}
	if a != nil {
		*audit = a.entry
	}
	return h, events, nil
}

// resolvedEvents writes h's hold.resolved event (without the request and params, which
// the hold.created event and the row have) and, when a is not nil, its audit entry with the
// hold's fields filled in.
func resolvedEvents(t *seqTx, h record.Hold, a *auditArgs) ([]record.Event, error) {
	brief := h
	brief.Request, brief.Params = nil, nil
	payload, err := json.Marshal(brief)
	if err != nil {
		return nil, fmt.Errorf("storage: encode hold %s: %w", h.ID, err)
	}
	if a != nil {
		e := &a.entry
		e.SessionID = cmp.Or(e.SessionID, h.SessionID)
		e.HoldID = cmp.Or(e.HoldID, h.ID)
		e.RuleID = cmp.Or(e.RuleID, h.RuleID)
		e.Decision = cmp.Or(e.Decision, h.Decision)
		e.Note = cmp.Or(e.Note, h.Note)
	}
	return eventAudit(t, record.EventHoldResolved, h.SessionID, h.DecidedAt, payload, a)
}

// eventAudit appends an event and, when a is not nil, a's audit entry.
func eventAudit(t *seqTx, typ, sessionID string, at time.Time, payload []byte, a *auditArgs) ([]record.Event, error) {
	ev, err := t.event(typ, sessionID, at, payload)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	events := []record.Event{ev}
	if a == nil {
		return events, nil
	}
	aev, err := appendAudit(t, a)
	if err != nil {
		return nil, err
	}
	return append(events, aev), nil
}

// RestartNote is the note of holds ended by ResolvePendingOnStartup.
const RestartNote = "guardian stopped while pending; the agent's connection was lost with the process"

// ResolvePendingOnStartup ends every pending hold as interrupted, with RestartNote and no
// decision, each with its hold.resolved event and a hold.interrupted audit entry, in one
// transaction. It returns the ended holds, oldest first, and the events.
func (db *DB) ResolvePendingOnStartup(ctx context.Context, now time.Time) (_ []record.Hold, _ []record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	now = norm(now)
	if now.IsZero() {
		now = norm(time.Now())
	}
	var (
		holds  []record.Hold
		events []record.Event
	)
	err = db.writeTx(ctx, func(t *seqTx) error {
		holds, events = holds[:0], events[:0]
		rows, err := t.Query(ctx, `UPDATE holds SET status = $1, decision = '', decided_by = '',
			decided_at = $2, note = $3 WHERE status = 'pending' RETURNING `+holdColumns,
			record.HoldInterrupted, nanos(now), RestartNote)
		if err != nil {
			return fmt.Errorf("storage: resolve pending holds: %w", err)
		}
		for rows.Next() {
			h, err := scanHold(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("storage: resolve pending holds: %w", err)
			}
			holds = append(holds, h)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("storage: resolve pending holds: %w", err)
		}
		slices.SortFunc(holds, func(a, b record.Hold) int {
			return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
		})
		for _, h := range holds {
			a, err := prepareAudit(&record.AuditEntry{Type: record.AuditHoldInterrupted,
				Detail: json.RawMessage(`{"reason":"restart"}`)}, now)
			if err != nil {
				return err
			}
			evs, err := resolvedEvents(t, h, a)
			if err != nil {
				return err
			}
			events = append(events, evs...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return holds, events, nil
}

// SetHoldSeq records the seq of the held step once it is stored.
func (db *DB) SetHoldSeq(ctx context.Context, id string, seq int64) (err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	return db.plainTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE holds SET seq = $1 WHERE id = $2`, seq, id)
		if err != nil {
			return fmt.Errorf("storage: set seq of hold %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("storage: hold %s: %w", id, record.ErrNotFound)
		}
		return nil
	})
}

// GetHold returns one hold, or ErrNotFound.
func (db *DB) GetHold(ctx context.Context, id string) (_ record.Hold, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	h, err := scanHold(db.pool.QueryRow(ctx, `SELECT `+holdColumns+` FROM holds WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return record.Hold{}, fmt.Errorf("storage: hold %s: %w", id, record.ErrNotFound)
	}
	if err != nil {
		return record.Hold{}, fmt.Errorf("storage: hold %s: %w", id, err)
	}
	return h, nil
}

// HoldBySeq returns the hold of the stored step seq, or ErrNotFound; the newest wins should
// two claim it.
func (db *DB) HoldBySeq(ctx context.Context, seq int64) (_ record.Hold, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if seq <= 0 {
		return record.Hold{}, fmt.Errorf("storage: hold of step %d: %w", seq, record.ErrNotFound)
	}
	h, err := scanHold(db.pool.QueryRow(ctx, `SELECT `+holdColumns+` FROM holds
		WHERE seq = $1 AND seq > 0 ORDER BY created_at DESC, id DESC LIMIT 1`, seq))
	if errors.Is(err, pgx.ErrNoRows) {
		return record.Hold{}, fmt.Errorf("storage: hold of step %d: %w", seq, record.ErrNotFound)
	}
	if err != nil {
		return record.Hold{}, fmt.Errorf("storage: hold of step %d: %w", seq, err)
	}
	return h, nil
}

// ListHolds returns holds with the given status ("" or "all" for every status), pending
// ones oldest first and others newest first; limit is clamped to 1..1000 (default 200).
func (db *DB) ListHolds(ctx context.Context, status string, limit int) (_ []record.Hold, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	limit = storage.ClampLimit(limit, 200, 1000)
	var rows pgx.Rows
	switch status {
	case "", "all":
		rows, err = db.pool.Query(ctx, `SELECT `+holdColumns+` FROM holds
			ORDER BY created_at DESC, id DESC LIMIT $1`, limit)
	case record.HoldPending:
		rows, err = db.pool.Query(ctx, `SELECT `+holdColumns+` FROM holds
			WHERE status = 'pending' ORDER BY created_at, id LIMIT $1`, limit)
	default:
		rows, err = db.pool.Query(ctx, `SELECT `+holdColumns+` FROM holds
			WHERE status = $1 ORDER BY created_at DESC, id DESC LIMIT $2`, status, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("storage: list holds: %w", err)
	}
	defer rows.Close()
	holds, err := storage.Collect(rows, make([]record.Hold, 0, min(limit, 64)), scanHold)
	if err != nil {
		return nil, fmt.Errorf("storage: list holds: %w", err)
	}
	return holds, nil
}

func scanHold(row storage.Scanner) (record.Hold, error) {
	var (
		h                              record.Hold
		request, params                *string
		createdAt, deadline, decidedAt int64
	)
	if err := row.Scan(&h.ID, &h.Seq, &h.SessionID, &h.AgentID, &h.Method, &h.Kind, &h.Tool,
		&h.RuleID, &h.Message, &request, &createdAt, &deadline, &h.OnTimeout, &h.Status,
		&h.Decision, &h.DecidedBy, &decidedAt, &h.Note, &params); err != nil {
		return record.Hold{}, err
	}
	h.Request = json.RawMessage("null")
	if request != nil {
		h.Request = json.RawMessage(*request)
	}
	if params != nil {
		h.Params = json.RawMessage(*params)
	}
	h.CreatedAt = time.Unix(0, createdAt).UTC()
	h.Deadline = time.Unix(0, deadline).UTC()
	h.DecidedAt = storage.TimeFromNanos(decidedAt)
	return h, nil
}

// SetSessionControl sets a session's control and stores its session.control event and audit
// entry in one transaction; a session not seen yet gets a row.
func (db *DB) SetSessionControl(ctx context.Context, c record.SessionControl, audit *record.AuditEntry) (_ []record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	state, ok := record.ControlState(c.Control)
	if !ok {
		return nil, fmt.Errorf("storage: session control %q: must be pause, resume or block", c.Control)
	}
	if c.SessionID == "" {
		return nil, errors.New("storage: session control has no session id")
	}
	if c.At.IsZero() {
		c.At = time.Now()
	}
	c.At = norm(c.At)
	c.SessionID, c.Operator, c.Note = cleanText(c.SessionID), cleanText(c.Operator), cleanText(c.Note)
	payload, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("storage: encode session control: %w", err)
	}
	a, err := prepareAudit(audit, c.At)
	if err != nil {
		return nil, err
	}
	if a != nil {
		a.entry.SessionID = cmp.Or(a.entry.SessionID, c.SessionID)
		a.entry.Operator = cmp.Or(a.entry.Operator, c.Operator)
		a.entry.Note = cmp.Or(a.entry.Note, c.Note)
	}
	var events []record.Event
	err = db.writeTx(ctx, func(t *seqTx) error {
		at := c.At.UnixNano()
		if _, err := t.Exec(ctx, `INSERT INTO sessions (id, first_seen, last_seen, last_seq, steps, control)
			VALUES ($1, $2, $2, 0, 0, $3) ON CONFLICT (id) DO UPDATE SET control = excluded.control`,
			c.SessionID, at, state); err != nil {
			return fmt.Errorf("storage: set control of session %q: %w", c.SessionID, err)
		}
		var err error
		events, err = eventAudit(t, record.EventSessionControl, c.SessionID, c.At, payload, a)
		return err
	})
	if err != nil {
		return nil, err
	}
	if a != nil {
		*audit = a.entry
	}
	return events, nil
}

// SessionControls returns the control of every session that is not active.
func (db *DB) SessionControls(ctx context.Context) (_ map[string]string, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	rows, err := db.pool.Query(ctx, `SELECT id, control FROM sessions WHERE control <> 'active'`)
	if err != nil {
		return nil, fmt.Errorf("storage: session controls: %w", err)
	}
	defer rows.Close()
	out := make(map[string]string)
	for rows.Next() {
		var id, control string
		if err := rows.Scan(&id, &control); err != nil {
			return nil, fmt.Errorf("storage: session controls: %w", err)
		}
		out[id] = control
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: session controls: %w", err)
	}
	return out, nil
}

// auditArgs is an entry validated and copied before it is written.
type auditArgs struct {
	entry record.AuditEntry
}

// prepareAudit validates e and copies it, its time defaulting to at (or now); nil for nil.
func prepareAudit(e *record.AuditEntry, at time.Time) (*auditArgs, error) {
	if e == nil {
		return nil, nil
	}
	if err := e.CheckNew(); err != nil {
		return nil, err
	}
	a := &auditArgs{entry: *e}
	x := &a.entry
	for _, f := range []*string{&x.Type, &x.Operator, &x.SessionID, &x.HoldID, &x.RuleID, &x.Decision, &x.Note} {
		*f = cleanText(*f)
	}
	x.Diff, x.Detail = cleanJSON(x.Diff), cleanJSON(x.Detail)
	if a.entry.At.IsZero() {
		a.entry.At = at
	}
	if a.entry.At.IsZero() {
		a.entry.At = time.Now()
	}
	a.entry.At = norm(a.entry.At)
	if len(a.entry.Diff) == 0 {
		a.entry.Diff = nil
	}
	if len(a.entry.Detail) == 0 {
		a.entry.Detail = nil
	}
	return a, nil
}

// appendAudit writes a's entry and its "audit" event, setting the entry's ID and Seq; the
// event's payload carries both.
func appendAudit(t *seqTx, a *auditArgs) (record.Event, error) {
	e := &a.entry
	seq := t.take(1)
	var id int64
	if err := t.QueryRow(t.ctx, `INSERT INTO audit (seq, at, type, operator, session_id, hold_id,
		rule_id, decision, note, diff, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		RETURNING id`, seq, e.At.UnixNano(), e.Type, e.Operator, e.SessionID, e.HoldID, e.RuleID,
		e.Decision, e.Note, nullText(e.Diff), nullText(e.Detail)).Scan(&id); err != nil {
		return record.Event{}, fmt.Errorf("storage: insert audit %s: %w", e.Type, err)
	}
	e.ID, e.Seq = id, seq
	payload, err := json.Marshal(e)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: encode audit %s: %w", e.Type, err)
	}
	if _, err := t.Exec(t.ctx, `INSERT INTO events (seq, type, session_id, at, payload)
		VALUES ($1, $2, $3, $4, $5)`, seq, record.EventAudit, e.SessionID, e.At.UnixNano(), string(payload)); err != nil {
		return record.Event{}, fmt.Errorf("storage: audit %s event: %w", e.Type, err)
	}
	return record.Event{Seq: seq, Type: record.EventAudit, SessionID: e.SessionID, At: e.At, Payload: payload}, nil
}

// AppendAudit stores e and its "audit" event in one transaction, sets e.ID, e.Seq and e.At
// and returns the event.
func (db *DB) AppendAudit(ctx context.Context, e *record.AuditEntry) (_ record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	a, err := prepareAudit(e, time.Now())
	if err != nil {
		return record.Event{}, err
	}
	var ev record.Event
	err = db.writeTx(ctx, func(t *seqTx) error {
		var err error
		ev, err = appendAudit(t, a)
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

func scanAudit(row storage.Scanner) (record.AuditEntry, error) {
	var (
		e            record.AuditEntry
		at           int64
		diff, detail *string
	)
	if err := row.Scan(&e.ID, &e.Seq, &at, &e.Type, &e.Operator, &e.SessionID, &e.HoldID,
		&e.RuleID, &e.Decision, &e.Note, &diff, &detail); err != nil {
		return record.AuditEntry{}, err
	}
	e.At = time.Unix(0, at).UTC()
	if diff != nil {
		e.Diff = json.RawMessage(*diff)
	}
	if detail != nil {
		e.Detail = json.RawMessage(*detail)
	}
	return e, nil
}

// ListAudit returns audit entries matching q, newest first.
func (db *DB) ListAudit(ctx context.Context, q record.AuditQuery) (_ []record.AuditEntry, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	limit := storage.ClampLimit(q.Limit, 100, 1000)
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Before > 0 {
		where = append(where, "id < "+arg(q.Before))
	}
	if q.Type != "" {
		if strings.Contains(q.Type, ".") {
			where = append(where, "type = "+arg(q.Type))
		} else {
			where = append(where, "(type = "+arg(q.Type)+" OR starts_with(type, "+arg(q.Type+".")+"))")
		}
	}
	for _, f := range []struct{ col, v string }{
		{"session_id", q.SessionID}, {"operator", q.Operator}, {"hold_id", q.HoldID},
	} {
		switch {
		case f.v == "":
		case q.Prefix:
			where = append(where, "starts_with("+f.col+", "+arg(f.v)+")")
		default:
			where = append(where, f.col+" = "+arg(f.v))
		}
	}
	query := `SELECT ` + auditColumns + ` FROM audit`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY id DESC LIMIT ` + arg(limit)
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("storage: list audit: %w", err)
	}
	defer rows.Close()
	entries, err := storage.Collect(rows, make([]record.AuditEntry, 0, min(limit, 64)), scanAudit)
	if err != nil {
		return nil, fmt.Errorf("storage: list audit: %w", err)
	}
	return entries, nil
}
