package rules

import (
	"encoding/json"
	"fmt"
	"strings"
)

// TestResult is the outcome of one TestCase.
type TestResult struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	Got    Action `json:"got,omitempty"`
	Want   Action `json:"want"`
	// Message explains a failure (or names the deciding rule of a pass).
	Message string `json:"message,omitempty"`
	// Line is the test's line in its file, 0 when unknown.
	Line int `json:"line,omitempty"`
}

// RunTests evaluates every test case of f with prog. build turns a test's method and params
// into an Env (the guardian's ruleenv.FromMethodParams); the test's history becomes the
// session's earlier steps.
func RunTests(f *File, prog *Program, build func(method string, params json.RawMessage) (*Env, error)) []TestResult {
	out := make([]TestResult, 0, len(f.Tests))
	for i, tc := range f.Tests {
		res := TestResult{Name: tc.Name, Want: tc.Expect, Line: tc.Line}
		if res.Name == "" {
			res.Name = fmt.Sprintf("test #%d", i+1)
		}
		out = append(out, runTest(tc, res, prog, build))
	}
	return out
}

func runTest(tc TestCase, res TestResult, prog *Program, build func(string, json.RawMessage) (*Env, error)) TestResult {
	if !tc.Expect.Valid() {
		res.Message = fmt.Sprintf("expect %q is not one of allow, deny, modify, hold", tc.Expect)
		return res
	}
	env, err := build(tc.Step.Method, tc.Step.Params)
	if err != nil {
		res.Message = fmt.Sprintf("step does not decode: %v", err)
		return res
	}
	if env == nil {
		env = &Env{}
	}
	if len(tc.History) > 0 {
		var steps []HistoryStep
		for _, h := range tc.History {
			n := max(h.Repeat, 1)
			for range n {
				steps = append(steps, h.HistoryStep)
			}
		}
		for i := range steps {
			if steps[i].Seq == 0 {
				steps[i].Seq = int64(i + 1)
			}
		}
		env.Session.Steps = steps
		env.Session.StepCount = len(steps)
	}
	if tc.Now != nil {
		env.Now = *tc.Now
	}
	v := prog.Evaluate(env)
	res.Got = v.Action
	var problems []string
	if v.Action != tc.Expect {
		problems = append(problems, fmt.Sprintf("want %s, got %s", tc.Expect, v.Action))
	}
	for _, code := range tc.ReasonCode {
		if !contains(v.ReasonCodes, code) {
			problems = append(problems, fmt.Sprintf("reason code %s missing (got %v)", code, v.ReasonCodes))
		}
	}
	if tc.Rule != "" && v.RuleID != tc.Rule {
		problems = append(problems, fmt.Sprintf("want deciding rule %s, got %q", tc.Rule, v.RuleID))
	}
	for _, m := range v.Matches {
		if m.Error != "" {
			problems = append(problems, fmt.Sprintf("rule %s failed: %s", m.RuleID, m.Error))
		}
	}
	if len(problems) > 0 {
		res.Message = strings.Join(problems, "; ") + " (" + v.Reasoning + ")"
		return res
	}
	res.Passed = true
	res.Message = v.Reasoning
	return res
}
