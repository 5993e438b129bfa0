package guardian

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/ruleenv"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// RulesPolicy decides steps with the expr rules engine.
type RulesPolicy struct {
	Engine *rules.Engine
	Log    *slog.Logger
}

// Decide implements Policy.
func (p *RulesPolicy) Decide(_ context.Context, step *aos.Step, hist *History, now time.Time) Verdict {
	prog := p.Engine.Program()
	env := ruleenv.BuildFor(prog, step, ruleenv.History{SessionID: hist.SessionID, StepCount: hist.StepCount, Steps: hist.Steps}, now)
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
		params, err := ModifyParams(step, rv.Modify)
		if err != nil {
			if log != nil {
				log.Error("apply modification", "rule", rv.RuleID, "err", err)
			}
			v.Decision = string(aos.Deny)
			v.Message = "The step had to be modified, but the modification failed; denied."
			return v
		}
		v.ModifiedParams = params
	case rules.ActionHold:
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
func Matches(ms []rules.Match) []storage.RuleMatch {
	out := make([]storage.RuleMatch, len(ms))
	for i, m := range ms {
		out[i] = storage.RuleMatch{RuleID: m.RuleID, Action: string(m.Action), Mode: string(m.Mode), ReasonCode: m.ReasonCode, Error: m.Error}
	}
	return out
}

// ModifyParams applies a modification to a step's params: redactions to the step's own
// content (everything but its context, which describes the agent rather than the step),
// and `set` values to the tool inputs (AOS tool calls, MCP tools/call arguments).
func ModifyParams(step *aos.Step, m *rules.Modification) (json.RawMessage, error) {
	if m == nil {
		return nil, nil
	}
	var params map[string]any
	if len(step.Params) > 0 {
		if err := json.Unmarshal(step.Params, &params); err != nil {
			return nil, fmt.Errorf("decode params: %w", err)
		}
	}
	if params == nil {
		params = map[string]any{}
	}
	ctx, hasCtx := params["context"]
	delete(params, "context")
	redacted, _ := m.Apply(params, nil)
	out, ok := redacted.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("redaction returned %T", redacted)
	}
	if hasCtx {
		out["context"] = ctx
	}
	var setErr error
	m.Apply(nil, func(name string, value any) {
		if err := setInput(step, out, name, value); err != nil && setErr == nil {
			setErr = err
		}
	})
	if setErr != nil {
		return nil, setErr
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode params: %w", err)
	}
	return b, nil
}

// setInput places one input value where the step's protocol keeps its inputs.
func setInput(step *aos.Step, params map[string]any, name string, value any) error {
	switch step.Kind {
	case aos.KindToolCall:
		tcr, _ := params["toolCallRequest"].(map[string]any)
		if tcr == nil {
			return fmt.Errorf("set %s: the step has no toolCallRequest", name)
		}
		inputs, _ := tcr["inputs"].([]any)
		for _, in := range inputs {
			if m, ok := in.(map[string]any); ok && m["name"] == name {
				m["value"] = value
				return nil
			}
		}
		tcr["inputs"] = append(inputs, map[string]any{"name": name, "value": value})
		return nil
	case aos.KindMCP:
		msg := params
		if _, inline := params["jsonrpc"]; !inline {
			msg, _ = params["message"].(map[string]any)
		}
		if msg == nil {
			return fmt.Errorf("set %s: the step has no MCP message", name)
		}
		p, _ := msg["params"].(map[string]any)
		if p == nil {
			p = map[string]any{}
			msg["params"] = p
		}
		args, _ := p["arguments"].(map[string]any)
		if args == nil {
			args = map[string]any{}
			p["arguments"] = args
		}
		args[name] = value
		return nil
	}
	return fmt.Errorf("set %s: a %s step has no inputs", name, step.Kind)
}

// EnvForStored rebuilds the rule environment of a stored step, for backtests and tests by
// seq; history is the session's earlier stored steps, oldest first.
func EnvForStored(_ context.Context, rec storage.StepRecord, history []storage.StepRecord) (*rules.Env, error) {
	step, perr := aos.ParseStep(rec.Request)
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
	mp, err := ModifyParams(step, v.Modify)
	if err != nil || mp == nil {
		return nil, err
	}
	return aos.NewModifiedRequest(step, mp)
}
