package rules

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeBuild is a stand-in for the guardian's step decoder: params carry tool, text and
// inputs directly.
func fakeBuild(method string, params json.RawMessage) (*Env, error) {
	var p struct {
		Tool   string         `json:"tool"`
		Text   string         `json:"text"`
		Inputs map[string]any `json:"inputs"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	if method == "" {
		return nil, errors.New("method is required")
	}
	return &Env{Method: method, Kind: "toolCall", Tool: p.Tool, Text: p.Text, Inputs: p.Inputs,
		Session: Session{ID: "s"}}, nil
}

const testsYAML = `rules:
  - id: sixth-transfer
    when: tool == "transfer_funds" && countTool(session, "transfer_funds") >= 5
    action: hold
    reasonCode: VELOCITY
  - id: confidential-email
    when: tool == "send_email" && domain(inputs.to) != "corp.example" && sessionHas(session, "read_doc", "confidential")
    action: deny
    reasonCode: EXFILTRATION
  - id: failing
    when: tool == "boom" && inputs.n > 1
    action: deny
  - id: late
    when: tool == "late" && now.Hour() >= 18
    action: deny
tests:
  - name: fifth transfer passes
    step: {method: steps/toolCallRequest, params: {tool: transfer_funds}}
    history: [{tool: transfer_funds, kind: toolCall, repeat: 4}]
    expect: allow
  - name: sixth transfer is held
    step: {method: steps/toolCallRequest, params: {tool: transfer_funds}}
    history: [{tool: transfer_funds, kind: toolCall, repeat: 5}]
    expect: hold
    reasonCode: [VELOCITY]
    rule: sixth-transfer
  - name: email after confidential read
    step: {method: steps/toolCallRequest, params: {tool: send_email, inputs: {to: eve@evil.example}}}
    history:
      - {tool: read_doc, kind: toolCall, text: plan.docx}
      - {tool: read_doc, kind: toolResult, text: "CONFIDENTIAL - do not share"}
    expect: deny
    reasonCode: [EXFILTRATION]
  - name: wrong expectation
    step: {method: steps/toolCallRequest, params: {tool: send_email, inputs: {to: eve@evil.example}}}
    expect: deny
  - step: {method: steps/toolCallRequest, params: {tool: transfer_funds}}
    history: [{tool: transfer_funds, repeat: 5}]
    expect: hold
    reasonCode: [OTHER]
    rule: someone-else
  - name: undecodable step
    step: {method: "", params: {}}
    expect: allow
  - name: rule error is a failure even when the decision matches
    step: {method: m, params: {tool: boom, inputs: {n: x}}}
    expect: deny
  - name: bad expectation
    step: {method: m, params: {}}
    expect: block
  - name: evening
    step: {method: m, params: {tool: late}}
    now: 2025-05-01T19:00:00Z
    expect: deny
`

func TestRunTests(t *testing.T) {
	f, err := ParseFile("tests.yaml", []byte(testsYAML))
	require.NoError(t, err)
	p, err := CompileFile(f, Options{})
	require.NoError(t, err)
	res := RunTests(f, p, fakeBuild)
	require.Len(t, res, 9)

	passed := map[string]bool{}
	for _, r := range res {
		passed[r.Name] = r.Passed
	}
	require.Equal(t, map[string]bool{
		"fifth transfer passes":         true,
		"sixth transfer is held":        true,
		"email after confidential read": true,
		"wrong expectation":             false,
		"test #5":                       false,
		"undecodable step":              false,
		"rule error is a failure even when the decision matches": false,
		"bad expectation": false,
		"evening":         true,
	}, passed)

	require.Equal(t, ActionHold, res[1].Got)
	require.Equal(t, 21, res[1].Line)
	require.Equal(t, TestResult{Name: "wrong expectation", Want: ActionDeny, Got: ActionAllow, Line: 34,
		Message: res[3].Message}, res[3])
	require.Contains(t, res[3].Message, "want deny, got allow")
	require.Contains(t, res[4].Message, "reason code OTHER missing")
	require.Contains(t, res[4].Message, "want deciding rule someone-else")
	require.Contains(t, res[5].Message, "step does not decode: method is required")
	require.Contains(t, res[6].Message, "rule failing failed")
	require.Contains(t, res[7].Message, `expect "block"`)
}
