package rules

import (
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// guard is a test on a string field of the Env that a condition's leading conjuncts make
// necessary: for `tool == "send_email" && …` the VM need not run when the tool differs.
// Most rules start this way, so checking the guard in Go skips most of a policy per step.
// Only leading conjuncts that cannot fail are used, so skipping never hides a run-time
// error the condition would have raised (&& evaluates left to right and stops at false).
type guard struct {
	// name is the field's expr name (tool, agent.id), for the rule index.
	name   string
	field  func(*Env) string
	values []string
	negate bool
	// test, when set, is the whole conjunct evaluated in Go instead: a constant regexp
	// match of a field, a session counter against a number, or a test of the domains of
	// the field's URLs.
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
}

// counterFields are the counting helpers a guard may evaluate, by the field they count.
var counterFields = map[string]string{
	"countTool": "tool", "countMethod": "method", "countKind": "kind", "countDecision": "decision",
}

// guardsOf returns the guards of a condition's leading conjuncts; regexps go through cache,
// as the condition's own `matches` do.
func guardsOf(src string, cache *regexCache) []guard {
	tree, err := parser.Parse(src)
	if err != nil {
		return nil
	}
	var out []guard
	for _, c := range conjuncts(tree.Node) {
		g, ok := guardOf(c, cache)
		if !ok {
			break
		}
		out = append(out, g)
	}
	return out
}

// conjuncts flattens a && b && c into [a b c], left to right.
func conjuncts(n ast.Node) []ast.Node {
	if b, ok := n.(*ast.BinaryNode); ok && (b.Operator == "&&" || b.Operator == "and") {
		return append(conjuncts(b.Left), conjuncts(b.Right)...)
	}
	return []ast.Node{n}
}

func guardOf(n ast.Node, cache *regexCache) (guard, bool) {
	if g, ok := urlGuard(n); ok {
		return g, true
	}
	b, ok := n.(*ast.BinaryNode)
	if !ok {
		return guard{}, false
	}
	if g, ok := counterGuard(b); ok {
		return g, true
	}
	switch b.Operator {
	case "matches":
		// `text matches "…"` with a valid constant pattern cannot fail.
		_, field, ok := fieldOf(b.Left)
		pat, isStr := b.Right.(*ast.StringNode)
		if !ok || !isStr {
			return guard{}, false
		}
		en := cache.entry(pat.Value)
		if en.err != nil {
			return guard{}, false
		}
		return guard{test: func(e *Env) bool { return en.match(e, field(e)) }}, true
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

// counterGuard recognises `countTool(session, "name") > 3` and the like (any comparison
// with an integer, the counter on the left, a plain name, not a glob): counting cannot fail.
func counterGuard(b *ast.BinaryNode) (guard, bool) {
	cmp := map[string]func(a, b int) bool{
		">": func(a, b int) bool { return a > b }, ">=": func(a, b int) bool { return a >= b },
		"<": func(a, b int) bool { return a < b }, "<=": func(a, b int) bool { return a <= b },
		"==": func(a, b int) bool { return a == b }, "!=": func(a, b int) bool { return a != b },
	}[b.Operator]
	call, isCall := b.Left.(*ast.CallNode)
	num, isInt := b.Right.(*ast.IntegerNode)
	if cmp == nil || !isCall || !isInt || len(call.Arguments) != 2 {
		return guard{}, false
	}
	callee, ok := call.Callee.(*ast.IdentifierNode)
	field := counterFields[callee.Value]
	sess, isIdent := call.Arguments[0].(*ast.IdentifierNode)
	name, isStr := call.Arguments[1].(*ast.StringNode)
	if !ok || field == "" || !isIdent || sess.Value != "session" || !isStr || isGlob(name.Value) {
		return guard{}, false
	}
	want, key := num.Value, name.Value
	return guard{test: func(e *Env) bool {
		return cmp(sessionOf(e, e.Session).counts(field)[key], want)
	}}, true
}

// urlGuard recognises `any(urls(text), {domain(#) == "evil.example"})`, the usual
// exfiltration test, with ==, !=, in [strings], startsWith, endsWith or contains against
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
