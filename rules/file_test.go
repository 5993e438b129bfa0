package rules

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const sampleYAML = `# sample policy
rules:
  - id: external-email
    name: No email outside corp.example
    when: tool == "send_email" && !(string(inputs.to) endsWith "@corp.example")
    action: deny
    message: "Email to {{inputs.to}} is not allowed"
    reasonCode: EXTERNAL_EMAIL
    priority: 100
  - id: big-transfer
    when: |
      tool == "transfer_funds"
        && inputs.amount > 1000
    action: hold
    hold: {timeout: 2m, onTimeout: deny, confirm: true}
    mode: monitor
  - id: redact-cards
    when: len(pii(text)) > 0
    action: modify
    modify: {redact: [pii, secrets, 'ACCT-[0-9]{6}'], set: {note: '"redacted"'}}
    enabled: false
    expiresAt: 2030-01-02T03:04:05Z
tests:
  - name: outside email is denied
    step:
      method: steps/toolCallRequest
      params: {toolCallRequest: {toolId: send_email, inputs: [{name: to, value: eve@evil.example}]}, n: 1.5}
    history:
      - {tool: read_doc, kind: toolCall, text: CONFIDENTIAL, repeat: 2}
    expect: deny
    reasonCode: [EXTERNAL_EMAIL]
    rule: external-email
    now: 2025-05-01T12:00:00Z
`

func TestParseFileYAML(t *testing.T) {
	f, err := ParseFile("policy.yaml", []byte(sampleYAML))
	require.NoError(t, err)
	require.Equal(t, "policy.yaml", f.Name())
	require.Len(t, f.Rules, 3)
	r := f.Rules[0]
	require.Equal(t, "external-email", r.ID)
	require.Equal(t, ActionDeny, r.Action)
	require.Equal(t, ModeEnforce, r.Mode, "mode defaults to enforce")
	require.True(t, r.Enabled, "enabled defaults to true")
	require.Equal(t, 100, r.Priority)
	require.Equal(t, "tool == \"transfer_funds\"\n  && inputs.amount > 1000\n", f.Rules[1].When)
	require.Equal(t, &HoldSpec{Timeout: Duration(2 * time.Minute), OnTimeout: ActionDeny, Confirm: true}, f.Rules[1].Hold)
	require.Equal(t, ModeMonitor, f.Rules[1].Mode)
	require.False(t, f.Rules[2].Enabled)
	require.Equal(t, &ModifySpec{Redact: []string{"pii", "secrets", "ACCT-[0-9]{6}"}, Set: map[string]string{"note": `"redacted"`}}, f.Rules[2].Modify)
	require.Equal(t, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), f.Rules[2].ExpiresAt.UTC())

	require.Len(t, f.Tests, 1)
	tc := f.Tests[0]
	require.Equal(t, "steps/toolCallRequest", tc.Step.Method)
	require.JSONEq(t, `{"toolCallRequest":{"toolId":"send_email","inputs":[{"name":"to","value":"eve@evil.example"}]},"n":1.5}`, string(tc.Step.Params))
	require.Equal(t, []TestHistory{{HistoryStep: HistoryStep{Tool: "read_doc", Kind: "toolCall", Text: "CONFIDENTIAL"}, Repeat: 2}}, tc.History)
	require.Equal(t, ActionDeny, tc.Expect)
	require.Equal(t, []string{"EXTERNAL_EMAIL"}, tc.ReasonCode)
	require.Equal(t, "external-email", tc.Rule)
	require.Equal(t, 24, tc.Line)

	_, err = CompileFile(f, Options{})
	require.NoError(t, err)
}

func TestFileRoundTrip(t *testing.T) {
	f, err := ParseFile("policy.yaml", []byte(sampleYAML))
	require.NoError(t, err)
	f.Rules[0].Version = 3
	f.Rules[0].UpdatedAt = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, format := range []string{"yaml", "json"} {
		t.Run(format, func(t *testing.T) {
			b, err := MarshalFile(f, format)
			require.NoError(t, err)
			back, err := ParseFile("policy."+format, b)
			require.NoError(t, err, string(b))
			require.Equal(t, f.Rules, back.Rules)
			require.Len(t, back.Tests, 1)
			require.JSONEq(t, string(f.Tests[0].Step.Params), string(back.Tests[0].Step.Params))
			a, b2 := f.Tests[0], back.Tests[0]
			a.Step.Params, b2.Step.Params, a.Line, b2.Line = nil, nil, 0, 0
			require.Equal(t, a, b2)
			// And once more: the output is stable.
			again, err := MarshalFile(back, format)
			require.NoError(t, err)
			require.Equal(t, string(b), string(again))
		})
	}
	b, err := MarshalFile(f, "yaml")
	require.NoError(t, err)
	require.NotContains(t, string(b), "enabled: true", "defaults stay out of files")
	require.Contains(t, string(b), "enabled: false")
	require.Contains(t, string(b), "timeout: 2m\n")
	_, err = MarshalFile(f, "toml")
	require.Error(t, err)
}

func TestRuleJSONDefaults(t *testing.T) {
	var r Rule
	require.NoError(t, json.Unmarshal([]byte(`{"id":"a","when":"true","action":"deny","hold":{"timeout":"90s","onTimeout":"allow"}}`), &r))
	require.True(t, r.Enabled)
	require.Equal(t, ModeEnforce, r.Mode)
	require.Equal(t, Duration(90*time.Second), r.Hold.Timeout)
	require.NoError(t, json.Unmarshal([]byte(`{"id":"a","enabled":false,"mode":"off"}`), &r))
	require.False(t, r.Enabled)
	require.Equal(t, ModeOff, r.Mode)
	b, err := json.Marshal(Rule{ID: "a", When: "true", Action: ActionDeny, Enabled: true})
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"a","when":"true","action":"deny","priority":0,"mode":"enforce","enabled":true}`, string(b))
}

func TestParseFileErrors(t *testing.T) {
	cases := []struct {
		name, file, data string
		line, col        int
		contains         string
	}{
		{"unknown rule field", "p.yaml", "rules:\n  - id: a\n    whne: true\n", 3, 5, `unknown field "whne" in rule`},
		{"unknown top-level field", "p.yaml", "rule:\n  - id: a\n", 1, 1, `unknown field "rule"`},
		{"unknown hold field", "p.yaml", "rules:\n  - id: a\n    hold: {timeout: 1m, onTimout: deny}\n", 3, 25, `unknown field "onTimout" in hold`},
		{"unknown modify field", "p.yaml", "rules:\n  - id: a\n    modify:\n      redacted: [pii]\n", 4, 7, `unknown field "redacted"`},
		{"unknown test field", "p.yaml", "tests:\n  - name: a\n    expected: deny\n", 3, 5, `unknown field "expected" in test`},
		{"unknown step field", "p.yaml", "tests:\n  - step: {methd: x}\n", 2, 12, `unknown field "methd" in step`},
		{"unknown history field", "p.yaml", "tests:\n  - history: [{tol: x}]\n", 2, 16, `unknown field "tol" in history step`},
		{"rules not a list", "p.yaml", "rules: {id: a}\n", 1, 8, "rules must be a list"},
		{"rule not a mapping", "p.yaml", "rules:\n  - just text\n", 2, 5, "a rule must be a mapping"},
		{"not a mapping", "p.yaml", "- a\n- b\n", 1, 1, "a rules file is a mapping"},
		{"yaml syntax", "p.yaml", "rules:\n  - id: a\n    when: \"unclosed\n", 3, 0, "found unexpected end of stream"},
		{"bad duration", "p.yaml", "rules:\n  - id: a\n    hold: {timeout: soon}\n", 3, 0, "invalid duration"},
		{"wrong type", "p.yaml", "rules:\n  - id: a\n    priority: high\n", 3, 0, "cannot unmarshal"},
		{"json syntax", "p.json", "{\n  \"rules\": [\n    {\"id\": \"a\",}\n  ]\n}", 3, 16, "invalid character"},
		{"json unknown field", "p.json", "{\"rules\": [{\"id\": \"a\", \"whn\": \"true\"}]}", 1, 24, `unknown field "whn"`},
		// yaml.Unmarshal reads the first document only: the second one's rules (and its
		// errors) would be dropped without a word.
		{"second document", "p.yaml", "rules:\n  - id: a\n    when: tool == \"x\"\n    action: deny\n---\nrules: [{id: b, when: nope, action: deny}]\n",
			5, 1, "a second YAML document starts here, but a rules file is one document"},
		{"second document after empty ones", "p.yaml", "---\n# draft\n---\nrules: []\n---\ntests: []\n", 5, 1, "a second YAML document starts here"},
		{"second document of tests only", "p.yaml", "rules: []\n--- # tests\ntests: [{name: t}]\n", 2, 1, "a second YAML document starts here"},
		{"second document is null", "p.yaml", "rules: []\n---\nnull\n", 2, 1, "a second YAML document starts here"},
		{"syntax error in a later document", "p.yaml", "rules: []\n---\nrules: [\n", 3, 0, "did not find expected node content"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFile(tc.file, []byte(tc.data))
			require.Error(t, err)
			var fe *FileError
			require.True(t, errors.As(err, &fe), "%T %v", err, err)
			require.Equal(t, tc.file, fe.File)
			require.Equal(t, tc.line, fe.Line, err.Error())
			if tc.col > 0 {
				require.Equal(t, tc.col, fe.Column, err.Error())
			}
			require.Contains(t, err.Error(), tc.contains)
		})
	}
	f, err := ParseFile("anchors.yaml", []byte("x-ctx: &ctx {a: 1}\ntests:\n  - name: t\n    step: {method: m, params: {context: *ctx, <<: *ctx}}\n    expect: allow\n"))
	require.NoError(t, err)
	require.JSONEq(t, `{"context":{"a":1},"a":1}`, string(f.Tests[0].Step.Params))
	f, err = ParseFile("empty.yaml", []byte("# nothing yet\n"))
	require.NoError(t, err)
	require.Empty(t, f.Rules)
	f, err = ParseFile("null.yaml", []byte("rules:\ntests:\n"))
	require.NoError(t, err)
	require.Empty(t, f.Rules)
}

// TestParseFileEmptyDocuments: documents with nothing in them (a bare `---` before or after
// the rules, as editors and concatenation leave) hold no rules to lose, so they are skipped.
func TestParseFileEmptyDocuments(t *testing.T) {
	const doc = "rules:\n  - id: a\n    when: nope\n    action: deny\n"
	for name, data := range map[string]string{
		"leading ---":             "---\n" + doc,
		"trailing ---":            doc + "---\n",
		"trailing --- no newline": doc + "---",
		"comment after ---":       doc + "---\n# more rules later\n",
		"empty documents around":  "---\n---\n" + doc + "---\n---\n",
		"document end marker":     doc + "...\n",
	} {
		t.Run(name, func(t *testing.T) {
			f, err := ParseFile("p.yaml", []byte(data))
			require.NoError(t, err)
			require.Len(t, f.Rules, 1)
			// Positions still point into the file, past the empty documents.
			_, err = CompileFile(f, Options{})
			var ce CompileErrors
			require.ErrorAs(t, err, &ce)
			require.Equal(t, strings.Count(data[:strings.Index(data, "nope")], "\n")+1, ce[0].FileLine)
		})
	}
	f, err := ParseFile("p.yaml", []byte("---\n"))
	require.NoError(t, err)
	require.Empty(t, f.Rules)
}

func TestCompileFilePositions(t *testing.T) {
	data := `rules:
  - id: plain
    when: tool == "x" && toool == "y"
    action: deny
  - id: quoted
    when: "tool == 'x' && toool"
    action: deny
  - id: literal
    when: |
      tool == "x"
        && toool
    action: deny
  - id: folded
    when: >
      tool == "x"
      && toool
    action: deny
  - id: message
    when: "true"
    action: deny
    message: "hi {{ inputs.to + }}"
  - id: set
    when: "true"
    action: modify
    modify:
      set:
        to: inputs.to +
  - id: action
    when: "true"
    action: block
`
	f, err := ParseFile("p.yaml", []byte(data))
	require.NoError(t, err)
	_, err = CompileFile(f, Options{})
	var ce CompileErrors
	require.True(t, errors.As(err, &ce), "%v", err)
	got := map[string][2]int{}
	for _, d := range ce {
		require.Equal(t, "p.yaml", d.File)
		got[d.RuleID] = [2]int{d.FileLine, d.FileColumn}
	}
	require.Equal(t, map[string][2]int{
		"plain":   {3, 26},
		"quoted":  {6, 27},
		"literal": {11, 12},
		"folded":  {16, 10},
		"message": {21, 32},
		"set":     {27, 23},
		"action":  {30, 13},
	}, got, "%v", ce)
	require.Contains(t, ce[0].String(), "p.yaml:3:26: rule plain: when: unknown name toool (1:16)")

	// JSON files get positions too.
	js := "{\n  \"rules\": [\n    {\"id\": \"j\", \"when\": \"tool == 1\", \"action\": \"deny\"}\n  ]\n}\n"
	f, err = ParseFile("p.json", []byte(js))
	require.NoError(t, err)
	_, err = CompileFile(f, Options{})
	require.True(t, errors.As(err, &ce))
	require.Equal(t, 3, ce[0].FileLine)
	require.Equal(t, 31, ce[0].FileColumn)
}
