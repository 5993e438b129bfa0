package guardian

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/ruleenv"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// RulesPolicy decides steps with the expr rules engine.
type RulesPolicy struct {
	Engine *rules.Engine
	Log    *slog.Logger
}

// Decide implements Policy.
func (p *RulesPolicy) Decide(_ context.Context, step *aos.Step, hist *History, now time.Time) Verdict {
	prog := p.Engine.Program()
	if prog.Empty() {
		// The default decision; building the Env would be wasted.
		return FromRulesVerdict(step, prog.Evaluate(&rules.Env{Now: now}), p.Log)
	}
	env := ruleenv.BuildFor(prog, step, ruleenv.History{SessionID: hist.SessionID, StepCount: hist.StepCount,
		Steps: hist.Steps, Counts: hist.Counts()}, now)
	return FromRulesVerdict(step, prog.Evaluate(env), p.Log)
}

// FromRulesVerdict turns the engine's verdict into the pipeline's, applying a modify to
// the step's params. It is shared by the live pipeline and the rule test endpoint.
func FromRulesVerdict(step *aos.Step, rv rules.Verdict, log *slog.Logger) Verdict {
	v := Verdict{
		Decision:    string(rv.Action),
		RuleID:      rv.RuleID,
		Message:     rv.Message,
		Reasoning:   rv.Reasoning,
		ReasonCodes: rv.ReasonCodes,
		Matches:     Matches(rv.Matches),
	}
	if v.Decision == "" {
		v.Decision = string(aos.Allow)
	}
	if v.Message == "" && v.RuleID == "" {
		v.Message = "No rule matched; " + pastTense(v.Decision) + " by default."
	}
	switch rv.Action {
	case rules.ActionModify:
		params, err := modifiedParams(step, rv.Modify)
		if err != nil {
			if log != nil {
				log.Error("apply modification", "rule", rv.RuleID, "err", err)
			}
			v.Decision = string(aos.Deny)
			v.Message = "The step had to be modified, but the modification failed; denied."
			return v
		}
		v.ModifiedParams = params
		// Kept for a paused session, which holds the step instead.
		v.Modify = rv.Modify
	case rules.ActionHold:
		// The engine returns the modify rules that matched with the hold; they apply if
		// the step is let through.
		v.Modify = rv.Modify
		if rv.Hold != nil {
			v.HoldTimeout = time.Duration(rv.Hold.Timeout)
			v.HoldOnTimeout = string(rv.Hold.OnTimeout)
		}
	}
	return v
}

func pastTense(d string) string {
	switch d {
	case "deny":
		return "denied"
	case "modify":
		return "modified"
	case "hold":
		return "held"
	}
	return "allowed"
}

// Matches converts the engine's matches to the stored form.
func Matches(ms []rules.Match) []record.RuleMatch {
	out := make([]record.RuleMatch, len(ms))
	for i, m := range ms {
		out[i] = record.RuleMatch{RuleID: m.RuleID, Action: string(m.Action), Mode: string(m.Mode), ReasonCode: m.ReasonCode, Error: m.Error}
	}
	return out
}

// EnvForStored rebuilds the rule environment of a stored step, for backtests and tests by
// seq; history is the session's earlier stored steps, oldest first.
func EnvForStored(_ context.Context, rec record.StepRecord, history []record.StepRecord) (*rules.Env, error) {
	step, perr := aos.ParseStoredStep(rec.Request)
	if perr != nil {
		return nil, fmt.Errorf("stored step %d no longer parses: %w", rec.Seq, perr)
	}
	h := ruleenv.History{SessionID: rec.SessionID, StepCount: len(history), Steps: make([]rules.HistoryStep, len(history))}
	for i, r := range history {
		h.Steps[i] = HistoryStep(r)
	}
	return ruleenv.Build(step, h, rec.ReceivedAt), nil
}

// DraftModifiedRequest renders the request a modify verdict would send back for a step
// given as method and params.
func DraftModifiedRequest(method string, params json.RawMessage, v rules.Verdict) (json.RawMessage, error) {
	req, err := json.Marshal(aos.Request{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: method, Params: params})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	step, perr := aos.ParseStep(req)
	if perr != nil {
		return nil, perr
	}
	return ruleenv.ModifiedRequest(step, v.Modify)
}

// modifiedParams applies a modification to the step and returns the new params.
func modifiedParams(step *aos.Step, m *rules.Modification) (json.RawMessage, error) {
	if m == nil {
		return nil, nil
	}
	mr, err := ruleenv.ModifiedRequest(step, m)
	if err != nil {
		return nil, fmt.Errorf("modify: %w", err)
	}
	var req aos.Request
	if err := json.Unmarshal(mr, &req); err != nil {
		return nil, fmt.Errorf("modify: decode modified request: %w", err)
	}
	return req.Params, nil
}

// MayAct reports whether an enforced rule (or a default decision other than allow) could
// decide anything but allow for a step like this one, judging only what the step is and
// who sent it, not its content (see rules.Program.MayAct).
func (p *RulesPolicy) MayAct(step *aos.Step) bool {
	prog := p.Engine.Program()
	return prog.MayAct(ruleenv.BuildFor(prog, step, ruleenv.History{}, time.Now()))
}
