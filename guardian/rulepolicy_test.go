package guardian_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/rules"
)

func TestRulesPolicyEndToEnd(t *testing.T) {
	engine := rules.NewEngine(rules.Options{})
	require.NoError(t, engine.Load([]rules.Rule{
		{ID: "no-transfer", When: `tool == "transfer_funds" && inputs.amount > 1000`, Action: rules.ActionDeny,
			Message: "Transfers of {{inputs.amount}} need approval.", ReasonCode: "BIG_TRANSFER", Enabled: true},
		{ID: "redact-email", When: `len(pii(text)) > 0`, Action: rules.ActionModify, Enabled: true,
			Modify: &rules.ModifySpec{Redact: []string{"pii"}}},
		{ID: "cap-limit", When: `tool == "search"`, Action: rules.ActionModify, Enabled: true,
			Modify: &rules.ModifySpec{Set: map[string]string{"limit": "10"}}},
		{ID: "watch-loops", When: `session.stepCount >= 1`, Action: rules.ActionDeny, Mode: rules.ModeMonitor, Enabled: true},
	}))
	e := newEnv(t, "", guardian.Options{Policy: &guardian.RulesPolicy{Engine: engine}}, guardian.Config{})

	tool := func(id, inputs string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":{"context":` + stepCtx("sess-rules", "s-"+id) +
			`,"toolCallRequest":{"executionId":"x","toolId":"` + id + `","inputs":` + inputs + `}}}`
	}

	_, b := e.post(tool("transfer_funds", `[{"name":"amount","value":5000}]`))
	r := decode(t, b)
	require.Equal(t, aos.Deny, r.Result.Decision)
	require.Equal(t, "Transfers of 5000 need approval.", r.Result.Message)
	require.Equal(t, []string{"BIG_TRANSFER"}, r.Result.ReasonCode)

	_, b = e.post(tool("send_note", `[{"name":"body","value":"mail dana@corp.example today"}]`))
	r = decode(t, b)
	require.Equal(t, aos.Modify, r.Result.Decision, string(b))
	step, perr := aos.ParseStep(r.Result.ModifiedRequest)
	require.Nil(t, perr)
	require.Equal(t, "[REDACTED:email]", step.Inputs()["body"].(string)[5:21])
	require.Equal(t, "agent-1", step.Context.Agent.ID, "the context is untouched")

	_, b = e.post(tool("search", `[{"name":"q","value":"invoices"}]`))
	r = decode(t, b)
	require.Equal(t, aos.Modify, r.Result.Decision, string(b))
	var mr struct {
		Params struct {
			ToolCallRequest struct {
				Inputs []map[string]any `json:"inputs"`
			} `json:"toolCallRequest"`
		} `json:"params"`
	}
	require.NoError(t, json.Unmarshal(r.Result.ModifiedRequest, &mr))
	require.Equal(t, []map[string]any{{"name": "q", "value": "invoices"}, {"name": "limit", "value": float64(10)}}, mr.Params.ToolCallRequest.Inputs)

	// Monitor-mode matches are recorded with the step but change nothing.
	_, b = e.post(tool("lookup", `[]`))
	require.Equal(t, aos.Allow, decode(t, b).Result.Decision)
	var steps struct {
		Steps []struct {
			MatchedRules []struct{ RuleID, Mode string } `json:"matchedRules"`
		} `json:"steps"`
	}
	e.get("/api/sessions/sess-rules/steps", &steps)
	require.Len(t, steps.Steps, 4)
	last := steps.Steps[3].MatchedRules
	require.Len(t, last, 1)
	require.Equal(t, "watch-loops", last[0].RuleID)
	require.Equal(t, "monitor", last[0].Mode)
}
