package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var holdT0 = time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)

func openHoldDB(t *testing.T, path string) *DB {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "holds.db")
	}
	db, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newTestHold(id, session string, offset time.Duration) *record.Hold {
	return &record.Hold{
		ID: id, SessionID: session, AgentID: "agent-1", Method: "steps/toolCallRequest",
		Kind: "toolCall", Tool: "transfer_funds", RuleID: "big-transfer", Message: "needs review",
		Request:   json.RawMessage(`{"jsonrpc":"2.0","id":7,"method":"steps/toolCallRequest","params":{"amount":5000}}`),
		CreatedAt: holdT0.Add(offset), Deadline: holdT0.Add(offset + 2*time.Minute),
		OnTimeout: "deny",
	}
}

// storedEvents returns the events after seq as EventsAfter reads them back.
func storedEvents(t *testing.T, db *DB, after int64) []record.Event {
	t.Helper()
	evs, err := db.EventsAfter(context.Background(), after, 1000)
	require.NoError(t, err)
	return evs
}

func requireSameEvents(t *testing.T, want, got []record.Event) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].Seq, got[i].Seq)
		require.Equal(t, want[i].Type, got[i].Type)
		require.Equal(t, want[i].SessionID, got[i].SessionID)
		require.True(t, want[i].At.Equal(got[i].At), "event %d at", i)
		require.JSONEq(t, string(want[i].Payload), string(got[i].Payload))
	}
}

func TestHoldCreateResolveRoundTrip(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")

	h := newTestHold("h1", "s1", 0)
	audit := &record.AuditEntry{Type: record.AuditHoldCreated, SessionID: "s1", HoldID: "h1", RuleID: "big-transfer", Decision: "hold"}
	evs, err := db.CreateHold(ctx, h, audit)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, record.EventHoldCreated, evs[0].Type)
	require.Equal(t, record.EventAudit, evs[1].Type)
	require.Less(t, evs[0].Seq, evs[1].Seq)
	require.Equal(t, record.HoldPending, h.Status)
	require.Equal(t, evs[1].Seq, audit.Seq)
	require.NotZero(t, audit.ID)
	requireSameEvents(t, evs, storedEvents(t, db, 0))

	got, err := db.GetHold(ctx, "h1")
	require.NoError(t, err)
	require.Equal(t, *h, got)
	var published record.Hold
	require.NoError(t, json.Unmarshal(evs[0].Payload, &published))
	require.Equal(t, got, published)

	res := record.HoldResolution{Status: record.HoldModified, Decision: "modify", DecidedBy: "alice",
		DecidedAt: holdT0.Add(time.Minute), Note: "smaller", Params: json.RawMessage(`{"amount":50}`)}
	ra := &record.AuditEntry{Type: record.AuditHoldModified, Operator: "alice", Diff: json.RawMessage(`[{"op":"replace","path":"/amount","value":50,"old":5000}]`)}
	resolved, evs2, err := db.ResolveHold(ctx, "h1", res, ra)
	require.NoError(t, err)
	require.Equal(t, record.HoldModified, resolved.Status)
	require.Equal(t, "modify", resolved.Decision)
	require.Equal(t, "alice", resolved.DecidedBy)
	require.True(t, resolved.DecidedAt.Equal(res.DecidedAt))
	require.JSONEq(t, `{"amount":50}`, string(resolved.Params))
	require.Len(t, evs2, 2)
	require.Equal(t, record.EventHoldResolved, evs2[0].Type)
	requireSameEvents(t, evs2, storedEvents(t, db, evs[1].Seq))
	// The audit entry took the hold's facts it was not given.
	require.Equal(t, "s1", ra.SessionID)
	require.Equal(t, "h1", ra.HoldID)
	require.Equal(t, "big-transfer", ra.RuleID)
	require.Equal(t, "modify", ra.Decision)
	require.Equal(t, "smaller", ra.Note)

	// A second decision conflicts and changes nothing.
	again, evs3, err := db.ResolveHold(ctx, "h1", record.HoldResolution{Status: record.HoldDenied, Decision: "deny", DecidedBy: "bob"}, &record.AuditEntry{Type: record.AuditHoldDenied})
	require.ErrorIs(t, err, record.ErrHoldDecided)
	require.Nil(t, evs3)
	require.Equal(t, resolved, again)
	require.Empty(t, storedEvents(t, db, evs2[1].Seq))

	_, _, err = db.ResolveHold(ctx, "nope", res, nil)
	require.ErrorIs(t, err, record.ErrNotFound)
	_, err = db.GetHold(ctx, "nope")
	require.ErrorIs(t, err, record.ErrNotFound)
}

func TestHoldValidation(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")
	for _, tc := range []struct {
		name   string
		mutate func(h *record.Hold)
	}{
		{"no id", func(h *record.Hold) { h.ID = "" }},
		{"no session", func(h *record.Hold) { h.SessionID = "" }},
		{"no method", func(h *record.Hold) { h.Method = "" }},
		{"bad onTimeout", func(h *record.Hold) { h.OnTimeout = "modify" }},
		{"not pending", func(h *record.Hold) { h.Status = record.HoldApproved }},
		{"bad request", func(h *record.Hold) { h.Request = json.RawMessage(`{`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHold("v", "s", 0)
			tc.mutate(h)
			_, err := db.CreateHold(ctx, h, nil)
			require.Error(t, err)
		})
	}
	_, err := db.CreateHold(ctx, newTestHold("v", "s", 0), &record.AuditEntry{})
	require.ErrorContains(t, err, "no type")

	require.NoError(t, func() error { _, err := db.CreateHold(ctx, newTestHold("v", "s", 0), nil); return err }())
	_, err = db.CreateHold(ctx, newTestHold("v", "s", 0), nil)
	require.Error(t, err, "duplicate id")

	for _, res := range []record.HoldResolution{
		{Status: record.HoldPending, Decision: "allow"},
		{Status: record.HoldApproved, Decision: "hold"},
		{Status: record.HoldModified, Decision: "modify", Params: json.RawMessage(`{`)},
	} {
		_, _, err := db.ResolveHold(ctx, "v", res, nil)
		require.Error(t, err, "%+v", res)
	}
	h, err := db.GetHold(ctx, "v")
	require.NoError(t, err)
	require.Equal(t, record.HoldPending, h.Status)
}

func TestHoldResolveRaceHasOneWinner(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")
	_, err := db.CreateHold(ctx, newTestHold("race", "s1", 0), nil)
	require.NoError(t, err)

	const n = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		winners  []string
		conflict int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := fmt.Sprintf("op%d", i)
			_, _, err := db.ResolveHold(ctx, "race", record.HoldResolution{Status: record.HoldApproved,
				Decision: "allow", DecidedBy: op}, &record.AuditEntry{Type: record.AuditHoldApproved, Operator: op})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, op)
			case errors.Is(err, record.ErrHoldDecided):
				conflict++
			default:
				t.Errorf("unexpected error: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Len(t, winners, 1)
	require.Equal(t, n-1, conflict)
	h, err := db.GetHold(ctx, "race")
	require.NoError(t, err)
	require.Equal(t, winners[0], h.DecidedBy)
	entries, err := db.ListAudit(ctx, record.AuditQuery{HoldID: "race"})
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the winner is audited")
	require.Equal(t, winners[0], entries[0].Operator)
}

func TestListHoldsOrderAndFilter(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")
	for i, id := range []string{"a", "b", "c", "d"} {
		_, err := db.CreateHold(ctx, newTestHold(id, "s1", time.Duration(i)*time.Second), nil)
		require.NoError(t, err)
	}
	_, _, err := db.ResolveHold(ctx, "b", record.HoldResolution{Status: record.HoldDenied, Decision: "deny", DecidedBy: "x"}, nil)
	require.NoError(t, err)

	ids := func(hs []record.Hold) []string {
		out := []string{}
		for _, h := range hs {
			out = append(out, h.ID)
		}
		return out
	}
	for _, tc := range []struct {
		status string
		limit  int
		want   []string
	}{
		{record.HoldPending, 0, []string{"a", "c", "d"}},
		{record.HoldPending, 2, []string{"a", "c"}},
		{"all", 0, []string{"d", "c", "b", "a"}},
		{"", 0, []string{"d", "c", "b", "a"}},
		{record.HoldDenied, 0, []string{"b"}},
		{record.HoldApproved, 0, []string{}},
	} {
		hs, err := db.ListHolds(ctx, tc.status, tc.limit)
		require.NoError(t, err)
		require.Equal(t, tc.want, ids(hs), "status %q limit %d", tc.status, tc.limit)
	}
}

func TestResolvePendingOnStartupAfterReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "restart.db")
	db := openHoldDB(t, path)
	// A stored step gives the session a row, so its pending count shows.
	require.NoError(t, db.SaveStep(ctx, &record.StepRecord{SessionID: "s1", Method: "steps/message",
		Decision: "allow", ReceivedAt: holdT0}))
	for i, id := range []string{"p1", "p2", "done"} {
		h := newTestHold(id, "s1", time.Duration(i)*time.Second)
		if id == "p2" {
			h.OnTimeout = "allow"
		}
		_, err := db.CreateHold(ctx, h, nil)
		require.NoError(t, err)
	}
	_, _, err := db.ResolveHold(ctx, "done", record.HoldResolution{Status: record.HoldApproved, Decision: "allow", DecidedBy: "alice"}, nil)
	require.NoError(t, err)
	s, err := db.Session(ctx, "s1")
	require.NoError(t, err)
	require.EqualValues(t, 2, s.PendingHolds)
	st, err := db.Stats(ctx, holdT0)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.PendingHolds, "the dashboard counts pending holds from the store")
	require.NoError(t, db.Close())

	db = openHoldDB(t, path)
	last := storedEvents(t, db, 0)
	lastSeq := last[len(last)-1].Seq
	now := holdT0.Add(time.Hour)
	holds, evs, err := db.ResolvePendingOnStartup(ctx, now)
	require.NoError(t, err)
	require.Len(t, holds, 2)
	require.Equal(t, "p1", holds[0].ID)
	require.Equal(t, "p2", holds[1].ID)
	// Their agents' connections ended with the process: no decision reached them, and none
	// is recorded (p2's onTimeout allow in particular).
	for _, h := range holds {
		require.Equal(t, record.HoldInterrupted, h.Status)
		require.Empty(t, h.Decision)
		require.Equal(t, RestartNote, h.Note)
		require.Empty(t, h.DecidedBy)
		require.True(t, h.DecidedAt.Equal(now))
	}
	require.Equal(t, "allow", holds[1].OnTimeout)
	require.Len(t, evs, 4) // hold.resolved + audit per hold
	requireSameEvents(t, evs, storedEvents(t, db, lastSeq))

	pending, err := db.ListHolds(ctx, record.HoldPending, 0)
	require.NoError(t, err)
	require.Empty(t, pending)
	s, err = db.Session(ctx, "s1")
	require.NoError(t, err)
	require.Zero(t, s.PendingHolds)

	entries, err := db.ListAudit(ctx, record.AuditQuery{Type: record.AuditHoldInterrupted})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, "p2", entries[0].HoldID) // newest first
	require.Equal(t, RestartNote, entries[0].Note)
	require.Empty(t, entries[0].Decision)
	require.JSONEq(t, `{"reason":"restart"}`, string(entries[0].Detail))

	// Nothing left: a second run is a no-op.
	holds, evs, err = db.ResolvePendingOnStartup(ctx, now)
	require.NoError(t, err)
	require.Empty(t, holds)
	require.Empty(t, evs)
}

func TestSetHoldSeq(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")
	_, err := db.CreateHold(ctx, newTestHold("h1", "s1", 0), nil)
	require.NoError(t, err)
	require.NoError(t, db.SetHoldSeq(ctx, "h1", 42))
	h, err := db.GetHold(ctx, "h1")
	require.NoError(t, err)
	require.EqualValues(t, 42, h.Seq)
	require.ErrorIs(t, db.SetHoldSeq(ctx, "nope", 1), record.ErrNotFound)
}

func TestHoldBySeq(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")
	for _, id := range []string{"h1", "h2"} {
		_, err := db.CreateHold(ctx, newTestHold(id, "s1", 0), nil)
		require.NoError(t, err)
	}
	require.NoError(t, db.SetHoldSeq(ctx, "h2", 42))

	h, err := db.HoldBySeq(ctx, 42)
	require.NoError(t, err)
	require.Equal(t, "h2", h.ID)
	require.EqualValues(t, 42, h.Seq)

	// A pending hold has seq 0, which names no step.
	for _, seq := range []int64{0, -1, 41} {
		_, err := db.HoldBySeq(ctx, seq)
		require.ErrorIs(t, err, record.ErrNotFound, "seq %d", seq)
	}
}

func TestSessionControlPersists(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "controls.db")
	db := openHoldDB(t, path)
	require.NoError(t, db.SaveStep(ctx, &record.StepRecord{SessionID: "seen", Method: "steps/message",
		Decision: "allow", ReceivedAt: holdT0}))

	a := &record.AuditEntry{Type: record.AuditSessionPause}
	evs, err := db.SetSessionControl(ctx, record.SessionControl{SessionID: "seen", Control: record.ControlPause,
		Operator: "alice", Note: "looks odd", At: holdT0.Add(time.Second)}, a)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, record.EventSessionControl, evs[0].Type)
	require.JSONEq(t, `{"sessionId":"seen","control":"pause","operator":"alice","note":"looks odd"}`, string(evs[0].Payload))
	require.Equal(t, "alice", a.Operator)
	require.Equal(t, "seen", a.SessionID)
	require.Equal(t, "looks odd", a.Note)
	requireSameEvents(t, evs, storedEvents(t, db, 1))

	// A session never seen can be blocked ahead of its first step, which keeps the block.
	_, err = db.SetSessionControl(ctx, record.SessionControl{SessionID: "new", Control: record.ControlBlock, Operator: "bob"}, nil)
	require.NoError(t, err)
	require.NoError(t, db.SaveStep(ctx, &record.StepRecord{SessionID: "new", Method: "steps/message",
		Decision: "deny", ReceivedAt: holdT0.Add(time.Minute)}))
	s, err := db.Session(ctx, "new")
	require.NoError(t, err)
	require.Equal(t, record.ControlBlocked, s.Control)
	require.EqualValues(t, 1, s.Steps)

	_, err = db.SetSessionControl(ctx, record.SessionControl{SessionID: "seen", Control: "stop"}, nil)
	require.Error(t, err)
	_, err = db.SetSessionControl(ctx, record.SessionControl{Control: record.ControlPause}, nil)
	require.Error(t, err)

	require.NoError(t, db.Close())
	db = openHoldDB(t, path)
	controls, err := db.SessionControls(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"seen": record.ControlPaused, "new": record.ControlBlocked}, controls)

	_, err = db.SetSessionControl(ctx, record.SessionControl{SessionID: "seen", Control: record.ControlResume, Operator: "alice"}, nil)
	require.NoError(t, err)
	controls, err = db.SessionControls(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"new": record.ControlBlocked}, controls)
	s, err = db.Session(ctx, "seen")
	require.NoError(t, err)
	require.Equal(t, record.ControlActive, s.Control)
}

func TestControlState(t *testing.T) {
	for action, want := range map[string]string{"pause": "paused", "resume": "active", "block": "blocked"} {
		got, ok := record.ControlState(action)
		require.True(t, ok)
		require.Equal(t, want, got)
	}
	_, ok := record.ControlState("paused")
	require.False(t, ok)
}
