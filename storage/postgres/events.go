package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// AppendEvent stores a non-step event, sets ev.Seq (and normalises ev.At) once committed.
func (db *DB) AppendEvent(ctx context.Context, ev *record.Event) (err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	switch ev.Type {
	case "":
		return errors.New("storage: event has no type")
	case record.EventStep:
		return errors.New(`storage: "step" events are written by SaveStep`)
	}
	payload := ev.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	} else if !json.Valid(payload) {
		return fmt.Errorf("storage: %s event payload is not valid JSON", ev.Type)
	}
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	ev.At = norm(ev.At)
	ev.Type, ev.SessionID, payload = cleanText(ev.Type), cleanText(ev.SessionID), cleanJSON(payload)
	var seq int64
	err = db.writeTx(ctx, func(t *seqTx) error {
		e, err := t.event(ev.Type, ev.SessionID, ev.At, payload)
		seq = e.Seq
		return err
	})
	if err != nil {
		return fmt.Errorf("storage: append %s event: %w", ev.Type, err)
	}
	ev.Seq = seq
	return nil
}

// pageOverhead is what an event costs beyond its payload's bulk in MaxBytes accounting.
const pageOverhead = 512

// EventsAfter returns events with seq > after in seq order, at most limit (clamped to
// 1..1000, default 500). A step event's payload is the step as Step returns it.
func (db *DB) EventsAfter(ctx context.Context, after int64, limit int) (_ []record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	return db.EventsPage(ctx, after, record.EventPage{Limit: limit})
}

// stepBulkSQL is a step's bulky size; octet_length reads a toasted value's size without
// its content.
const stepBulkSQL = `coalesce(octet_length(s.request), 0) + coalesce(octet_length(s.response), 0) + octet_length(s.text)`

// EventsPage is EventsAfter bounded in bytes as well, with big steps optionally truncated.
// A first query reads the events with their steps' sizes only (octet_length reads a
// value's header, not its content), so the page ends before steps that would not fit are
// read; a second reads the page's steps, their seqs being exactly those of its step events.
// Events are visible in seq order (seqs are taken in commit order), so the second query
// finds every step of the page committed; one pruned meanwhile is published as null.
func (db *DB) EventsPage(ctx context.Context, after int64, p record.EventPage) (_ []record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	p.Limit = storage.ClampLimit(p.Limit, 500, 1000)
	rows, err := db.pool.Query(ctx, `SELECT e.seq, e.type, e.session_id, e.at, e.payload,
		coalesce(`+stepBulkSQL+`, 0)
		FROM events e LEFT JOIN steps s ON s.seq = e.seq AND e.type = 'step'
		WHERE e.seq > $1 ORDER BY e.seq LIMIT $2`, after, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	events := make([]record.Event, 0, min(p.Limit, 64))
	size, steps := 0, 0
	for rows.Next() {
		var (
			ev      record.Event
			at      int64
			payload *string
			bulk    int
		)
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.SessionID, &at, &payload, &bulk); err != nil {
			rows.Close()
			return nil, fmt.Errorf("storage: events after %d: %w", after, err)
		}
		ev.At = time.Unix(0, at).UTC()
		if payload != nil {
			ev.Payload = json.RawMessage(*payload)
		}
		if p.MaxBytes > 0 {
			if p.MaxStepBulk > 0 && bulk > p.MaxStepBulk {
				bulk = record.TruncatedTextBytes
			}
			n := pageOverhead + len(ev.Payload) + bulk
			if len(events) > 0 && size+n > p.MaxBytes {
				break
			}
			size += n
		}
		if ev.Type == record.EventStep {
			steps++
		}
		events = append(events, ev)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	if steps == 0 {
		return events, nil
	}
	if err := db.fillStepPayloads(ctx, events, after, p.MaxStepBulk); err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	return events, nil
}

// fillStepPayloads sets the payload of every step event of events to its step's JSON, the
// steps over maxBulk (> 0) truncated without their bulky columns being read.
func (db *DB) fillStepPayloads(ctx context.Context, events []record.Event, after int64, maxBulk int) error {
	last := events[len(events)-1].Seq
	cols := stepColumns
	args := []any{after, last}
	if maxBulk > 0 {
		big := "(" + strings.ReplaceAll(stepBulkSQL, "s.", "") + ") > $3"
		cols = strings.NewReplacer(
			"request,", "CASE WHEN "+big+" THEN NULL ELSE request END,",
			"response,", "CASE WHEN "+big+" THEN NULL ELSE response END,",
			"text,", "CASE WHEN "+big+" THEN left(text, 4096) ELSE text END,",
		).Replace(stepColumns) + ", " + big
		args = append(args, maxBulk)
	}
	rows, err := db.pool.Query(ctx, `SELECT `+cols+` FROM steps WHERE seq > $1 AND seq <= $2 ORDER BY seq`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	k := 0
	for rows.Next() {
		var (
			rec       record.StepRecord
			truncated bool
		)
		if maxBulk > 0 {
			rec, err = scanStep(rows, &truncated)
		} else {
			rec, err = scanStep(rows)
		}
		if err != nil {
			return err
		}
		for k < len(events) && (events[k].Seq < rec.Seq || events[k].Type != record.EventStep) {
			if events[k].Type == record.EventStep {
				events[k].Payload = json.RawMessage("null") // pruned meanwhile
			}
			k++
		}
		if k == len(events) || events[k].Seq != rec.Seq {
			continue
		}
		if truncated {
			rec.Truncated = true
			rec.Text = record.CutText(rec.Text, record.TruncatedTextBytes)
		}
		b, err := json.Marshal(&rec)
		if err != nil {
			return fmt.Errorf("encode step %d: %w", rec.Seq, err)
		}
		events[k].Payload = b
		k++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for ; k < len(events); k++ {
		if events[k].Type == record.EventStep {
			events[k].Payload = json.RawMessage("null")
		}
	}
	return nil
}

const sessionColumns = `s.id, s.agent_id, s.agent_name, s.user_id, s.first_seen, s.last_seen,
	s.last_seq, s.steps, s.last_method, s.control, s.decisions::text, s.key_id,
	s.client_name, s.client_version, s.server_name, s.server_version,
	(SELECT count(*) FROM holds h WHERE h.session_id = s.id AND h.status = 'pending')`

// Sessions pages through sessions newest first by last activity, ties broken by id, with
// keyset pagination on the cursor q.Before. Limit is clamped to 1..500 (default 50). Search
// keeps sessions whose id, agent id, agent name, user id, or client or server name contains
// it, ignoring case.
func (db *DB) Sessions(ctx context.Context, q record.SessionQuery) (_ record.SessionPage, err error) {
	ctx, done := db.boundSlow(ctx)
	defer done(&err)
	limit := storage.ClampLimit(q.Limit, 50, 500)
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Before != "" {
		lastSeen, id, err := record.DecodeCursor(q.Before)
		if err != nil {
			return record.SessionPage{}, fmt.Errorf("storage: sessions: %w", err)
		}
		where = append(where, "(s.last_seen, s.id) < ("+arg(lastSeen)+", "+arg(id)+")")
	}
	if q.Search != "" {
		p := arg("%" + storage.EscapeLike(q.Search) + "%")
		where = append(where, `(s.id ILIKE `+p+` OR s.agent_id ILIKE `+p+`
			OR s.agent_name ILIKE `+p+` OR s.user_id ILIKE `+p+`
			OR s.client_name ILIKE `+p+` OR s.server_name ILIKE `+p+`)`)
	}
	query := `SELECT ` + sessionColumns + ` FROM sessions s`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY s.last_seen DESC, s.id DESC LIMIT ` + arg(limit+1)
	rows, err := db.pool.Query(ctx, query, args...)
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
		page.Next = record.SessionCursor(page.Sessions[limit-1])
	}
	return page, nil
}

// Session returns one session's summary, or ErrNotFound.
func (db *DB) Session(ctx context.Context, id string) (_ record.Session, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	s, err := storage.ScanSession(db.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions s WHERE s.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return record.Session{}, fmt.Errorf("storage: session %q: %w", id, record.ErrNotFound)
	}
	if err != nil {
		return record.Session{}, fmt.Errorf("storage: session %q: %w", id, err)
	}
	return s, nil
}
