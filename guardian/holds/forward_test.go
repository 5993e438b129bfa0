package holds_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// fakeCluster stands in for the replica registry (guardian/cluster): it knows which
// replica's agent waits on each hold and carries decisions there, in process.
type fakeCluster struct {
	mu     sync.Mutex
	owners map[string]string
	serve  map[string]func(context.Context, string, []byte) []byte
	down   map[string]bool
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{owners: map[string]string{}, serve: map[string]func(context.Context, string, []byte) []byte{},
		down: map[string]bool{}}
}

// member is one replica's view of the cluster: its holds.Owner and holds.Forwarder.
type member struct {
	c    *fakeCluster
	name string
}

func (m member) Own(_ context.Context, id string) error {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.c.owners[id] = m.name
	return nil
}

func (m member) Disown(id string) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	delete(m.c.owners, id)
}

func (m member) ServeForwarded(f func(context.Context, string, []byte) []byte) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.c.serve[m.name] = f
}

func (m member) Forward(ctx context.Context, id string, decision []byte) ([]byte, error) {
	m.c.mu.Lock()
	owner, ok := m.c.owners[id]
	serve, down := m.c.serve[owner], m.c.down[owner]
	m.c.mu.Unlock()
	switch {
	case !ok || owner == m.name:
		return nil, holds.ErrNotForwarded
	case down:
		return nil, fmt.Errorf("%w: replica %s did not take the decision within 3s; nothing was decided", holds.ErrOwnerUnavailable, owner)
	}
	return serve(ctx, id, decision), nil
}

var (
	_ holds.Owner     = member{}
	_ holds.Forwarder = member{}
)

// twoReplicas is a replica "a" (e.m, where agents wait) and a replica "b" sharing its store
// and its cluster.
func twoReplicas(t *testing.T, opts ...envOption) (*env, *holds.Manager, *fakeCluster) {
	c := newFakeCluster()
	withA := append([]envOption{func(o *holds.Options) { o.Shared, o.Owner = true, member{c, "a"} }}, opts...)
	e := newEnv(t, withA...)
	withB := append([]envOption{func(o *holds.Options) { o.Owner = member{c, "b"} }}, opts...)
	b, _ := e.replica(withB...)
	return e, b, c
}

// What a decision stores, audits and answers, without what differs from hold to hold.
type decided struct {
	Status, Decision, Params string
	AuditType, AuditDiff     string
	AgentDecision            rules.Action
	AgentParams, Message     string
}

func TestDecisionOnAnotherReplicaIsTheOneTheAgentGets(t *testing.T) {
	edit := json.RawMessage(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"amount":5,"to":"eve@evil.example"}}}`)
	for _, tc := range []struct {
		name   string
		decide func(m *holds.Manager, id string) (holds.Hold, error)
		want   decided
	}{
		{"approve applies the matched modifications", func(m *holds.Manager, id string) (holds.Hold, error) {
			return m.Approve(context.Background(), id, holds.Decision{Operator: "bob"})
		}, decided{Status: holds.StatusApproved, Decision: "modify",
			Params:    `{"toolCallRequest":{"inputs":{"amount":5000,"to":"[redacted]"},"toolId":"transfer_funds"}}`,
			AuditType: record.AuditHoldApproved, AuditDiff: `[{"op":"replace","path":"/toolCallRequest/inputs/to","value":"[redacted]","old":"ACCT-1"}]`,
			AgentDecision: rules.ActionModify, Message: "Approved by bob, with the rules' modifications"}},
		{"an edit gets them on top", func(m *holds.Manager, id string) (holds.Hold, error) {
			return m.Modify(context.Background(), id, holds.Decision{Operator: "bob"}, edit)
		}, decided{Status: holds.StatusModified, Decision: "modify",
			Params:        `{"toolCallRequest":{"inputs":{"amount":5,"to":"[redacted]"},"toolId":"transfer_funds"}}`,
			AuditType:     record.AuditHoldModified,
			AuditDiff:     `[{"op":"replace","path":"/toolCallRequest/inputs/amount","value":5,"old":5000},{"op":"replace","path":"/toolCallRequest/inputs/to","value":"[redacted]","old":"ACCT-1"}]`,
			AgentDecision: rules.ActionModify, Message: "Modified by bob"}},
		{"deny", func(m *holds.Manager, id string) (holds.Hold, error) {
			return m.Deny(context.Background(), id, holds.Decision{Operator: "bob"})
		}, decided{Status: holds.StatusDenied, Decision: "deny", AuditType: record.AuditHoldDenied,
			AgentDecision: rules.ActionDeny, Message: "Denied by bob"}},
	} {
		for _, where := range []string{"on its replica", "on another replica"} {
			t.Run(tc.name+" "+where, func(t *testing.T) {
				e, b, _ := twoReplicas(t)
				req := toolRequest("s1", 5000)
				req.Modify = redact
				ch := e.held(e.ctx, req)
				h := e.createdHold("s1")
				decider := e.m
				if where == "on another replica" {
					decider = b
				}
				stored, err := tc.decide(decider, h.ID)
				require.NoError(t, err)
				r := receive(t, ch)
				require.NoError(t, r.err)
				var audit record.AuditEntry
				for _, a := range e.audit(record.AuditQuery{HoldID: h.ID}) {
					if a.Type != record.AuditHoldCreated {
						audit = a
					}
				}
				got := decided{Status: stored.Status, Decision: stored.Decision, Params: string(stored.Params),
					AuditType: audit.Type, AuditDiff: string(audit.Diff),
					AgentDecision: r.out.Decision, AgentParams: string(r.out.Params), Message: r.out.Message}
				want := tc.want
				want.AgentParams = want.Params
				require.Equal(t, want, got)
				again, err := e.m.Get(e.ctx, h.ID)
				require.NoError(t, err)
				require.Equal(t, stored.Params, again.Params, "stored as answered")
				require.Equal(t, stored.Decision, again.Decision)
			})
		}
	}
}

// The errors an operator acts on cross replicas as they are: an edit the rules deny (with
// the verdict, for the override), a second decision (with the hold as decided), an
// approval the modifications cannot be applied to.
func TestErrorsOfADecisionOnAnotherReplica(t *testing.T) {
	deny := func(_ context.Context, _, _ string, params json.RawMessage) (holds.EditVerdict, error) {
		if strings.Contains(string(params), "evil") {
			return holds.EditVerdict{Decision: "deny", RuleID: "no-evil", Message: "not there"}, nil
		}
		return holds.EditVerdict{Decision: "allow"}, nil
	}
	e, b, _ := twoReplicas(t, func(o *holds.Options) { o.CheckEdit = deny })
	req := toolRequest("s1", 5000)
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")

	_, err := b.Modify(e.ctx, h.ID, holds.Decision{Operator: "bob"},
		json.RawMessage(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"to":"evil"}}}`))
	var rd *holds.RulesDenyError
	require.ErrorAs(t, err, &rd)
	require.Equal(t, "no-evil", rd.Verdict.RuleID)
	_, err = b.Modify(e.ctx, h.ID, holds.Decision{Operator: "bob"}, json.RawMessage(`{"toolCallRequest":{}}`))
	var fe *holds.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "params", fe.Field)
	requireWaiting(t, ch)

	stored, err := b.Modify(e.ctx, h.ID, holds.Decision{Operator: "bob", Override: true},
		json.RawMessage(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"to":"evil"}}}`))
	require.NoError(t, err, "overridden")
	require.Equal(t, holds.StatusModified, stored.Status)
	receive(t, ch)

	h2, err := b.Approve(e.ctx, h.ID, holds.Decision{Operator: "carol"})
	require.ErrorIs(t, err, holds.ErrConflict)
	require.Equal(t, "bob", h2.DecidedBy, "the hold as decided first")

	// A redaction that fails on an approval refuses it rather than letting the step through.
	req = toolRequest("s2", 1)
	req.Modify = func(json.RawMessage) (json.RawMessage, error) { return nil, fmt.Errorf("broken") }
	ch = e.held(e.ctx, req)
	h = e.createdHold("s2")
	_, err = b.Approve(e.ctx, h.ID, holds.Decision{Operator: "bob"})
	require.ErrorAs(t, err, &fe)
	require.Contains(t, fe.Message, "could not be applied")
	requireWaiting(t, ch)
	got, err := b.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusPending, got.Status)
}

// A decision for a hold whose replica cannot take it (stopped, frozen) is refused with 503
// and decides nothing: stored, it would never reach the agent, whose connection is there.
func TestDecisionForAnUnavailableReplicaIsRefused(t *testing.T) {
	e, b, c := twoReplicas(t)
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")
	c.mu.Lock()
	c.down["a"] = true
	c.mu.Unlock()
	mux := http.NewServeMux()
	b.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := srv.Client().Post(srv.URL+"/api/holds/"+h.ID+"/approve", "application/json", strings.NewReader(`{"operator":"bob"}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	var body apiErr
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "unavailable", body.Error.Code)
	require.Contains(t, body.Error.Message, "nothing was decided")
	got, err := e.m.Get(e.ctx, h.ID)
	require.NoError(t, err)
	require.Equal(t, holds.StatusPending, got.Status)
	requireWaiting(t, ch)
}
