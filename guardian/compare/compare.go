// Package compare lines up the steps of two sessions, for example the same task run before
// and after a rule change, and says per aligned pair what differs.
//
// Turns are paired in order (the first turn of one session with the first of the other).
// Within a pair of turns the steps are aligned by a longest common subsequence over their
// (kind, tool) keys, so a step one session has and the other has not shows as a gap rather
// than shifting every later row. In a stretch between aligned steps, a step missing on one
// side and a step extra on the other of the same kind are paired as a change of tool.
package compare

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/jsonpatch"
	"github.com/vigil-guardian/vigil/record"
)

// Limits.
const (
	// MaxSteps is how many steps of each session a comparison reads; the rest is cut off
	// and the side says so.
	MaxSteps = 2000
	// MaxBytes cuts a side off sooner, once its steps' stored size (storage.StepBytes)
	// reaches it: 2000 steps of megabytes each are not read into memory.
	MaxBytes = 64 << 20
	// MaxText is how many characters of a step's text a row carries; the comparison itself
	// uses the whole text.
	MaxText = 2000
	// MaxInputOps is how many operations of an inputs diff a row carries.
	MaxInputOps = 50
)

// Row statuses.
const (
	StatusSame   = "same"
	StatusDiffer = "differ"
	// StatusOnlyA and StatusOnlyB: the step has no counterpart on the other side.
	StatusOnlyA = "onlyA"
	StatusOnlyB = "onlyB"
)

// Fields that can differ between two aligned steps.
const (
	FieldDecision = "decision"
	FieldTool     = "tool"
	FieldInputs   = "inputs"
	FieldText     = "text"
	FieldRules    = "rules"
)

// Step is one side of a row: the parts of a stored step a comparison shows.
type Step struct {
	Seq      int64  `json:"seq"`
	TurnID   string `json:"turnId,omitempty"`
	StepID   string `json:"stepId,omitempty"`
	Method   string `json:"method"`
	Kind     string `json:"kind"`
	Tool     string `json:"tool,omitempty"`
	Decision string `json:"decision"`
	Held     bool   `json:"held,omitempty"`
	Text     string `json:"text,omitempty"`
	// TextTruncated says Text was cut to MaxText characters.
	TextTruncated bool `json:"textTruncated,omitempty"`
	// Rules are the ids of the rules that matched, as "id:action".
	Rules []string `json:"rules"`
}

// Row is one line of the comparison: a step of each session, or a step and a gap.
type Row struct {
	// Turn numbers the pair of turns, from 1.
	Turn   int    `json:"turn"`
	A      *Step  `json:"a"`
	B      *Step  `json:"b"`
	Status string `json:"status"`
	// Diff names the fields that differ (Field* constants), for StatusDiffer.
	Diff []string `json:"diff,omitempty"`
	// Inputs is the JSON Patch from A's inputs to B's, when they differ (at most
	// MaxInputOps operations; InputsTruncated says when more were left out).
	Inputs          []jsonpatch.Op `json:"inputs,omitempty"`
	InputsTruncated bool           `json:"inputsTruncated,omitempty"`
}

// Summary counts the rows by status.
type Summary struct {
	Same   int `json:"same"`
	Differ int `json:"differ"`
	OnlyA  int `json:"onlyA"`
	OnlyB  int `json:"onlyB"`
}

// Align lines up the steps of two sessions, each in seq order.
func Align(a, b []record.StepRecord) ([]Row, Summary) {
	ta, tb := turns(a), turns(b)
	var rows []Row
	for i := range max(len(ta), len(tb)) {
		var x, y []record.StepRecord
		if i < len(ta) {
			x = ta[i]
		}
		if i < len(tb) {
			y = tb[i]
		}
		rows = alignTurn(rows, i+1, x, y)
	}
	var sum Summary
	for _, r := range rows {
		switch r.Status {
		case StatusSame:
			sum.Same++
		case StatusDiffer:
			sum.Differ++
		case StatusOnlyA:
			sum.OnlyA++
		case StatusOnlyB:
			sum.OnlyB++
		}
	}
	if rows == nil {
		rows = []Row{}
	}
	return rows, sum
}

// turns splits steps into runs of the same turn id. Steps without one (protocols that have
// no turns) continue the current run, so a session without turn ids is one turn.
func turns(steps []record.StepRecord) [][]record.StepRecord {
	var out [][]record.StepRecord
	cur := ""
	for i, s := range steps {
		if i == 0 || (s.TurnID != "" && s.TurnID != cur) {
			out = append(out, nil)
			if s.TurnID != "" {
				cur = s.TurnID
			}
		}
		out[len(out)-1] = append(out[len(out)-1], s)
	}
	return out
}

type key struct{ kind, tool string }

func keyOf(s record.StepRecord) key { return key{s.Kind, s.Tool} }

// alignTurn appends the rows of one pair of turns.
func alignTurn(rows []Row, turn int, a, b []record.StepRecord) []Row {
	pairs := lcs(a, b)
	i, j := 0, 0
	for _, p := range append(pairs, [2]int{len(a), len(b)}) {
		rows = gapRows(rows, turn, a[i:p[0]], b[j:p[1]])
		if p[0] < len(a) {
			rows = append(rows, pairRow(turn, a[p[0]], b[p[1]]))
		}
		i, j = p[0]+1, p[1]+1
	}
	return rows
}

// gapRows lays out a stretch with no common key: a step of A and one of B of the same kind
// pair up as a change (of tool, mostly), the others stand alone.
func gapRows(rows []Row, turn int, a, b []record.StepRecord) []Row {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i].Kind == b[j].Kind:
			rows = append(rows, pairRow(turn, a[i], b[j]))
			i++
			j++
		case i < len(a):
			rows = append(rows, Row{Turn: turn, A: view(a[i]), Status: StatusOnlyA})
			i++
		default:
			rows = append(rows, Row{Turn: turn, B: view(b[j]), Status: StatusOnlyB})
			j++
		}
	}
	return rows
}

// lcs returns the index pairs of a longest common subsequence of the keys of a and b, in
// order. A common prefix and suffix are matched directly, so the table covers only the
// part in between: at most MaxSteps × MaxSteps two-byte cells (8 MB) in the worst case,
// and little for sessions that mostly agree.
func lcs(a, b []record.StepRecord) [][2]int {
	var head, tail [][2]int
	lo := 0
	for lo < len(a) && lo < len(b) && keyOf(a[lo]) == keyOf(b[lo]) {
		head = append(head, [2]int{lo, lo})
		lo++
	}
	ea, eb := len(a), len(b)
	for ea > lo && eb > lo && keyOf(a[ea-1]) == keyOf(b[eb-1]) {
		ea--
		eb--
		tail = append(tail, [2]int{ea, eb})
	}
	slices.Reverse(tail)
	n, m := ea-lo, eb-lo
	if n == 0 || m == 0 {
		return append(head, tail...)
	}
	ka, kb := make([]key, n), make([]key, m)
	for i := range n {
		ka[i] = keyOf(a[lo+i])
	}
	for j := range m {
		kb[j] = keyOf(b[lo+j])
	}
	// t[i*(m+1)+j] is the LCS length of ka[i:] and kb[j:]; lengths fit in uint16 because
	// each side has at most MaxSteps steps.
	w := m + 1
	t := make([]uint16, (n+1)*w)
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			switch {
			case ka[i] == kb[j]:
				t[i*w+j] = t[(i+1)*w+j+1] + 1
			case t[(i+1)*w+j] >= t[i*w+j+1]:
				t[i*w+j] = t[(i+1)*w+j]
			default:
				t[i*w+j] = t[i*w+j+1]
			}
		}
	}
	mid := head
	for i, j := 0, 0; i < n && j < m; {
		switch {
		case ka[i] == kb[j]:
			mid = append(mid, [2]int{lo + i, lo + j})
			i++
			j++
		case t[(i+1)*w+j] >= t[i*w+j+1]:
			i++
		default:
			j++
		}
	}
	return append(mid, tail...)
}

// pairRow compares two aligned steps.
func pairRow(turn int, a, b record.StepRecord) Row {
	r := Row{Turn: turn, A: view(a), B: view(b), Status: StatusSame}
	if a.Decision != b.Decision || a.Held != b.Held {
		r.Diff = append(r.Diff, FieldDecision)
	}
	if a.Tool != b.Tool {
		r.Diff = append(r.Diff, FieldTool)
	}
	if ops := inputsDiff(a, b); len(ops) > 0 {
		r.Diff = append(r.Diff, FieldInputs)
		if len(ops) > MaxInputOps {
			ops, r.InputsTruncated = ops[:MaxInputOps], true
		}
		r.Inputs = ops
	}
	if a.Text != b.Text {
		r.Diff = append(r.Diff, FieldText)
	}
	if !slices.Equal(r.A.Rules, r.B.Rules) {
		r.Diff = append(r.Diff, FieldRules)
	}
	if len(r.Diff) > 0 {
		r.Status = StatusDiffer
	}
	return r
}

// inputsDiff is the JSON Patch between the tool inputs of two stored steps; nil when they
// are equal or either request no longer decodes (nothing can be said about its inputs).
func inputsDiff(a, b record.StepRecord) []jsonpatch.Op {
	ia, okA := inputs(a)
	ib, okB := inputs(b)
	if !okA || !okB || bytes.Equal(ia, ib) {
		return nil
	}
	ops, err := jsonpatch.Diff(ia, ib)
	if err != nil {
		return nil
	}
	return ops
}

func inputs(rec record.StepRecord) (json.RawMessage, bool) {
	step, perr := aos.ParseStoredStep(rec.Request)
	if perr != nil {
		return nil, false
	}
	in := step.ExactInputs()
	if in == nil {
		return json.RawMessage("null"), true
	}
	// Maps marshal with sorted keys, so equal inputs give equal bytes.
	js, err := json.Marshal(in)
	if err != nil {
		return nil, false
	}
	return js, true
}

func view(rec record.StepRecord) *Step {
	s := &Step{Seq: rec.Seq, TurnID: rec.TurnID, StepID: rec.StepID, Method: rec.Method, Kind: rec.Kind,
		Tool: rec.Tool, Decision: rec.Decision, Held: rec.Held, Text: rec.Text, Rules: make([]string, 0, len(rec.MatchedRules))}
	if utf8.RuneCountInString(s.Text) > MaxText {
		s.Text, s.TextTruncated = string([]rune(s.Text)[:MaxText]), true
	}
	for _, m := range rec.MatchedRules {
		s.Rules = append(s.Rules, m.RuleID+":"+m.Action)
	}
	slices.SortFunc(s.Rules, strings.Compare)
	return s
}
