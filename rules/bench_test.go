package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// benchRules returns n rules shaped like a real policy: tool checks, PII and secret
// finders, regexes, domain checks and session counters.
func benchRules(n int) []Rule {
	tmpl := []string{
		`tool == "tool_%[1]d" && inputs.path startsWith "/etc"`,
		`kind == "toolCall" && tool == "export_%[1]d" && len(pii(text)) > 0`,
		`text matches "(?i)ignore (all )?previous instructions v%[1]d"`,
		`tool == "transfer_funds" && countTool(session, "transfer_funds") > %[1]d + 20`,
		`tool == "send_email" && domain(inputs.to) not in ["corp.example", "partner%[1]d.example"] && sessionHas(session, "read_doc", "confidential")`,
		`len(secrets(text)) > 0 && tool == "post_%[1]d"`,
		`kind == "knowledge" && containsAny(text, ["ignore previous instructions", "disregard the system prompt", "phrase %[1]d"])`,
		`toolStreak(session, tool) > %[1]d + 50`,
		`"creditCard" in piiKinds(text) && tool == "chat_%[1]d"`,
		`any(urls(text), domain(#) endsWith ".evil%[1]d.example")`,
	}
	rules := make([]Rule, n)
	for i := range rules {
		rules[i] = Rule{
			ID:       fmt.Sprintf("r%03d", i),
			When:     fmt.Sprintf(tmpl[i%len(tmpl)], i),
			Action:   []Action{ActionDeny, ActionHold, ActionAllow, ActionDeny}[i%4],
			Priority: i % 7,
			Enabled:  true,
			Message:  "blocked {{tool}}",
		}
		if i%10 == 9 {
			rules[i].Mode = ModeMonitor
		}
	}
	return rules
}

func benchEnv() *Env {
	body := "Hi Dana,\n\nas discussed, here is the summary of the Q3 plan. Revenue grew 12% and " +
		"the team shipped the new onboarding flow. Please review the attached deck at " +
		"https://docs.corp.example/q3/deck and send comments by Friday. If anything is " +
		"unclear call me at +1 415 555 0132 or reply to this mail.\n\nThanks,\nAlex"
	steps := make([]HistoryStep, 30)
	at := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range steps {
		steps[i] = HistoryStep{Method: "steps/toolCallRequest", Kind: "toolCall",
			Tool: []string{"search", "read_doc", "summarize"}[i%3], Decision: "allow",
			Text: "step text number " + fmt.Sprint(i), Seq: int64(i + 1), ReceivedAt: at.Add(time.Duration(i) * time.Second)}
	}
	return &Env{
		Method: "steps/toolCallRequest", Kind: "toolCall",
		Agent:   Agent{ID: "agent-1", Name: "Mailer", Version: "1.2.0", Provider: "Acme"},
		User:    User{ID: "u-7", Email: "alex@corp.example", Org: "corp"},
		Session: Session{ID: "s-1", StepCount: len(steps), Steps: steps},
		TurnID:  "t-3", StepID: "st-9", Tool: "send_email",
		Text:   "dana@partner.example\nQ3 plan\n" + body,
		Inputs: map[string]any{"to": "dana@partner.example", "subject": "Q3 plan", "body": body},
		Now:    at.Add(time.Minute),
	}
}

func BenchmarkEvaluate100Rules(b *testing.B) {
	p, err := Compile(benchRules(100), Options{})
	if err != nil {
		b.Fatal(err)
	}
	env := benchEnv()
	b.ReportAllocs()
	b.ResetTimer()
	cpuPerOp(b, func() { p.Evaluate(env) })
}

// BenchmarkEvaluateLoadRules evaluates the load benchmark's 100 rules (bench/rules100.yaml)
// on the step the benchmark environment describes, with its counts kept, as the guardian
// keeps them for its session history.
func BenchmarkEvaluateLoadRules(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "bench", "rules100.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	f, err := ParseFile("rules100.yaml", data)
	if err != nil {
		b.Fatal(err)
	}
	p, err := Compile(f.Rules, Options{})
	if err != nil {
		b.Fatal(err)
	}
	env := benchEnv()
	env.Session = env.Session.WithCounts(CountSteps(env.Session.Steps))
	b.ReportAllocs()
	b.ResetTimer()
	cpuPerOp(b, func() { p.Evaluate(env) })
}

// BenchmarkEvaluate100RulesParallel evaluates on every core at once through an Engine, as
// the guardian does with many agents.
func BenchmarkEvaluate100RulesParallel(b *testing.B) {
	e := NewEngine(Options{})
	if err := e.Load(benchRules(100)); err != nil {
		b.Fatal(err)
	}
	env := benchEnv()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.Evaluate(env)
		}
	})
}

// BenchmarkDetectors measures the text scanners on the benchmark step's text (about 500
// bytes): each runs at most once per step however many rules call it.
func BenchmarkDetectors(b *testing.B) {
	s := benchEnv().Text
	for name, f := range map[string]func(string) []span{
		"pii": findPII, "secrets": findSecrets, "urls": findURLs,
	} {
		b.Run(name, func(b *testing.B) { cpuPerOp(b, func() { f(s) }) })
	}
}

func BenchmarkCompile100Rules(b *testing.B) {
	rules := benchRules(100)
	for b.Loop() {
		if _, err := Compile(rules, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTextHelpersVM runs text helper calls on string arguments in the VM, as it runs
// the conditions no guard takes over: the call itself, not the scan, is what it measures
// (the texts are short, and the memo is cleared as for a new step).
func BenchmarkTextHelpersVM(b *testing.B) {
	var rules []Rule
	for i, when := range []string{
		`icontains(text, "confidential")`,
		`containsAny(inputs.body, ["ignore previous", "system prompt"])`,
		`glob("**/*.pem", inputs.subject)`,
		`regexMatch(inputs.to, "@evil\\.example$")`,
		`inputs.subject matches "(?i)^re: "`,
		`domain(inputs.to) == "partner.example"`,
		`len(regexFind(inputs.subject, "Q[1-4]")) > 0`,
		`len(pii(inputs.to)) > 0`,
		`len(urls(inputs.subject)) > 0`,
	} {
		rules = append(rules, Rule{ID: fmt.Sprint("r", i), When: when, Action: ActionDeny, Enabled: true})
	}
	p, err := Compile(rules, Options{})
	if err != nil {
		b.Fatal(err)
	}
	st := &evalState{memo: map[memoKey]memoEntry{}}
	e := *benchEnv()
	e.state = st
	b.ReportAllocs()
	cpuPerOp(b, func() {
		for _, r := range p.rules {
			if _, err := st.vm.Run(r.when, &e); err != nil {
				b.Fatal(err)
			}
		}
		clear(st.memo)
	})
}
