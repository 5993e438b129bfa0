package guardian_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// An empty context.session.id is refused, whatever else could name a session: read as
// absent, it split one agent's steps into a session per step kind ("toolCall@127.0.0.1",
// "memoryStore@127.0.0.1") and refused a second agent from sessions it never named.
func TestEmptySessionIDIsRefused(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{})
	withSession := func(i int) string { return sessionSteps("")[i] }
	tests := []struct {
		name    string
		body    string
		headers []string
	}{
		{"tool call", withSession(4), nil},
		{"memory store", withSession(6), nil},
		{"another agent's tool call", strings.Replace(withSession(4), `"id":"agent-1"`, `"id":"agent-2"`, 1), nil},
		{"with X-Vigil-Session", withSession(4), []string{"X-Vigil-Session", "from-header"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := e.post(tt.body, tt.headers...)
			require.Equal(t, http.StatusOK, status)
			requireFieldError(t, b, "params.context.session.id", "must not be empty")
			require.Contains(t, decode(t, b).Error.Message, "invalid params: params.context.session.id: ")
		})
	}
	// A notification gets no answer, and is not stored either.
	status, b := e.post(strings.Replace(withSession(4), `"id":5,`, "", 1))
	require.Equal(t, http.StatusNoContent, status, string(b))
	require.Zero(t, e.sessionCount(), "nothing was stored under another name")
}

// Ids are echoed byte for byte, HTML characters included, on every answer path: a ping, an
// allowed, modified or refused step, an error and a batch; the stored answer too.
func TestIDsAreEchoedByteForByte(t *testing.T) {
	const id = `"<&> \u003c caf` + "\u00e9 \u2028" + `"`
	withID := func(body string) string {
		before, after, ok := strings.Cut(body, `"id":`)
		require.True(t, ok)
		_, rest, _ := strings.Cut(after, ",")
		return before + `"id":` + id + "," + rest
	}
	step := withID(sessionSteps("sess-ids")[4])
	modified := json.RawMessage(`{"context":` + stepCtx("sess-ids", "s5") + `,"toolCallRequest":{"executionId":"x1","toolId":"lookup_invoice","inputs":[{"name":"customer","value":"<redacted>"}]}}`)
	tests := []struct {
		name    string
		verdict guardian.Verdict
		body    string
		ids     int // how often the id appears in the answer
	}{
		{"ping", guardian.Verdict{Decision: "allow"}, withID(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), 1},
		{"allow", guardian.Verdict{Decision: "allow", RuleID: "ok"}, step, 1},
		{"deny with data", guardian.Verdict{Decision: "deny", RuleID: "no"}, step, 1},
		{"modify", guardian.Verdict{Decision: "modify", RuleID: "redact", ModifiedParams: modified}, step, 2},
		{"unknown method", guardian.Verdict{}, withID(`{"jsonrpc":"2.0","id":1,"method":"steps/knowledge","params":{}}`), 1},
		{"invalid params", guardian.Verdict{}, withID(`{"jsonrpc":"2.0","id":1,"method":"steps/message","params":{}}`), 1},
		{"batch", guardian.Verdict{Decision: "allow"}, "[" + withID(`{"jsonrpc":"2.0","id":1,"method":"ping"}`) + "," + step + "]", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "", guardian.Options{Policy: &fixedPolicy{v: tt.verdict}}, guardian.Config{})
			status, b := e.post(tt.body)
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, tt.ids, strings.Count(string(b), `"id":`+id), string(b))
			require.NotContains(t, string(b), `\u0026`, string(b))
			require.True(t, json.Valid(b), string(b))
			if tt.body != step {
				return
			}
			var steps struct {
				Steps []record.StepRecord `json:"steps"`
			}
			e.get("/api/sessions/sess-ids/steps", &steps)
			require.Len(t, steps.Steps, 1)
			stored, err := e.db.Step(context.Background(), steps.Steps[0].Seq)
			require.NoError(t, err)
			require.Equal(t, string(b), string(stored.Response), "the stored answer is the one sent")
		})
	}
}

// A step a remembered approval lets through names that approval as what decided: its
// reason code first, its rule id, reasoning that says so; and the stored step agrees.
func TestRememberedApprovalIsTheDecidingRule(t *testing.T) {
	hold := rules.Rule{ID: "hold-transfer", When: `tool == "send_email"`, Action: rules.ActionHold,
		Enabled: true, Hold: &rules.HoldSpec{Timeout: rules.Duration(time.Minute), OnTimeout: rules.ActionDeny}}
	he := newHoldEnv(t, []rules.Rule{hold})
	ch := he.send(emailStep("sess-rem", "s1", "hello"))
	_, err := he.m.Approve(context.Background(), he.nextHold(), holds.Decision{Operator: "dana",
		Remember: &holds.RememberSpec{Scope: holds.ScopeTool}})
	require.NoError(t, err)
	require.Equal(t, aos.Allow, answer(t, ch).Result.Decision)

	_, b := he.post(emailStep("sess-rem", "s2", "hello again"))
	r := decode(t, b)
	require.Equal(t, aos.Allow, r.Result.Decision, string(b))
	ruleID, _ := r.Result.Data["ruleId"].(string)
	require.True(t, holds.IsRemembered(ruleID), string(b))
	require.Equal(t, []string{holds.RememberReasonCode, "hold-transfer"}, r.Result.ReasonCode,
		"the deciding rule's code first, then the other enforced match's")
	require.True(t, strings.HasPrefix(r.Result.Reasoning, "rule "+ruleID+" decided allow"), r.Result.Reasoning)
	require.Contains(t, r.Result.Reasoning, "rule hold-transfer decided hold", "what the rules alone decided stays")

	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	he.get("/api/sessions/sess-rem/steps", &steps)
	require.Len(t, steps.Steps, 2)
	i := slices.IndexFunc(steps.Steps, func(s record.StepRecord) bool { return s.StepID == "s2" })
	require.GreaterOrEqual(t, i, 0)
	require.False(t, steps.Steps[i].Held)
	require.Equal(t, string(b), string(steps.Steps[i].Response), "the stored step says what the agent was told")
}

// Live rules see the session's newest rules.DefaultMaxHistory earlier steps, the window
// `vigil rules test` and rules.Compile use: a rule counting 300 earlier calls denies the
// 301st (with a window of 200 it never would).
func TestLiveRulesSeeTheTestWindow(t *testing.T) {
	engine := rules.NewEngine(rules.Options{})
	require.NoError(t, engine.Load([]rules.Rule{{ID: "read-flood", When: `countTool(session, "read_doc") >= 300`,
		Action: rules.ActionDeny, Enabled: true}}))
	e := newEnv(t, "", guardian.Options{Policy: &guardian.RulesPolicy{Engine: engine}},
		guardian.Config{HistorySize: rules.DefaultMaxHistory})
	for i := range 301 {
		body := `{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":{"context":` + stepCtx("sess-flood", fmt.Sprint("s", i)) +
			`,"toolCallRequest":{"executionId":"x","toolId":"read_doc","inputs":[]}}}`
		_, b := e.post(body)
		want := aos.Allow
		if i == 300 {
			want = aos.Deny
		}
		require.Equal(t, want, decode(t, b).Result.Decision, "call %d: %s", i+1, b)
	}
}
