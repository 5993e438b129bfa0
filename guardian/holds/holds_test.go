package holds_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

func TestTimeoutAnswersOnTimeoutDecision(t *testing.T) {
	for _, tc := range []struct {
		onTimeout rules.Action
		want      rules.Action
	}{
		{rules.ActionDeny, rules.ActionDeny},
		{rules.ActionAllow, rules.ActionAllow},
		{"", rules.ActionDeny},
		{rules.ActionModify, rules.ActionDeny},
	} {
		t.Run(string(tc.onTimeout), func(t *testing.T) {
			e := newEnv(t)
			req := toolRequest("s1", 5000)
			req.OnTimeout = tc.onTimeout
			ch := e.held(e.ctx, req)
			h := e.createdHold("s1")
			require.Equal(t, string(tc.want), h.OnTimeout)
			require.NoError(t, e.clock.WaitTimers(e.ctx, 1))

			e.clock.Advance(2*time.Minute - time.Nanosecond)
			requireWaiting(t, ch)
			e.clock.Advance(time.Nanosecond)
			r := receive(t, ch)
			require.NoError(t, r.err)
			require.Equal(t, holds.StatusTimedOut, r.out.Status)
			require.Equal(t, tc.want, r.out.Decision)
			require.Contains(t, r.out.Message, "timed out")
			require.Contains(t, r.out.Message, "2m0s")
			require.Empty(t, r.out.Hold.DecidedBy)
			require.True(t, r.out.Hold.DecidedAt.Equal(start.Add(2*time.Minute)))

			_, err := e.m.Approve(e.ctx, h.ID, holds.Decision{Operator: "late"})
			require.ErrorIs(t, err, holds.ErrConflict)
			require.ErrorContains(t, err, "timedOut")

			entries := e.audit(record.AuditQuery{HoldID: h.ID})
			require.Len(t, entries, 2)
			require.Equal(t, record.AuditHoldTimedOut, entries[0].Type)
			require.Empty(t, entries[0].Operator)
			require.Equal(t, string(tc.want), entries[0].Decision)
			require.Equal(t, "no operator decided within 2m0s", entries[0].Note)
			require.JSONEq(t, `{"timeout":"2m0s"}`, string(entries[0].Detail))
		})
	}
}

func TestDefaultTimeout(t *testing.T) {
	e := newEnv(t, func(o *holds.Options) { o.DefaultTimeout = 5 * time.Minute })
	req := toolRequest("s1", 5000)
	req.Timeout = 0
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	require.True(t, h.Deadline.Equal(start.Add(5*time.Minute)))
	e.clock.Advance(5 * time.Minute)
	require.Equal(t, holds.StatusTimedOut, receive(t, ch).out.Status)
}

func TestAgentDisconnectAbandons(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(e.ctx)
	ch := e.held(ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")
	requireWaiting(t, ch)
	cancel()
	r := receive(t, ch)
	require.NoError(t, r.err)
	require.Equal(t, holds.StatusAbandoned, r.out.Status)
	require.Equal(t, rules.ActionDeny, r.out.Decision)
	require.Zero(t, e.m.Pending())

	stored, err := e.m.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusAbandoned, stored.Status)
	_, err = e.m.Deny(e.ctx, h.ID, holds.Decision{Operator: "alice"})
	require.ErrorIs(t, err, holds.ErrConflict)

	entries := e.audit(record.AuditQuery{HoldID: h.ID})
	require.Len(t, entries, 2)
	require.Equal(t, record.AuditHoldAbandoned, entries[0].Type)
	require.Equal(t, "deny", entries[0].Decision)
	require.Contains(t, entries[0].Note, "disconnected")
}

// Decisions, the timer and the agent's disconnect all race for the same hold; exactly one
// ends it, in memory and in the database, and only that one is audited.
func TestOneOfDecisionTimeoutAbandonWins(t *testing.T) {
	e := newEnv(t)
	wins := map[string]int{}
	for i := range 40 {
		sid := fmt.Sprintf("race-%02d", i)
		ctx, cancel := context.WithCancel(e.ctx)
		ch := e.held(ctx, toolRequest(sid, 5000))
		h := e.createdHold(sid)
		require.NoError(t, e.clock.WaitTimers(e.ctx, 1))

		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			decided []string
			go1     = make(chan struct{})
		)
		decide := func(name string, f func() (holds.Hold, error)) {
			defer wg.Done()
			<-go1
			_, err := f()
			if err != nil {
				if !errors.Is(err, holds.ErrConflict) {
					t.Errorf("%s: %v", name, err)
				}
				return
			}
			mu.Lock()
			decided = append(decided, name)
			mu.Unlock()
		}
		wg.Add(4)
		go decide(holds.StatusApproved, func() (holds.Hold, error) {
			return e.m.Approve(e.ctx, h.ID, holds.Decision{Operator: "alice"})
		})
		go decide(holds.StatusDenied, func() (holds.Hold, error) {
			return e.m.Deny(e.ctx, h.ID, holds.Decision{Operator: "bob"})
		})
		go func() {
			defer wg.Done()
			<-go1
			e.clock.Advance(2 * time.Minute)
		}()
		go func() {
			defer wg.Done()
			<-go1
			cancel()
		}()
		close(go1)
		wg.Wait()
		r := receive(t, ch)
		require.NoError(t, r.err)
		require.LessOrEqual(t, len(decided), 1)
		if len(decided) == 1 {
			require.Equal(t, decided[0], r.out.Status)
		} else {
			require.Contains(t, []string{holds.StatusTimedOut, holds.StatusAbandoned}, r.out.Status)
		}
		wins[r.out.Status]++
		stored, err := e.m.Get(e.ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, r.out.Status, stored.Status)
		require.Equal(t, r.out.Hold, stored)
		require.Len(t, e.audit(record.AuditQuery{HoldID: h.ID}), 2)
		require.Zero(t, e.m.Pending())
	}
	t.Logf("winners over 40 races: %v", wins)
}

func TestHundredsOfConcurrentHolds(t *testing.T) {
	const n = 300
	e := newEnv(t, func(o *holds.Options) { o.MaxPendingPerAgent = n })
	chans := make(map[string]<-chan holdResult, n)
	for i := range n {
		sid := fmt.Sprintf("s%03d", i)
		chans[sid] = e.held(e.ctx, toolRequest(sid, 1000+i))
	}
	created := e.rec.waitN(t, n, ofType(record.EventHoldCreated))
	require.Equal(t, n, e.m.Pending())
	var list struct {
		Holds []holds.Hold `json:"holds"`
	}
	require.Equal(t, http.StatusOK, e.call("GET", "/api/holds?status=pending&limit=1000", nil, &list))
	require.Len(t, list.Holds, n)

	type job struct{ id, sid string }
	var jobs []job
	for _, ev := range created {
		var h holds.Hold
		require.NoError(t, json.Unmarshal(ev.Payload, &h))
		// Each hold gets two competing decisions.
		jobs = append(jobs, job{h.ID, h.SessionID}, job{h.ID, h.SessionID})
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })

	var (
		mu        sync.Mutex
		winner    = map[string]string{} // session -> status decided
		conflicts int
		wg        sync.WaitGroup
		queue     = make(chan job)
	)
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := fmt.Sprintf("op%d", w)
			for j := range queue {
				var (
					err    error
					status string
				)
				switch rand.IntN(3) {
				case 0:
					status = holds.StatusApproved
					_, err = e.m.Approve(e.ctx, j.id, holds.Decision{Operator: op})
				case 1:
					status = holds.StatusDenied
					_, err = e.m.Deny(e.ctx, j.id, holds.Decision{Operator: op})
				default:
					status = holds.StatusModified
					_, err = e.m.Modify(e.ctx, j.id, holds.Decision{Operator: op},
						json.RawMessage(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"amount":1}}}`))
				}
				mu.Lock()
				switch {
				case err == nil:
					if prev, ok := winner[j.sid]; ok {
						t.Errorf("hold of %s decided twice: %s and %s", j.sid, prev, status)
					}
					winner[j.sid] = status
				case errors.Is(err, holds.ErrConflict):
					conflicts++
				default:
					t.Errorf("decide %s: %v", j.id, err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	wg.Wait()
	require.Len(t, winner, n)
	require.Equal(t, n, conflicts)

	for sid, ch := range chans {
		r := receive(t, ch)
		require.NoError(t, r.err)
		require.Equal(t, winner[sid], r.out.Status, sid)
	}
	require.Zero(t, e.m.Pending())
	require.Len(t, e.audit(record.AuditQuery{Type: "hold", Limit: 1000}), 2*n)
}

func TestRestartResolvesPendingHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "restart.db")
	e1 := newEnvAt(t, path)
	pending := toolRequest("s1", 5000)
	pending.OnTimeout = rules.ActionAllow
	ch := e1.held(e1.ctx, pending)
	h := e1.createdHold("s1")
	done := e1.held(e1.ctx, toolRequest("s2", 5000))
	h2 := e1.createdHold("s2")
	_, err := e1.m.Approve(e1.ctx, h2.ID, holds.Decision{Operator: "alice"})
	require.NoError(t, err)
	receive(t, done)

	// The process dies with the hold pending: the database goes first, so nothing the
	// dying process does afterwards reaches it.
	require.NoError(t, e1.db.Close())
	e1.close()
	receive(t, ch)

	e2 := newEnvAt(t, path)
	var list struct {
		Holds []holds.Hold `json:"holds"`
	}
	require.Equal(t, http.StatusOK, e2.call("GET", "/api/holds?status=pending", nil, &list))
	require.Empty(t, list.Holds)

	var got holds.Hold
	require.Equal(t, http.StatusOK, e2.call("GET", "/api/holds/"+h.ID, nil, &got))
	// The agent's connection ended with the process: it got nothing, and no decision (in
	// particular not the hold's onTimeout allow) is recorded as if it had.
	require.Equal(t, holds.StatusInterrupted, got.Status)
	require.Empty(t, got.Decision)
	require.Equal(t, sqlite.RestartNote, got.Note)
	require.True(t, got.DecidedAt.Equal(start))
	require.Equal(t, http.StatusOK, e2.call("GET", "/api/holds/"+h2.ID, nil, &got))
	require.Equal(t, holds.StatusApproved, got.Status)

	entries := e2.audit(record.AuditQuery{HoldID: h.ID})
	require.Len(t, entries, 2)
	require.Equal(t, record.AuditHoldInterrupted, entries[0].Type)
	require.Equal(t, sqlite.RestartNote, entries[0].Note)
	require.Empty(t, entries[0].Decision)
	require.JSONEq(t, `{"reason":"restart"}`, string(entries[0].Detail))

	resolved := e2.rec.waitN(t, 1, ofType(record.EventHoldResolved))
	require.Len(t, resolved, 1)
	var live holds.Hold
	require.NoError(t, json.Unmarshal(resolved[0].Payload, &live))
	require.Equal(t, h.ID, live.ID)

	var conflict apiErr
	require.Equal(t, http.StatusConflict, e2.call("POST", "/api/holds/"+h.ID+"/approve", map[string]any{"operator": "bob"}, &conflict))
	require.Contains(t, conflict.Error.Message, "interrupted")
	require.Equal(t, http.StatusOK, e2.call("GET", "/api/holds?status=interrupted", nil, &list))
	require.Len(t, list.Holds, 1)
	require.Equal(t, h.ID, list.Holds[0].ID)
	require.Error(t, e2.m.Start(e2.ctx), "Start runs once")
}

func TestShutdownAnswersWaitingAgents(t *testing.T) {
	e := newEnv(t)
	// A hold that allows on timeout: a shutdown must not approve it all the same.
	req := toolRequest("s1", 5000)
	req.OnTimeout = rules.ActionAllow
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	ctx, cancel := context.WithTimeout(e.ctx, wait)
	defer cancel()
	require.NoError(t, e.m.Shutdown(ctx))
	r := receive(t, ch)
	require.Equal(t, holds.StatusInterrupted, r.out.Status)
	require.Equal(t, rules.ActionDeny, r.out.Decision)
	require.Equal(t, holds.ReasonRestarting, r.out.ReasonCode)
	require.Contains(t, r.out.Message, "restarting")
	stored, err := e.m.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusInterrupted, stored.Status)
	require.Equal(t, "deny", stored.Decision)
	entries := e.audit(record.AuditQuery{HoldID: h.ID})
	require.Len(t, entries, 2)
	require.Equal(t, record.AuditHoldInterrupted, entries[0].Type)
	require.Equal(t, "deny", entries[0].Decision)
	require.JSONEq(t, `{"reason":"shutdown"}`, string(entries[0].Detail))

	_, err = e.m.Hold(e.ctx, toolRequest("s2", 5000))
	require.ErrorIs(t, err, holds.ErrClosed)
}

func TestMaxPending(t *testing.T) {
	e := newEnv(t, func(o *holds.Options) { o.MaxPending, o.MaxPendingPerAgent = 2, 2 })
	ch1 := e.held(e.ctx, toolRequest("s1", 5000))
	h1 := e.createdHold("s1")
	ch2 := e.held(e.ctx, toolRequest("s2", 5000))
	e.createdHold("s2")

	_, err := e.m.Hold(e.ctx, toolRequest("s3", 5000))
	require.ErrorIs(t, err, holds.ErrTooManyPending)
	require.ErrorContains(t, err, "at most 2)")
	require.Len(t, e.audit(record.AuditQuery{Type: record.AuditHoldCreated}), 2, "a refused hold is not stored")

	_, err = e.m.Approve(e.ctx, h1.ID, holds.Decision{Operator: "alice"})
	require.NoError(t, err)
	receive(t, ch1)
	ch3 := e.held(e.ctx, toolRequest("s3", 5000))
	e.createdHold("s3")
	requireWaiting(t, ch2)
	requireWaiting(t, ch3)
}

// TestQueueLimits: past the byte budget, or past one agent's share of the holds or of the
// bytes, a hold is refused with a *QueueFullError naming the limit, and nothing is stored;
// other agents still get their reviews.
func TestQueueLimits(t *testing.T) {
	sized := func(sid, agent string, size int64) holds.Request {
		r := toolRequest(sid, 5000)
		r.AgentID, r.Size = agent, size
		return r
	}
	keyed := func(r holds.Request, key string) holds.Request {
		r.KeyID = key
		return r
	}
	for _, tc := range []struct {
		name   string
		opts   func(*holds.Options)
		first  []holds.Request // held and waiting
		refuse holds.Request
		limit  string
		other  holds.Request // still held afterwards
	}{
		{
			name:   "bytes",
			opts:   func(o *holds.Options) { o.MaxPending, o.MaxPendingBytes, o.MaxPendingPerAgent = 10, 1000, 10 },
			first:  []holds.Request{sized("s1", "a", 600)},
			refuse: sized("s2", "b", 500),
			limit:  "the steps waiting for review take 600 bytes, and this one 500 more (at most 1000)",
			other:  sized("s3", "c", 400),
		},
		{
			name:   "holds per agent",
			opts:   func(o *holds.Options) { o.MaxPending = 8 }, // a quarter: 2 per agent
			first:  []holds.Request{sized("s1", "a", 1), sized("s2", "a", 1)},
			refuse: sized("s3", "a", 1),
			limit:  "this agent has 2 steps waiting for review (at most 2 per agent)",
			other:  sized("s4", "b", 1),
		},
		{
			name:   "bytes per agent",
			opts:   func(o *holds.Options) { o.MaxPendingBytes = 4000 }, // a quarter: 1000 per agent
			first:  []holds.Request{sized("s1", "a", 700)},
			refuse: sized("s2", "a", 400),
			limit:  "this agent's steps waiting for review take 700 bytes, and this one 400 more (at most 1000 per agent)",
			other:  sized("s3", "b", 900),
		},
		{
			// A key that may speak for any agent cannot fill the queue under new names.
			name:   "holds per key",
			opts:   func(o *holds.Options) { o.MaxPending = 8 }, // a quarter: 2 per agent or key
			first:  []holds.Request{keyed(sized("s1", "a", 1), "k1"), keyed(sized("s2", "b", 1), "k1")},
			refuse: keyed(sized("s3", "c", 1), "k1"),
			limit:  "this API key has 2 steps waiting for review (at most 2 per key)",
			other:  keyed(sized("s4", "d", 1), "k2"),
		},
		{
			name:   "bytes per key",
			opts:   func(o *holds.Options) { o.MaxPendingBytes = 4000 }, // 1000 per agent or key
			first:  []holds.Request{keyed(sized("s1", "a", 700), "k1")},
			refuse: keyed(sized("s2", "b", 400), "k1"),
			limit:  "this API key's steps waiting for review take 700 bytes, and this one 400 more (at most 1000 per key)",
			other:  sized("s3", "b", 900),
		},
		{
			name:   "session without an agent id",
			opts:   func(o *holds.Options) { o.MaxPending = 4 }, // 1 per agent (or session)
			first:  []holds.Request{sized("s1", "", 1)},
			refuse: sized("s1", "", 1),
			limit:  "this agent has 1 steps waiting for review (at most 1 per agent)",
			other:  sized("s2", "", 1),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts)
			var waiting []<-chan holdResult
			for _, r := range tc.first {
				waiting = append(waiting, e.held(e.ctx, r))
			}
			e.rec.waitN(t, len(tc.first), ofType(record.EventHoldCreated))

			_, err := e.m.Hold(e.ctx, tc.refuse)
			var full *holds.QueueFullError
			require.ErrorAs(t, err, &full)
			require.ErrorIs(t, err, holds.ErrTooManyPending)
			require.Equal(t, tc.limit, full.Limit)
			require.Len(t, e.audit(record.AuditQuery{Type: record.AuditHoldCreated}), len(tc.first), "a refused hold is not stored")

			waiting = append(waiting, e.held(e.ctx, tc.other))
			e.rec.waitN(t, len(tc.first)+1, ofType(record.EventHoldCreated))
			for _, ch := range waiting {
				requireWaiting(t, ch)
			}
			require.EqualValues(t, len(tc.first)+1, e.m.Pending())
		})
	}
}

// TestQueueChargesAreReturned: every way a hold ends gives its share back (its agent's and
// its key's).
func TestQueueChargesAreReturned(t *testing.T) {
	e := newEnv(t, func(o *holds.Options) { o.MaxPending, o.MaxPendingPerAgent, o.MaxPendingBytes = 4, 4, 100 })
	req := func(sid string) holds.Request {
		r := toolRequest(sid, 5000)
		r.Size, r.KeyID = 100, "k1"
		return r
	}
	ends := []func(h holds.Hold, cancel context.CancelFunc){
		func(h holds.Hold, _ context.CancelFunc) {
			_, err := e.m.Approve(e.ctx, h.ID, holds.Decision{Operator: "alice"})
			require.NoError(t, err)
		},
		func(h holds.Hold, _ context.CancelFunc) {
			_, err := e.m.Deny(e.ctx, h.ID, holds.Decision{Operator: "alice"})
			require.NoError(t, err)
		},
		func(holds.Hold, context.CancelFunc) { e.clock.Advance(2 * time.Minute) },
		func(_ holds.Hold, cancel context.CancelFunc) { cancel() },
	}
	for i, end := range ends {
		sid := fmt.Sprintf("s%d", i)
		ctx, cancel := context.WithCancel(e.ctx)
		ch := e.held(ctx, req(sid))
		h := e.createdHold(sid)
		require.EqualValues(t, 100, e.m.PendingBytes())
		end(h, cancel)
		receive(t, ch)
		cancel()
		require.Zero(t, e.m.PendingBytes())
		require.Zero(t, e.m.Pending())
	}
}

func TestHoldRequestValidation(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		field string
		req   holds.Request
	}{
		{"sessionId", holds.Request{Method: "steps/message"}},
		{"method", holds.Request{SessionID: "s1"}},
	} {
		_, err := e.m.Hold(e.ctx, tc.req)
		var fe *holds.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, tc.field, fe.Field)
	}
}

func TestSessionControls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "controls.db")
	e := newEnvAt(t, path)

	var got map[string]string
	require.Equal(t, http.StatusOK, e.call("POST", "/api/sessions/s1/pause", map[string]any{"operator": "alice", "note": "odd"}, &got))
	require.Equal(t, map[string]string{"sessionId": "s1", "control": "paused"}, got)
	require.Equal(t, holds.ControlPaused, e.m.Control("s1"))
	require.Equal(t, holds.ControlActive, e.m.Control("s2"))

	evs := e.rec.waitN(t, 1, ofType(record.EventSessionControl))
	require.JSONEq(t, `{"sessionId":"s1","control":"pause","operator":"alice","note":"odd"}`, string(evs[0].Payload))
	audits := e.rec.waitN(t, 1, ofType(record.EventAudit))
	var a record.AuditEntry
	require.NoError(t, json.Unmarshal(audits[0].Payload, &a))
	require.Equal(t, record.AuditSessionPause, a.Type)
	require.Equal(t, "alice", a.Operator)
	require.Equal(t, "odd", a.Note)
	require.JSONEq(t, `{"state":"paused"}`, string(a.Detail))

	// A paused session's step is held by the pause, and a remembered approval does not
	// let it through.
	pauseReq := toolRequest("s1", 10)
	pauseReq.RuleID = holds.PauseRuleID
	pauseReq.Matches = []record.RuleMatch{{RuleID: "remember-agent-1-transfer-funds-1", Action: "allow", Mode: "enforce"}}
	paused := e.held(e.ctx, pauseReq)
	ph := e.createdHold("s1")
	require.Equal(t, holds.PauseRuleID, ph.RuleID)

	// Resume: back to active; the step already held stays for an operator.
	require.Equal(t, http.StatusOK, e.call("POST", "/api/sessions/s1/resume", map[string]any{"operator": "alice"}, &got))
	require.Equal(t, "active", got["control"])
	require.Equal(t, holds.ControlActive, e.m.Control("s1"))
	requireWaiting(t, paused)

	// Block: the session's waiting steps are denied; other sessions' are not.
	other := e.held(e.ctx, toolRequest("s2", 5000))
	e.createdHold("s2")
	require.Equal(t, http.StatusOK, e.call("POST", "/api/sessions/s1/block", map[string]any{"operator": "bob", "note": "exfiltration"}, &got))
	require.Equal(t, "blocked", got["control"])
	r := receive(t, paused)
	require.Equal(t, holds.StatusDenied, r.out.Status)
	require.Equal(t, "bob", r.out.Operator)
	require.Equal(t, "session blocked: exfiltration", r.out.Note)
	requireWaiting(t, other)

	// A step that reaches Hold after the block (the guardian read the control just before)
	// is denied at once, without a hold.
	out, err := e.m.Hold(e.ctx, pauseReq)
	require.NoError(t, err)
	require.Equal(t, holds.StatusDenied, out.Status)
	require.Equal(t, holds.BlockRuleID, out.RuleID)
	require.Empty(t, out.Hold.ID)

	// A session not seen yet can be controlled too.
	require.NoError(t, e.m.SetControl(e.ctx, "s3", "pause", "carol", ""))
	require.Equal(t, map[string]string{"s1": "blocked", "s3": "paused"}, e.m.Controls())

	sessionAudit := e.audit(record.AuditQuery{Type: "session"})
	var types []string
	for _, en := range sessionAudit {
		types = append(types, en.Type)
	}
	require.Equal(t, []string{"session.pause", "session.block", "session.resume", "session.pause"}, types)

	for _, bad := range []struct{ session, control, operator, field string }{
		{"", "pause", "a", "sessionId"},
		{"s1", "stop", "a", "control"},
		{"s1", "pause", "", "operator"},
	} {
		err := e.m.SetControl(e.ctx, bad.session, bad.control, bad.operator, "")
		var fe *holds.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, bad.field, fe.Field)
	}

	// Controls survive a restart.
	_, err = e.m.Deny(e.ctx, e.createdHold("s2").ID, holds.Decision{Operator: "x"})
	require.NoError(t, err)
	receive(t, other)
	e.close()
	e2 := newEnvAt(t, path)
	require.Equal(t, holds.ControlBlocked, e2.m.Control("s1"))
	require.Equal(t, holds.ControlPaused, e2.m.Control("s3"))
	require.Equal(t, holds.ControlActive, e2.m.Control("s2"))
}

func TestAttachStep(t *testing.T) {
	e := newEnv(t)
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")
	_, err := e.m.Approve(e.ctx, h.ID, holds.Decision{Operator: "alice"})
	require.NoError(t, err)
	receive(t, ch)
	require.NoError(t, e.m.AttachStep(e.ctx, h.ID, 77))
	got, err := e.m.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.EqualValues(t, 77, got.Seq)
	require.ErrorIs(t, e.m.AttachStep(e.ctx, "h_nope", 1), holds.ErrNotFound)
}
