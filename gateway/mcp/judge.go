package mcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// Decider is the guardian's pipeline as the gateway uses it (*guardian.Guardian).
type Decider interface {
	DecideStep(ctx context.Context, step *aos.Step, meta guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error)
}

// InProcess judges with the pipeline of this process: the step is the AOS request an
// MCP-aware agent would have sent, parsed by aos.ParseStep, so it is stored and shown like
// any protocols/MCP step.
func InProcess(dec Decider, meta func() guardian.RequestMeta) JudgeFunc {
	var n atomic.Int64
	return func(ctx context.Context, params []byte) (Outcome, error) {
		req := make([]byte, 0, len(params)+64)
		req = append(req, `{"jsonrpc":"2.0","id":`...)
		req = strconv.AppendInt(req, n.Add(1), 10)
		req = append(req, `,"method":"protocols/MCP","params":`...)
		req = append(req, params...)
		req = append(req, '}')
		step, perr := aos.ParseStep(req)
		if perr != nil {
			return Outcome{Decision: "deny", Message: "the message is not valid MCP: " + perr.Message}, nil
		}
		v, _, err := dec.DecideStep(ctx, step, meta())
		if err != nil {
			var ae *aos.Error
			if errors.As(err, &ae) {
				return Outcome{Decision: "deny", Message: ae.Message}, nil
			}
			return Outcome{}, fmt.Errorf("decide: %w", err)
		}
		return OutcomeOf(v.Decision, v.Message, v.ModifiedRequest)
	}
}

// Previewer is a Decider that can say what the rules decide without recording a step
// (*guardian.Guardian).
type Previewer interface {
	Preview(ctx context.Context, step *aos.Step, meta guardian.RequestMeta) guardian.Verdict
}

// HidesInProcess reports whether an enforced rule denies a step outright (no rule failed to
// evaluate: a rule that errs on a call without arguments says nothing about the tool).
func HidesInProcess(p Previewer, meta func() guardian.RequestMeta) func(ctx context.Context, params []byte) bool {
	return func(ctx context.Context, params []byte) bool {
		req := make([]byte, 0, len(params)+64)
		req = append(req, `{"jsonrpc":"2.0","id":0,"method":"protocols/MCP","params":`...)
		req = append(req, params...)
		req = append(req, '}')
		step, perr := aos.ParseStep(req)
		if perr != nil {
			return false
		}
		v := p.Preview(ctx, step, meta())
		if v.Decision != string(aos.Deny) {
			return false
		}
		for _, m := range v.Matches {
			if m.Error != "" {
				return false
			}
		}
		return true
	}
}

// Remote judges over HTTP with the guardian's /aos endpoint (vigil mcp wrap).
func Remote(c *aos.Client) JudgeFunc {
	return func(ctx context.Context, params []byte) (Outcome, error) {
		res, err := c.Call(ctx, aos.MethodMCP, rawParams(params))
		if err != nil {
			return Outcome{}, err
		}
		return OutcomeOf(string(res.Decision), res.Message, res.ModifiedRequest)
	}
}

// rawParams marshals as itself.
type rawParams []byte

func (r rawParams) MarshalJSON() ([]byte, error) { return r, nil }
