package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// EventsAfter returns events with seq > after in seq order, at most limit (clamped to
// 1..1000, default 500). A "step" event's payload is the step record exactly as Step
// returns it, so a client replaying the log sees the same JSON as GET /api/steps/{seq}.
func (db *DB) EventsAfter(ctx context.Context, after int64, limit int) ([]Event, error) {
	limit = clamp(limit, 500, 1000)
	if err := db.Flush(ctx); err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	// One read transaction: the events and the steps they point to come from one snapshot.
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	defer func() { _ = tx.Rollback() }()

	events, err := queryEvents(ctx, tx, after, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	if len(events) == 0 {
		return events, nil
	}
	if err := fillStepPayloads(ctx, tx, events, after); err != nil {
		return nil, fmt.Errorf("storage: events after %d: %w", after, err)
	}
	return events, nil
}

func queryEvents(ctx context.Context, tx *sql.Tx, after int64, limit int) ([]Event, error) {
	rows, err := tx.QueryContext(ctx, `SELECT seq, type, session_id, at, payload FROM events
		WHERE seq > ? ORDER BY seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	events := make([]Event, 0, min(limit, 64))
	for rows.Next() {
		var (
			ev      Event
			at      int64
			payload sql.NullString
		)
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.SessionID, &at, &payload); err != nil {
			return nil, err
		}
		ev.At = time.Unix(0, at).UTC()
		if payload.Valid {
			ev.Payload = json.RawMessage(payload.String)
		}
		events = append(events, ev)
	}
	return events, rows.Err()
}

// fillStepPayloads sets the payload of every step event in events from the steps table.
// Steps share the events' seqs, so the steps of this page are exactly those in
// (after, last seq]: one range scan of the primary key.
func fillStepPayloads(ctx context.Context, tx *sql.Tx, events []Event, after int64) error {
	last := events[len(events)-1].Seq
	rows, err := tx.QueryContext(ctx, `SELECT `+stepColumns+` FROM steps
		WHERE seq > ? AND seq <= ? ORDER BY seq`, after, last)
	if err != nil {
		return err
	}
	steps, err := collectSteps(rows, len(events))
	if err != nil {
		return err
	}
	i := 0
	for k := range events {
		ev := &events[k]
		if ev.Type != EventStep {
			continue
		}
		for i < len(steps) && steps[i].Seq < ev.Seq {
			i++
		}
		if i == len(steps) || steps[i].Seq != ev.Seq {
			// The step row is gone (deleted apart from its event): publish null rather
			// than fail the whole page.
			ev.Payload = json.RawMessage("null")
			continue
		}
		b, err := json.Marshal(steps[i])
		if err != nil {
			return fmt.Errorf("encode step %d: %w", ev.Seq, err)
		}
		ev.Payload = b
	}
	return nil
}
