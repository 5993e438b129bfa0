package rules

import (
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// guard is a conjunct of a condition that the condition makes necessary, checked in Go:
// for `… && tool == "send_email"` the VM need not run when the tool differs. Only
// conjuncts before the first one that could fail are used, so skipping never hides a
// run-time error the condition would have raised (&& evaluates left to right and stops at
// false); see order.go.
type guard struct {
	// name is the field's expr name (tool, agent.id), for the rule index.
	name   string
	field  func(*Env) string
	values []string
	negate bool
	// test, when set, is the whole conjunct evaluated in Go instead (guardBool): a
	// constant regexp match, a session counter against a number, a test of the domains of
	// URLs, a prefix test, a clock test and the like.
	test func(*Env) bool
}

func (g guard) pass(e *Env) bool {
	if g.test != nil {
		return g.test(e)
	}
	v := g.field(e)
	for _, want := range g.values {
		if v == want {
			return !g.negate
		}
	}
	return g.negate
}

// guardFields are the Env strings a guard may test, by expr name.
var guardFields = map[string]func(*Env) string{
	"method":     func(e *Env) string { return e.Method },
	"kind":       func(e *Env) string { return e.Kind },
	"tool":       func(e *Env) string { return e.Tool },
	"role":       func(e *Env) string { return e.Role },
	"agent.id":   func(e *Env) string { return e.Agent.ID },
	"agent.name": func(e *Env) string { return e.Agent.Name },
	"user.id":    func(e *Env) string { return e.User.ID },
	"mcp.method": func(e *Env) string { return e.MCP.Method },
	"mcp.tool":   func(e *Env) string { return e.MCP.Tool },
	"a2a.method": func(e *Env) string { return e.A2A.Method },
	"text":       func(e *Env) string { return e.Text },
	// Fields no rule index files by in practice, but which cheap tests read.
	"agent.version":  func(e *Env) string { return e.Agent.Version },
	"agent.provider": func(e *Env) string { return e.Agent.Provider },
	"agent.model":    func(e *Env) string { return e.Agent.Model },
	"user.name":      func(e *Env) string { return e.User.Name },
	"user.email":     func(e *Env) string { return e.User.Email },
	"user.org":       func(e *Env) string { return e.User.Org },
	"session.id":     func(e *Env) string { return e.Session.ID },
	"turnId":         func(e *Env) string { return e.TurnID },
	"stepId":         func(e *Env) string { return e.StepID },
	"reasoning":      func(e *Env) string { return e.Reasoning },
	"a2a.text":       func(e *Env) string { return e.A2A.Text },
	"a2a.from":       func(e *Env) string { return e.A2A.From },
	"a2a.to":         func(e *Env) string { return e.A2A.To },
	"a2a.contextId":  func(e *Env) string { return e.A2A.ContextID },
}

// counterFields are the counting helpers a guard may evaluate, by the field they count.
var counterFields = map[string]string{
	"countTool": "tool", "countMethod": "method", "countKind": "kind", "countDecision": "decision",
}

// guardsOf returns the guards of a condition, cheapest first, and whether they are the
// whole condition (then the VM need not run when they pass). Guards come from the
// conjuncts before the first one that could fail (see order.go); regexps go through cache,
// as the condition's own `matches` do.
func guardsOf(src string, cache *regexCache) ([]guard, bool) {
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, false
	}
	type costed struct {
		g    guard
		cost int
	}
	var out []costed
	partial := false
	cs := conjuncts(tree.Node)
	for _, c := range cs {
		if typeOf(c, tBad) != tBool {
			// It may fail: a guard after it could hide its error. But where it is certainly
			// false without failing, so is the rule.
			if f, ok := inputCompareRefuter(c); ok {
				out = append(out, costed{guard{test: f}, costCompare})
				partial = true // the VM still evaluates the conjunct when it passes
			}
			break
		}
		if g, ok := guardOf(c); ok {
			out = append(out, costed{g, costField})
		} else if f, cost, ok := guardBool(c, cache); ok {
			out = append(out, costed{guard{test: f}, cost})
		}
		// Otherwise the VM evaluates it; the conjuncts after it may still be guards.
	}
	slices.SortStableFunc(out, func(a, b costed) int { return a.cost - b.cost })
	gs := make([]guard, len(out))
	for i, c := range out {
		gs[i] = c.g
	}
	return gs, !partial && len(gs) == len(cs)
}

// conjuncts flattens a && b && c into [a b c], left to right.
func conjuncts(n ast.Node) []ast.Node {
	if b, ok := n.(*ast.BinaryNode); ok && (b.Operator == "&&" || b.Operator == "and") {
		return append(conjuncts(b.Left), conjuncts(b.Right)...)
	}
	return []ast.Node{n}
}

// guardOf recognises an equality or `in` test of a step field against constants, which
// the rule index can file the rule under.
func guardOf(n ast.Node) (guard, bool) {
	b, ok := n.(*ast.BinaryNode)
	if !ok {
		return guard{}, false
	}
	switch b.Operator {
	case "==", "!=":
		f, s := b.Left, b.Right
		if _, isStr := f.(*ast.StringNode); isStr {
			f, s = s, f
		}
		name, field, ok := fieldOf(f)
		str, isStr := s.(*ast.StringNode)
		if !ok || !isStr {
			return guard{}, false
		}
		return guard{name: name, field: field, values: []string{str.Value}, negate: b.Operator == "!="}, true
	case "in":
		name, field, ok := fieldOf(b.Left)
		arr, isArr := b.Right.(*ast.ArrayNode)
		if !ok || !isArr {
			return guard{}, false
		}
		g := guard{name: name, field: field}
		for _, e := range arr.Nodes {
			s, ok := e.(*ast.StringNode)
			if !ok {
				return guard{}, false
			}
			g.values = append(g.values, s.Value)
		}
		return g, true
	}
	return guard{}, false
}

// urlGuard recognises `any(urls(text), {domain(#) == "evil.example"})`, the usual
// exfiltration test (of a step field or an input), with ==, !=, in [strings], startsWith,
// endsWith or contains against
// constants. Finding URLs and their domains cannot fail, and the domains are found once
// per evaluation for all such rules instead of once per rule in the VM.
func urlGuard(n ast.Node) (guard, bool) {
	call, ok := n.(*ast.BuiltinNode)
	if !ok || call.Name != "any" || len(call.Arguments) != 2 || call.Map != nil || call.Threshold != nil {
		return guard{}, false
	}
	list, isCall := call.Arguments[0].(*ast.CallNode)
	pred, isPred := call.Arguments[1].(*ast.PredicateNode)
	if !isCall || !isPred || !isIdent(list.Callee, "urls") || len(list.Arguments) != 1 {
		return guard{}, false
	}
	_, field, ok := fieldOf(list.Arguments[0])
	if !ok {
		// urls(inputs.body) reads the input as text, as inputText does.
		_, field, ok = inputText(list.Arguments[0])
	}
	b, isBin := pred.Node.(*ast.BinaryNode)
	if !ok || !isBin {
		return guard{}, false
	}
	dom, isCall := b.Left.(*ast.CallNode)
	if !isCall || !isIdent(dom.Callee, "domain") || len(dom.Arguments) != 1 {
		return guard{}, false
	}
	if p, isPtr := dom.Arguments[0].(*ast.PointerNode); !isPtr || p.Name != "" {
		return guard{}, false
	}
	var test func(string) bool
	if str, isStr := b.Right.(*ast.StringNode); isStr {
		want := str.Value
		test = map[string]func(string) bool{
			"==":         func(d string) bool { return d == want },
			"!=":         func(d string) bool { return d != want },
			"startsWith": func(d string) bool { return strings.HasPrefix(d, want) },
			"endsWith":   func(d string) bool { return strings.HasSuffix(d, want) },
			"contains":   func(d string) bool { return strings.Contains(d, want) },
		}[b.Operator]
	} else if arr, isArr := b.Right.(*ast.ArrayNode); isArr && b.Operator == "in" {
		var set []string
		for _, e := range arr.Nodes {
			s, ok := e.(*ast.StringNode)
			if !ok {
				return guard{}, false
			}
			set = append(set, s.Value)
		}
		test = func(d string) bool { return slices.Contains(set, d) }
	}
	if test == nil {
		return guard{}, false
	}
	return guard{test: func(e *Env) bool {
		return slices.ContainsFunc(urlDomains(e, field(e)), test)
	}}, true
}

func isIdent(n ast.Node, name string) bool {
	id, ok := n.(*ast.IdentifierNode)
	return ok && id.Value == name
}

// fieldOf recognises `tool`, `agent.id` and the like.
func fieldOf(n ast.Node) (string, func(*Env) string, bool) {
	var name string
	switch x := n.(type) {
	case *ast.IdentifierNode:
		name = x.Value
	case *ast.MemberNode:
		id, ok := x.Node.(*ast.IdentifierNode)
		prop, isStr := x.Property.(*ast.StringNode)
		if !ok || !isStr || x.Method {
			return "", nil, false
		}
		name = id.Value + "." + prop.Value
	default:
		return "", nil, false
	}
	f, ok := guardFields[name]
	return name, f, ok
}

// identReads collects the costly Env fields that identifiers name.
type identReads struct{ r reads }

// readsByName are the costly fields by expr name; $env reaches all of them.
var readsByName = map[string]reads{"params": readsParams, "toolDef": readsToolDef,
	"inputs": readsInputs, "$env": readsParams | readsToolDef | readsInputs}

func (f *identReads) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok {
		f.r |= readsByName[id.Value]
	}
}

// reads is the set of costly Env fields an expression may read, so that an Env builder can
// skip filling the others.
type reads uint8

const (
	readsParams reads = 1 << iota
	readsToolDef
	readsInputs
)

// readsOf reports which costly fields an expression may read: by name, or all of them
// through $env. Unparseable text counts as reading everything, to stay on the safe side.
func readsOf(src string) reads {
	tree, err := parser.Parse(src)
	if err != nil {
		return readsParams | readsToolDef | readsInputs
	}
	var f identReads
	ast.Walk(&tree.Node, &f)
	return f.r
}
