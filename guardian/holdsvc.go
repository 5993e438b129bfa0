package guardian

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/rules"
)

// HoldRequest asks for a step to be parked for review.
type HoldRequest struct {
	Step      *aos.Step
	SessionID string
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

// Hold implements HoldService.
func (h ManagerHolds) Hold(ctx context.Context, req HoldRequest) (HoldOutcome, error) {
	s := req.Step
	r := holds.Request{
		SessionID: req.SessionID,
		Method:    s.Method,
		Kind:      string(s.Kind),
		Tool:      s.ToolID(),
		RuleID:    req.Verdict.RuleID,
		Message:   req.Verdict.Message,
		Request:   s.Raw,
		Inputs:    s.Inputs(),
		Timeout:   req.Verdict.HoldTimeout,
		OnTimeout: rules.Action(req.Verdict.HoldOnTimeout),
		Matches:   req.Verdict.Matches,
	}
	if s.Context != nil {
		r.AgentID = s.Context.Agent.ID
	}
	out, err := h.M.Hold(ctx, r)
	if err != nil {
		return HoldOutcome{}, fmt.Errorf("hold: %w", err)
	}
	return HoldOutcome{
		Decision: string(out.Decision),
		Message:  out.Message,
		Params:   out.Params,
		HoldID:   out.Hold.ID,
		RuleID:   out.RuleID,
	}, nil
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
