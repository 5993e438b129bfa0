package holds_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// replica is a second Manager over e's store: another guardian process sharing the
// database. Its events are what a bus carries to e.m.Observe.
func (e *env) replica(opts ...envOption) (*holds.Manager, *recorder) {
	e.t.Helper()
	rec := newRecorder()
	o := holds.Options{Store: e.db, Clock: e.clock, Publish: rec.publish, Shared: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, f := range opts {
		f(&o)
	}
	m := holds.NewManager(o)
	require.NoError(e.t, m.Start(e.ctx))
	return m, rec
}

// relay hands every event rec got to m.Observe, as the bus does.
func relay(m *holds.Manager, rec *recorder) {
	for _, ev := range rec.all() {
		m.Observe(ev)
	}
}

// redact is a hold's matched modification: it replaces the transfer's account.
func redact(params json.RawMessage) (json.RawMessage, error) {
	var p map[string]map[string]any
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	p["toolCallRequest"]["inputs"].(map[string]any)["to"] = "[redacted]"
	return json.Marshal(p)
}

func TestDecisionOnAnotherReplicaAnswersTheWaitingAgent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		decide   func(m *holds.Manager, id string) (holds.Hold, error)
		decision rules.Action
		to       string
	}{
		{"approve applies the matched modifications", func(m *holds.Manager, id string) (holds.Hold, error) {
			return m.Approve(context.Background(), id, holds.Decision{Operator: "bob"})
		}, rules.ActionModify, "[redacted]"},
		{"edit gets the matched modifications on top", func(m *holds.Manager, id string) (holds.Hold, error) {
			return m.Modify(context.Background(), id, holds.Decision{Operator: "bob"},
				json.RawMessage(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"amount":5,"to":"ACCT-9"}}}`))
		}, rules.ActionModify, "[redacted]"},
		{"deny", func(m *holds.Manager, id string) (holds.Hold, error) {
			return m.Deny(context.Background(), id, holds.Decision{Operator: "bob"})
		}, rules.ActionDeny, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			b, bRec := e.replica()
			req := toolRequest("s1", 5000)
			req.Modify = redact
			ch := e.held(e.ctx, req)
			h := e.createdHold("s1")

			stored, err := tc.decide(b, h.ID)
			require.NoError(t, err)
			requireWaiting(t, ch)
			relay(e.m, bRec)
			r := receive(t, ch)
			require.NoError(t, r.err)
			require.Equal(t, tc.decision, r.out.Decision)
			require.Equal(t, "bob", r.out.Operator)
			if tc.to != "" {
				var p struct {
					ToolCallRequest struct {
						Inputs map[string]any `json:"inputs"`
					} `json:"toolCallRequest"`
				}
				require.NoError(t, json.Unmarshal(r.out.Params, &p))
				require.Equal(t, tc.to, p.ToolCallRequest.Inputs["to"])
			}
			require.Equal(t, stored.Status, r.out.Status)

			// The second decision, on either replica, conflicts.
			_, err = e.m.Approve(e.ctx, h.ID, holds.Decision{Operator: "carol"})
			require.ErrorIs(t, err, holds.ErrConflict)
			_, err = tc.decide(b, h.ID)
			require.ErrorIs(t, err, holds.ErrConflict)
			require.Zero(t, e.m.Pending())
		})
	}
}

func TestBlockOnAnotherReplicaReachesThisOne(t *testing.T) {
	e := newEnv(t)
	b, bRec := e.replica()
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	e.createdHold("s1")
	require.NoError(t, b.SetControl(e.ctx, "s1", "block", "bob", "runaway"))
	require.Equal(t, holds.ControlActive, e.m.Control("s1"))
	relay(e.m, bRec)
	require.Equal(t, holds.ControlBlocked, e.m.Control("s1"))
	r := receive(t, ch)
	require.NoError(t, r.err)
	require.Equal(t, rules.ActionDeny, r.out.Decision)

	require.NoError(t, b.SetControl(e.ctx, "s1", "resume", "bob", ""))
	relay(e.m, bRec)
	require.Equal(t, holds.ControlActive, e.m.Control("s1"))
}

// owners records Own and Disown calls.
type owners struct {
	mu    sync.Mutex
	owned map[string]bool
	fail  bool
}

func (o *owners) Own(_ context.Context, id string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail {
		return errors.New("registry unreachable")
	}
	o.owned[id] = true
	return nil
}

func (o *owners) Disown(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.owned, id)
}

func TestSharedStoreKeepsOtherProcessesHoldsAndRecordsOwners(t *testing.T) {
	o := &owners{owned: map[string]bool{}}
	e := newEnv(t, func(opts *holds.Options) { opts.Owner = o; opts.Shared = true })
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")
	o.mu.Lock()
	require.True(t, o.owned[h.ID], "owned before it is stored")
	o.mu.Unlock()

	// Another replica starting does not end the pending hold as a single process would.
	e.replica()
	got, err := e.m.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusPending, got.Status)

	_, err = e.m.Deny(e.ctx, h.ID, holds.Decision{Operator: "bob"})
	require.NoError(t, err)
	receive(t, ch)
	o.mu.Lock()
	require.Empty(t, o.owned)
	o.fail = true
	o.mu.Unlock()

	// Without a recorded owner, no hold is stored: the agent is refused, not left to a
	// hold nobody could end after a crash.
	_, err = e.m.Hold(e.ctx, toolRequest("s2", 1))
	require.Error(t, err)
	pending, err := e.m.List(e.ctx, holds.StatusPending, 10)
	require.NoError(t, err)
	require.Empty(t, pending)
}

func TestInterruptedElsewhereIsNeverAnApproval(t *testing.T) {
	e := newEnv(t)
	req := toolRequest("s1", 5000)
	req.OnTimeout = rules.ActionAllow
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	// A survivor's sweep ended it (as for a replica it believed dead).
	stored, evs, err := e.db.ResolveHold(e.ctx, h.ID, record.HoldResolution{Status: holds.StatusInterrupted,
		Decision: string(rules.ActionDeny), Note: "interrupted: replica r1 stopped", DecidedAt: start}, &record.AuditEntry{Type: record.AuditHoldInterrupted})
	require.NoError(t, err)
	require.Equal(t, holds.StatusInterrupted, stored.Status)
	for _, ev := range evs {
		e.m.Observe(ev)
	}
	r := receive(t, ch)
	require.Equal(t, rules.ActionDeny, r.out.Decision)
	require.Equal(t, holds.ReasonRestarting, r.out.ReasonCode)
}

// A decision here that loses to one stored elsewhere answers the agent with the stored
// one, and never drops the modifications that matched with the hold.
func TestConflictWithADecisionElsewhereKeepsTheModifications(t *testing.T) {
	e := newEnv(t)
	b, _ := e.replica()
	req := toolRequest("s1", 5000)
	req.Modify = redact
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	_, err := b.Approve(e.ctx, h.ID, holds.Decision{Operator: "bob"})
	require.NoError(t, err)
	// No relay: this replica has not heard of it when its own operator decides.
	_, err = e.m.Deny(e.ctx, h.ID, holds.Decision{Operator: "carol"})
	require.ErrorIs(t, err, holds.ErrConflict)
	r := receive(t, ch)
	require.Equal(t, rules.ActionModify, r.out.Decision)
	require.Contains(t, string(r.out.Params), "[redacted]")
}

// Approve and remember works on a replica the agent does not wait on: the rule is built
// from the stored hold (its inputs read from the stored request) and saved there.
func TestRememberOnAnotherReplica(t *testing.T) {
	e := newEnv(t)
	var (
		saved []rules.Rule
		by    []string
	)
	remember := func(_ context.Context, r rules.Rule, operator string) error {
		saved, by = append(saved, r), append(by, operator)
		return nil
	}
	plain, _ := e.replica(func(o *holds.Options) { o.Remember = remember })
	b, bRec := e.replica(func(o *holds.Options) {
		o.Remember = remember
		o.InputsFrom = func(request json.RawMessage) map[string]any {
			var r struct {
				Params struct {
					ToolCallRequest struct {
						Inputs map[string]any `json:"inputs"`
					} `json:"toolCallRequest"`
				} `json:"params"`
			}
			if json.Unmarshal(request, &r) != nil {
				return nil
			}
			return r.Params.ToolCallRequest.Inputs
		}
	})
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")
	spec := &holds.RememberSpec{Scope: holds.ScopeInputs}

	_, err := plain.Approve(e.ctx, h.ID, holds.Decision{Operator: "bob", Remember: spec})
	var fe *holds.FieldError
	require.ErrorAs(t, err, &fe, "without InputsFrom it is refused")
	require.Equal(t, "remember", fe.Field)

	stored, err := b.Approve(e.ctx, h.ID, holds.Decision{Operator: "bob", Remember: spec})
	require.NoError(t, err)
	require.Equal(t, holds.StatusApproved, stored.Status)
	require.Len(t, saved, 1)
	require.Equal(t, []string{"bob"}, by, "the rule is saved in the approver's name")
	require.Contains(t, saved[0].When, `agent.id == "agent-1" && tool == "transfer_funds"`)
	require.Contains(t, saved[0].When, "5000", "scoped to the held step's inputs")
	relay(e.m, bRec)
	r := receive(t, ch)
	require.Equal(t, rules.ActionAllow, r.out.Decision)
	audit := e.audit(record.AuditQuery{HoldID: h.ID})
	var approved *record.AuditEntry
	for i := range audit {
		if audit[i].Type == record.AuditHoldApproved {
			approved = &audit[i]
		}
	}
	require.NotNil(t, approved)
	require.Contains(t, string(approved.Detail), saved[0].ID)
}
