package mcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
			return refused(perr), nil
		}
		v, _, err := dec.DecideStep(ctx, step, meta())
		if err != nil {
			var ae *aos.Error
			if errors.As(err, &ae) {
				return refused(ae), nil
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

// HidesFunc reports, for each of params (a tools/call step's AOS params with empty
// arguments), whether an enforced rule denies the call whatever its arguments; such tools
// are left out of tools/list answers. It asks about a whole tools/list at once.
type HidesFunc func(ctx context.Context, params [][]byte) []bool

// HidesInProcess hides a tool when an enforced rule denies the step outright (no rule
// failed to evaluate: a rule that errs on a call without arguments says nothing about the
// tool).
func HidesInProcess(p Previewer, meta func() guardian.RequestMeta) HidesFunc {
	return func(ctx context.Context, params [][]byte) []bool {
		out := make([]bool, len(params))
		for i, ps := range params {
			if ctx.Err() != nil {
				break // the rest stay listed
			}
			req := make([]byte, 0, len(ps)+64)
			req = append(req, `{"jsonrpc":"2.0","id":0,"method":"protocols/MCP","params":`...)
			req = append(req, ps...)
			req = append(req, '}')
			step, perr := aos.ParseStep(req)
			if perr != nil {
				continue
			}
			v := p.Preview(ctx, step, meta())
			out[i] = v.Decision == string(aos.Deny) && !slices.ContainsFunc(v.Matches,
				func(m record.RuleMatch) bool { return m.Error != "" })
		}
		return out
	}
}

// previewTimeout bounds one question to the guardian's dry run: a tools/list answer waits
// for the answers, and a guardian that does not answer leaves the tools listed.
const previewTimeout = 2 * time.Second

// previewBatch is the most tools asked about in one request to the dry run; a longer
// tools/list takes several (each within the guardian's batch and body limits).
const previewBatch = 100

// HidesRemote is HidesInProcess for a gateway out of process (vigil mcp wrap): c is a client
// of the guardian's dry run (guardian.PreviewPath), which decides without storing or
// holding. A whole tools/list is one batch request (per previewBatch tools), so that asking
// counts once against the agent's rate limit. Any failure to ask keeps the tools listed:
// their calls are still judged.
func HidesRemote(c *aos.Client) HidesFunc {
	return func(ctx context.Context, params [][]byte) []bool {
		out := make([]bool, len(params))
		for start := 0; start < len(params); start += previewBatch {
			end := min(start+previewBatch, len(params))
			batch := make([]any, 0, end-start)
			for _, ps := range params[start:end] {
				batch = append(batch, rawParams(ps))
			}
			qctx, cancel := context.WithTimeout(ctx, previewTimeout)
			answers, err := c.CallBatch(qctx, aos.MethodMCP, batch)
			cancel()
			if err != nil {
				break
			}
			for i, a := range answers {
				out[start+i] = a.Err == nil && deniedOutright(a.Result)
			}
		}
		return out
	}
}

// deniedOutright tells a dry run's clean deny: not a real step's answer (an older
// guardian would have recorded one), and no rule failed to evaluate.
func deniedOutright(res *aos.Result) bool {
	if res.Decision != aos.Deny {
		return false
	}
	if p, _ := res.Data["preview"].(bool); !p {
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

// Remote judges over HTTP with the guardian's /aos endpoint (vigil mcp wrap). A step the
// guardian refuses as invalid params is refused as InProcess refuses it; any other failure
// is the guardian's, for the session's error policy.
func Remote(c *aos.Client) JudgeFunc {
	return func(ctx context.Context, params []byte) (Outcome, error) {
		res, err := c.Call(ctx, aos.MethodMCP, rawParams(params))
		if err != nil {
			var ae *aos.Error
			if errors.As(err, &ae) && ae.Code == aos.CodeInvalidParams {
				return refused(ae), nil
			}
			return Outcome{}, fmt.Errorf("ask the guardian: %w", err)
		}
		return OutcomeOf(string(res.Decision), res.Message, res.ModifiedRequest)
	}
}

// notMCP begins the refusal of a judged message the guardian cannot read as MCP.
const notMCP = "the message is not valid MCP: "

// refused is the outcome of a step the guardian would not take (invalid params): a message
// that is not valid MCP, or a session that belongs to another key or agent. That is the
// client's doing, not a failure to ask the guardian, so it is denied whatever the error
// policy, with the reason. InProcess meets it as Go errors (aos.ParseStep's, DecideStep's)
// and Remote as /aos's answer; both read the field it names, so the client gets the same
// answer over either transport.
func refused(e *aos.Error) Outcome {
	if f := errorField(e.Data); f == "params.message" || strings.HasPrefix(f, "params.message.") ||
		strings.HasPrefix(f, "params.message[") {
		return Outcome{Decision: "deny", Message: notMCP + e.Message}
	}
	return Outcome{Decision: "deny", Message: e.Message}
}

// errorField is the field an invalid-params error names: aos.FieldError in process, its
// JSON over /aos.
func errorField(data any) string {
	switch d := data.(type) {
	case aos.FieldError:
		return d.Field
	case *aos.FieldError:
		return d.Field
	case map[string]any:
		f, _ := d["field"].(string)
		return f
	}
	return ""
}

// rawParams marshals as itself.
type rawParams []byte

func (r rawParams) MarshalJSON() ([]byte, error) { return r, nil }
