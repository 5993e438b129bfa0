package rules

import "testing"

// The examples of the README's environment and helper tables compile and run.
func TestDocumentedExamples(t *testing.T) {
	for _, src := range []string{
		`method == "steps/toolCallRequest"`,
		`agent.model startsWith "gpt-4"`,
		`user.org == "contractors"`,
		`session.id startsWith "test-"`,
		`session.stepCount >= 500`,
		`any(session.steps, .decision == "deny")`,
		`last(session.steps).tool == "read_doc"`,
		`stepId == "step-1"`,
		`role == "agent"`,
		`tool == "send_email"`,
		`toolDef?.type == "api_request"`,
		`tool == "transfer_funds" && inputs.amount > 1000`,
		`kind == "toolResult" && isError`,
		`mcp.method == "tools/call"`,
		`a2a.to == "Payments Agent"`,
		`kind == "knowledge" && params.knowledgeStep.query contains "salary"`,
		`now.Hour() >= 22`,
		`len(pii(text)) > 0`,
		`"creditCard" in piiKinds(text)`,
		`all(emails(text), # endsWith "@corp.example")`,
		`len(secrets(text)) > 0`,
		`"privateKey" in secretKinds(text)`,
		`any(urls(text), domain(#) == "pastebin.com")`,
		`domain(inputs.to) != "corp.example"`,
		`glob("/etc/**", inputs.path)`,
		`text matches "(?i)ignore (all )?previous instructions"`,
		`regexMatch(inputs.cmd, "rm\\s+-rf")`,
		`regexFind(text, "ACCT-[0-9]{6}")`,
		`icontains(text, "confidential")`,
		`containsAny(text, ["you are now", "new instructions:"])`,
		`countTool(session, "transfer_funds") >= 5`,
		`countToolWithin(session, tool, duration("1m")) >= 30`,
		`toolStreak(session, tool) >= 9`,
		`lastTool(session) == "read_doc"`,
		`countDecision(session, "deny") > 3`,
		`sessionHas(session, "read_doc", "confidential")`,
		`sessionText(session) contains "CONFIDENTIAL"`,
	} {
		if _, err := run(t, src, historyEnv()); err != nil {
			t.Errorf("%s: %v", src, err)
		}
	}
}
