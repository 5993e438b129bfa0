package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr/ast"
)

// Cost-ordered evaluation. People write the costly test first (`sessionHas(…) && tool ==
// "send_email"`), and && evaluates left to right, so the VM would scan the history on every
// step to learn that the tool differs. A conjunct that cannot fail, standing before anything
// that can, is a necessary condition of the whole rule: when it is false the rule is false,
// whatever the conjuncts before it compute, because none of them could have raised an error
// the rule would otherwise report. Such conjuncts, where the engine can evaluate them in Go,
// become the rule's guards and run cheapest first; the VM then runs the unchanged program
// only on steps that pass them all, so a match, a message and a run-time error are exactly
// those of the rule as written. Helpers that can only fail by running over the evaluation
// budget count as unable to fail: the budget bounds work, and skipping work never exceeds it.

// vtype is the static type of an expression that cannot fail, as far as the checker knows.
type vtype uint8

const (
	tBad      vtype = iota // may fail, or of a type the checker does not follow
	tBool                  // bool
	tString                // string
	tInt                   // int
	tStrings               // []string (helper results and constant string arrays)
	tSteps                 // []HistoryStep
	tStep                  // HistoryStep (the element of a predicate over session.steps)
	tStruct                // agent, user, mcp, a2a
	tSession               // Session
	tTime                  // time.Time (now, receivedAt)
	tStringer              // time.Weekday, time.Month: only their String() is followed
	tMap                   // map[string]any: inputs, params, toolDef, mcp.arguments
	tAny                   // a value of any type that was fetched without failing
	tDuration              // duration("…") with a constant that parses
)

// envTypes are the Env's top-level names and their types.
var envTypes = map[string]vtype{
	"method": tString, "kind": tString, "role": tString, "text": tString, "tool": tString,
	"reasoning": tString, "turnId": tString, "stepId": tString, "isError": tBool,
	"agent": tStruct, "user": tStruct, "mcp": tStruct, "a2a": tStruct, "session": tSession,
	"now": tTime, "inputs": tMap, "params": tMap, "toolDef": tMap,
}

// memberTypes are the fields of the Env's structs, by "base.field".
var memberTypes = map[string]vtype{
	"agent.id": tString, "agent.name": tString, "agent.version": tString, "agent.provider": tString,
	"agent.model": tString, "user.id": tString, "user.name": tString, "user.email": tString,
	"user.org": tString, "mcp.method": tString, "mcp.tool": tString, "mcp.arguments": tMap,
	"a2a.method": tString, "a2a.text": tString, "a2a.from": tString, "a2a.to": tString,
	"a2a.contextId": tString, "session.id": tString, "session.stepCount": tInt, "session.steps": tSteps,
}

// stepTypes are the fields of a HistoryStep.
var stepTypes = map[string]vtype{
	"method": tString, "kind": tString, "tool": tString, "decision": tString, "text": tString,
	"seq": tInt, "receivedAt": tTime,
}

// timeMethods are the methods of now (and receivedAt) the checker follows.
var timeMethods = map[string]vtype{
	"Hour": tInt, "Minute": tInt, "Second": tInt, "Day": tInt, "Year": tInt, "YearDay": tInt,
	"Weekday": tStringer, "Month": tStringer,
}

// scanHelpers take any value as text and return a list of strings.
var scanHelpers = map[string]bool{"pii": true, "piiKinds": true, "emails": true, "secrets": true,
	"secretKinds": true, "urls": true}

// validGlob reports whether n is a constant glob (or plain name) that compiles.
func validGlob(n ast.Node) bool {
	s, ok := n.(*ast.StringNode)
	if !ok {
		return false
	}
	src, err := globRegexp(s.Value)
	if err != nil {
		return false
	}
	_, err = regexp.Compile(src)
	return err == nil
}

// validRegexp reports whether n is a constant regular expression that compiles.
func validRegexp(n ast.Node) bool {
	s, ok := n.(*ast.StringNode)
	if !ok {
		return false
	}
	_, err := regexp.Compile(s.Value)
	return err == nil
}

// typeOf returns the type of n when evaluating n cannot fail (tBad otherwise); ptr is the
// type of # inside the enclosing predicate (tBad outside one).
func typeOf(n ast.Node, ptr vtype) vtype {
	switch x := n.(type) {
	case *ast.StringNode:
		return tString
	case *ast.IntegerNode:
		return tInt
	case *ast.BoolNode:
		return tBool
	case *ast.NilNode:
		return tAny
	case *ast.ArrayNode:
		for _, e := range x.Nodes {
			if _, ok := e.(*ast.StringNode); !ok {
				return tBad
			}
		}
		return tStrings
	case *ast.IdentifierNode:
		return envTypes[x.Value]
	case *ast.PointerNode:
		if x.Name != "" {
			return tBad
		}
		return ptr
	case *ast.ChainNode:
		return typeOf(x.Node, ptr)
	case *ast.MemberNode:
		return memberTypeOf(x, ptr)
	case *ast.UnaryNode:
		if (x.Operator == "!" || x.Operator == "not") && typeOf(x.Node, ptr) == tBool {
			return tBool
		}
	case *ast.BinaryNode:
		return binaryTypeOf(x, ptr)
	case *ast.CallNode:
		return callTypeOf(x, ptr)
	case *ast.BuiltinNode:
		return builtinTypeOf(x, ptr)
	}
	return tBad
}

func memberTypeOf(x *ast.MemberNode, ptr vtype) vtype {
	prop, ok := x.Property.(*ast.StringNode)
	if !ok || x.Method {
		return tBad
	}
	switch base := typeOf(x.Node, ptr); base {
	case tStruct, tSession:
		id, ok := x.Node.(*ast.IdentifierNode)
		if !ok {
			return tBad
		}
		return memberTypes[id.Value+"."+prop.Value]
	case tStep:
		return stepTypes[prop.Value]
	case tMap:
		// Reading a key of a map (nil or not) yields nil when it is absent: it cannot fail.
		// Going deeper can (a string has no members), so only one level is followed.
		if _, isIdent := x.Node.(*ast.IdentifierNode); isIdent || x.Optional {
			return tAny
		}
		if m, isMember := x.Node.(*ast.MemberNode); isMember && memberTypeOf(m, ptr) == tMap {
			return tAny
		}
	}
	return tBad
}

func binaryTypeOf(x *ast.BinaryNode, ptr vtype) vtype {
	l, r := typeOf(x.Left, ptr), typeOf(x.Right, ptr)
	if l == tBad || r == tBad {
		return tBad
	}
	switch x.Operator {
	case "==", "!=":
		return tBool
	case "&&", "||", "and", "or":
		if l == tBool && r == tBool {
			return tBool
		}
	case "in":
		if l == tString && r == tStrings {
			return tBool
		}
	case "startsWith", "endsWith", "contains":
		if l == tString && r == tString {
			return tBool
		}
	case "matches":
		// With a constant pattern the engine runs it as regexMatch, which reads any value
		// as text.
		if validRegexp(x.Right) {
			return tBool
		}
	case "<", "<=", ">", ">=":
		if l == tInt && r == tInt {
			return tBool
		}
	}
	return tBad
}

func callTypeOf(x *ast.CallNode, ptr vtype) vtype {
	if m, ok := x.Callee.(*ast.MemberNode); ok && m.Method && len(x.Arguments) == 0 {
		prop, _ := m.Property.(*ast.StringNode)
		if prop == nil {
			return tBad
		}
		switch typeOf(m.Node, ptr) {
		case tTime:
			return timeMethods[prop.Value]
		case tStringer:
			if prop.Value == "String" {
				return tString
			}
		}
		return tBad
	}
	id, ok := x.Callee.(*ast.IdentifierNode)
	if !ok {
		return tBad
	}
	args := x.Arguments
	for _, a := range args {
		if typeOf(a, ptr) == tBad {
			return tBad
		}
	}
	is := func(i int, t vtype) bool { return i < len(args) && typeOf(args[i], ptr) == t }
	switch name := id.Value; {
	case scanHelpers[name] && len(args) == 1:
		return tStrings
	case name == "domain" && len(args) == 1:
		return tString
	case (name == "sessionText" || name == "lastTool") && len(args) == 1 && is(0, tSession):
		return tString
	case name == "icontains" && len(args) == 2:
		return tBool
	case name == "containsAny" && len(args) == 2 && is(1, tStrings):
		return tBool
	case name == "glob" && len(args) == 2 && validGlob(args[0]):
		return tBool
	case name == "regexMatch" && len(args) == 2 && validRegexp(args[1]):
		return tBool
	case (name == "countTool" || name == "countMethod" || name == "countKind" || name == "countDecision" ||
		name == "toolStreak") && len(args) == 2 && is(0, tSession) && validGlob(args[1]):
		return tInt
	case name == "countToolWithin" && len(args) == 3 && is(0, tSession) && validGlob(args[1]) &&
		is(2, tDuration):
		return tInt
	case name == "sessionHas" && len(args) == 3 && is(0, tSession) && validGlob(args[1]):
		return tBool
	}
	return tBad
}

func builtinTypeOf(x *ast.BuiltinNode, ptr vtype) vtype {
	args := x.Arguments
	switch x.Name {
	case "len":
		if len(args) == 1 {
			switch typeOf(args[0], ptr) {
			case tString, tStrings, tSteps:
				return tInt
			}
		}
	case "lower", "upper", "trim":
		if len(args) == 1 && typeOf(args[0], ptr) == tString {
			return tString
		}
	case "duration":
		if len(args) == 1 {
			if s, ok := args[0].(*ast.StringNode); ok {
				if _, err := time.ParseDuration(s.Value); err == nil {
					return tDuration
				}
			}
		}
	case "any", "all", "none", "one", "count":
		if len(args) != 2 || x.Map != nil || x.Threshold != nil {
			return tBad
		}
		elem := tBad
		switch typeOf(args[0], ptr) {
		case tStrings:
			elem = tString
		case tSteps:
			elem = tStep
		}
		pred, ok := args[1].(*ast.PredicateNode)
		if elem == tBad || !ok || typeOf(pred.Node, elem) != tBool {
			return tBad
		}
		if x.Name == "count" {
			return tInt
		}
		return tBool
	}
	return tBad
}

// Costs of guards, in rough units of a string comparison, to order them.
const (
	costField   = 1
	costCompare = 2
	costCounter = 4
	costText    = 10 // a case-folding substring search over the step's text
	costRegexp  = 20
	costURLs    = 30
	costScan    = 35 // a PII or secret scan, done once per step and text
	// costHistory: a question about the session's history, answered from its memo when
	// the guardian keeps one, else by a scan.
	costHistory = 40
)

// compiled guard pieces.
type (
	strFn  func(*Env) string
	intFn  func(*Env) int
	boolFn func(*Env) bool
)

// guardStr compiles a string-valued node that cannot fail into Go.
func guardStr(n ast.Node, cache *regexCache) (strFn, int, bool) {
	switch x := n.(type) {
	case *ast.StringNode:
		v := x.Value
		return func(*Env) string { return v }, 0, true
	case *ast.CallNode:
		if m, ok := x.Callee.(*ast.MemberNode); ok && m.Method && len(x.Arguments) == 0 && isNowCall(m.Node) {
			prop, _ := m.Property.(*ast.StringNode)
			inner := m.Node.(*ast.CallNode).Callee.(*ast.MemberNode).Property.(*ast.StringNode).Value
			if prop != nil && prop.Value == "String" {
				switch inner {
				case "Weekday":
					return func(e *Env) string { return e.Now.Weekday().String() }, costCompare, true
				case "Month":
					return func(e *Env) string { return e.Now.Month().String() }, costCompare, true
				}
			}
			return nil, 0, false
		}
		if isIdent(x.Callee, "lastTool") && len(x.Arguments) == 1 && isIdent(x.Arguments[0], "session") {
			return func(e *Env) string { return lastToolOf(e.Session) }, costCounter, true
		}
		if isIdent(x.Callee, "sessionText") && len(x.Arguments) == 1 && isIdent(x.Arguments[0], "session") {
			return func(e *Env) string { return sessionTextOf(e, e.Session) }, costHistory, true
		}
	}
	if _, field, ok := fieldOf(n); ok {
		return field, 0, true
	}
	return nil, 0, false
}

// guardText compiles a node the text helpers read (any value, as text) into Go: a string
// field, or an input by name, for which the guard builds the deferred inputs.
func guardText(n ast.Node, cache *regexCache) (strFn, int, bool) {
	if f, c, ok := guardStr(n, cache); ok {
		return f, c, true
	}
	if _, f, ok := inputText(n); ok {
		return f, costField, true
	}
	return nil, 0, false
}

// inputText recognises inputs.NAME and reads it as the text helpers do (textOf): the
// input's value as text, "" when the step has no such input; the inputs are built on first
// use.
func inputText(n ast.Node) (name string, get strFn, ok bool) {
	m, ok := n.(*ast.MemberNode)
	if !ok || m.Method || !isIdent(m.Node, "inputs") {
		return "", nil, false
	}
	p, ok := m.Property.(*ast.StringNode)
	if !ok {
		return "", nil, false
	}
	name = p.Value
	return name, func(e *Env) string {
		e.fill(readsInputs)
		return textOf(e.Inputs[name])
	}, true
}

// isNowCall recognises now.Weekday() and now.Month().
func isNowCall(n ast.Node) bool {
	c, ok := n.(*ast.CallNode)
	if !ok || len(c.Arguments) != 0 {
		return false
	}
	m, ok := c.Callee.(*ast.MemberNode)
	if !ok || !m.Method || !isIdent(m.Node, "now") {
		return false
	}
	p, ok := m.Property.(*ast.StringNode)
	return ok && (p.Value == "Weekday" || p.Value == "Month")
}

// guardInt compiles an int-valued node that cannot fail into Go.
func guardInt(n ast.Node, cache *regexCache) (intFn, int, bool) {
	switch x := n.(type) {
	case *ast.IntegerNode:
		v := x.Value
		return func(*Env) int { return v }, 0, true
	case *ast.MemberNode:
		if id, ok := x.Node.(*ast.IdentifierNode); ok && id.Value == "session" && !x.Method {
			if p, ok := x.Property.(*ast.StringNode); ok && p.Value == "stepCount" {
				return func(e *Env) int { return e.Session.StepCount }, 0, true
			}
		}
	case *ast.BuiltinNode:
		if x.Name == "len" && len(x.Arguments) == 1 {
			if s, c, ok := guardStr(x.Arguments[0], cache); ok {
				// expr's len counts a string's runes, not its bytes.
				return func(e *Env) int { return utf8.RuneCountInString(s(e)) }, c, true
			}
			if l, c, ok := guardScan(x.Arguments[0], cache); ok {
				return func(e *Env) int { return len(l(e)) }, c, true
			}
		}
	case *ast.CallNode:
		if m, ok := x.Callee.(*ast.MemberNode); ok && m.Method && len(x.Arguments) == 0 && isIdent(m.Node, "now") {
			prop, _ := m.Property.(*ast.StringNode)
			if prop == nil {
				return nil, 0, false
			}
			f := map[string]func(time.Time) int{"Hour": time.Time.Hour, "Minute": time.Time.Minute,
				"Second": time.Time.Second, "Day": time.Time.Day, "Year": time.Time.Year, "YearDay": time.Time.YearDay}[prop.Value]
			if f == nil {
				return nil, 0, false
			}
			return func(e *Env) int { return f(e.Now) }, costCompare, true
		}
		callee, ok := x.Callee.(*ast.IdentifierNode)
		if ok && callee.Value == "toolStreak" && len(x.Arguments) == 2 && isIdent(x.Arguments[0], "session") &&
			validGlob(x.Arguments[1]) {
			name := x.Arguments[1].(*ast.StringNode).Value
			return func(e *Env) int {
				n, _ := toolStreak(cache, e.Session, name) // a valid glob
				return n
			}, costCounter, true
		}
		if ok && callee.Value == "countToolWithin" && len(x.Arguments) == 3 && isIdent(x.Arguments[0], "session") &&
			validGlob(x.Arguments[1]) {
			d, ok := constDuration(x.Arguments[2])
			if !ok {
				return nil, 0, false
			}
			name := x.Arguments[1].(*ast.StringNode).Value
			return func(e *Env) int {
				n, _ := countToolWithin(cache, e, e.Session, name, d) // a valid glob
				return n
			}, costHistory, true
		}
		if !ok || len(x.Arguments) != 2 || !isIdent(x.Arguments[0], "session") || !validGlob(x.Arguments[1]) {
			return nil, 0, false
		}
		field := counterFields[callee.Value]
		if field == "" {
			return nil, 0, false
		}
		key := x.Arguments[1].(*ast.StringNode).Value
		if !isGlob(key) {
			return func(e *Env) int { return sessionOf(e, e.Session).counts(field)[key] }, costCounter, true
		}
		return func(e *Env) int {
			n, _ := countIn(cache, sessionOf(e, e.Session).counts(field), key) // a valid glob
			return n
		}, costText, true
	}
	return nil, 0, false
}

// guardBool compiles a condition that cannot fail into Go, with the same result as the VM.
func guardBool(n ast.Node, cache *regexCache) (boolFn, int, bool) {
	if g, ok := urlGuard(n); ok {
		return g.test, costURLs, true
	}
	switch x := n.(type) {
	case *ast.BoolNode:
		v := x.Value
		return func(*Env) bool { return v }, 0, true
	case *ast.IdentifierNode:
		if x.Value == "isError" {
			return func(e *Env) bool { return e.IsError }, costField, true
		}
	case *ast.UnaryNode:
		if x.Operator != "!" && x.Operator != "not" {
			return nil, 0, false
		}
		f, c, ok := guardBool(x.Node, cache)
		if !ok {
			return nil, 0, false
		}
		return func(e *Env) bool { return !f(e) }, c, true
	case *ast.CallNode:
		return guardCall(x, cache)
	case *ast.BinaryNode:
		return guardBinary(x, cache)
	case *ast.BuiltinNode:
		return guardSteps(x, cache)
	}
	return nil, 0, false
}

// constDuration is the value of duration("…") with a constant.
func constDuration(n ast.Node) (time.Duration, bool) {
	switch x := n.(type) {
	case *ast.BuiltinNode:
		if x.Name != "duration" || len(x.Arguments) != 1 {
			return 0, false
		}
		s, ok := x.Arguments[0].(*ast.StringNode)
		if !ok {
			return 0, false
		}
		d, err := time.ParseDuration(s.Value)
		return d, err == nil
	}
	return 0, false
}

// guardSteps compiles any, none and all over session.steps with a predicate of the step's
// string fields. The question "is there a step where the predicate holds (fails, for
// all)" is answered by the session's memo, so a long session is not walked on every step.
func guardSteps(x *ast.BuiltinNode, cache *regexCache) (boolFn, int, bool) {
	if (x.Name != "any" && x.Name != "none" && x.Name != "all") || len(x.Arguments) != 2 || x.Map != nil || x.Threshold != nil {
		return nil, 0, false
	}
	m, ok := x.Arguments[0].(*ast.MemberNode)
	if !ok || m.Method || !isIdent(m.Node, "session") {
		return nil, 0, false
	}
	if p, ok := m.Property.(*ast.StringNode); !ok || p.Value != "steps" {
		return nil, 0, false
	}
	pn, ok := x.Arguments[1].(*ast.PredicateNode)
	if !ok {
		return nil, 0, false
	}
	pred, ok := stepPred(pn.Node, cache)
	if !ok {
		return nil, 0, false
	}
	want := x.Name != "all"
	key := "steps\x00" + fmt.Sprint(want) + "\x00" + pn.Node.String()
	ask := func(h *HistoryStep) (bool, error) { return pred(h) == want, nil }
	found := func(e *Env) bool {
		if mm := memoOf(e, e.Session); mm != nil {
			if v, ok, _ := mm.anyStep(key, e.Session, ask); ok {
				return v
			}
		}
		for i := len(e.Session.Steps) - 1; i >= 0; i-- {
			if pred(&e.Session.Steps[i]) == want {
				return true
			}
		}
		return false
	}
	if x.Name == "any" {
		return found, costHistory, true
	}
	return func(e *Env) bool { return !found(e) }, costHistory, true
}

// stepFields are the string fields of a HistoryStep a step predicate may test.
var stepFields = map[string]func(*HistoryStep) string{
	"method": func(h *HistoryStep) string { return h.Method }, "kind": func(h *HistoryStep) string { return h.Kind },
	"tool": func(h *HistoryStep) string { return h.Tool }, "decision": func(h *HistoryStep) string { return h.Decision },
	"text": func(h *HistoryStep) string { return h.Text },
}

// stepPred compiles a predicate over one history step (.tool == "x" && .decision in […]).
func stepPred(n ast.Node, cache *regexCache) (func(*HistoryStep) bool, bool) {
	switch x := n.(type) {
	case *ast.BoolNode:
		v := x.Value
		return func(*HistoryStep) bool { return v }, true
	case *ast.UnaryNode:
		if x.Operator != "!" && x.Operator != "not" {
			return nil, false
		}
		f, ok := stepPred(x.Node, cache)
		if !ok {
			return nil, false
		}
		return func(h *HistoryStep) bool { return !f(h) }, true
	case *ast.BinaryNode:
		switch x.Operator {
		case "&&", "and", "||", "or":
			l, ok := stepPred(x.Left, cache)
			if !ok {
				return nil, false
			}
			r, ok := stepPred(x.Right, cache)
			if !ok {
				return nil, false
			}
			if x.Operator == "&&" || x.Operator == "and" {
				return func(h *HistoryStep) bool { return l(h) && r(h) }, true
			}
			return func(h *HistoryStep) bool { return l(h) || r(h) }, true
		}
		f, ok := stepField(x.Left)
		if !ok {
			return nil, false
		}
		switch x.Operator {
		case "in":
			arr, ok := x.Right.(*ast.ArrayNode)
			if !ok {
				return nil, false
			}
			var set []string
			for _, n := range arr.Nodes {
				s, ok := n.(*ast.StringNode)
				if !ok {
					return nil, false
				}
				set = append(set, s.Value)
			}
			return func(h *HistoryStep) bool { return slices.Contains(set, f(h)) }, true
		case "matches":
			pat, ok := x.Right.(*ast.StringNode)
			if !ok {
				return nil, false
			}
			en := cache.entry(pat.Value)
			if en.err != nil {
				return nil, false
			}
			return func(h *HistoryStep) bool { return en.re.MatchString(f(h)) }, true
		}
		c, ok := x.Right.(*ast.StringNode)
		if !ok {
			return nil, false
		}
		want := c.Value
		op := map[string]func(a, b string) bool{
			"==": func(a, b string) bool { return a == b }, "!=": func(a, b string) bool { return a != b },
			"startsWith": strings.HasPrefix, "endsWith": strings.HasSuffix, "contains": strings.Contains,
		}[x.Operator]
		if op == nil {
			return nil, false
		}
		return func(h *HistoryStep) bool { return op(f(h), want) }, true
	}
	return nil, false
}

// stepField recognises .tool (#.tool) inside a predicate over history steps.
func stepField(n ast.Node) (func(*HistoryStep) string, bool) {
	m, ok := n.(*ast.MemberNode)
	if !ok || m.Method {
		return nil, false
	}
	if p, ok := m.Node.(*ast.PointerNode); !ok || p.Name != "" {
		return nil, false
	}
	prop, ok := m.Property.(*ast.StringNode)
	if !ok {
		return nil, false
	}
	f, ok := stepFields[prop.Value]
	return f, ok
}

// guardScan compiles a text scanner's call (piiKinds(text), secrets(inputs.body)) into Go;
// it shares the evaluation's memo with the VM's calls.
func guardScan(n ast.Node, cache *regexCache) (func(*Env) []string, int, bool) {
	c, ok := n.(*ast.CallNode)
	if !ok || len(c.Arguments) != 1 {
		return nil, 0, false
	}
	id, ok := c.Callee.(*ast.IdentifierNode)
	if !ok || !scanHelpers[id.Value] {
		return nil, 0, false
	}
	s, cost, ok := guardText(c.Arguments[0], cache)
	if !ok {
		return nil, 0, false
	}
	name := id.Value
	return func(e *Env) []string { return scanList(e, name, s(e)) }, cost + costScan, true
}

func guardCall(x *ast.CallNode, cache *regexCache) (boolFn, int, bool) {
	if id, ok := x.Callee.(*ast.IdentifierNode); ok && len(x.Arguments) == 2 && (id.Value == "glob" || id.Value == "regexMatch") {
		pat, text := x.Arguments[0], x.Arguments[1]
		if id.Value == "regexMatch" {
			pat, text = text, pat
		}
		p, ok := pat.(*ast.StringNode)
		if !ok {
			return nil, 0, false
		}
		s, c, ok := guardText(text, cache)
		if !ok {
			return nil, 0, false
		}
		if id.Value == "glob" {
			if !validGlob(pat) {
				return nil, 0, false
			}
			en := cache.globEntry(p.Value)
			if en.err != nil {
				return nil, 0, false
			}
			return func(e *Env) bool { return en.re.MatchString(s(e)) }, c + costRegexp, true
		}
		en := cache.entry(p.Value)
		if en.err != nil {
			return nil, 0, false
		}
		return func(e *Env) bool { return en.match(e, s(e)) }, c + costRegexp, true
	}
	id, ok := x.Callee.(*ast.IdentifierNode)
	if ok && id.Value == "sessionHas" && len(x.Arguments) == 3 && isIdent(x.Arguments[0], "session") &&
		validGlob(x.Arguments[1]) {
		sub, ok := x.Arguments[2].(*ast.StringNode)
		if !ok {
			return nil, 0, false
		}
		sel, low := x.Arguments[1].(*ast.StringNode).Value, strings.ToLower(sub.Value)
		return func(e *Env) bool {
			v, _ := sessionHasCached(cache, e, e.Session, sel, low) // a valid glob
			return v
		}, costHistory, true
	}
	if !ok || len(x.Arguments) != 2 {
		return nil, 0, false
	}
	s, c, ok := guardStr(x.Arguments[0], cache)
	if !ok {
		return nil, 0, false
	}
	switch id.Value {
	case "icontains":
		sub, ok := x.Arguments[1].(*ast.StringNode)
		if !ok {
			return nil, 0, false
		}
		want := strings.ToLower(sub.Value)
		return func(e *Env) bool { return strings.Contains(lowerOf(e, s(e)), want) }, c + costText, true
	case "sessionHas":
		return nil, 0, false
	case "containsAny":
		arr, ok := x.Arguments[1].(*ast.ArrayNode)
		if !ok {
			return nil, 0, false
		}
		var subs []string
		for _, n := range arr.Nodes {
			str, ok := n.(*ast.StringNode)
			if !ok {
				return nil, 0, false
			}
			if str.Value != "" {
				subs = append(subs, strings.ToLower(str.Value))
			}
		}
		return func(e *Env) bool {
			if len(subs) == 0 {
				return false
			}
			low := lowerOf(e, s(e))
			return slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(low, sub) })
		}, c + costText, true
	}
	return nil, 0, false
}

func guardBinary(x *ast.BinaryNode, cache *regexCache) (boolFn, int, bool) {
	switch x.Operator {
	case "&&", "and", "||", "or":
		l, lc, ok := guardBool(x.Left, cache)
		if !ok {
			return nil, 0, false
		}
		r, rc, ok := guardBool(x.Right, cache)
		if !ok {
			return nil, 0, false
		}
		if x.Operator == "&&" || x.Operator == "and" {
			return func(e *Env) bool { return l(e) && r(e) }, lc + rc, true
		}
		return func(e *Env) bool { return l(e) || r(e) }, lc + rc, true
	case "<", "<=", ">", ">=", "==", "!=":
		if l, lc, ok := guardInt(x.Left, cache); ok {
			r, rc, ok := guardInt(x.Right, cache)
			if !ok {
				return nil, 0, false
			}
			cmp := map[string]func(a, b int) bool{
				">": func(a, b int) bool { return a > b }, ">=": func(a, b int) bool { return a >= b },
				"<": func(a, b int) bool { return a < b }, "<=": func(a, b int) bool { return a <= b },
				"==": func(a, b int) bool { return a == b }, "!=": func(a, b int) bool { return a != b },
			}[x.Operator]
			return func(e *Env) bool { return cmp(l(e), r(e)) }, lc + rc + costCompare, true
		}
	}
	if f, ok := inputNilTest(x); ok {
		return f, costField, true
	}
	if x.Operator == "matches" {
		pat, ok := x.Right.(*ast.StringNode)
		if !ok {
			return nil, 0, false
		}
		l, lc, ok := guardText(x.Left, cache)
		if !ok {
			return nil, 0, false
		}
		en := cache.entry(pat.Value)
		if en.err != nil {
			return nil, 0, false
		}
		return func(e *Env) bool { return en.match(e, l(e)) }, lc + costRegexp, true
	}
	if x.Operator == "in" {
		if list, c, ok := guardScan(x.Right, cache); ok {
			want, _, ok := guardStr(x.Left, cache)
			if !ok {
				return nil, 0, false
			}
			return func(e *Env) bool { return slices.Contains(list(e), want(e)) }, c, true
		}
	}
	l, lc, ok := guardStr(x.Left, cache)
	if !ok {
		return nil, 0, false
	}
	if x.Operator == "in" {
		arr, ok := x.Right.(*ast.ArrayNode)
		if !ok {
			return nil, 0, false
		}
		var set []string
		for _, n := range arr.Nodes {
			s, ok := n.(*ast.StringNode)
			if !ok {
				return nil, 0, false
			}
			set = append(set, s.Value)
		}
		return func(e *Env) bool { return slices.Contains(set, l(e)) }, lc + costField + len(set)/8, true
	}
	if x.Operator == "matches" {
		pat, ok := x.Right.(*ast.StringNode)
		if !ok {
			return nil, 0, false
		}
		en := cache.entry(pat.Value)
		if en.err != nil {
			return nil, 0, false
		}
		return func(e *Env) bool { return en.match(e, l(e)) }, lc + costRegexp, true
	}
	if f, ok := sessionTextContains(x); ok {
		return f, costHistory, true
	}
	r, rc, ok := guardStr(x.Right, cache)
	if !ok {
		return nil, 0, false
	}
	op := map[string]func(a, b string) bool{
		"==": func(a, b string) bool { return a == b }, "!=": func(a, b string) bool { return a != b },
		"startsWith": strings.HasPrefix, "endsWith": strings.HasSuffix, "contains": strings.Contains,
	}[x.Operator]
	if op == nil {
		return nil, 0, false
	}
	return func(e *Env) bool { return op(l(e), r(e)) }, lc + rc + costCompare, true
}

// inputNilTest compiles `inputs.NAME != nil` (or ==, either way round), the usual test
// that a tool call has an input before its value is looked at. The VM's == with nil is true
// for a missing input, a JSON null and a nil map or list alike, as isNil is.
func inputNilTest(x *ast.BinaryNode) (boolFn, bool) {
	if x.Operator != "==" && x.Operator != "!=" {
		return nil, false
	}
	in, other := x.Left, x.Right
	if _, isNil := in.(*ast.NilNode); isNil {
		in, other = other, in
	}
	if _, isNil := other.(*ast.NilNode); !isNil {
		return nil, false
	}
	m, ok := in.(*ast.MemberNode)
	if !ok || m.Method || !isIdent(m.Node, "inputs") {
		return nil, false
	}
	p, ok := m.Property.(*ast.StringNode)
	if !ok {
		return nil, false
	}
	name, want := p.Value, x.Operator == "=="
	return func(e *Env) bool {
		e.fill(readsInputs)
		return isNil(e.Inputs[name]) == want
	}, true
}

// inputCompareRefuter recognises `inputs.NAME > 5000` (any of < <= > >=, either way
// round), which fails in the VM when the input is not a number, and returns a test that is
// false only when the comparison is certainly false without failing: the input is a number
// (float64 as JSON decodes it, or int) and the comparison, as expr makes it, does not hold.
// For anything else it is true and leaves the VM to decide and report.
func inputCompareRefuter(n ast.Node) (boolFn, bool) {
	x, ok := n.(*ast.BinaryNode)
	if !ok {
		return nil, false
	}
	op := x.Operator
	in, num := x.Left, x.Right
	if _, isInt := in.(*ast.IntegerNode); isInt {
		in, num = num, in
		op = map[string]string{"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
	}
	c, isInt := num.(*ast.IntegerNode)
	m, isMember := in.(*ast.MemberNode)
	if !isInt || !isMember || m.Method || m.Optional || !isIdent(m.Node, "inputs") {
		return nil, false
	}
	p, ok := m.Property.(*ast.StringNode)
	if !ok {
		return nil, false
	}
	holds := map[string]func(cmp int) bool{
		"<":  func(cmp int) bool { return cmp < 0 },
		"<=": func(cmp int) bool { return cmp <= 0 },
		">":  func(cmp int) bool { return cmp > 0 },
		">=": func(cmp int) bool { return cmp >= 0 },
	}[op]
	if holds == nil {
		return nil, false
	}
	name, want := p.Value, c.Value
	return func(e *Env) bool {
		e.fill(readsInputs)
		switch v := e.Inputs[name].(type) {
		case int:
			return holds(cmpInt(v, want))
		case float64:
			// expr compares a float with an int as float64(int), as here. NaN compares as
			// equal here, so <= and >= leave it to the VM (which finds it false).
			return holds(cmpFloat(v, float64(want)))
		}
		return true
	}, true
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sessionTextContains compiles `sessionText(session) contains "literal"`, for a literal
// without a newline, into a question the session memo answers incrementally: the steps'
// texts are joined with newlines, so such a literal occurs in the joined text exactly when
// it occurs in one step's text, and each step is looked at once per question instead of the
// whole history being searched on every step. Without a memo (or when it cannot answer) the
// text is joined and searched as the VM would.
func sessionTextContains(x *ast.BinaryNode) (boolFn, bool) {
	c, ok := x.Left.(*ast.CallNode)
	if !ok || x.Operator != "contains" || !isIdent(c.Callee, "sessionText") || len(c.Arguments) != 1 ||
		!isIdent(c.Arguments[0], "session") {
		return nil, false
	}
	lit, ok := x.Right.(*ast.StringNode)
	if !ok || lit.Value == "" || strings.Contains(lit.Value, "\n") {
		return nil, false
	}
	sub, key := lit.Value, "text\x00"+lit.Value
	has := func(st *HistoryStep) (bool, error) { return strings.Contains(st.Text, sub), nil }
	return func(e *Env) bool {
		if m := memoOf(e, e.Session); m != nil {
			if v, ok, _ := m.anyStep(key, e.Session, has); ok {
				return v
			}
		}
		return strings.Contains(sessionTextOf(e, e.Session), sub)
	}, true
}

// lastToolOf is lastTool(session).
func lastToolOf(s Session) string {
	for i := len(s.Steps) - 1; i >= 0; i-- {
		if isToolCall(&s.Steps[i]) {
			return s.Steps[i].Tool
		}
	}
	return ""
}
