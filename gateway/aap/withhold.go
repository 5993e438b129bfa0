package aap

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"

	"github.com/vigil-guardian/vigil/rules"
)

// RulesMayWithhold is Options.MayWithhold for a rules engine: true when the default decision
// is deny, or an enabled, enforced deny, hold or modify rule could match an agent's message.
// A rule cannot when its condition starts with a test that such a message fails (`kind ==
// "tool"`, `role == "user"`, `tool == "send_email"`, `method in [...]`); any other rule is
// assumed to. The answer is cached per rule set, so a reload is seen on the next message.
func RulesMayWithhold(e *rules.Engine, now func() time.Time) func() bool {
	type entry struct {
		prog *rules.Program
		may  bool
		// until is when a rule of the set expires, after which the answer is worked out again.
		until time.Time
	}
	var cache atomic.Pointer[entry]
	if now == nil {
		now = time.Now
	}
	return func() bool {
		p := e.Program()
		t := now()
		if c := cache.Load(); c != nil && c.prog == p && (c.until.IsZero() || t.Before(c.until)) {
			return c.may
		}
		ent := &entry{prog: p, may: p.Options().DefaultDecision == rules.ActionDeny}
		for _, r := range p.Rules() {
			if r.ExpiresAt != nil {
				if !t.Before(*r.ExpiresAt) {
					continue
				}
				if ent.until.IsZero() || r.ExpiresAt.Before(ent.until) {
					ent.until = *r.ExpiresAt
				}
			}
			if ruleMayWithhold(r) {
				ent.may = true
			}
		}
		cache.Store(ent)
		return ent.may
	}
}

// agentMessage is what an assistant message's step has in the fields a guard can test.
var agentMessage = map[string]string{"kind": "message", "method": "steps/message", "role": "agent", "tool": ""}

func ruleMayWithhold(r rules.Rule) bool {
	if !r.Enabled || (r.Mode != "" && r.Mode != rules.ModeEnforce) || r.Action == rules.ActionAllow {
		return false
	}
	tree, err := parser.Parse(r.When)
	if err != nil {
		return true
	}
	for _, c := range conjuncts(tree.Node) {
		if excludes(c) {
			return false
		}
	}
	return true
}

func conjuncts(n ast.Node) []ast.Node {
	if b, ok := n.(*ast.BinaryNode); ok && (b.Operator == "&&" || b.Operator == "and") {
		return append(conjuncts(b.Left), conjuncts(b.Right)...)
	}
	return []ast.Node{n}
}

// excludes reports whether a conjunct is a test of a string field an agent message fails.
func excludes(n ast.Node) bool {
	b, ok := n.(*ast.BinaryNode)
	if !ok {
		return false
	}
	id, ok := b.Left.(*ast.IdentifierNode)
	if !ok {
		return false
	}
	have, known := agentMessage[id.Value]
	if !known {
		return false
	}
	switch b.Operator {
	case "==", "!=":
		s, ok := b.Right.(*ast.StringNode)
		if !ok {
			return false
		}
		return (s.Value == have) == (b.Operator == "!=")
	case "in", "not in":
		arr, ok := b.Right.(*ast.ArrayNode)
		if !ok {
			return false
		}
		var vals []string
		for _, e := range arr.Nodes {
			s, ok := e.(*ast.StringNode)
			if !ok {
				return false
			}
			vals = append(vals, s.Value)
		}
		return slices.Contains(vals, have) == (b.Operator == "not in")
	}
	return false
}
