package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

func newHold(id, sid string) *record.Hold {
	return &record.Hold{
		ID: id, SessionID: sid, AgentID: "agent-1", Method: "steps/toolCallRequest", Kind: "toolCall",
		Tool: "transfer", RuleID: "big", Message: "needs a look",
		Request:   json.RawMessage(`{"jsonrpc":"2.0","id":7}`),
		CreatedAt: t0, Deadline: t0.Add(time.Minute), OnTimeout: "deny",
	}
}

var holdCases = []testCase{
	{"HoldCreateResolveRoundTrip", func(t *testing.T, db storage.Backend) {
		save(t, db, step("s1", "allow", 0))
		h := newHold("h1", "s1")
		h.CreatedAt = t0.In(time.FixedZone("X", 3600))
		audit := &record.AuditEntry{Type: record.AuditHoldCreated, Detail: json.RawMessage(`{"k":1}`)}
		events, err := db.CreateHold(bg(), h, audit)
		require.NoError(t, err)
		require.Equal(t, record.HoldPending, h.Status)
		require.Equal(t, t0, h.CreatedAt)
		require.Len(t, events, 2)
		require.Equal(t, record.EventHoldCreated, events[0].Type)
		require.Equal(t, "s1", events[0].SessionID)
		require.Equal(t, events[1].Seq, audit.Seq)
		require.Positive(t, audit.ID)
		hj, err := json.Marshal(h)
		require.NoError(t, err)
		require.JSONEq(t, string(hj), string(events[0].Payload))

		got, err := db.GetHold(bg(), "h1")
		require.NoError(t, err)
		require.Equal(t, *h, got)
		s, err := db.Session(bg(), "s1")
		require.NoError(t, err)
		require.Equal(t, int64(1), s.PendingHolds)

		res := record.HoldResolution{Status: record.HoldModified, Decision: "modify", DecidedBy: "ann",
			DecidedAt: t0.Add(time.Second), Note: "ok", Params: json.RawMessage(`{"amount":1}`)}
		raudit := &record.AuditEntry{Type: record.AuditHoldModified, Operator: "ann", Diff: json.RawMessage(`[]`)}
		resolved, events, err := db.ResolveHold(bg(), "h1", res, raudit)
		require.NoError(t, err)
		require.Equal(t, record.HoldModified, resolved.Status)
		require.Equal(t, "modify", resolved.Decision)
		require.Equal(t, t0.Add(time.Second), resolved.DecidedAt)
		require.JSONEq(t, `{"amount":1}`, string(resolved.Params))
		require.Len(t, events, 2)
		require.Equal(t, record.EventHoldResolved, events[0].Type)
		var brief record.Hold
		require.NoError(t, json.Unmarshal(events[0].Payload, &brief))
		require.Equal(t, record.HoldModified, brief.Status)
		require.Equal(t, "s1", raudit.SessionID, "audit filled from the hold")
		require.Equal(t, "h1", raudit.HoldID)
		require.Equal(t, "big", raudit.RuleID)
		require.Equal(t, "modify", raudit.Decision)
		require.Equal(t, "ok", raudit.Note)
		got, err = db.GetHold(bg(), "h1")
		require.NoError(t, err)
		require.Equal(t, resolved, got)
		s, err = db.Session(bg(), "s1")
		require.NoError(t, err)
		require.Zero(t, s.PendingHolds)

		// The first decision won: a second gets the stored hold and ErrHoldDecided.
		again, events, err := db.ResolveHold(bg(), "h1", record.HoldResolution{Status: record.HoldDenied, Decision: "deny"}, nil)
		require.ErrorIs(t, err, record.ErrHoldDecided)
		require.Empty(t, events)
		require.Equal(t, resolved, again)

		_, _, err = db.ResolveHold(bg(), "missing", record.HoldResolution{Status: record.HoldDenied, Decision: "deny"}, nil)
		require.ErrorIs(t, err, record.ErrNotFound)
		_, err = db.GetHold(bg(), "missing")
		require.ErrorIs(t, err, record.ErrNotFound)
	}},
	{"HoldValidation", func(t *testing.T, db storage.Backend) {
		for name, mod := range map[string]func(h *record.Hold){
			"no id":         func(h *record.Hold) { h.ID = "" },
			"no session":    func(h *record.Hold) { h.SessionID = "" },
			"no method":     func(h *record.Hold) { h.Method = "" },
			"bad onTimeout": func(h *record.Hold) { h.OnTimeout = "maybe" },
			"not pending":   func(h *record.Hold) { h.Status = record.HoldApproved },
			"bad request":   func(h *record.Hold) { h.Request = json.RawMessage(`{`) },
		} {
			h := newHold("h", "s")
			mod(h)
			_, err := db.CreateHold(bg(), h, nil)
			require.Error(t, err, name)
		}
		_, err := db.CreateHold(bg(), newHold("h", "s"), nil)
		require.NoError(t, err)
		for name, res := range map[string]record.HoldResolution{
			"bad status":   {Status: "pending", Decision: "deny"},
			"bad decision": {Status: record.HoldDenied, Decision: "maybe"},
			"bad params":   {Status: record.HoldModified, Decision: "modify", Params: json.RawMessage(`{`)},
		} {
			_, _, err := db.ResolveHold(bg(), "h", res, nil)
			require.Error(t, err, name)
			require.NotErrorIs(t, err, record.ErrHoldDecided, name)
		}
		h, err := db.GetHold(bg(), "h")
		require.NoError(t, err)
		require.Equal(t, record.HoldPending, h.Status, "refused resolutions change nothing")
	}},
	{"HoldResolveRaceHasOneWinner", func(t *testing.T, db storage.Backend) {
		for round := range 5 {
			id := fmt.Sprint("h", round)
			_, err := db.CreateHold(bg(), newHold(id, "s"), nil)
			require.NoError(t, err)
			const n = 8
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				winners []string
				losers  int
			)
			for i := range n {
				wg.Go(func() {
					who := fmt.Sprint("op", i)
					_, _, err := db.ResolveHold(bg(), id, record.HoldResolution{Status: record.HoldApproved,
						Decision: "allow", DecidedBy: who}, &record.AuditEntry{Type: record.AuditHoldApproved, Operator: who})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						winners = append(winners, who)
					case errors.Is(err, record.ErrHoldDecided):
						losers++
					default:
						t.Error(err)
					}
				})
			}
			wg.Wait()
			require.Len(t, winners, 1)
			require.Equal(t, n-1, losers)
			h, err := db.GetHold(bg(), id)
			require.NoError(t, err)
			require.Equal(t, winners[0], h.DecidedBy)
			entries, err := db.ListAudit(bg(), record.AuditQuery{HoldID: id})
			require.NoError(t, err)
			require.Len(t, entries, 1, "only the winner is audited")
		}
	}},
	{"ListHoldsOrderAndFilter", func(t *testing.T, db storage.Backend) {
		for i, id := range []string{"b", "a", "c", "d"} {
			h := newHold(id, "s")
			h.CreatedAt = t0.Add(time.Duration(i%3) * time.Second) // b and d share a time
			_, err := db.CreateHold(bg(), h, nil)
			require.NoError(t, err)
		}
		_, _, err := db.ResolveHold(bg(), "c", record.HoldResolution{Status: record.HoldDenied, Decision: "deny"}, nil)
		require.NoError(t, err)
		ids := func(status string, limit int) []string {
			hs, err := db.ListHolds(bg(), status, limit)
			require.NoError(t, err)
			out := []string{}
			for _, h := range hs {
				out = append(out, h.ID)
			}
			return out
		}
		require.Equal(t, []string{"b", "d", "a"}, ids(record.HoldPending, 0), "pending: oldest first")
		require.Equal(t, []string{"c", "a", "d", "b"}, ids("", 0), "all: newest first")
		require.Equal(t, []string{"c", "a", "d", "b"}, ids("all", 0))
		require.Equal(t, []string{"c"}, ids(record.HoldDenied, 0))
		require.Equal(t, []string{"c", "a"}, ids("all", 2))
		require.Equal(t, []string{}, ids(record.HoldApproved, 0))
	}},
	{"SetHoldSeqAndHoldBySeq", func(t *testing.T, db storage.Backend) {
		_, err := db.CreateHold(bg(), newHold("h1", "s"), nil)
		require.NoError(t, err)
		rec := save(t, db, step("s", "allow", 0))
		_, err = db.HoldBySeq(bg(), rec.Seq)
		require.ErrorIs(t, err, record.ErrNotFound)
		require.NoError(t, db.SetHoldSeq(bg(), "h1", rec.Seq))
		h, err := db.HoldBySeq(bg(), rec.Seq)
		require.NoError(t, err)
		require.Equal(t, "h1", h.ID)
		require.Equal(t, rec.Seq, h.Seq)
		require.ErrorIs(t, db.SetHoldSeq(bg(), "missing", 1), record.ErrNotFound)
		_, err = db.HoldBySeq(bg(), 0)
		require.ErrorIs(t, err, record.ErrNotFound)
	}},
	{"ResolvePendingOnStartup", func(t *testing.T, db storage.Backend) {
		for i, id := range []string{"z", "y", "x"} {
			h := newHold(id, "s")
			h.CreatedAt = t0.Add(time.Duration(i) * time.Second)
			_, err := db.CreateHold(bg(), h, nil)
			require.NoError(t, err)
		}
		_, _, err := db.ResolveHold(bg(), "y", record.HoldResolution{Status: record.HoldApproved, Decision: "allow"}, nil)
		require.NoError(t, err)
		now := t0.Add(time.Hour)
		holds, events, err := db.ResolvePendingOnStartup(bg(), now)
		require.NoError(t, err)
		require.Len(t, holds, 2)
		require.Equal(t, []string{"z", "x"}, []string{holds[0].ID, holds[1].ID}, "oldest first")
		for _, h := range holds {
			require.Equal(t, record.HoldInterrupted, h.Status)
			require.Empty(t, h.Decision)
			require.Equal(t, now, h.DecidedAt)
		}
		require.Len(t, events, 4, "a hold.resolved event and an audit entry each")
		requireIncreasing(t, eventSeqs(events))
		entries, err := db.ListAudit(bg(), record.AuditQuery{Type: record.AuditHoldInterrupted})
		require.NoError(t, err)
		require.Len(t, entries, 2)
		holds, events, err = db.ResolvePendingOnStartup(bg(), now)
		require.NoError(t, err)
		require.Empty(t, holds)
		require.Empty(t, events)
	}},
}
