package sqlite

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"

	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

const holdColumns = `id, seq, session_id, agent_id, method, kind, tool, rule_id, message,
	request, created_at, deadline, on_timeout, status, decision, decided_by, decided_at, note,
	params`

// holdTime is how a time is stored and read back: UTC with nanosecond precision, so that a
// hold published at write time marshals exactly like the same hold read later.
func holdTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(0, t.UnixNano()).UTC()
}

func holdNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func holdText(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// CreateHold stores a new pending hold together with its hold.created event and, when
// audit is not nil, its audit entry, in one transaction. It normalises h's times to what a
// read returns and returns the events written, in seq order, for publishing.
func (db *DB) CreateHold(ctx context.Context, h *record.Hold, audit *record.AuditEntry) ([]record.Event, error) {
	if err := h.CheckNew(); err != nil {
		return nil, err
	}
	h.Status = record.HoldPending
	h.CreatedAt = holdTime(h.CreatedAt)
	if h.CreatedAt.IsZero() {
		h.CreatedAt = holdTime(time.Now())
	}
	h.Deadline = holdTime(h.Deadline)
	if len(h.Request) == 0 {
		h.Request = json.RawMessage("null")
	}
	payload, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("storage: encode hold %s: %w", h.ID, err)
	}
	auditArgs, err := prepareAudit(audit, h.CreatedAt)
	if err != nil {
		return nil, err
	}
	row := *h
	var events []record.Event
	err = db.Exec(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO holds (`+holdColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			row.ID, row.Seq, row.SessionID, row.AgentID, row.Method, row.Kind, row.Tool,
			row.RuleID, row.Message, holdText(row.Request), holdNanos(row.CreatedAt),
			holdNanos(row.Deadline), row.OnTimeout, row.Status, row.Decision, row.DecidedBy,
			holdNanos(row.DecidedAt), row.Note, holdText(row.Params)); err != nil {
			return fmt.Errorf("storage: insert hold %s: %w", row.ID, err)
		}
		var err error
		events, err = db.eventAuditTx(tx, record.EventHoldCreated, row.SessionID, row.CreatedAt, payload, auditArgs)
		return err
	})
	if err != nil {
		return nil, err
	}
	if auditArgs != nil {
		*audit = auditArgs.entry
	}
	return events, nil
}

// ResolveHold ends a pending hold with res, storing its hold.resolved event and, when audit
// is not nil, its audit entry in the same transaction. The update is conditional on the
// hold still being pending: when it is not, nothing is written and ErrHoldDecided is
// returned with the hold as stored. An unknown id returns ErrNotFound. Fields of audit left
// empty (session, hold, rule, decision, note) are filled from the hold.
func (db *DB) ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *record.AuditEntry) (record.Hold, []record.Event, error) {
	if err := res.Check(id); err != nil {
		return record.Hold{}, nil, err
	}
	if res.DecidedAt.IsZero() {
		res.DecidedAt = time.Now()
	}
	res.DecidedAt = holdTime(res.DecidedAt)
	auditArgs, err := prepareAudit(audit, res.DecidedAt)
	if err != nil {
		return record.Hold{}, nil, err
	}
	var (
		h      record.Hold
		events []record.Event
	)
	err = db.Exec(ctx, func(tx *sql.Tx) error {
		events = events[:0]
		row := tx.QueryRow(`UPDATE holds SET status = ?, decision = ?, decided_by = ?,
			decided_at = ?, note = ?, params = ?
			WHERE id = ? AND status = 'pending' RETURNING `+holdColumns,
			res.Status, res.Decision, res.DecidedBy, holdNanos(res.DecidedAt), res.Note,
			holdText(res.Params), id)
		var err error
		h, err = scanHold(row)
		if errors.Is(err, sql.ErrNoRows) {
			h, err = scanHold(tx.QueryRow(`SELECT `+holdColumns+` FROM holds WHERE id = ?`, id))
			if errors.Is(err, sql.ErrNoRows) {
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
		evs, err := db.resolvedEventsTx(tx, h, auditArgs)
		if err != nil {
			return err
		}
		events = append(events, evs...)
		return nil
	})
	if errors.Is(err, record.ErrHoldDecided) {
		return h, nil, err
	}
	if err != nil {
		return record.Hold{}, nil, err
	}
	if auditArgs != nil {
		*audit = auditArgs.entry
	}
	return h, events, nil
}

// resolvedEventsTx writes the hold.resolved event of h and its audit entry (when a is not
// nil), filling the entry's hold fields from h.
func (db *DB) resolvedEventsTx(tx *sql.Tx, h record.Hold, a *auditArgs) ([]record.Event, error) {
	// The event says how the hold ended; the request (up to the body limit, already in
	// the hold.created event and the hold row) and the operator's params stay out of it, so
	// that ending a thousand large holds at once, as a shutdown does, writes little.
	// GET /api/holds/{id} has them.
	brief := h
	brief.Request, brief.Params = nil, nil
	payload, err := json.Marshal(brief)
	if err != nil {
		return nil, fmt.Errorf("storage: encode hold %s: %w", h.ID, err)
	}
	if a != nil {
		e := &a.entry
		fill := func(dst *string, v string) {
			if *dst == "" {
				*dst = v
			}
		}
		fill(&e.SessionID, h.SessionID)
		fill(&e.HoldID, h.ID)
		fill(&e.RuleID, h.RuleID)
		fill(&e.Decision, h.Decision)
		fill(&e.Note, h.Note)
	}
	return db.eventAuditTx(tx, record.EventHoldResolved, h.SessionID, h.DecidedAt, payload, a)
}

// eventAuditTx appends an event and, when a is not nil, a's audit entry inside tx, and
// returns both events as published.
func (db *DB) eventAuditTx(tx *sql.Tx, typ, sessionID string, at time.Time, payload []byte, a *auditArgs) ([]record.Event, error) {
	ev, err := db.eventTx(tx, typ, sessionID, at, payload)
	if err != nil {
		return nil, err
	}
	events := []record.Event{ev}
	if a == nil {
		return events, nil
	}
	aev, err := db.appendAuditTx(tx, a)
	if err != nil {
		return nil, err
	}
	return append(events, aev), nil
}

// RestartNote is the note of holds ended by ResolvePendingOnStartup.
const RestartNote = "guardian stopped while pending; the agent's connection was lost with the process"

// ResolvePendingOnStartup ends every hold left pending by a previous run as interrupted,
// with RestartNote and no decision: its agent's connection ended with that process, so it
// never received one, and none is recorded as if it had. Each hold gets its hold.resolved
// event and a hold.interrupted audit entry, in one transaction. It returns the ended holds,
// oldest first, and the events written.
func (db *DB) ResolvePendingOnStartup(ctx context.Context, now time.Time) ([]record.Hold, []record.Event, error) {
	now = holdTime(now)
	if now.IsZero() {
		now = holdTime(time.Now())
	}
	var (
		holds  []record.Hold
		events []record.Event
	)
	err := db.Exec(ctx, func(tx *sql.Tx) error {
		holds, events = holds[:0], events[:0]
		rows, err := tx.Query(`UPDATE holds SET status = ?, decision = '',
			decided_by = '', decided_at = ?, note = ?
			WHERE status = 'pending' RETURNING `+holdColumns,
			record.HoldInterrupted, holdNanos(now), RestartNote)
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
		if err := rows.Close(); err != nil {
			return fmt.Errorf("storage: resolve pending holds: %w", err)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("storage: resolve pending holds: %w", err)
		}
		// RETURNING order is unspecified; audit entries follow the queue's order.
		slices.SortFunc(holds, func(a, b record.Hold) int {
			return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
		})
		for _, h := range holds {
			a, err := prepareAudit(&record.AuditEntry{Type: record.AuditHoldInterrupted,
				Detail: json.RawMessage(`{"reason":"restart"}`)}, now)
			if err != nil {
				return err
			}
			evs, err := db.resolvedEventsTx(tx, h, a)
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
func (db *DB) SetHoldSeq(ctx context.Context, id string, seq int64) error {
	return db.Exec(ctx, func(tx *sql.Tx) error {
		res, err := tx.Exec(`UPDATE holds SET seq = ? WHERE id = ?`, seq, id)
		if err != nil {
			return fmt.Errorf("storage: set seq of hold %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("storage: set seq of hold %s: %w", id, err)
		} else if n == 0 {
			return fmt.Errorf("storage: hold %s: %w", id, record.ErrNotFound)
		}
		return nil
	})
}

// GetHold returns one hold, or ErrNotFound.
func (db *DB) GetHold(ctx context.Context, id string) (record.Hold, error) {
	h, err := scanHold(db.Reader().QueryRowContext(ctx,
		`SELECT `+holdColumns+` FROM holds WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return record.Hold{}, fmt.Errorf("storage: hold %s: %w", id, record.ErrNotFound)
	}
	if err != nil {
		return record.Hold{}, fmt.Errorf("storage: hold %s: %w", id, err)
	}
	return h, nil
}

// HoldBySeq returns the hold of the stored step seq, or ErrNotFound when the step was never
// held. A step is held at most once; should two rows claim the seq, the newest wins. The
// lookup scans the holds table: holds are steps a person reviewed, few next to steps, and it
// runs only when an operator opens a held step.
func (db *DB) HoldBySeq(ctx context.Context, seq int64) (record.Hold, error) {
	if seq <= 0 {
		return record.Hold{}, fmt.Errorf("storage: hold of step %d: %w", seq, record.ErrNotFound)
	}
	h, err := scanHold(db.Reader().QueryRowContext(ctx,
		`SELECT `+holdColumns+` FROM holds WHERE seq = ? AND seq > 0 ORDER BY created_at DESC, id DESC LIMIT 1`, seq))
	if errors.Is(err, sql.ErrNoRows) {
		return record.Hold{}, fmt.Errorf("storage: hold of step %d: %w", seq, record.ErrNotFound)
	}
	if err != nil {
		return record.Hold{}, fmt.Errorf("storage: hold of step %d: %w", seq, err)
	}
	return h, nil
}

// ListHolds returns holds with the given status ("" or "all" for every status), pending
// ones oldest first (the review queue) and others newest first. limit is clamped to
// 1..1000 and defaults to 200.
func (db *DB) ListHolds(ctx context.Context, status string, limit int) ([]record.Hold, error) {
	if limit <= 0 {
		limit = 200
	}
	limit = min(limit, 1000)
	var (
		rows *sql.Rows
		err  error
	)
	switch status {
	case "", "all":
		rows, err = db.Reader().QueryContext(ctx, `SELECT `+holdColumns+` FROM holds
			ORDER BY created_at DESC, id DESC LIMIT ?`, limit)
	case record.HoldPending:
		rows, err = db.Reader().QueryContext(ctx, `SELECT `+holdColumns+` FROM holds
			WHERE status = 'pending' ORDER BY created_at, id LIMIT ?`, limit)
	default:
		rows, err = db.Reader().QueryContext(ctx, `SELECT `+holdColumns+` FROM holds
			WHERE status = ? ORDER BY created_at DESC, id DESC LIMIT ?`, status, limit)
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

type holdScanner = storage.Scanner

func scanHold(sc holdScanner) (record.Hold, error) {
	var (
		h                              record.Hold
		request, params                sql.NullString
		createdAt, deadline, decidedAt int64
	)
	if err := sc.Scan(&h.ID, &h.Seq, &h.SessionID, &h.AgentID, &h.Method, &h.Kind, &h.Tool,
		&h.RuleID, &h.Message, &request, &createdAt, &deadline, &h.OnTimeout, &h.Status,
		&h.Decision, &h.DecidedBy, &decidedAt, &h.Note, &params); err != nil {
		return record.Hold{}, err
	}
	h.Request = json.RawMessage("null")
	if request.Valid {
		h.Request = json.RawMessage(request.String)
	}
	if params.Valid {
		h.Params = json.RawMessage(params.String)
	}
	h.CreatedAt = time.Unix(0, createdAt).UTC()
	h.Deadline = time.Unix(0, deadline).UTC()
	if decidedAt != 0 {
		h.DecidedAt = time.Unix(0, decidedAt).UTC()
	}
	return h, nil
}

// SetSessionControl sets a session's control (c.Control is pause, resume or block) and
// stores its session.control event and, when audit is not nil, its audit entry, in one
// transaction. A session not seen yet gets a row, so a session can be paused or blocked
// before (or while) its first step is held.
func (db *DB) SetSessionControl(ctx context.Context, c record.SessionControl, audit *record.AuditEntry) ([]record.Event, error) {
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
	c.At = holdTime(c.At)
	payload, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("storage: encode session control: %w", err)
	}
	a, err := prepareAudit(audit, c.At)
	if err != nil {
		return nil, err
	}
	if a != nil {
		if a.entry.SessionID == "" {
			a.entry.SessionID = c.SessionID
		}
		if a.entry.Operator == "" {
			a.entry.Operator = c.Operator
		}
		if a.entry.Note == "" {
			a.entry.Note = c.Note
		}
	}
	var events []record.Event
	err = db.Exec(ctx, func(tx *sql.Tx) error {
		at := c.At.UnixNano()
		if _, err := tx.Exec(`INSERT INTO sessions (id, first_seen, last_seen, last_seq, steps,
			control) VALUES (?, ?, ?, 0, 0, ?)
			ON CONFLICT (id) DO UPDATE SET control = excluded.control`,
			c.SessionID, at, at, state); err != nil {
			return fmt.Errorf("storage: set control of session %q: %w", c.SessionID, err)
		}
		var err error
		events, err = db.eventAuditTx(tx, record.EventSessionControl, c.SessionID, c.At, payload, a)
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
func (db *DB) SessionControls(ctx context.Context) (map[string]string, error) {
	rows, err := db.Reader().QueryContext(ctx,
		`SELECT id, control FROM sessions WHERE control <> 'active'`)
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
