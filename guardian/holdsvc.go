package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/rules"
)

// HoldRequest asks for a step to be parked for review.
type HoldRequest struct {
	Step      *aos.Step
	SessionID string
	// KeyID is the API key the step came with ("" without one).
	KeyID string
	// Verdict is the hold verdict: its rule, message, timeout and timeout decision.
	Verdict Verdict
}

// HoldOutcome is the decision that released a held step.
type HoldOutcome struct {
	// Decision is allow, deny or modify.
	Decision  string
	Message   string
	Reasoning string
	// Params are the operator's edited params for modify.
	Params json.RawMessage
	// HoldID names the hold, so the stored step can be linked to it; empty when no hold
	// was needed (a remembered approval).
	HoldID string
	// RuleID replaces the deciding rule when a remembered approval let the step through.
	RuleID string
	// ReasonCode, when set, comes first among the answer's reason codes: why the queue
	// answered by itself (holds.ReasonQueueFull, holds.ReasonRestarting).
	ReasonCode string
	// StoredSeq is the step's seq when another process has already stored it: a replica
	// that lost the database past --replica-dead-after had its holds ended by a survivor,
	// which stored their steps. The step must not be stored a second time.
	StoredSeq int64
}

// HoldService parks held steps until an operator or a timeout decides, and knows which
// sessions an operator paused or blocked.
type HoldService interface {
	// Control reports "active", "paused" or "blocked" for a session.
	Control(sessionID string) string
	// Hold blocks until the step is decided; ctx ends when the agent goes away.
	Hold(ctx context.Context, req HoldRequest) (HoldOutcome, error)
	// AttachStep links a resolved hold to its stored step.
	AttachStep(ctx context.Context, holdID string, seq int64) error
}

// ManagerHolds adapts holds.Manager to the pipeline.
type ManagerHolds struct{ M *holds.Manager }

// Control implements HoldService.
func (h ManagerHolds) Control(sessionID string) string { return h.M.Control(sessionID) }

// AttachStep implements HoldService.
func (h ManagerHolds) AttachStep(ctx context.Context, holdID string, seq int64) error {
	return h.M.AttachStep(ctx, holdID, seq)
}

// Hold implements HoldService. A full queue or a stopping guardian is answered here, as a
// deny with its own reason code, rather than as an error.
func (h ManagerHolds) Hold(ctx context.Context, req HoldRequest) (HoldOutcome, error) {
	s := req.Step
	r := holds.Request{
		SessionID: req.SessionID,
		Method:    s.Method,
		Kind:      string(s.Kind),
		Tool:      s.ToolID(),
		RuleID:    req.Verdict.RuleID,
		Message:   req.Verdict.Message,
		// Request and Params share the body as received: a waiting hold holds it once.
		Request:   s.Raw,
		Params:    s.Params,
		Size:      int64(len(s.Raw)),
		Inputs:    s.Inputs,
		Timeout:   req.Verdict.HoldTimeout,
		OnTimeout: rules.Action(req.Verdict.HoldOnTimeout),
		Matches:   req.Verdict.Matches,
	}
	if m := req.Verdict.Modify; m != nil {
		r.Modify = applyModification(s.Method, m)
	}
	if s.Context != nil {
		r.AgentID = s.Context.Agent.ID
	}
	r.KeyID = req.KeyID
	out, err := h.M.Hold(ctx, r)
	var full *holds.QueueFullError
	switch {
	case errors.As(err, &full):
		return HoldOutcome{Decision: string(aos.Deny), ReasonCode: holds.ReasonQueueFull,
			Message: "The step needs review, but the review queue is full (" + full.Limit + "); denied."}, nil
	case errors.Is(err, holds.ErrClosed):
		return HoldOutcome{Decision: string(aos.Deny), ReasonCode: holds.ReasonRestarting,
			Message: "The guardian is restarting: the step was not reviewed and is denied; send it again shortly."}, nil
	case err != nil:
		return HoldOutcome{}, fmt.Errorf("hold: %w", err)
	}
	return HoldOutcome{
		Decision:   string(out.Decision),
		Message:    out.Message,
		Params:     out.Params,
		HoldID:     out.Hold.ID,
		RuleID:     out.RuleID,
		ReasonCode: out.ReasonCode,
		StoredSeq:  out.Hold.Seq,
	}, nil
}

// applyModification returns a function that applies m to params of method, as the rules
// apply it to a step an agent sent: to the step's own params when a held step is approved,
// or to an operator's edit.
func applyModification(method string, m *rules.Modification) func(json.RawMessage) (json.RawMessage, error) {
	return func(params json.RawMessage) (json.RawMessage, error) {
		req, err := json.Marshal(aos.Request{JSONRPC: "2.0", ID: json.RawMessage("0"), Method: method, Params: params})
		if err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
		step, perr := aos.ParseStep(req)
		if perr != nil {
			return nil, perr
		}
		return modifiedParams(step, m)
	}
}

// ValidateParams checks params for a method exactly as if an agent had sent them, so an
// operator's edit can never produce a request the guardian itself would refuse.
func ValidateParams(method string, params json.RawMessage) error {
	req, err := json.Marshal(aos.Request{JSONRPC: "2.0", ID: json.RawMessage("0"), Method: method, Params: params})
	if err != nil {
		return fmt.Errorf("params: %w", err)
	}
	if _, perr := aos.ParseStep(req); perr != nil {
		return perr
	}
	return nil
}

// HoldInputs reads a tool call's inputs from a stored hold's request, as the waiting step
// offered them, for a hold approved and remembered on a replica its agent does not wait on.
// A request that no longer parses has none.
func HoldInputs(request json.RawMessage) map[string]any {
	step, perr := aos.ParseStoredStep(request)
	if perr != nil {
		return nil
	}
	return step.Inputs()
}
