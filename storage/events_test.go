package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEventsAfterInterleavesStepsAndOtherEvents(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()

	type written struct {
		seq     int64
		typ     string
		session string
		payload json.RawMessage // nil for steps: compared with the stored step instead
	}
	var log []written
	for i := range 6 {
		rec := step("s", "allow", time.Duration(i)*time.Second)
		rec.MatchedRules = []RuleMatch{{RuleID: "r", Action: "allow", Mode: "enforce"}}
		save(t, db, rec)
		log = append(log, written{rec.Seq, EventStep, "s", nil})

		ev := &Event{Type: "hold.created", SessionID: "s", At: t0, Payload: json.RawMessage(`{"id":"h1"}`)}
		require.NoError(t, db.AppendEvent(ctx, ev))
		log = append(log, written{ev.Seq, ev.Type, "s", ev.Payload})

		var seq int64
		payload := json.RawMessage(`{"op":"create","rule":null,"ruleId":"r"}`)
		require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
			var err error
			seq, err = db.NextSeqTx(tx, "rule.changed", "", t0, payload)
			return err
		}))
		log = append(log, written{seq, "rule.changed", "", payload})
	}
	for i := 1; i < len(log); i++ {
		require.Equal(t, log[i-1].seq+1, log[i].seq, "one sequence, no gaps")
	}

	all, err := db.EventsAfter(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, all, len(log))
	for i, ev := range all {
		require.Equal(t, log[i].seq, ev.Seq)
		require.Equal(t, log[i].typ, ev.Type)
		require.Equal(t, log[i].session, ev.SessionID)
		if ev.Type != EventStep {
			require.Equal(t, string(log[i].payload), string(ev.Payload))
			continue
		}
		// A step event's payload is exactly GET /api/steps/{seq}'s body.
		rec, err := db.Step(ctx, ev.Seq)
		require.NoError(t, err)
		want, err := json.Marshal(rec)
		require.NoError(t, err)
		require.Equal(t, string(want), string(ev.Payload))
		require.Equal(t, rec.ReceivedAt, ev.At)
	}

	// Resuming from any seq returns exactly the rest, in pages.
	for _, after := range []int64{0, 1, 5, log[len(log)-2].seq} {
		var got []int64
		cur := after
		for {
			page, err := db.EventsAfter(ctx, cur, 4)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page), 4)
			if len(page) == 0 {
				break
			}
			for _, ev := range page {
				got = append(got, ev.Seq)
			}
			cur = page[len(page)-1].Seq
		}
		var want []int64
		for _, w := range log {
			if w.seq > after {
				want = append(want, w.seq)
			}
		}
		require.Equal(t, want, got)
	}

	none, err := db.EventsAfter(ctx, log[len(log)-1].seq, 10)
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestAppendEventNormalisesAndValidates(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()

	local := time.Date(2025, 6, 1, 12, 0, 0, 7, time.FixedZone("X", -5*3600))
	ev := &Event{Type: "audit", At: local}
	require.NoError(t, db.AppendEvent(ctx, ev))
	require.Equal(t, time.UTC, ev.At.Location())
	require.True(t, local.Equal(ev.At))

	got, err := db.EventsAfter(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, Event{Seq: ev.Seq, Type: "audit", At: ev.At, Payload: json.RawMessage("null")}, got[0])

	tests := []struct {
		name string
		ev   Event
	}{
		{"no type", Event{Payload: json.RawMessage(`{}`)}},
		{"step type", Event{Type: EventStep, Payload: json.RawMessage(`{}`)}},
		{"invalid payload", Event{Type: "audit", Payload: json.RawMessage(`{"a":`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, db.AppendEvent(ctx, &tc.ev))
		})
	}
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := db.NextSeqTx(tx, EventStep, "s", t0, nil)
		if err == nil {
			return errors.New("NextSeqTx accepted a step event")
		}
		return nil
	}))
	require.Equal(t, 1, countRows(t, db, "events"))
}
