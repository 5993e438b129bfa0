package holds

import (
	"context"
	"encoding/json"
	"fmt"
)

// EditVerdict is what the rules decide about an operator's edited params, evaluated as if
// the agent had sent them.
type EditVerdict struct {
	Decision    string   `json:"decision"`
	RuleID      string   `json:"ruleId,omitempty"`
	Message     string   `json:"message,omitempty"`
	ReasonCodes []string `json:"reasonCode,omitempty"`
}

// CheckEditFunc evaluates the rules on params of method, as a step of the session.
type CheckEditFunc func(ctx context.Context, sessionID, method string, params json.RawMessage) (EditVerdict, error)

// RulesDenyError refuses an edit the rules would deny: without it an operator's edit
// could carry through what a deny rule forbids. Decision.Override sends it anyway.
type RulesDenyError struct{ Verdict EditVerdict }

func (e *RulesDenyError) Error() string {
	msg := "the rules would deny the edited step"
	if e.Verdict.RuleID != "" {
		msg += " (rule " + e.Verdict.RuleID + ")"
	}
	if e.Verdict.Message != "" {
		msg += ": " + e.Verdict.Message
	}
	return msg + `; send it with "override": true to approve it anyway`
}

// checkEdit runs the rules on an operator's edit. It returns the deny verdict the operator
// overrides (nil when the rules do not deny), or a *RulesDenyError when not overriding.
func (m *Manager) checkEdit(ctx context.Context, req Request, params json.RawMessage, override bool) (*EditVerdict, error) {
	if m.checkEditFn == nil {
		return nil, nil
	}
	v, err := m.checkEditFn(ctx, req.SessionID, req.Method, params)
	if err != nil {
		// Fail closed: an edit the rules could not judge is not sent.
		return nil, fmt.Errorf("holds: check the edit against the rules: %w", err)
	}
	if v.Decision != "deny" {
		return nil, nil
	}
	if !override {
		return nil, &RulesDenyError{Verdict: v}
	}
	return &v, nil
}
