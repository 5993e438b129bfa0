package sqlite

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"

	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// pageOverhead is what an event costs beyond its payload's bulk, in MaxBytes accounting:
// the envelope and a step's small fields.
const pageOverhead = 512

// EventsAfter returns events with seq > after in seq order, at most limit (clamped to
// 1..1000, default 500). A "step" event's payload is the step record exactly as Step
// returns it, so a client replaying the log sees the same JSON as GET /api/steps/{seq}.
func (db *DB) EventsAfter(ctx context.Context, after int64, limit int) ([]record.Event, error) {
	return db.EventsPage(ctx, after, record.EventPage{Limit: limit})
}

// EventsPage is EventsAfter with the page bounded in bytes as well as in events, and big
// steps optionally truncated; see EventPage.
func (db *DB) EventsPage(ctx context.Context, after int64, p record.EventPage) ([]record.Event, error) {
	p.Limit = storage.ClampLimit(p.Limit, 500, 1000)
	if err := db.flushSteps(ctx); err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	// One read transaction: the events and the steps they point to come from one snapshot.
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	defer func() { _ = tx.Rollback() }()

	events, err := queryEvents(ctx, tx, after, p)
	if err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	if len(events) == 0 {
		return events, nil
	}
	if err := fillStepPayloads(ctx, tx, events, after, p.MaxStepBulk); err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	return events, nil
}

// stepBulkSQL is a step's bulky size, read from the rows' headers: octet_length of a column
// does not load its content.
const stepBulkSQL = `coalesce(octet_length(request), 0) + coalesce(octet_length(response), 0) + octet_length(text)`

func queryEvents(ctx context.Context, tx *sql.Tx, after int64, p record.EventPage) ([]record.Event, error) {
	bounded := p.MaxBytes > 0
	q := `SELECT seq, type, session_id, at, payload, 0 FROM events
		WHERE seq > ? ORDER BY seq LIMIT ?`
	if bounded {
		// Each step's size comes from its row header (one primary-key probe), so the page
		// ends before the steps that would not fit are read.
		q = `SELECT e.seq, e.type, e.session_id, e.at, e.payload,
			coalesce((SELECT ` + stepBulkSQL + ` FROM steps s WHERE s.seq = e.seq), 0)
			FROM events e WHERE e.seq > ? ORDER BY e.seq LIMIT ?`
	}
	rows, err := tx.QueryContext(ctx, q, after, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	events := make([]record.Event, 0, min(p.Limit, 64))
	size := 0
	for rows.Next() {
		var (
			ev      record.Event
			at      int64
			payload sql.NullString
			bulk    int
		)
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.SessionID, &at, &payload, &bulk); err != nil {
			return nil, err
		}
		ev.At = time.Unix(0, at).UTC()
		if payload.Valid {
			ev.Payload = json.RawMessage(payload.String)
		}
		if bounded {
			if p.MaxStepBulk > 0 && bulk > p.MaxStepBulk {
				bulk = record.TruncatedTextBytes
			}
			n := pageOverhead + len(ev.Payload) + bulk
			if len(events) > 0 && size+n > p.MaxBytes {
				break
			}
			size += n
		}
		events = append(events, ev)
	}
	return events, rows.Err()
}

// truncatedStepColumns are stepColumns for a reader that takes steps over ?1 bulky bytes
// truncated, plus whether the step was: the CASEs leave the bulky columns of a big step
// unread, and only a prefix of its text is read (substr counts characters; the prefix is
// cut to bytes in Go). Derived from stepColumns so that both stay one list.
func truncatedStepColumns() string {
	big := stepBulkSQL + ` > ?1`
	return strings.NewReplacer(
		"request,", "CASE WHEN "+big+" THEN NULL ELSE request END,",
		"response,", "CASE WHEN "+big+" THEN NULL ELSE response END,",
		"text,", "CASE WHEN "+big+" THEN substr(text, 1, "+truncatedTextChars+") ELSE text END,",
	).Replace(stepColumns) + ", " + big
}

// truncatedTextChars is TruncatedTextBytes in characters, which is at least as long.
const truncatedTextChars = "4096"

// withTail scans a row of stepColumns followed by more columns.
type withTail struct {
	rows *sql.Rows
	tail []any
}

func (w withTail) Scan(dest ...any) error { return w.rows.Scan(append(dest, w.tail...)...) }

// fillStepPayloads sets the payload of every step event in events from the steps table.
// Steps share the events' seqs, so the steps of this page are exactly those in
// (after, last seq]: one range scan of the primary key, read as the events need them.
// Steps over maxBulk (> 0) come truncated, their bulky columns unread.
func fillStepPayloads(ctx context.Context, tx *sql.Tx, events []record.Event, after int64, maxBulk int) error {
	last := events[len(events)-1].Seq
	var (
		rows *sql.Rows
		err  error
	)
	if maxBulk > 0 {
		rows, err = tx.QueryContext(ctx, `SELECT `+truncatedStepColumns()+` FROM steps
			WHERE seq > ?2 AND seq <= ?3 ORDER BY seq`, maxBulk, after, last)
	} else {
		rows, err = tx.QueryContext(ctx, `SELECT `+stepColumns+` FROM steps
			WHERE seq > ? AND seq <= ? ORDER BY seq`, after, last)
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	next := func() (record.StepRecord, bool, error) {
		if !rows.Next() {
			return record.StepRecord{}, false, rows.Err()
		}
		if maxBulk <= 0 {
			rec, err := scanStep(rows)
			return rec, err == nil, err
		}
		var truncated bool
		rec, err := scanStep(withTail{rows, []any{&truncated}})
		if err != nil {
			return record.StepRecord{}, false, err
		}
		if truncated {
			rec.Truncated = true
			rec.Text = record.CutText(rec.Text, record.TruncatedTextBytes)
		}
		return rec, true, nil
	}
	// One step record at a time: a page never holds its steps both as records and as
	// encoded payloads.
	var (
		rec        record.StepRecord
		have, done bool
	)
	for k := range events {
		ev := &events[k]
		if ev.Type != record.EventStep {
			continue
		}
		for !done && (!have || rec.Seq < ev.Seq) {
			if rec, have, err = next(); err != nil {
				return err
			}
			done = !have
		}
		if !have || rec.Seq != ev.Seq {
			// The step row is gone (deleted apart from its event): publish null rather
			// than fail the whole page.
			ev.Payload = json.RawMessage("null")
			continue
		}
		b, err := json.Marshal(&rec)
		if err != nil {
			return fmt.Errorf("encode step %d: %w", ev.Seq, err)
		}
		ev.Payload = b
		have = false
	}
	return nil
}
