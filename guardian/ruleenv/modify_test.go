package ruleenv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/rules"
)

// A credential or an address is redacted wherever it is in the agent's data: as a value,
// as an object's key, and under keys ("name", "id") that are structure elsewhere in the
// request. The protocol's own structure and the step context stay as they are.
func TestRedactionReachesAllOfTheContent(t *testing.T) {
	prog, err := rules.Compile([]rules.Rule{{
		ID: "r", When: `true`, Action: rules.ActionModify, Enabled: true,
		Modify: &rules.ModifySpec{Redact: []string{"secrets", "pii", `ACCT-[0-9]+`}},
	}}, rules.Options{})
	require.NoError(t, err)
	modified := func(t *testing.T, method, params string) *aos.Step {
		t.Helper()
		step := parse(t, method, params)
		raw, err := ModifiedRequest(step, prog.Evaluate(Build(step, History{}, time.Time{})).Modify)
		require.NoError(t, err)
		mod, aerr := aos.ParseStep(raw)
		require.Nil(t, aerr, string(raw))
		return mod
	}

	t.Run("tool input values", func(t *testing.T) {
		mod := modified(t, aos.MethodToolCallRequest, `{"context": `+context+`,
		  "toolCallRequest": {"executionId": "e1", "toolId": "upload", "inputs": [
		    {"name": "meta", "value": {"AKIAIOSFODNN7EXAMPLE": "x", "AKIAI44QH8DHBEXAMPLE": "y", "owner": "bob@corp.example",
		      "name": "alice@corp.example", "id": "AKIAIOSFODNN7EXAMPLE", "ACCT-1234": "kept as a key"}},
		    {"name": "note", "value": "ACCT-99 for bob@corp.example"}]}}`)
		require.Equal(t, map[string]any{
			"meta": map[string]any{
				"[REDACTED:awsAccessKey]":    "y", // AKIAI44… comes first in key order
				"[REDACTED:awsAccessKey] #2": "x",
				"owner":                      "[REDACTED:email]",
				"name":                       "[REDACTED:email]",
				"id":                         "[REDACTED:awsAccessKey]",
				"ACCT-1234":                  "kept as a key",
			},
			"note": "[REDACTED] for [REDACTED:email]",
		}, mod.Inputs(), "a pattern of the rule's own redacts values, not keys")
		require.Equal(t, "upload", mod.ToolCall.ToolCallRequest.ToolID)
		require.Equal(t, "alex@corp.example", mod.Context.User.Email, "the step context is not content")
	})
	t.Run("MCP arguments", func(t *testing.T) {
		mod := modified(t, aos.MethodMCP, `{"message": {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
		  "params": {"name": "send", "arguments": {"name": "bob@corp.example", "type": "AKIAIOSFODNN7EXAMPLE",
		    "headers": {"bob@corp.example": "cc"}}}}}`)
		require.Equal(t, map[string]any{
			"name": "[REDACTED:email]", "type": "[REDACTED:awsAccessKey]",
			"headers": map[string]any{"[REDACTED:email]": "cc"},
		}, mod.Inputs())
		require.Equal(t, "send", mod.MCP.ToolName, "the tool's name is structure")
	})
}
