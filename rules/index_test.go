package rules

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIndexAgreesWithConditions builds random rules out of field tests (==, !=, in, not in
// on coarse and fine fields, in any order), tests the VM evaluates and a test that fails on
// some steps, and checks that each rule matches, or records an error, through Evaluate,
// which visits only the rules its index files under the step's values, exactly when its
// condition does in the VM.
func TestIndexAgreesWithConditions(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	fields := map[string][]string{
		"kind": {"toolCall", "message"}, "method": {"m1", "m2"}, "tool": {"a", "b", "c", "d"},
		"agent.id": {"x", "y", "z"}, "user.id": {"u", "v"},
	}
	names := []string{"kind", "method", "tool", "agent.id", "user.id"}
	value := func(f string) string { vs := fields[f]; return vs[r.IntN(len(vs))] }
	test := func() string {
		f := names[r.IntN(len(names))]
		switch r.IntN(6) {
		case 0:
			return fmt.Sprintf("%s != %q", f, value(f))
		case 1:
			return fmt.Sprintf("%s in [%q, %q]", f, value(f), value(f))
		case 2:
			return fmt.Sprintf("!(%s in [%q])", f, value(f))
		case 3:
			return fmt.Sprintf("%q == %s", value(f), f)
		default:
			return fmt.Sprintf("%s == %q", f, value(f))
		}
	}
	others := []string{
		"inputs.n > 1",        // fails when n is a string
		"len(text) > 2",       // the VM's
		"text contains \"k\"", // a guard of another kind
		"countTool(session, \"a\") >= 0",
	}
	filedLater := 0
	for round := range 80 {
		var rs []Rule
		for i := range 1 + r.IntN(60) {
			var parts []string
			for range 1 + r.IntN(4) {
				if r.IntN(4) == 0 {
					parts = append(parts, others[r.IntN(len(others))])
				} else {
					parts = append(parts, test())
				}
			}
			c := strings.Join(parts, " && ")
			rs = append(rs, rule(fmt.Sprintf("r%d", i), c, ActionDeny))
		}
		p := mustCompile(t, Options{}, rs...)
		for _, cr := range p.active {
			if g, ok := indexGuard(cr.guards); ok && len(cr.guards) > 0 && g.name != cr.guards[0].name {
				filedLater++
			}
		}
		for range 40 {
			env := &Env{Kind: value("kind"), Method: value("method"), Tool: value("tool"),
				Agent: Agent{ID: value("agent.id")}, User: User{ID: value("user.id")},
				Text: []string{"kk", "a"}[r.IntN(2)], Inputs: map[string]any{"n": []any{2, "s"}[r.IntN(2)]}}
			requireVerdictsMatchVM(t, p, env, fmt.Sprintf("round %d ", round))
		}
	}
	require.Greater(t, filedLater, 100, "rules filed under a guard other than their first")
}
