package aap_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap"
	"github.com/vigil-guardian/vigil/rules"
)

func TestRulesMayWithhold(t *testing.T) {
	past := time.Now().Add(-time.Hour)
	cases := []struct {
		name string
		rule rules.Rule
		want bool
	}{
		{"any text rule", rules.Rule{When: `text contains "sk-"`, Action: rules.ActionModify, Modify: &rules.ModifySpec{Redact: []string{"secrets"}}}, true},
		{"agent messages", rules.Rule{When: `kind == "message" && role == "agent" && len(secrets(text)) > 0`, Action: rules.ActionDeny}, true},
		{"tool calls only", rules.Rule{When: `kind == "toolCall" && tool == "delete_file"`, Action: rules.ActionDeny}, false},
		{"one tool", rules.Rule{When: `tool == "delete_file"`, Action: rules.ActionHold}, false},
		{"user messages", rules.Rule{When: `role == "user" && text contains "rm"`, Action: rules.ActionDeny}, false},
		{"not agents", rules.Rule{When: `role != "agent"`, Action: rules.ActionDeny}, false},
		{"methods", rules.Rule{When: `method in ["steps/toolCallRequest", "steps/toolCallResult"]`, Action: rules.ActionDeny}, false},
		{"methods with message", rules.Rule{When: `method in ["steps/message"]`, Action: rules.ActionDeny}, true},
		{"allow", rules.Rule{When: `true`, Action: rules.ActionAllow}, false},
		{"monitor", rules.Rule{When: `true`, Action: rules.ActionDeny, Mode: rules.ModeMonitor}, false},
		{"disabled", rules.Rule{When: `true`, Action: rules.ActionDeny, Enabled: false}, false},
		{"expired", rules.Rule{When: `true`, Action: rules.ActionDeny, ExpiresAt: &past}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.rule
			r.ID = "r1"
			if c.name != "disabled" {
				r.Enabled = true
			}
			e := rules.NewEngine(rules.Options{})
			require.NoError(t, e.Load([]rules.Rule{r}))
			require.Equal(t, c.want, aap.RulesMayWithhold(e, nil)())
		})
	}
	t.Run("default deny", func(t *testing.T) {
		e := rules.NewEngine(rules.Options{DefaultDecision: rules.ActionDeny})
		require.True(t, aap.RulesMayWithhold(e, nil)())
	})
	t.Run("reload is seen", func(t *testing.T) {
		e := rules.NewEngine(rules.Options{})
		may := aap.RulesMayWithhold(e, nil)
		require.False(t, may())
		require.NoError(t, e.Load([]rules.Rule{{ID: "r", When: `text contains "x"`, Action: rules.ActionDeny, Enabled: true}}))
		require.True(t, may())
	})
}
