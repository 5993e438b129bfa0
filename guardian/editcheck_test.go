package guardian_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// fakeHistory is a session's stored steps for the edit check.
type fakeHistory []record.StepRecord

func (f fakeHistory) SessionStepsBefore(context.Context, string, int64, int) ([]record.StepRecord, error) {
	return f, nil
}

// The edit check judges an operator's params with the live rules, as a step of the held
// step's session: its verdict names the deny rule, and rules on the session's history see
// the stored steps.
func TestEditCheckerJudgesTheEditWithTheLiveRules(t *testing.T) {
	engine := rules.NewEngine(rules.Options{})
	require.NoError(t, engine.Load([]rules.Rule{
		{ID: "big-transfer", When: `tool == "transfer_funds" && inputs.amount > 1000`, Action: rules.ActionHold, Enabled: true},
		{ID: "cap", When: `tool == "transfer_funds" && inputs.amount > 10000`, Action: rules.ActionDeny, Priority: 10,
			Message: "Transfers of {{inputs.amount}} are never allowed", ReasonCode: "CAP", Enabled: true},
		{ID: "third-transfer", When: `tool == "transfer_funds" && session.stepCount >= 2`, Action: rules.ActionDeny, Priority: 5, Enabled: true},
	}))
	params := func(amount string) json.RawMessage {
		return json.RawMessage(`{"context":` + stepCtx("sess-edit", "s-1") +
			`,"toolCallRequest":{"executionId":"x","toolId":"transfer_funds","inputs":[{"name":"amount","value":` + amount + `}]}}`)
	}
	tests := []struct {
		name    string
		amount  string
		history fakeHistory
		want    string
		rule    string
		message string
	}{
		{name: "small edit allowed", amount: "900", want: "allow"},
		{name: "still held", amount: "5000", want: "hold", rule: "big-transfer"},
		{name: "denied edit", amount: "50000", want: "deny", rule: "cap", message: "Transfers of 50000 are never allowed"},
		{name: "denied by history", amount: "900", history: fakeHistory{{Seq: 1, SessionID: "sess-edit"}, {Seq: 2, SessionID: "sess-edit"}},
			want: "deny", rule: "third-transfer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := guardian.EditChecker{Policy: &guardian.RulesPolicy{Engine: engine}, Store: tc.history, HistorySize: 200}
			v, err := c.Check(context.Background(), "sess-edit", "steps/toolCallRequest", params(tc.amount))
			require.NoError(t, err)
			require.Equal(t, tc.want, v.Decision)
			require.Equal(t, tc.rule, v.RuleID)
			if tc.message != "" {
				require.Equal(t, tc.message, v.Message)
				require.Contains(t, v.ReasonCodes, "CAP")
			}
		})
	}

	_, err := guardian.EditChecker{Policy: &guardian.RulesPolicy{Engine: engine}}.Check(context.Background(), "s", "steps/toolCallRequest", json.RawMessage(`{"toolCallRequest":{}}`))
	require.Error(t, err, "params that do not parse as a step are not judged")
}
