package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
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
		rec.MatchedRules = []record.RuleMatch{{RuleID: "r", Action: "allow", Mode: "enforce"}}
		save(t, db, rec)
		log = append(log, written{rec.Seq, record.EventStep, "s", nil})

		ev := &record.Event{Type: "hold.created", SessionID: "s", At: t0, Payload: json.RawMessage(`{"id":"h1"}`)}
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
		if ev.Type != record.EventStep {
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
	ev := &record.Event{Type: "audit", At: local}
	require.NoError(t, db.AppendEvent(ctx, ev))
	require.Equal(t, time.UTC, ev.At.Location())
	require.True(t, local.Equal(ev.At))

	got, err := db.EventsAfter(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, record.Event{Seq: ev.Seq, Type: "audit", At: ev.At, Payload: json.RawMessage("null")}, got[0])

	tests := []struct {
		name string
		ev   record.Event
	}{
		{"no type", record.Event{Payload: json.RawMessage(`{}`)}},
		{"step type", record.Event{Type: record.EventStep, Payload: json.RawMessage(`{}`)}},
		{"invalid payload", record.Event{Type: "audit", Payload: json.RawMessage(`{"a":`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, db.AppendEvent(ctx, &tc.ev))
		})
	}
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := db.NextSeqTx(tx, record.EventStep, "s", t0, nil)
		if err == nil {
			return errors.New("NextSeqTx accepted a step event")
		}
		return nil
	}))
	require.Equal(t, 1, countRows(t, db, "events"))
}

// EventsPage ends a page by bytes as well as by count, always returns at least one event,
// and truncates big steps without changing small ones or other events.
func TestEventsPageBoundsBytesAndTruncatesBigSteps(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	big := strings.Repeat("é", 40<<10) // 80 KiB of text, two bytes a character
	var seqs []int64
	for i := range 12 {
		rec := step("s", "allow", time.Duration(i)*time.Second)
		if i%3 == 0 {
			rec.Request = json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"steps/message","params":{"t":"` + big + `"}}`)
			rec.Text = big
		}
		save(t, db, rec)
		seqs = append(seqs, rec.Seq)
		ev := &record.Event{Type: "audit", SessionID: "s", At: t0, Payload: json.RawMessage(`{"n":1}`)}
		require.NoError(t, db.AppendEvent(ctx, ev))
		seqs = append(seqs, ev.Seq)
	}

	tests := []struct {
		name     string
		page     record.EventPage
		maxCount int // most events in any page
	}{
		{"whole steps, 100 KiB pages: one big step a page", record.EventPage{MaxBytes: 100 << 10}, 6},
		{"whole steps, tiny pages: one event a page", record.EventPage{MaxBytes: 1}, 1},
		{"truncated steps fit many to a page", record.EventPage{MaxBytes: 100 << 10, MaxStepBulk: 64 << 10}, 24},
		{"count bound still applies", record.EventPage{Limit: 5, MaxBytes: 1 << 20, MaxStepBulk: 64 << 10}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			for cur := int64(0); ; {
				page, err := db.EventsPage(ctx, cur, tc.page)
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				require.LessOrEqual(t, len(page), tc.maxCount)
				for _, ev := range page {
					got = append(got, ev.Seq)
					if ev.Type != record.EventStep {
						require.JSONEq(t, `{"n":1}`, string(ev.Payload))
						continue
					}
					full, err := db.Step(ctx, ev.Seq)
					require.NoError(t, err)
					want := &full
					if tc.page.MaxStepBulk > 0 {
						want = full.Truncate(tc.page.MaxStepBulk)
					}
					b, err := json.Marshal(want)
					require.NoError(t, err)
					require.Equal(t, string(b), string(ev.Payload))
					if len(full.Text) > 0 && tc.page.MaxStepBulk > 0 {
						var rec record.StepRecord
						require.NoError(t, json.Unmarshal(ev.Payload, &rec))
						require.True(t, rec.Truncated)
						require.Equal(t, "null", string(rec.Request))
						require.Len(t, rec.Text, record.TruncatedTextBytes)
						require.True(t, strings.HasPrefix(big, rec.Text))
					}
				}
				cur = page[len(page)-1].Seq
			}
			require.Equal(t, seqs, got)
		})
	}
}

func TestTruncate(t *testing.T) {
	rec := step("s", "allow", 0)
	require.Same(t, rec, rec.Truncate(0), "0 never truncates")
	require.Same(t, rec, rec.Truncate(record.StepBulk(rec)), "at the bound: whole")
	rec.Text = "ab€" + strings.Repeat("x", record.TruncatedTextBytes)
	cut := rec.Truncate(10)
	require.NotSame(t, rec, cut)
	require.True(t, cut.Truncated)
	require.Nil(t, cut.Request)
	require.Nil(t, cut.Response)
	require.Len(t, cut.Text, record.TruncatedTextBytes)
	require.NotNil(t, rec.Request, "the original is unchanged")
	rec.Text = strings.Repeat("€", record.TruncatedTextBytes) // 3 bytes each: the cut lands mid-character
	cut = rec.Truncate(10)
	require.True(t, utf8.ValidString(cut.Text))
	require.Len(t, cut.Text, record.TruncatedTextBytes/3*3)
	b, err := json.Marshal(cut)
	require.NoError(t, err)
	require.Equal(t, string(b), string(cut.AppendJSON(nil)))
}
