package holds_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Each operator action over real HTTP, while the agent's call is still waiting.
func TestDecisionsOverHTTP(t *testing.T) {
	for _, tc := range []struct {
		action   string
		body     map[string]any
		status   string
		decision rules.Action
		audit    string
		diff     string
	}{
		{action: "approve", body: map[string]any{"operator": "alice", "note": "expected"},
			status: holds.StatusApproved, decision: rules.ActionAllow, audit: record.AuditHoldApproved},
		{action: "deny", body: map[string]any{"operator": "alice", "note": "not today"},
			status: holds.StatusDenied, decision: rules.ActionDeny, audit: record.AuditHoldDenied},
		{action: "modify", body: map[string]any{"operator": "alice", "note": "smaller",
			"params": json.RawMessage(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"amount":50,"to":"ACCT-1","memo":"capped"}}}`)},
			status: holds.StatusModified, decision: rules.ActionModify, audit: record.AuditHoldModified,
			diff: `[{"op":"replace","path":"/toolCallRequest/inputs/amount","value":50,"old":5000},
				{"op":"add","path":"/toolCallRequest/inputs/memo","value":"capped"}]`},
	} {
		t.Run(tc.action, func(t *testing.T) {
			e := newEnv(t)
			ch := e.held(e.ctx, toolRequest("s1", 5000))
			h := e.createdHold("s1")
			require.Equal(t, holds.StatusPending, h.Status)

			var list struct {
				Holds []holds.Hold `json:"holds"`
				Now   time.Time    `json:"now"`
			}
			require.Equal(t, http.StatusOK, e.call("GET", "/api/holds?status=pending", nil, &list))
			require.Len(t, list.Holds, 1)
			got := list.Holds[0]
			require.Equal(t, h.ID, got.ID)
			require.Equal(t, "s1", got.SessionID)
			require.Equal(t, "big-transfer", got.RuleID)
			require.Equal(t, "transfer_funds", got.Tool)
			require.Equal(t, "deny", got.OnTimeout)
			require.True(t, got.CreatedAt.Equal(start))
			require.True(t, got.Deadline.Equal(start.Add(2*time.Minute)))
			require.True(t, list.Now.Equal(start))
			require.JSONEq(t, string(toolRequest("s1", 5000).Request), string(got.Request))

			e.clock.Advance(30 * time.Second)
			requireWaiting(t, ch)
			var resolved holds.Hold
			require.Equal(t, http.StatusOK, e.call("POST", "/api/holds/"+h.ID+"/"+tc.action, tc.body, &resolved))
			require.Equal(t, tc.status, resolved.Status)
			require.Equal(t, "alice", resolved.DecidedBy)
			require.True(t, resolved.DecidedAt.Equal(start.Add(30*time.Second)))
			require.Equal(t, tc.body["note"], resolved.Note)

			r := receive(t, ch)
			require.NoError(t, r.err)
			require.Equal(t, tc.status, r.out.Status)
			require.Equal(t, tc.decision, r.out.Decision)
			require.Equal(t, "alice", r.out.Operator)
			require.Contains(t, r.out.Message, "alice")
			require.Equal(t, resolved, r.out.Hold)
			if tc.action == "modify" {
				require.JSONEq(t, string(tc.body["params"].(json.RawMessage)), string(r.out.Params))
			} else {
				require.Nil(t, r.out.Params)
			}

			// Nothing pending any more; the resolved hold is listed under its status.
			require.Equal(t, http.StatusOK, e.call("GET", "/api/holds", nil, &list))
			require.Empty(t, list.Holds)
			require.Equal(t, http.StatusOK, e.call("GET", "/api/holds?status="+tc.status, nil, &list))
			require.Len(t, list.Holds, 1)

			// Audit: created, then the decision, with who, when, what and the note.
			var audit struct {
				Entries []record.AuditEntry `json:"entries"`
				Next    *int64              `json:"next"`
			}
			require.Equal(t, http.StatusOK, e.call("GET", "/api/audit?holdId="+h.ID, nil, &audit))
			require.Len(t, audit.Entries, 2)
			require.Nil(t, audit.Next)
			decided, created := audit.Entries[0], audit.Entries[1]
			require.Equal(t, record.AuditHoldCreated, created.Type)
			require.Equal(t, "hold", created.Decision)
			require.Equal(t, "big-transfer", created.RuleID)
			require.Equal(t, "s1", created.SessionID)
			require.True(t, created.At.Equal(start))
			require.Equal(t, tc.audit, decided.Type)
			require.Equal(t, "alice", decided.Operator)
			require.Equal(t, string(tc.decision), decided.Decision)
			require.Equal(t, tc.body["note"], decided.Note)
			require.True(t, decided.At.Equal(start.Add(30*time.Second)))
			if tc.diff != "" {
				require.JSONEq(t, tc.diff, string(decided.Diff))
			} else {
				require.Equal(t, "null", string(decided.Diff))
			}

			// Live: hold.created, its audit, hold.resolved, its audit, in seq order.
			evs := e.rec.all()
			var types []string
			for i, ev := range evs {
				types = append(types, ev.Type)
				if i > 0 {
					require.Greater(t, ev.Seq, evs[i-1].Seq)
				}
			}
			require.Equal(t, []string{"hold.created", "audit", "hold.resolved", "audit"}, types)
			// The event carries how the hold ended, not the request or params again.
			var live holds.Hold
			require.NoError(t, json.Unmarshal(evs[2].Payload, &live))
			brief := resolved
			brief.Request, brief.Params = json.RawMessage("null"), nil
			require.Equal(t, brief, live)
			require.NotContains(t, string(evs[2].Payload), "transfer_funds\",\"inputs")
		})
	}
}

func TestHTTPValidation(t *testing.T) {
	e := newEnv(t)
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")

	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   any
		status int
		code   string
		field  string
		msg    string
	}{
		{"no operator", "POST", "/api/holds/" + h.ID + "/approve", map[string]any{"note": "x"}, 400, "bad_request", "operator", "operator is required"},
		{"blank operator", "POST", "/api/holds/" + h.ID + "/deny", map[string]any{"operator": "  "}, 400, "bad_request", "operator", "operator is required"},
		{"empty body", "POST", "/api/holds/" + h.ID + "/approve", nil, 400, "bad_request", "operator", "operator is required"},
		{"bad json", "POST", "/api/holds/" + h.ID + "/approve", "{", 400, "bad_request", "body", "not a valid JSON"},
		{"params not object", "POST", "/api/holds/" + h.ID + "/modify", map[string]any{"operator": "a", "params": []int{1}}, 400, "bad_request", "params", "JSON object"},
		{"params missing", "POST", "/api/holds/" + h.ID + "/modify", map[string]any{"operator": "a"}, 400, "bad_request", "params", "required"},
		{"params invalid for method", "POST", "/api/holds/" + h.ID + "/modify", map[string]any{"operator": "a", "params": map[string]any{"toolCallRequest": map[string]any{}}}, 400, "bad_request", "params", "toolCallRequest.toolId is required"},
		{"params on approve", "POST", "/api/holds/" + h.ID + "/approve", map[string]any{"operator": "a", "params": map[string]any{}}, 400, "bad_request", "params", "modify only"},
		{"remember on deny", "POST", "/api/holds/" + h.ID + "/deny", map[string]any{"operator": "a", "remember": map[string]any{"scope": "tool"}}, 400, "bad_request", "remember", "approval"},
		{"remember bad scope", "POST", "/api/holds/" + h.ID + "/approve", map[string]any{"operator": "a", "remember": map[string]any{"scope": "everything"}}, 400, "bad_request", "remember.scope", "scope"},
		{"remember bad expiry", "POST", "/api/holds/" + h.ID + "/approve", map[string]any{"operator": "a", "remember": map[string]any{"scope": "tool", "expiresIn": "soon"}}, 400, "bad_request", "remember.expiresIn", "duration"},
		{"remember expiry too long in days", "POST", "/api/holds/" + h.ID + "/approve", map[string]any{"operator": "a", "remember": map[string]any{"scope": "tool", "expiresIn": "999d"}}, 400, "bad_request", "remember.expiresIn", "at most 366 days"},
		{"remember expiry too long in hours", "POST", "/api/holds/" + h.ID + "/approve", map[string]any{"operator": "a", "remember": map[string]any{"scope": "tool", "expiresIn": "9000h"}}, 400, "bad_request", "remember.expiresIn", "at most 366 days"},
		{"long note", "POST", "/api/holds/" + h.ID + "/approve", map[string]any{"operator": "a", "note": strings.Repeat("n", 5000)}, 400, "bad_request", "note", "longer"},
		{"unknown hold", "POST", "/api/holds/h_nope/approve", map[string]any{"operator": "a"}, 404, "not_found", "", "not found"},
		{"unknown hold get", "GET", "/api/holds/h_nope", nil, 404, "not_found", "", "not found"},
		{"bad status", "GET", "/api/holds?status=later", nil, 400, "bad_request", "status", "status must be"},
		{"bad limit", "GET", "/api/holds?limit=-1", nil, 400, "bad_request", "limit", "limit"},
		{"bad audit before", "GET", "/api/audit?before=x", nil, 400, "bad_request", "before", "before"},
		{"huge audit session filter", "GET", "/api/audit?sessionId=" + strings.Repeat("s", 100_000), nil, 400, "bad_request", "sessionId", "longer than 1024"},
		{"huge audit operator filter", "GET", "/api/audit?operator=" + strings.Repeat("o", 2000), nil, 400, "bad_request", "operator", "longer than 1024"},
		{"control without operator", "POST", "/api/sessions/s1/pause", map[string]any{}, 400, "bad_request", "operator", "operator is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got apiErr
			require.Equal(t, tc.status, e.call(tc.method, tc.path, tc.body, &got))
			require.Equal(t, tc.code, got.Error.Code)
			require.Equal(t, tc.field, got.Error.Field)
			require.Contains(t, got.Error.Message, tc.msg)
		})
	}
	// None of that decided anything.
	requireWaiting(t, ch)
	require.Equal(t, holds.ControlActive, e.m.Control("s1"))
	var one holds.Hold
	require.Equal(t, http.StatusOK, e.call("GET", "/api/holds/"+h.ID, nil, &one))
	require.Equal(t, holds.StatusPending, one.Status)
	require.Len(t, e.audit(record.AuditQuery{}), 1)
}

func TestDoubleDecisionConflict(t *testing.T) {
	e := newEnv(t)
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")

	var first holds.Hold
	require.Equal(t, http.StatusOK, e.call("POST", "/api/holds/"+h.ID+"/approve", map[string]any{"operator": "alice"}, &first))
	for _, action := range []string{"deny", "approve", "modify"} {
		var conflict apiErr
		body := map[string]any{"operator": "bob"}
		if action == "modify" {
			body["params"] = map[string]any{"toolCallRequest": map[string]any{"toolId": "x"}}
		}
		require.Equal(t, http.StatusConflict, e.call("POST", "/api/holds/"+h.ID+"/"+action, body, &conflict))
		require.Equal(t, "conflict", conflict.Error.Code)
		require.Contains(t, conflict.Error.Message, "already approved by alice")
		require.NotNil(t, conflict.Hold)
		require.Equal(t, first, *conflict.Hold)
	}
	r := receive(t, ch)
	require.Equal(t, holds.StatusApproved, r.out.Status)
	entries := e.audit(record.AuditQuery{HoldID: h.ID})
	require.Len(t, entries, 2, "the losing decisions are not audited")
}

func TestOperatorFromOverridesBody(t *testing.T) {
	e := newEnv(t, func(o *holds.Options) {
		o.OperatorFrom = func(r *http.Request) (string, bool) {
			name := r.Header.Get("X-Test-User")
			return name, name != ""
		}
	})
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")
	req, err := http.NewRequest("POST", e.srv.URL+"/api/holds/"+h.ID+"/approve", strings.NewReader(`{"operator":"mallory"}`))
	require.NoError(t, err)
	req.Header.Set("X-Test-User", "signed-in-carol")
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got holds.Hold
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	require.Equal(t, "signed-in-carol", got.DecidedBy)
	require.Equal(t, "signed-in-carol", receive(t, ch).out.Operator)

	// Without a signed-in name the body's operator is used.
	ch = e.held(e.ctx, toolRequest("s2", 5000))
	h = e.createdHold("s2")
	require.Equal(t, http.StatusOK, e.call("POST", "/api/holds/"+h.ID+"/deny", map[string]any{"operator": "dave"}, &got))
	require.Equal(t, "dave", got.DecidedBy)
	receive(t, ch)
}

func TestAuditAPIFiltersAndPages(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		sid := fmt.Sprintf("s%d", i)
		ch := e.held(e.ctx, toolRequest(sid, 5000))
		h := e.createdHold(sid)
		_, err := e.m.Deny(e.ctx, h.ID, holds.Decision{Operator: fmt.Sprintf("op%d", i%2)})
		require.NoError(t, err)
		receive(t, ch)
	}
	require.NoError(t, e.m.SetControl(e.ctx, "s0", "pause", "op1", "watching"))

	type page struct {
		Entries []record.AuditEntry `json:"entries"`
		Next    *int64              `json:"next"`
	}
	var p page
	require.Equal(t, http.StatusOK, e.call("GET", "/api/audit", nil, &p))
	require.Len(t, p.Entries, 7)
	require.Equal(t, record.AuditSessionPause, p.Entries[0].Type)

	require.Equal(t, http.StatusOK, e.call("GET", "/api/audit?type=hold&operator=op0", nil, &p))
	require.Len(t, p.Entries, 2)
	for _, en := range p.Entries {
		require.Equal(t, record.AuditHoldDenied, en.Type)
		require.Equal(t, "op0", en.Operator)
	}
	require.Equal(t, http.StatusOK, e.call("GET", "/api/audit?sessionId=s0&type=session", nil, &p))
	require.Len(t, p.Entries, 1)
	require.Equal(t, "watching", p.Entries[0].Note)

	// Paging with next/before walks everything once.
	seen := map[int64]bool{}
	path := "/api/audit?limit=3"
	for {
		require.Equal(t, http.StatusOK, e.call("GET", path, nil, &p))
		for _, en := range p.Entries {
			require.False(t, seen[en.ID])
			seen[en.ID] = true
		}
		if p.Next == nil {
			break
		}
		path = fmt.Sprintf("/api/audit?limit=3&before=%d", *p.Next)
	}
	require.Len(t, seen, 7)
}

func TestRememberOverHTTP(t *testing.T) {
	e := newEnv(t)
	holdRule := rules.Rule{ID: "big-transfer", When: `tool == "transfer_funds" && inputs.amount > 1000`,
		Action: rules.ActionHold, Enabled: true, Mode: rules.ModeEnforce}

	// evaluate runs the real rules engine over the held rule and whatever was remembered,
	// as the guardian's pipeline would for the next step of the agent.
	evaluate := func(req holds.Request) rules.Verdict {
		set := append([]rules.Rule{holdRule}, e.remembered()...)
		p, err := rules.Compile(set, rules.Options{Now: e.clock.Now})
		require.NoError(t, err)
		env := rules.Env{Agent: rules.Agent{ID: req.AgentID}, Tool: req.Tool, Inputs: req.Inputs(), Now: e.clock.Now()}
		return p.Evaluate(&env)
	}
	matches := func(v rules.Verdict) []record.RuleMatch {
		var out []record.RuleMatch
		for _, m := range v.Matches {
			out = append(out, record.RuleMatch{RuleID: m.RuleID, Action: string(m.Action), Mode: string(m.Mode), ReasonCode: m.ReasonCode, Error: m.Error})
		}
		return out
	}

	req := toolRequest("s1", 5000)
	v := evaluate(req)
	require.Equal(t, rules.ActionHold, v.Action)
	req.Matches = matches(v)
	ch := e.held(e.ctx, req)
	h := e.createdHold("s1")
	var got holds.Hold
	require.Equal(t, http.StatusOK, e.call("POST", "/api/holds/"+h.ID+"/approve", map[string]any{
		"operator": "alice", "remember": map[string]any{"scope": "inputs", "expiresIn": "7d"}}, &got))
	require.Equal(t, holds.StatusApproved, got.Status)
	r := receive(t, ch)
	require.Equal(t, holds.StatusApproved, r.out.Status)

	// The rule was saved before the agent was answered.
	saved := e.remembered()
	require.Len(t, saved, 1)
	rule := saved[0]
	require.True(t, holds.IsRemembered(rule.ID))
	require.Equal(t, rules.ActionAllow, rule.Action)
	require.Equal(t, start.Add(7*24*time.Hour), *rule.ExpiresAt)
	e.rulesM.Lock()
	require.Equal(t, []string{"alice"}, e.rememberedBy, "the rule is saved (and audited) in the approver's name")
	e.rulesM.Unlock()
	entries := e.audit(record.AuditQuery{Type: record.AuditHoldApproved})
	require.Len(t, entries, 1)
	require.JSONEq(t, fmt.Sprintf(`{"remember":{"ruleId":%q,"scope":"inputs","expiresAt":%q}}`,
		rule.ID, start.Add(7*24*time.Hour).Format(time.RFC3339Nano)), string(entries[0].Detail))

	// The identical next step passes without a hold…
	next := toolRequest("s1", 5000)
	v = evaluate(next)
	require.Equal(t, rules.ActionHold, v.Action, "by combination a hold still outranks the allow")
	next.Matches = matches(v)
	out, err := e.m.Hold(e.ctx, next)
	require.NoError(t, err)
	require.Equal(t, holds.StatusRemembered, out.Status)
	require.Equal(t, rules.ActionAllow, out.Decision)
	require.Equal(t, rule.ID, out.RuleID)
	require.Zero(t, e.m.Pending())

	// …a different amount is held again…
	other := toolRequest("s2", 6000)
	other.Matches = matches(evaluate(other))
	ch = e.held(e.ctx, other)
	h2 := e.createdHold("s2")
	require.NotEqual(t, h.ID, h2.ID)
	_, err = e.m.Deny(e.ctx, h2.ID, holds.Decision{Operator: "alice"})
	require.NoError(t, err)
	receive(t, ch)

	// …and so is the identical step once the rule has expired.
	e.clock.Advance(8 * 24 * time.Hour)
	later := toolRequest("s3", 5000)
	v = evaluate(later)
	later.Matches = matches(v)
	later.Timeout = time.Minute
	ch = e.held(e.ctx, later)
	e.createdHold("s3")
	require.NoError(t, e.clock.WaitTimers(context.Background(), 1))
	e.clock.Advance(time.Minute)
	require.Equal(t, holds.StatusTimedOut, receive(t, ch).out.Status)
}

func TestRememberFailureKeepsApproval(t *testing.T) {
	e := newEnv(t, func(o *holds.Options) {
		o.Remember = func(context.Context, rules.Rule, string) error { return fmt.Errorf("disk full") }
	})
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")
	var got apiErr
	require.Equal(t, http.StatusInternalServerError, e.call("POST", "/api/holds/"+h.ID+"/approve",
		map[string]any{"operator": "alice", "remember": map[string]any{"scope": "tool"}}, &got))
	require.Equal(t, "remember_failed", got.Error.Code)
	require.Contains(t, got.Error.Message, "disk full")
	require.NotNil(t, got.Hold)
	require.Equal(t, holds.StatusApproved, got.Hold.Status)
	require.Equal(t, holds.StatusApproved, receive(t, ch).out.Status)
}

func TestRememberDisabled(t *testing.T) {
	e := newEnv(t, func(o *holds.Options) { o.Remember = nil })
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")
	var got apiErr
	require.Equal(t, http.StatusBadRequest, e.call("POST", "/api/holds/"+h.ID+"/approve",
		map[string]any{"operator": "alice", "remember": map[string]any{"scope": "tool"}}, &got))
	require.Equal(t, "remember", got.Error.Field)
	requireWaiting(t, ch)
}

// A held step's inspector finds its hold by the step's seq: who decided, when, the note and
// the audited diff of an edit.
func TestStepHoldOverHTTP(t *testing.T) {
	e := newEnv(t)
	ch := e.held(e.ctx, toolRequest("s1", 5000))
	h := e.createdHold("s1")

	// Pending: no step is stored yet, so no step names the hold.
	var missing apiErr
	require.Equal(t, http.StatusNotFound, e.call("GET", "/api/steps/7/hold", nil, &missing))
	require.Equal(t, "not_found", missing.Error.Code)

	e.clock.Advance(10 * time.Second)
	params := json.RawMessage(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"amount":50,"to":"ACCT-1"}}}`)
	require.Equal(t, http.StatusOK, e.call("POST", "/api/holds/"+h.ID+"/modify",
		map[string]any{"operator": "dana", "note": "capped", "params": params}, nil))
	receive(t, ch)
	require.NoError(t, e.m.AttachStep(e.ctx, h.ID, 7))

	var got holds.StepHold
	require.Equal(t, http.StatusOK, e.call("GET", "/api/steps/7/hold", nil, &got))
	require.Equal(t, h.ID, got.Hold.ID)
	require.EqualValues(t, 7, got.Hold.Seq)
	require.Equal(t, holds.StatusModified, got.Hold.Status)
	require.Equal(t, "dana", got.Hold.DecidedBy)
	require.Equal(t, "capped", got.Hold.Note)
	require.True(t, got.Hold.DecidedAt.Equal(start.Add(10*time.Second)))
	require.Len(t, got.Audit, 2)
	require.Equal(t, record.AuditHoldCreated, got.Audit[0].Type, "oldest first")
	require.Equal(t, record.AuditHoldModified, got.Audit[1].Type)
	require.JSONEq(t, `[{"op":"replace","path":"/toolCallRequest/inputs/amount","value":50,"old":5000}]`, string(got.Audit[1].Diff))

	for _, bad := range []string{"0", "-3", "x"} {
		var e400 apiErr
		require.Equal(t, http.StatusBadRequest, e.call("GET", "/api/steps/"+bad+"/hold", nil, &e400), bad)
		require.Equal(t, "seq", e400.Error.Field)
	}
}
