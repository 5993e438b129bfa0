package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

var eventCases = []testCase{
	{"EventsAfterInterleavesEveryKindInSeqOrder", func(t *testing.T, db storage.Backend) {
		s1 := save(t, db, step("s1", "allow", 0))
		ev := &record.Event{Type: "custom", SessionID: "s1", At: t0.In(time.FixedZone("X", 7200)), Payload: json.RawMessage(`{"x":1}`)}
		require.NoError(t, db.AppendEvent(bg(), ev))
		require.Greater(t, ev.Seq, s1.Seq)
		require.Equal(t, t0, ev.At, "At normalised to UTC")
		holdEvents, err := db.CreateHold(bg(), newHold("h1", "s1"), &record.AuditEntry{Type: record.AuditHoldCreated})
		require.NoError(t, err)
		require.Len(t, holdEvents, 2)
		s2 := save(t, db, step("s2", "deny", time.Second))
		audit := &record.AuditEntry{Type: "test.entry", Operator: "op"}
		aev, err := db.AppendAudit(bg(), audit)
		require.NoError(t, err)

		want := []int64{s1.Seq, ev.Seq, holdEvents[0].Seq, holdEvents[1].Seq, s2.Seq, aev.Seq}
		requireIncreasing(t, want)
		all := allEvents(t, db)
		require.Equal(t, want, eventSeqs(all))
		require.Equal(t, []string{record.EventStep, "custom", record.EventHoldCreated, record.EventAudit, record.EventStep, record.EventAudit},
			[]string{all[0].Type, all[1].Type, all[2].Type, all[3].Type, all[4].Type, all[5].Type})
		require.JSONEq(t, stepJSON(t, db, s1.Seq), string(all[0].Payload), "a step event's payload is the step")
		require.Equal(t, "s1", all[0].SessionID)
		require.Equal(t, s1.ReceivedAt, all[0].At)
		require.JSONEq(t, `{"x":1}`, string(all[1].Payload))
		require.Equal(t, holdEvents[0].Payload, all[2].Payload)
		require.Equal(t, aev.Payload, all[5].Payload)
		var carried record.AuditEntry
		require.NoError(t, json.Unmarshal(all[5].Payload, &carried))
		require.Equal(t, audit.ID, carried.ID)
		require.Equal(t, aev.Seq, carried.Seq)

		// Pages: after any seq, in order, bounded by limit.
		for i := range want {
			got, err := db.EventsAfter(bg(), want[i], 2)
			require.NoError(t, err)
			require.Equal(t, want[i+1:min(i+3, len(want))], eventSeqs(got))
		}
		got, err := db.EventsAfter(bg(), 0, 0)
		require.NoError(t, err)
		require.Len(t, got, len(want), "limit 0 is the default")
	}},
	{"AppendEventValidates", func(t *testing.T, db storage.Backend) {
		for name, ev := range map[string]*record.Event{
			"no type":          {},
			"step event":       {Type: record.EventStep},
			"payload not JSON": {Type: "x", Payload: json.RawMessage(`{`)},
		} {
			require.Error(t, db.AppendEvent(bg(), ev), name)
		}
		ev := &record.Event{Type: "x"}
		require.NoError(t, db.AppendEvent(bg(), ev))
		require.False(t, ev.At.IsZero())
		all := allEvents(t, db)
		require.Len(t, all, 1)
		require.Equal(t, "null", string(all[0].Payload), "an absent payload is null")
	}},
	{"EventsPageBoundsBytesAndTruncatesBigSteps", func(t *testing.T, db storage.Backend) {
		big := step("s", "allow", 0)
		big.Text = strings.Repeat("é", 10000) // 20000 bytes
		big.Request = json.RawMessage(`"` + strings.Repeat("x", 50000) + `"`)
		save(t, db, big)
		small := save(t, db, step("s", "allow", 1))
		save(t, db, step("s", "allow", 2))

		evs, err := db.EventsPage(bg(), 0, record.EventPage{MaxStepBulk: 1000})
		require.NoError(t, err)
		require.Len(t, evs, 3)
		var got record.StepRecord
		require.NoError(t, json.Unmarshal(evs[0].Payload, &got))
		require.True(t, got.Truncated)
		require.Contains(t, []string{"", "null"}, string(got.Request), "a truncated step's request is left out")
		require.Equal(t, record.CutText(big.Text, record.TruncatedTextBytes), got.Text)
		require.JSONEq(t, stepJSON(t, db, small.Seq), string(evs[1].Payload), "small steps whole")

		// A byte bound ends the page, but a page holds at least one event.
		evs, err = db.EventsPage(bg(), 0, record.EventPage{MaxBytes: 1})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.JSONEq(t, stepJSON(t, db, big.Seq), string(evs[0].Payload))
		evs, err = db.EventsPage(bg(), 0, record.EventPage{MaxBytes: 100000, MaxStepBulk: 1000})
		require.NoError(t, err)
		require.Len(t, evs, 3, "truncated steps count as truncated")
		evs, err = db.EventsPage(bg(), big.Seq, record.EventPage{MaxBytes: 1200})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, small.Seq, evs[0].Seq)
	}},
}
