package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// run compiles src as a value expression and evaluates it the way Evaluate does (with the
// per-evaluation state), returning its value.
func run(t *testing.T, src string, env *Env) (any, error) {
	t.Helper()
	prog, diags := compileExpr(src, "when", false, helperOptions(&regexCache{}))
	require.Empty(t, diags, src)
	st := &evalState{memo: map[memoKey]memoEntry{}}
	e := *env
	e.state = st
	return st.vm.Run(prog, &e)
}

var t0 = time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

func historyEnv() *Env {
	return &Env{
		Method: "steps/toolCallRequest", Kind: "toolCall", Tool: "send_email",
		Text:   "Hi bob@outside.example, card 4111 1111 1111 1111, key AKIAIOSFODNN7EXAMPLE, see https://docs.example/a?b=1.",
		Inputs: map[string]any{"to": "bob@outside.example", "count": 3, "list": []any{"a", "b"}},
		Now:    t0,
		Session: Session{ID: "s1", StepCount: 7, Steps: []HistoryStep{
			{Method: "steps/message", Kind: "message", Decision: "allow", Text: "please summarise the plan", ReceivedAt: t0.Add(-10 * time.Minute)},
			{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: "read_doc", Decision: "allow", Text: "plan.docx", ReceivedAt: t0.Add(-9 * time.Minute)},
			{Method: "steps/toolCallResult", Kind: "toolResult", Tool: "read_doc", Decision: "allow", Text: "CONFIDENTIAL: Q3 plan", ReceivedAt: t0.Add(-8 * time.Minute)},
			{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: "transfer_funds", Decision: "allow", ReceivedAt: t0.Add(-3 * time.Minute)},
			{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: "transfer_funds", Decision: "deny", ReceivedAt: t0.Add(-2 * time.Minute)},
			{Method: "steps/message", Kind: "message", Decision: "allow", Text: "retrying", ReceivedAt: t0.Add(-90 * time.Second)},
			{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: "transfer_funds", Decision: "allow", ReceivedAt: t0.Add(-30 * time.Second)},
		}},
	}
}

func TestHelpers(t *testing.T) {
	cases := []struct {
		expr string
		want any
	}{
		{`pii(text)`, []string{"bob@outside.example", "4111 1111 1111 1111"}},
		{`piiKinds(text)`, []string{"email", "creditCard"}},
		{`emails(text)`, []string{"bob@outside.example"}},
		{`emails("nobody here")`, []string{}},
		{`pii(inputs.count)`, []string{}},
		{`pii(inputs.missing)`, []string{}},
		{`secrets(text)`, []string{"AKIAIOSFODNN7EXAMPLE"}},
		{`secretKinds(text)`, []string{"awsAccessKey"}},
		{`urls(text)`, []string{"https://docs.example/a?b=1"}},
		{`map(urls(text), domain(#))`, []any{"docs.example"}},
		{`domain(inputs.to)`, "outside.example"},
		{`domain(inputs.to) endsWith "corp.example"`, false},
		{`glob("send_*", tool)`, true},
		{`glob("/etc/**", "/etc/ssh/x")`, true},
		{`regexMatch(text, "AKIA[0-9A-Z]{16}")`, true},
		{`text matches "(?i)hi BOB"`, true},
		{`text matches inputs.to`, true},
		{`regexFind("a1 b22 c333", "[0-9]+")`, []string{"1", "22", "333"}},
		{`regexFind("abc", "[0-9]+")`, []string{}},
		{`icontains(text, "CONFIDENTIAL")`, false},
		{`icontains(text, "HI BOB")`, true},
		{`containsAny(text, ["nope", "CARD"])`, true},
		{`containsAny(text, ["nope", ""])`, false},
		{`containsAny("x y", inputs.list)`, false},
		{`containsAny(tool, piiKinds("a@b.example"))`, true}, // "send_email" contains "email"
		{`countTool(session, "transfer_funds")`, 3},
		{`countTool(session, "read_doc")`, 1}, // the result step is not a call
		{`countTool(session, "transfer_*")`, 3},
		{`countTool(session, "none")`, 0},
		{`countMethod(session, "steps/message")`, 2},
		{`countKind(session, "toolResult")`, 1},
		{`countDecision(session, "deny")`, 1},
		{`countDecision(session, "*")`, 7},
		{`countToolWithin(session, "transfer_funds", duration("150s"))`, 2},
		{`countToolWithin(session, "transfer_funds", duration("1h"))`, 3},
		{`countToolWithin(session, "transfer_*", duration("10s"))`, 0},
		{`toolStreak(session, "transfer_funds")`, 3}, // messages between calls do not break a streak
		{`toolStreak(session, "read_doc")`, 0},
		{`lastTool(session)`, "transfer_funds"},
		{`sessionText(session)`, "please summarise the plan\nplan.docx\nCONFIDENTIAL: Q3 plan\n\n\nretrying\n"},
		{`sessionHas(session, "read_doc", "confidential")`, true},
		{`sessionHas(session, "toolResult", "confidential")`, true},
		{`sessionHas(session, "*", "CONFIDENTIAL")`, true},
		{`sessionHas(session, "read_*", "q3")`, true},
		{`sessionHas(session, "message", "confidential")`, false},
		{`any(session.steps, .tool == "read_doc" && .text contains "CONFIDENTIAL")`, true},
		{`session.stepCount`, 7},
		{`now.Year()`, 2025},
		{`lower("ABC") + upper("d")`, "abcD"},
		// Written as encoding/json writes it, without HTML escapes, so a test for markup finds it.
		{`toJSON({"a": "<script>&x</script>", "b": [1]})`, "{\n  \"a\": \"<script>&x</script>\",\n  \"b\": [\n    1\n  ]\n}"},
		{`toJSON("<b>") contains "<b>"`, true},
		{`toJSON(nil)`, "null"},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := run(t, tc.expr, historyEnv())
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestHelpersRuntimeErrors(t *testing.T) {
	for _, src := range []string{
		`regexMatch(text, inputs.to + "(")`,
		`glob(inputs.to + "[", tool)`,
		`countTool(session, inputs.to + "[")`,
		`countToolWithin(session, "x", inputs.to)`,
	} {
		_, err := run(t, src, historyEnv())
		require.Error(t, err, src)
	}
}

func TestHelpersWithoutState(t *testing.T) {
	// Helpers must also work when called on a session that is not the step's own (no cache).
	env := historyEnv()
	got, err := run(t, `countTool({"id": "x"}.id == "x" ? session : session, "transfer_funds")`, env)
	require.NoError(t, err)
	require.Equal(t, 3, got)
	e := *env
	require.Equal(t, []string{"bob@outside.example"}, memo(&e, "x", "bob@outside.example", func(s string) []string { return []string{s} }))
	other := Session{Steps: env.Session.Steps[:2]}
	require.Equal(t, "please summarise the plan\nplan.docx", sessionTextOf(&e, other))
	require.Equal(t, 1, sessionOf(&e, other).counts("tool")["read_doc"])
}

func TestNowIsTheEnvClock(t *testing.T) {
	_, diags := compileExpr(`now()`, "when", false, helperOptions(&regexCache{}))
	require.NotEmpty(t, diags, "the wall-clock builtin must not be available")
	got, err := run(t, `now.Sub(date("2025-05-01T11:00:00Z")).Hours()`, historyEnv())
	require.NoError(t, err)
	require.Equal(t, 1.0, got)
}

func TestMemoComputesOncePerEvaluation(t *testing.T) {
	st := &evalState{memo: map[memoKey]memoEntry{}}
	e := &Env{state: st}
	calls := 0
	f := func(s string) string { calls++; return strings.ToUpper(s) }
	s := "some text"
	require.Equal(t, "SOME TEXT", memo(e, "f", s, f))
	require.Equal(t, "SOME TEXT", memo(e, "f", s, f))
	require.Equal(t, 1, calls)
	// Same content at another address is computed again, but correctly.
	other := string([]byte(s))
	require.Equal(t, "SOME TEXT", memo(e, "f", other, f))
	require.Equal(t, "SOME TEXT", memo(e, "g", s, f))
	require.Equal(t, 3, calls)
	// Each result type has its own field: results of two types for one text do not mix.
	words := func(s string) []string { return strings.Fields(s) }
	require.Equal(t, []string{"some", "text"}, memo(e, "words", s, words))
	require.Equal(t, []string{"some", "text"}, memo(e, "words", s, words))
	require.Equal(t, "SOME TEXT", memo(e, "f", s, f))
	require.Equal(t, 3, calls)
}

// Counts passed with the session are what the counting helpers use, unless the session is
// cut to MaxHistory, which they would no longer match.
func TestSessionWithCounts(t *testing.T) {
	steps := make([]HistoryStep, 5)
	for i := range steps {
		steps[i] = HistoryStep{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: "x", Decision: "allow"}
	}
	bogus := CountSteps(steps)
	bogus.Tools["x"] = 99
	for _, tc := range []struct {
		name       string
		maxHistory int
		counts     *SessionCounts
		want       Action
	}{
		{"counted here", 100, nil, ActionAllow},
		{"the same counts", 100, CountSteps(steps), ActionAllow},
		{"given counts are used", 100, bogus, ActionDeny},
		{"cut history counts again", 3, bogus, ActionAllow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Compile([]Rule{{ID: "r", When: `countTool(session, "x") > 10`, Action: ActionDeny,
				Enabled: true}}, Options{MaxHistory: tc.maxHistory})
			require.NoError(t, err)
			env := &Env{Tool: "x", Session: Session{ID: "s", Steps: steps}.WithCounts(tc.counts)}
			require.Equal(t, tc.want, p.Evaluate(env).Action)
		})
	}
}
