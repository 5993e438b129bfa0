package holds_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// withDenyOver stands in for the rules: an edited transfer over limit is denied by rule
// "cap"; a check that fails returns failErr.
func withDenyOver(limit float64, failErr error) envOption {
	return func(o *holds.Options) {
		o.CheckEdit = func(_ context.Context, sessionID, method string, params json.RawMessage) (holds.EditVerdict, error) {
			if failErr != nil {
				return holds.EditVerdict{}, failErr
			}
			var p struct {
				ToolCallRequest struct {
					Inputs struct {
						Amount float64 `json:"amount"`
					} `json:"inputs"`
				} `json:"toolCallRequest"`
			}
			if err := json.Unmarshal(params, &p); err != nil {
				return holds.EditVerdict{}, err
			}
			if sessionID == "" || method != "steps/toolCallRequest" {
				return holds.EditVerdict{}, errors.New("the check needs the hold's session and method")
			}
			if p.ToolCallRequest.Inputs.Amount > limit {
				return holds.EditVerdict{Decision: string(rules.ActionDeny), RuleID: "cap", Message: "Over the cap"}, nil
			}
			return holds.EditVerdict{Decision: string(rules.ActionAllow)}, nil
		}
	}
}

func transferParams(amount string) json.RawMessage {
	return json.RawMessage(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"amount":` + amount + `,"to":"ACCT-1"}}}`)
}

// An operator's edit is judged by the rules as the agent's step would be: one they deny is
// refused (400 rules_deny, with the verdict) and the step keeps waiting, unless the body
// says "override": true, which the audit entry then records.
func TestModifyReRunsTheRules(t *testing.T) {
	type verdictErr struct {
		apiErr
		Verdict *holds.EditVerdict `json:"verdict"`
	}
	tests := []struct {
		name     string
		amount   string
		override any
		status   int
		code     string
		audited  string // the audit detail of the modification, "" for none
	}{
		{name: "allowed edit", amount: "900", status: http.StatusOK},
		{name: "denied edit refused", amount: "50000", status: http.StatusBadRequest, code: "rules_deny"},
		{name: "denied edit, override false", amount: "50000", override: false, status: http.StatusBadRequest, code: "rules_deny"},
		{name: "denied edit overridden", amount: "50000", override: true, status: http.StatusOK,
			audited: `{"override":{"decision":"deny","ruleId":"cap","message":"Over the cap"}}`},
		{name: "allowed edit, needless override", amount: "900", override: true, status: http.StatusOK},
		{name: "override is not a boolean", amount: "900", override: "yes", status: http.StatusBadRequest, code: "bad_request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withDenyOver(1000, nil))
			ch := e.held(e.ctx, toolRequest("s1", 5000))
			h := e.createdHold("s1")
			body := map[string]any{"operator": "dana", "params": transferParams(tc.amount)}
			if tc.override != nil {
				body["override"] = tc.override
			}
			var got verdictErr
			require.Equal(t, tc.status, e.call("POST", "/api/holds/"+h.ID+"/modify", body, &got))
			if tc.status != http.StatusOK {
				require.Equal(t, tc.code, got.Error.Code, got.Error.Message)
				if tc.code == "rules_deny" {
					require.Equal(t, "params", got.Error.Field)
					require.Contains(t, got.Error.Message, "rule cap")
					require.Contains(t, got.Error.Message, "Over the cap")
					require.Equal(t, &holds.EditVerdict{Decision: "deny", RuleID: "cap", Message: "Over the cap"}, got.Verdict)
				}
				requireWaiting(t, ch)
				// The refusal leaves the hold to decide: a plain approval still works.
				require.Equal(t, http.StatusOK, e.call("POST", "/api/holds/"+h.ID+"/approve", map[string]any{"operator": "dana"}, nil))
				require.Equal(t, rules.ActionAllow, receive(t, ch).out.Decision)
				return
			}
			r := receive(t, ch)
			require.NoError(t, r.err)
			require.Equal(t, rules.ActionModify, r.out.Decision)
			require.JSONEq(t, string(transferParams(tc.amount)), string(r.out.Params))
			entries := e.audit(record.AuditQuery{Type: record.AuditHoldModified, Limit: 10})
			require.Len(t, entries, 1)
			if tc.audited == "" {
				require.Empty(t, entries[0].Detail)
			} else {
				require.JSONEq(t, tc.audited, string(entries[0].Detail))
			}
		})
	}
}

// Overriding applies to an edit only, and a rule check that fails refuses the edit rather
// than sending what the rules could not judge.
func TestModifyRuleCheckEdges(t *testing.T) {
	t.Run("override on approve", func(t *testing.T) {
		e := newEnv(t, withDenyOver(1000, nil))
		ch := e.held(e.ctx, toolRequest("s1", 5000))
		h := e.createdHold("s1")
		var got apiErr
		require.Equal(t, http.StatusBadRequest, e.call("POST", "/api/holds/"+h.ID+"/approve", map[string]any{"operator": "a", "override": true}, &got))
		require.Equal(t, "override", got.Error.Field)
		requireWaiting(t, ch)
	})
	t.Run("the check fails closed", func(t *testing.T) {
		e := newEnv(t, withDenyOver(1000, errors.New("rules unavailable")))
		ch := e.held(e.ctx, toolRequest("s1", 5000))
		h := e.createdHold("s1")
		_, err := e.m.Modify(e.ctx, h.ID, holds.Decision{Operator: "a"}, transferParams("10"))
		require.ErrorContains(t, err, "rules unavailable")
		requireWaiting(t, ch)
	})
	t.Run("Go callers get a RulesDenyError", func(t *testing.T) {
		e := newEnv(t, withDenyOver(1000, nil))
		ch := e.held(e.ctx, toolRequest("s1", 5000))
		h := e.createdHold("s1")
		_, err := e.m.Modify(e.ctx, h.ID, holds.Decision{Operator: "a"}, transferParams("2000"))
		var deny *holds.RulesDenyError
		require.ErrorAs(t, err, &deny)
		require.Equal(t, "cap", deny.Verdict.RuleID)
		require.True(t, strings.HasSuffix(err.Error(), `send it with "override": true to approve it anyway`), err.Error())
		requireWaiting(t, ch)
	})
}
