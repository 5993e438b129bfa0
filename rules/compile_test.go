package rules

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/expr-lang/expr/vm"
	"github.com/stretchr/testify/require"
)

func TestCompileErrorPositions(t *testing.T) {
	cases := []struct {
		name      string
		when      string
		line, col int
		contains  string
	}{
		{"unknown name", `toool == "x"`, 1, 1, "unknown name toool"},
		{"unknown field", `tool == "x" && agent.nme == "y"`, 1, 22, "nme"},
		{"type mismatch", `tool == 3`, 1, 6, "mismatched types"},
		{"second line", "tool == \"x\" &&\n  text > 3", 2, 8, "mismatched types"},
		{"syntax", `tool == `, 1, 8, "unexpected token EOF"},
		{"not a bool", `tool`, 0, 0, "expected bool"},
		{"helper argument type", `regexMatch(text, 1)`, 1, 18, "cannot use int"}, // a pattern is a string; the text may be any value
		{"helper arity", `countTool(session)`, 1, 1, "not enough arguments"},
		{"bad constant regexp operator", `text matches "(" `, 1, 6, "missing closing )"},
		{"bad constant regexp helper", `regexMatch(text, "a[")`, 1, 18, "missing closing ]"},
		{"bad constant glob", `glob("[ab", tool)`, 1, 6, "unterminated"},
		{"wall clock", `now() > now`, 1, 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			diags := ValidateExpr(tc.when)
			require.Len(t, diags, 1, "%v", diags)
			d := diags[0]
			require.Equal(t, "when", d.Field)
			require.Equal(t, tc.line, d.Line, "%+v", d)
			require.Equal(t, tc.col, d.Column, "%+v", d)
			require.Contains(t, d.Message, tc.contains)
			require.NotContains(t, d.Message, "\n", "the message is one line; the snippet is separate")
		})
	}
}

func TestValidateRule(t *testing.T) {
	good := Rule{ID: "ok", When: `tool == "x"`, Action: ActionDeny, Enabled: true}
	require.Empty(t, Validate(good))

	type fieldMsg struct{ field, msg string }
	cases := []struct {
		name string
		edit func(*Rule)
		want []fieldMsg
	}{
		{"missing id", func(r *Rule) { r.ID = "" }, []fieldMsg{{"id", "required"}}},
		{"bad id", func(r *Rule) { r.ID = "a b/c" }, []fieldMsg{{"id", "may contain only"}}},
		{"long id", func(r *Rule) { r.ID = strings.Repeat("a", MaxIDLen+1) }, []fieldMsg{{"id", "longer"}}},
		{"bad action", func(r *Rule) { r.Action = "block" }, []fieldMsg{{"action", "not one of"}}},
		{"bad mode", func(r *Rule) { r.Mode = "audit" }, []fieldMsg{{"mode", "not one of"}}},
		{"empty when", func(r *Rule) { r.When = " " }, []fieldMsg{{"when", "empty"}}},
		{"huge when", func(r *Rule) { r.When = strings.Repeat("true && ", MaxExprLen/8) + "true" }, []fieldMsg{{"when", "longer than"}}},
		{"too many nodes", func(r *Rule) { r.When = strings.Repeat("1+", 3000) + "1 > 0" }, []fieldMsg{{"when", "maximum allowed nodes"}}},
		{"huge message", func(r *Rule) { r.Message = strings.Repeat("x", MaxMessageLen+1) }, []fieldMsg{{"message", "longer than"}}},
		{"bad message placeholder", func(r *Rule) { r.Message = "to {{ inputs.to + }}" }, []fieldMsg{{"message", "unexpected"}}},
		{"unclosed placeholder", func(r *Rule) { r.Message = "to {{ inputs.to" }, []fieldMsg{{"message", "unclosed"}}},
		{"modify without spec", func(r *Rule) { r.Action = ActionModify }, []fieldMsg{{"modify", "needs"}}},
		{"bad redact regexp", func(r *Rule) {
			r.Action = ActionModify
			r.Modify = &ModifySpec{Redact: []string{"pii", "("}}
		}, []fieldMsg{{"modify.redact[1]", "invalid redaction pattern"}}},
		{"empty redact", func(r *Rule) {
			r.Action = ActionModify
			r.Modify = &ModifySpec{Redact: []string{""}}
		}, []fieldMsg{{"modify.redact[0]", "empty"}}},
		{"bad set expression", func(r *Rule) {
			r.Action = ActionModify
			r.Modify = &ModifySpec{Set: map[string]string{"to": `inputs.to +`, " ": `1`}}
		}, []fieldMsg{{"modify.set. ", "input name is empty"}, {"modify.set.to", "unexpected token"}}},
		{"bad onTimeout", func(r *Rule) {
			r.Action = ActionHold
			r.Hold = &HoldSpec{Timeout: Duration(time.Minute), OnTimeout: "hold"}
		}, []fieldMsg{{"hold.onTimeout", "allow or deny"}}},
		{"long hold", func(r *Rule) {
			r.Action = ActionHold
			r.Hold = &HoldSpec{Timeout: Duration(48 * time.Hour)}
		}, []fieldMsg{{"hold.timeout", "longer than 24h"}}},
		{"confirm on a deny rule", func(r *Rule) { r.Hold = &HoldSpec{Confirm: true} }, []fieldMsg{{"hold.confirm", "hold rules only"}}},
		{"long reason code", func(r *Rule) { r.ReasonCode = strings.Repeat("C", MaxIDLen+1) }, []fieldMsg{{"reasonCode", "longer"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.edit(&r)
			diags := Validate(r)
			require.Len(t, diags, len(tc.want), "%v", diags)
			for i, w := range tc.want {
				require.Equal(t, w.field, diags[i].Field)
				require.Contains(t, diags[i].Message, w.msg)
				require.Equal(t, r.ID, diags[i].RuleID)
			}
		})
	}
	// MaxNodes: a short expression with very many nodes.
	r := good
	r.When = "len([" + strings.Repeat("1,", 2100) + "1]) > 0"
	diags := Validate(r)
	require.Len(t, diags, 1)
	require.Contains(t, diags[0].Message, "node")
}

func TestMessagePlaceholderPosition(t *testing.T) {
	r := Rule{ID: "m", When: "true", Action: ActionDeny, Message: "Hello,\nsend to {{ inputs.to + }} now"}
	diags := Validate(r)
	require.Len(t, diags, 1)
	require.Equal(t, "message", diags[0].Field)
	require.Equal(t, 2, diags[0].Line)
	require.Equal(t, 23, diags[0].Column, "%+v", diags[0]) // just after the dangling +
}

func TestCompileAllOrNothing(t *testing.T) {
	_, err := Compile([]Rule{
		{ID: "a", When: "true", Action: ActionDeny},
		{ID: "b", When: "nope", Action: ActionDeny},
		{ID: "a", When: "true", Action: ActionDeny},
	}, Options{})
	var ce CompileErrors
	require.True(t, errors.As(err, &ce))
	require.Len(t, ce, 2)
	require.Equal(t, "b", ce[0].RuleID)
	require.Equal(t, 1, ce[0].Index)
	require.Equal(t, "id", ce[1].Field)
	require.Equal(t, 2, ce[1].Index)
	require.Contains(t, ce[1].Message, "duplicate")
	require.Contains(t, err.Error(), "rule b: when: unknown name nope (1:1)")
}

func TestDiagnosticString(t *testing.T) {
	d := Diagnostic{RuleID: "r", Field: "when", Line: 1, Column: 5, Message: "boom", File: "p.yaml", FileLine: 7, FileColumn: 14}
	require.Equal(t, "p.yaml:7:14: rule r: when: boom (1:5)", d.String())
	require.Equal(t, "rule #3: id: id is required", Diagnostic{Index: 2, Field: "id", Message: "id is required"}.String())
	var many CompileErrors
	for i := 0; i < 7; i++ {
		many = append(many, Diagnostic{RuleID: "x", Message: "m"})
	}
	require.Contains(t, many.Error(), "and 2 more")
}

func TestDisabledRulesAreStillChecked(t *testing.T) {
	_, err := Compile([]Rule{{ID: "a", When: "nope", Action: ActionDeny, Enabled: false, Mode: ModeOff}}, Options{})
	require.Error(t, err)
	p, err := Compile([]Rule{{ID: "a", When: "true", Action: ActionDeny, Enabled: false}}, Options{})
	require.NoError(t, err)
	require.Len(t, p.Rules(), 1)
	require.Empty(t, p.active)
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		2 * time.Minute: "2m", time.Hour: "1h", 90 * time.Second: "1m30s", 90 * time.Minute: "1h30m",
		500 * time.Millisecond: "500ms", 0: "0s", time.Hour + time.Second: "1h0m1s",
	} {
		require.Equal(t, want, Duration(d).String())
		b, err := Duration(d).MarshalJSON()
		require.NoError(t, err)
		var back Duration
		require.NoError(t, back.UnmarshalJSON(b))
		require.Equal(t, Duration(d), back)
	}
	var d Duration
	require.Error(t, d.UnmarshalJSON([]byte(`120`)))
	require.Error(t, d.UnmarshalJSON([]byte(`"-1m"`)))
	require.Error(t, d.UnmarshalJSON([]byte(`"soon"`)))
}

func TestUsesParamsToolDefAndInputs(t *testing.T) {
	cases := []struct {
		r                       Rule
		params, toolDef, inputs bool
	}{
		{Rule{ID: "a", When: `tool == "x"`, Action: ActionDeny}, false, false, false},
		{Rule{ID: "a", When: `params.x == 1`, Action: ActionDeny}, true, false, false},
		{Rule{ID: "a", When: `toolDef.risk == "high"`, Action: ActionDeny}, false, true, false},
		{Rule{ID: "a", When: `inputs.amount > 100`, Action: ActionDeny}, false, false, true},
		{Rule{ID: "a", When: `$env["params"] != nil`, Action: ActionDeny}, true, true, true},
		{Rule{ID: "a", When: `any(session.steps, .tool == "params")`, Action: ActionDeny}, false, false, false},
		{Rule{ID: "a", When: `true`, Action: ActionDeny, Message: "{{ toJSON(params) }}"}, true, false, false},
		{Rule{ID: "a", When: `true`, Action: ActionDeny, Message: "{{ toolDef.name }}"}, false, true, false},
		{Rule{ID: "a", When: `true`, Action: ActionDeny, Message: "to {{ inputs.to }}"}, false, false, true},
		{Rule{ID: "a", When: `true`, Action: ActionModify, Modify: &ModifySpec{Set: map[string]string{"x": "params.y"}}}, true, false, false},
		{Rule{ID: "a", When: `true`, Action: ActionModify, Modify: &ModifySpec{Set: map[string]string{"x": "inputs.y + 1"}}}, false, false, true},
		{Rule{ID: "a", When: `params.x == 1 && toolDef != nil && inputs.y`, Action: ActionDeny, Mode: ModeOff}, false, false, false},
	}
	for _, tc := range cases {
		tc.r.Enabled = true
		p, err := Compile([]Rule{tc.r}, Options{})
		require.NoError(t, err)
		require.Equal(t, tc.params, p.UsesParams(), "%+v", tc.r)
		require.Equal(t, tc.toolDef, p.UsesToolDef(), "%+v", tc.r)
		require.Equal(t, tc.inputs, p.UsesInputs(), "%+v", tc.r)
		require.Equal(t, tc.r.Mode == ModeOff, p.Empty())
	}
}

func TestMayAct(t *testing.T) {
	tests := []struct {
		name  string
		rules []Rule
		def   Action
		want  bool
	}{
		{"no rules", nil, "", false},
		{"default deny", nil, ActionDeny, true},
		{"allow rule only", []Rule{{ID: "a", When: `true`, Action: ActionAllow, Enabled: true}}, "", false},
		{"monitor deny", []Rule{{ID: "a", When: `true`, Action: ActionDeny, Mode: ModeMonitor, Enabled: true}}, "", false},
		{"tool rule", []Rule{{ID: "a", When: `method == "steps/toolCallRequest" && tool == "rm"`, Action: ActionDeny, Enabled: true}}, "", false},
		{"user messages only", []Rule{{ID: "a", When: `method == "steps/message" && role == "user" && text contains "x"`, Action: ActionDeny, Enabled: true}}, "", false},
		{"agent message redaction", []Rule{{ID: "a", When: `method == "steps/message" && text contains "x"`, Action: ActionModify, Enabled: true,
			Modify: &ModifySpec{Redact: []string{"x"}}}}, "", true},
		{"text rule", []Rule{{ID: "a", When: `text contains "secret"`, Action: ActionHold, Enabled: true}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEngine(Options{DefaultDecision: tt.def})
			require.NoError(t, e.Load(tt.rules))
			require.Equal(t, tt.want, e.Program().MayAct(&Env{Method: "steps/message", Kind: "message", Role: "agent"}))
		})
	}
}

// A message placeholder naming a step field is read without the VM; it must render as
// the VM renders it, for every field the guards know, around literal text and other
// placeholders, and within the rendered length bound.
func TestMessageFieldPlaceholdersRenderAsTheVM(t *testing.T) {
	e := &Env{}
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		for i := range v.NumField() {
			switch f := v.Field(i); {
			case !v.Type().Field(i).IsExported():
			case f.Kind() == reflect.String:
				n++
				f.SetString(fmt.Sprintf("v%d <é>", n))
			case f.Kind() == reflect.Struct:
				fill(f)
			}
		}
	}
	fill(reflect.ValueOf(e).Elem())
	long := &Env{Tool: strings.Repeat("x", maxRendered+10)}
	for name := range guardFields {
		for want, msg := range map[int]string{1: "{{" + name + "}}", 2: "a {{ " + name + " }} b {{len(tool)}} {{" + name + "}}"} {
			tm, diags := compileTemplate(msg, helperOptions(&regexCache{}))
			require.Empty(t, diags, msg)
			vmOnly := &template{parts: slices.Clone(tm.parts)}
			fields := 0
			for i := range vmOnly.parts {
				if vmOnly.parts[i].field != nil {
					fields++
				}
				vmOnly.parts[i].field = nil
			}
			require.Equal(t, want, fields, "%s: read without the VM", msg)
			m := &vm.VM{}
			got := tm.render(m, e)
			require.Equal(t, vmOnly.render(m, e), got, msg)
			require.Contains(t, got, guardFields[name](e), msg)
			require.Equal(t, vmOnly.render(m, long), tm.render(m, long), msg)
		}
	}
}
