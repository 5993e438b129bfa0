// Package storetest is the conformance suite of storage.Backend: what every backend must do,
// checked through the interface only. A backend's own tests call Run with a function that
// opens a fresh, empty backend for one test (and closes it in t.Cleanup):
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storage.Backend { return openEmpty(t) })
//	}
//
// It covers every method, the errors callers branch on (record.ErrNotFound,
// record.ErrHoldDecided, record.ErrInvalidCursor, record.ErrBadQuery, record.ErrExists,
// record.ErrLastAdmin, storage.ErrStaleRule), the preconditions of rule changes under
// concurrent writers, and the ordering guarantees the live stream and the console rely on:
// seqs strictly increasing, EventsAfter in seq order and never skipping an event a poller
// could have missed, sessions newest first with cursor paging, steps in arrival order.
package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Open returns a new, empty backend for one test and closes it when the test ends (a
// backend must accept a second Close: one case closes it itself).
type Open func(t *testing.T) storage.Backend

type testCase struct {
	name string
	run  func(t *testing.T, db storage.Backend)
}

// Run runs the whole suite, each case on a backend of its own.
func Run(t *testing.T, open Open) {
	var cases []testCase
	for _, group := range [][]testCase{stepCases, eventCases, sessionCases, peerCases, holdCases, auditCases,
		ruleCases, ruleConditionCases, authCases, approvalCases, secretCases, searchCases, statsCases, maintenanceCases, writableCases} {
		cases = append(cases, group...)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, open(t))
		})
	}
}

// t0 has nanoseconds, which every backend must keep.
var t0 = time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)

func bg() context.Context { return context.Background() }

// step builds a valid record of session sid received at t0+offset.
func step(sid, decision string, offset time.Duration) *record.StepRecord {
	return &record.StepRecord{
		SessionID:  sid,
		Method:     "steps/toolCallRequest",
		Kind:       "toolCall",
		Decision:   decision,
		ReceivedAt: t0.Add(offset),
		Request:    json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest"}`),
		Response:   json.RawMessage(`{"jsonrpc":"2.0","id":1,"result":{"decision":"` + decision + `"}}`),
	}
}

func save(t testing.TB, db storage.Backend, rec *record.StepRecord) *record.StepRecord {
	t.Helper()
	require.NoError(t, db.SaveStep(bg(), rec))
	require.Positive(t, rec.Seq)
	return rec
}

func seqsOf(steps []record.StepRecord) []int64 {
	out := []int64{}
	for _, s := range steps {
		out = append(out, s.Seq)
	}
	return out
}

func eventSeqs(events []record.Event) []int64 {
	out := []int64{}
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

// allEvents reads the whole event log.
func allEvents(t testing.TB, db storage.Backend) []record.Event {
	t.Helper()
	var out []record.Event
	var after int64
	for {
		page, err := db.EventsAfter(bg(), after, 1000)
		require.NoError(t, err)
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].Seq
	}
}

func requireIncreasing(t testing.TB, seqs []int64) {
	t.Helper()
	for i := 1; i < len(seqs); i++ {
		require.Greater(t, seqs[i], seqs[i-1], "seqs must be strictly increasing: %v", seqs)
	}
}

// stepJSON is what a step event's payload must be: the step as Step returns it.
func stepJSON(t testing.TB, db storage.Backend, seq int64) string {
	t.Helper()
	rec, err := db.Step(bg(), seq)
	require.NoError(t, err)
	b, err := json.Marshal(&rec)
	require.NoError(t, err)
	return string(b)
}
