package holds_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// failingStore is a holds.Store whose hold-end writes (ResolveHold) fail while fail says so,
// as a database that refuses one update (a trigger, a constraint) or is down does.
type failingStore struct {
	holds.Store
	mu   sync.Mutex
	fail func(record.HoldResolution) bool
}

var errWriteFailed = errors.New("storage: resolve hold: disk I/O error")

func (s *failingStore) ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *record.AuditEntry) (holds.Hold, []record.Event, error) {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil && fail(res) {
		return holds.Hold{}, nil, errWriteFailed
	}
	return s.Store.ResolveHold(ctx, id, res, audit)
}

func (s *failingStore) set(fail func(record.HoldResolution) bool) {
	s.mu.Lock()
	s.fail = fail
	s.mu.Unlock()
}

// withFailingStore puts s in front of the env's store.
func withFailingStore(s *failingStore) envOption {
	return func(o *holds.Options) {
		s.Store = o.Store
		o.Store = s
	}
}

func failStatus(status string) func(record.HoldResolution) bool {
	return func(res record.HoldResolution) bool { return res.Status == status }
}

func failAll(record.HoldResolution) bool { return true }

// requireDeniedNotRecorded checks the agent's answer of a hold whose end could not be stored.
func requireDeniedNotRecorded(t *testing.T, r holdResult) {
	t.Helper()
	require.NoError(t, r.err)
	require.Equal(t, rules.ActionDeny, r.out.Decision, "never the end the store did not take: %+v", r.out)
	require.Nil(t, r.out.Params)
	require.Equal(t, holds.ReasonNotRecorded, r.out.ReasonCode)
	require.Contains(t, r.out.Message, "could not be recorded, so the step is denied")
	require.Equal(t, holds.StatusInterrupted, r.out.Status)
}

// requireStoredDeny checks that the store and the audit log tell of the deny the agent got:
// the hold interrupted and denied, and its audit entry naming the end that was lost.
func requireStoredDeny(t *testing.T, e *env, id, lostStatus, lostDecision string) {
	t.Helper()
	got, err := e.m.Get(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, holds.StatusInterrupted, got.Status)
	require.Equal(t, string(rules.ActionDeny), got.Decision)
	require.Contains(t, got.Note, "could not be stored, so its agent was denied")
	require.Empty(t, got.Params)

	var types []string
	var end record.AuditEntry
	for _, a := range e.audit(record.AuditQuery{HoldID: id}) {
		types = append(types, a.Type)
		if a.Type != record.AuditHoldCreated {
			end = a
		}
	}
	require.ElementsMatch(t, []string{record.AuditHoldCreated, record.AuditHoldInterrupted}, types,
		"no entry of the lost end")
	require.Equal(t, string(rules.ActionDeny), end.Decision)
	var detail map[string]string
	require.NoError(t, json.Unmarshal(end.Detail, &detail))
	require.Equal(t, map[string]string{"reason": "not recorded", "status": lostStatus, "decision": lostDecision}, detail)
}

// Whichever way a hold ends without an operator, an end the store refuses is never the
// agent's answer: the agent is denied, saying the outcome could not be recorded, and that
// deny is what the store (a write it takes) and the audit log say.
func TestHoldEndNotStoredDeniesTheAgent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		onTimeout rules.Action
		modify    bool
		fail      func(record.HoldResolution) bool
		// before runs while the hold waits; end ends it.
		before                   func(t *testing.T, e *env, id string)
		end                      func(t *testing.T, e *env, cancel context.CancelFunc)
		lostStatus, lostDecision string
		how                      string
	}{
		{name: "allow on timeout", onTimeout: rules.ActionAllow, fail: failStatus(holds.StatusTimedOut),
			end: advance, lostStatus: holds.StatusTimedOut, lostDecision: "allow",
			how: "timed out (decision on timeout: allow)"},
		{name: "allow on timeout with the rules' modifications", onTimeout: rules.ActionAllow, modify: true,
			fail: failStatus(holds.StatusTimedOut), end: advance, lostStatus: holds.StatusTimedOut, lostDecision: "modify",
			how: "timed out (decision on timeout: allow, with the rules' modifications)"},
		{name: "deny on timeout", onTimeout: rules.ActionDeny, fail: failStatus(holds.StatusTimedOut),
			end: advance, lostStatus: holds.StatusTimedOut, lostDecision: "deny",
			how: "timed out (decision on timeout: deny)"},
		{name: "agent disconnects", onTimeout: rules.ActionAllow, fail: failStatus(holds.StatusAbandoned),
			end:        func(_ *testing.T, _ *env, cancel context.CancelFunc) { cancel() },
			lostStatus: holds.StatusAbandoned, lostDecision: "deny", how: "its agent disconnected"},
		{name: "shutdown", onTimeout: rules.ActionAllow,
			fail: func(res record.HoldResolution) bool { return res.Note == "guardian shut down while pending" },
			end: func(t *testing.T, e *env, _ context.CancelFunc) {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				require.NoError(t, e.m.Shutdown(ctx))
			},
			lostStatus: holds.StatusInterrupted, lostDecision: "deny", how: "the guardian is shutting down"},
		{name: "approval not stored, then allow on timeout", onTimeout: rules.ActionAllow,
			fail: func(res record.HoldResolution) bool {
				return res.Status == holds.StatusApproved || res.Status == holds.StatusTimedOut
			},
			before: func(t *testing.T, e *env, id string) {
				// The operator hears that the approval failed, and the agent keeps waiting.
				var ae apiErr
				status := e.call(http.MethodPost, "/api/holds/"+id+"/approve", map[string]string{"operator": "bob"}, &ae)
				require.Equal(t, http.StatusInternalServerError, status)
				require.Equal(t, "internal", ae.Error.Code)
			},
			end: advance, lostStatus: holds.StatusTimedOut, lostDecision: "allow",
			how: "timed out (decision on timeout: allow)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &failingStore{}
			e := newEnv(t, withFailingStore(fs))
			fs.set(tc.fail)
			req := toolRequest("s1", 5000)
			req.OnTimeout = tc.onTimeout
			if tc.modify {
				req.Modify = redact
			}
			ctx, cancel := context.WithCancel(e.ctx)
			defer cancel()
			ch := e.held(ctx, req)
			h := e.createdHold("s1")
			if tc.before != nil {
				tc.before(t, e, h.ID)
				requireWaiting(t, ch)
			}
			tc.end(t, e, cancel)

			r := receive(t, ch)
			requireDeniedNotRecorded(t, r)
			require.Contains(t, r.out.Message, tc.how)
			require.Equal(t, h.ID, r.out.Hold.ID, "the step is linked to its hold")
			requireStoredDeny(t, e, h.ID, tc.lostStatus, tc.lostDecision)
			resolved := e.rec.waitN(t, 1, ofType(record.EventHoldResolved))
			require.Equal(t, h.ID, holdID(t, resolved[0].Payload))
			require.Zero(t, e.m.Pending())

			// The hold has ended: a late approval conflicts with the stored deny.
			var ae apiErr
			status := e.call(http.MethodPost, "/api/holds/"+h.ID+"/approve", map[string]string{"operator": "bob"}, &ae)
			require.Equal(t, http.StatusConflict, status)
			require.Equal(t, holds.StatusInterrupted, ae.Hold.Status)
		})
	}
}

func advance(_ *testing.T, e *env, _ context.CancelFunc) { e.clock.Advance(2 * time.Minute) }

// With the store refusing every write, the agent of a hold allowed on timeout is denied at
// once; the hold, still pending in the store, takes no decision meanwhile (an approval
// stored then would say the step went ahead), and once the store is back the deny is
// stored.
func TestHoldEndNotStoredAtAllIsStoredOnceTheStoreIsBack(t *testing.T) {
	fs := &failingStore{}
	e := newEnv(t, withFailingStore(fs))
	req := toolRequest("s1", 5000)
	req.OnTimeout = rules.ActionAllow
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	fs.set(failAll)
	e.clock.Advance(2 * time.Minute)
	requireDeniedNotRecorded(t, receive(t, ch))
	require.Zero(t, e.m.Pending(), "its place in the queue is free")

	got, err := e.m.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusPending, got.Status, "the store is down")
	var ae apiErr
	status := e.call(http.MethodPost, "/api/holds/"+h.ID+"/approve", map[string]string{"operator": "bob"}, &ae)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "conflict", ae.Error.Code)
	require.NotNil(t, ae.Hold)
	require.Equal(t, holds.StatusInterrupted, ae.Hold.Status, "the hold as its agent was answered")
	require.Equal(t, string(rules.ActionDeny), ae.Hold.Decision)

	// A retry while the store is still down fails and schedules the next one.
	ctx, cancel := context.WithTimeout(e.ctx, wait)
	defer cancel()
	require.NoError(t, e.clock.WaitTimers(ctx, 1))
	e.clock.Advance(time.Second)
	require.NoError(t, e.clock.WaitTimers(ctx, 1))
	got, err = e.m.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusPending, got.Status)

	fs.set(nil)
	e.clock.Advance(2 * time.Second)
	resolved := e.rec.waitN(t, 1, ofType(record.EventHoldResolved))
	require.Equal(t, h.ID, holdID(t, resolved[0].Payload))
	requireStoredDeny(t, e, h.ID, holds.StatusTimedOut, "allow")
	status = e.call(http.MethodPost, "/api/holds/"+h.ID+"/approve", map[string]string{"operator": "bob"}, &ae)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, holds.StatusInterrupted, ae.Hold.Status)
}

// A stop before the store is back leaves the hold pending; the next start ends it as
// interrupted, never as the approval the lost end would have been.
func TestHoldEndNotStoredBeforeAStopIsInterruptedByTheNextStart(t *testing.T) {
	fs := &failingStore{}
	e := newEnv(t, withFailingStore(fs))
	req := toolRequest("s1", 5000)
	req.OnTimeout = rules.ActionAllow
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	fs.set(failAll)
	e.clock.Advance(2 * time.Minute)
	requireDeniedNotRecorded(t, receive(t, ch))
	e.close() // Shutdown makes the last attempt, which fails

	e2 := newEnvAt(t, e.path)
	got, err := e2.m.Get(e2.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusInterrupted, got.Status)
	require.NotEqual(t, string(rules.ActionAllow), got.Decision)
}

// With replicas, the hold stays owned by the replica whose agent was denied until the deny
// is stored: a decision made on another replica is forwarded there and refused, rather
// than stored in a hold the store still calls pending.
func TestHoldEndNotStoredRefusesDecisionsFromOtherReplicas(t *testing.T) {
	c := newFakeCluster()
	fs := &failingStore{}
	e := newEnv(t, withFailingStore(fs), func(o *holds.Options) { o.Shared, o.Owner = true, member{c, "a"} })
	b, _ := e.replica(func(o *holds.Options) { o.Owner = member{c, "b"} })
	req := toolRequest("s1", 5000)
	req.OnTimeout = rules.ActionAllow
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	fs.set(failAll)
	e.clock.Advance(2 * time.Minute)
	requireDeniedNotRecorded(t, receive(t, ch))

	owner := func() string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.owners[h.ID]
	}
	require.Equal(t, "a", owner())
	stored, err := b.Approve(e.ctx, h.ID, holds.Decision{Operator: "bob"})
	require.ErrorIs(t, err, holds.ErrConflict)
	require.Equal(t, holds.StatusInterrupted, stored.Status)
	got, err := b.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusPending, got.Status, "nothing was stored")

	fs.set(nil)
	ctx, cancel := context.WithTimeout(e.ctx, wait)
	defer cancel()
	require.NoError(t, e.clock.WaitTimers(ctx, 1))
	e.clock.Advance(time.Second)
	e.rec.waitN(t, 1, ofType(record.EventHoldResolved))
	requireStoredDeny(t, e, h.ID, holds.StatusTimedOut, "allow")
	require.Empty(t, owner(), "disowned once its end is stored")
	_, err = b.Approve(e.ctx, h.ID, holds.Decision{Operator: "bob"})
	require.ErrorIs(t, err, holds.ErrConflict)
}

// committedAnyway stores a hold's timeout and then reports an error, as a connection lost
// after the commit does.
type committedAnyway struct{ holds.Store }

func (s committedAnyway) ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *record.AuditEntry) (holds.Hold, []record.Event, error) {
	h, evs, err := s.Store.ResolveHold(ctx, id, res, audit)
	if err == nil && res.Status == holds.StatusTimedOut {
		return holds.Hold{}, nil, errors.New("storage: resolve hold: connection lost")
	}
	return h, evs, err
}

// A hold's end whose write failed after its commit is found when the deny is written: the
// stored end stands, and the agent gets it, as the record says.
func TestHoldEndStoredDespiteAnErrorStands(t *testing.T) {
	e := newEnv(t, func(o *holds.Options) { o.Store = committedAnyway{o.Store} })
	req := toolRequest("s1", 5000)
	req.OnTimeout = rules.ActionAllow
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	e.clock.Advance(2 * time.Minute)
	r := receive(t, ch)
	require.NoError(t, r.err)
	require.Equal(t, rules.ActionAllow, r.out.Decision)
	require.Equal(t, holds.StatusTimedOut, r.out.Status)
	got, err := e.m.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusTimedOut, got.Status)
	require.Equal(t, string(rules.ActionAllow), got.Decision)
}

// Should the lost end reach the store only after its agent was denied (a write that
// committed late), the deny cannot replace it; the audit log then says the agent was denied.
func TestHoldEndStoredAfterTheDenyIsAudited(t *testing.T) {
	fs := &failingStore{}
	e := newEnv(t, withFailingStore(fs))
	req := toolRequest("s1", 5000)
	req.OnTimeout = rules.ActionAllow
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	fs.set(failAll)
	e.clock.Advance(2 * time.Minute)
	requireDeniedNotRecorded(t, receive(t, ch))

	// The lost write lands.
	_, _, err := e.db.ResolveHold(e.ctx, h.ID, record.HoldResolution{Status: holds.StatusTimedOut,
		Decision: string(rules.ActionAllow), DecidedAt: start, Note: "no operator decided within 2m0s"},
		&record.AuditEntry{Type: record.AuditHoldTimedOut})
	require.NoError(t, err)
	fs.set(nil)
	ctx, cancel := context.WithTimeout(e.ctx, wait)
	defer cancel()
	require.NoError(t, e.clock.WaitTimers(ctx, 1))
	e.clock.Advance(time.Second)
	e.rec.waitN(t, 1, func(ev record.Event) bool {
		var a record.AuditEntry
		return ev.Type == record.EventAudit && json.Unmarshal(ev.Payload, &a) == nil && a.Type == record.AuditHoldInterrupted
	})
	entries := e.audit(record.AuditQuery{HoldID: h.ID, Type: record.AuditHoldInterrupted})
	require.Len(t, entries, 1)
	require.Equal(t, string(rules.ActionDeny), entries[0].Decision)
	require.Contains(t, entries[0].Note, "its agent was denied")
	_, err = e.m.Approve(e.ctx, h.ID, holds.Decision{Operator: "bob"})
	require.ErrorIs(t, err, holds.ErrConflict, "no longer refused for want of a record, but ended")
}
