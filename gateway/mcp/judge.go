package mcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

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

// previewTimeout bounds one question to the guardian's dry run: a tools/list answer waits
// for the answers, and a guardian that does not answer leaves the tool listed.
const previewTimeout = 2 * time.Second

// HidesRemote is HidesInProcess for a gateway out of process (vigil mcp wrap): c is a client
// of the guardian's dry run (guardian.PreviewPath), which decides without storing or
// holding. Any failure to ask keeps the tool listed: its calls are still judged.
func HidesRemote(c *aos.Client) func(ctx context.Context, params []byte) bool {
	return func(ctx context.Context, params []byte) bool {
		ctx, cancel := context.WithTimeout(ctx, previewTimeout)
		defer cancel()
		res, err := c.Call(ctx, aos.MethodMCP, rawParams(params))
		if err != nil || res.Decision != aos.Deny {
			return false
		}
		if p, _ := res.Data["preview"].(bool); !p {
			// Not a dry run's answer (an older guardian would have recorded a step).
			return false
		}
		ms, _ := res.Data["matchedRules"].([]any)
		for _, m := range ms {
			if mm, ok := m.(map[string]any); !ok || mm["error"] != nil {
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
