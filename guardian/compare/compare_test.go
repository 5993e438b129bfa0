package compare

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// steps builds records from "turn/kind/tool/decision" specs; seqs start at base.
func steps(base int64, specs ...string) []record.StepRecord {
	out := make([]record.StepRecord, len(specs))
	for i, s := range specs {
		f := strings.Split(s, "/")
		out[i] = record.StepRecord{Seq: base + int64(i), TurnID: f[0], Kind: f[1], Tool: f[2], Decision: f[3],
			Method: "steps/" + f[1], MatchedRules: []record.RuleMatch{}}
	}
	return out
}

// layout renders rows as "turn status aSeq|bSeq diff…", a gap as "-".
func layout(rows []Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		a, b := "-", "-"
		if r.A != nil {
			a = fmt.Sprint(r.A.Seq)
		}
		if r.B != nil {
			b = fmt.Sprint(r.B.Seq)
		}
		out[i] = strings.TrimSpace(fmt.Sprintf("%d %s %s|%s %s", r.Turn, r.Status, a, b, strings.Join(r.Diff, ",")))
	}
	return out
}

func TestAlign(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []record.StepRecord
		want []string
		sum  Summary
	}{
		{name: "both empty", want: []string{}},
		{name: "identical",
			a:    steps(1, "t1/message//allow", "t1/toolCall/ls/allow"),
			b:    steps(11, "u1/message//allow", "u1/toolCall/ls/allow"),
			want: []string{"1 same 1|11", "1 same 2|12"}, sum: Summary{Same: 2}},
		{name: "a decision differs",
			a:    steps(1, "t1/toolCall/ls/allow", "t1/toolCall/rm/allow"),
			b:    steps(11, "u1/toolCall/ls/allow", "u1/toolCall/rm/deny"),
			want: []string{"1 same 1|11", "1 differ 2|12 decision"}, sum: Summary{Same: 1, Differ: 1}},
		{name: "an extra step in the middle is a gap",
			a:    steps(1, "t1/message//allow", "t1/toolCall/ls/allow", "t1/toolCall/cat/allow"),
			b:    steps(11, "u1/message//allow", "u1/toolCall/ls/allow", "u1/toolCall/rm/allow", "u1/toolCall/cat/allow"),
			want: []string{"1 same 1|11", "1 same 2|12", "1 onlyB -|13", "1 same 3|14"}, sum: Summary{Same: 3, OnlyB: 1}},
		{name: "a missing step is a gap",
			a:    steps(1, "t1/toolCall/a/allow", "t1/toolCall/b/allow", "t1/toolCall/c/allow"),
			b:    steps(11, "u1/toolCall/a/allow", "u1/toolCall/c/allow"),
			want: []string{"1 same 1|11", "1 onlyA 2|-", "1 same 3|12"}, sum: Summary{Same: 2, OnlyA: 1}},
		{name: "another tool in the same place pairs as a change of tool",
			a:    steps(1, "t1/message//allow", "t1/toolCall/rm/allow", "t1/message//allow"),
			b:    steps(11, "u1/message//allow", "u1/toolCall/trash/allow", "u1/message//allow"),
			want: []string{"1 same 1|11", "1 differ 2|12 tool", "1 same 3|13"}, sum: Summary{Same: 2, Differ: 1}},
		{name: "turns pair in order; an extra turn stands alone",
			a:    steps(1, "t1/message//allow", "t2/toolCall/ls/allow"),
			b:    steps(11, "u1/message//allow", "u2/toolCall/ls/allow", "u2/toolCall/ls/allow", "u3/message//deny"),
			want: []string{"1 same 1|11", "2 same 2|12", "2 onlyB -|13", "3 onlyB -|14"}, sum: Summary{Same: 2, OnlyB: 2}},
		{name: "steps do not move across turns",
			a:    steps(1, "t1/toolCall/ls/allow", "t2/toolCall/rm/allow"),
			b:    steps(11, "u1/toolCall/rm/allow", "u2/toolCall/ls/allow"),
			want: []string{"1 differ 1|11 tool", "2 differ 2|12 tool"}, sum: Summary{Differ: 2}},
		{name: "no turn ids: one turn",
			a:    steps(1, "/toolCall/a/allow", "/toolCall/b/allow", "/toolCall/c/allow"),
			b:    steps(11, "/toolCall/b/allow", "/toolCall/c/hold"),
			want: []string{"1 onlyA 1|-", "1 same 2|11", "1 differ 3|12 decision"}, sum: Summary{Same: 1, Differ: 1, OnlyA: 1}},
		{name: "one side empty",
			a:    steps(1, "t1/toolCall/a/allow"),
			want: []string{"1 onlyA 1|-"}, sum: Summary{OnlyA: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, sum := Align(tc.a, tc.b)
			require.Equal(t, tc.want, layout(rows))
			require.Equal(t, tc.sum, sum)
		})
	}
}

func TestAlignFields(t *testing.T) {
	a := steps(1, "t1/toolCall/send/allow")[0]
	b := steps(2, "t1/toolCall/send/allow")[0]
	a.Text, b.Text = "send it", "send it now"
	a.MatchedRules = []record.RuleMatch{{RuleID: "watch", Action: "allow"}}
	b.MatchedRules = []record.RuleMatch{{RuleID: "watch", Action: "allow"}, {RuleID: "hold-send", Action: "hold"}}
	b.Held = true
	rows, _ := Align([]record.StepRecord{a}, []record.StepRecord{b})
	require.Equal(t, []string{FieldDecision, FieldText, FieldRules}, rows[0].Diff)
	require.Equal(t, []string{"hold-send:hold", "watch:allow"}, rows[0].B.Rules)

	long := strings.Repeat("é", MaxText+5)
	a.Text = long
	rows, _ = Align([]record.StepRecord{a}, []record.StepRecord{a})
	require.Equal(t, StatusSame, rows[0].Status)
	require.True(t, rows[0].A.TextTruncated)
	require.Equal(t, MaxText, len([]rune(rows[0].A.Text)))
}

func TestAlignLongSessionsBounded(t *testing.T) {
	// Two sessions of MaxSteps steps that share nothing in the middle: the whole table.
	specA, specB := make([]string, MaxSteps), make([]string, MaxSteps)
	for i := range MaxSteps {
		specA[i] = fmt.Sprintf("/toolCall/a%d/allow", i%7)
		specB[i] = fmt.Sprintf("/toolCall/a%d/allow", i%5)
	}
	rows, sum := Align(steps(1, specA...), steps(10000, specB...))
	require.Equal(t, MaxSteps, sum.Same+sum.Differ+sum.OnlyA)
	require.Equal(t, MaxSteps, sum.Same+sum.Differ+sum.OnlyB)
	require.Len(t, rows, sum.Same+sum.Differ+sum.OnlyA+sum.OnlyB)
	// Every step appears once, in order, on its side.
	var la, lb int64
	for _, r := range rows {
		if r.A != nil {
			require.Greater(t, r.A.Seq, la)
			la = r.A.Seq
		}
		if r.B != nil {
			require.Greater(t, r.B.Seq, lb)
			lb = r.B.Seq
		}
	}
}

// TestInputsDiffKeepsLongNumbers: two inputs that differ only past a float64's precision
// differ, and the patch carries the agent's digits.
func TestInputsDiffKeepsLongNumbers(t *testing.T) {
	rec := func(amount string) record.StepRecord {
		req := strings.Replace(string(toolCall("s", "t1", "s1", "pay", "x")), `{"name":"to","value":"x"}`, `{"name":"amount","value":`+amount+`}`, 1)
		return record.StepRecord{Request: json.RawMessage(req)}
	}
	ops := inputsDiff(rec("12345678901234567891"), rec("12345678901234567892"))
	require.Len(t, ops, 1)
	require.Equal(t, "/amount", ops[0].Path)
	require.Equal(t, "12345678901234567892", string(ops[0].Value))
	require.Equal(t, "12345678901234567891", string(ops[0].Old))
	require.Nil(t, inputsDiff(rec("12345678901234567891"), rec("12345678901234567891")))
}
