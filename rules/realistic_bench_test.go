package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// realisticRules loads bench/rules-realistic.yaml, the load benchmark's realistic set.
func realisticRules(tb testing.TB) []Rule {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("..", "bench", "rules-realistic.yaml"))
	require.NoError(tb, err)
	f, err := ParseFile("rules-realistic.yaml", data)
	require.NoError(tb, err)
	return f.Rules
}

// loadEnv is a step like the load generator's (bench/loadgen): a tool call of the billing
// agent, its tool cycling through four, after hist earlier steps received a second apart.
func loadEnv(i, hist int) *Env {
	tools := []string{"search_web", "read_file", "send_email", "transfer_funds"}
	at := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	steps := make([]HistoryStep, hist)
	for k := range steps {
		steps[k] = HistoryStep{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: tools[k%4],
			Decision: "allow", Text: "query=outstanding invoices for customer 8812 in October\nto=dana@corp.example\namount=" + fmt.Sprint(k*37%2000),
			Seq: int64(k + 1), ReceivedAt: at.Add(time.Duration(k) * 100 * time.Millisecond)}
	}
	return &Env{
		Method: "steps/toolCallRequest", Kind: "toolCall",
		Agent:   Agent{ID: "agent-billing", Name: "Billing assistant", Version: "2.3.1", Provider: "corp.example", Model: "model-large"},
		User:    User{ID: "user-42", Name: "Dana", Email: "dana@corp.example", Org: "org-1"},
		Session: Session{ID: "load-1", StepCount: hist, Steps: steps},
		TurnID:  "turn-1", StepID: "step-1", Tool: tools[i%4],
		Text:      "query=outstanding invoices for customer 8812 in October\nto=dana@corp.example\namount=" + fmt.Sprint(i*37%2000),
		Inputs:    map[string]any{"query": "outstanding invoices for customer 8812 in October", "to": "dana@corp.example", "amount": i * 37 % 2000},
		Reasoning: "The user asked about their open invoices; I will look them up before answering.",
		Now:       at.Add(time.Duration(hist) * 100 * time.Millisecond),
	}
}

// TestRealisticRulesAllowTheLoad: the load benchmark must evaluate every rule on every
// request, so no rule of the realistic set may deny or hold its traffic.
func TestRealisticRulesAllowTheLoad(t *testing.T) {
	p, err := Compile(realisticRules(t), Options{})
	require.NoError(t, err)
	for _, hist := range []int{0, 20, 300, 1000} {
		for i := range 8 {
			v := p.Evaluate(loadEnv(i, hist))
			require.Equal(t, ActionAllow, v.Action, "hist %d step %d: %s", hist, i, v.Reasoning)
			for _, m := range v.Matches {
				require.Empty(t, m.Error, "hist %d step %d: rule %s", hist, i, m.RuleID)
			}
		}
	}
}

// BenchmarkEvaluateRealistic evaluates bench/rules-realistic.yaml against no rules on the
// load generator's four steps, in sessions of 20, 300 and 1000 earlier steps.
func BenchmarkEvaluateRealistic(b *testing.B) {
	for _, hist := range []int{20, 300, 1000} {
		envs := make([]*Env, 4)
		for i := range envs {
			envs[i] = loadEnv(i, hist)
			envs[i].Session = envs[i].Session.WithCounts(CountSteps(envs[i].Session.Steps))
		}
		for _, set := range []struct {
			name  string
			rules []Rule
		}{{"none", nil}, {"realistic", realisticRules(b)}} {
			p, err := Compile(set.rules, Options{})
			require.NoError(b, err)
			b.Run(fmt.Sprintf("hist=%d/%s", hist, set.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				cpuPerOp(b, func() { p.Evaluate(envs[i%4]); i++ })
			})
		}
	}
}
