package holds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vigil-guardian/vigil/rules"
)

// A decision of a hold whose agent waits on another guardian process (a replica) is sent
// there (Forwarder) and decided by that process's Manager as if its own operator had made
// it: the matched modifications are applied to what the operator lets through, an edit is
// validated and checked against the rules, a remembered approval is built from the waiting
// step, and the decision is stored and audited with the params the agent then receives.
// Deciding it here instead would store and audit the step as sent (without the
// redactions the agent never sees), since only the owner has the modifications.

// forwardedDecision is a decision on its way to the hold's owner.
type forwardedDecision struct {
	Status   string          `json:"status"`
	Operator string          `json:"operator"`
	Note     string          `json:"note,omitempty"`
	Params   json.RawMessage `json:"params,omitempty"`
	Override bool            `json:"override,omitempty"`
	Remember *RememberSpec   `json:"remember,omitempty"`
}

// forwardedAnswer is the owner's answer: the hold as decided, or why not.
type forwardedAnswer struct {
	Hold  *Hold           `json:"hold,omitempty"`
	Error *forwardedError `json:"error,omitempty"`
}

// forwardedError carries the errors callers branch on across processes.
type forwardedError struct {
	Kind    string       `json:"kind"`
	Field   string       `json:"field,omitempty"`
	Message string       `json:"message"`
	Verdict *EditVerdict `json:"verdict,omitempty"`
}

// Kinds of forwardedError.
const (
	fwdField          = "field"
	fwdRulesDeny      = "rules_deny"
	fwdConflict       = "conflict"
	fwdNotFound       = "not_found"
	fwdRememberFailed = "remember_failed"
	fwdUnavailable    = "unavailable"
	fwdInternal       = "internal"
)

func actionOf(status string) (rules.Action, bool) {
	switch status {
	case StatusApproved:
		return rules.ActionAllow, true
	case StatusDenied:
		return rules.ActionDeny, true
	case StatusModified:
		return rules.ActionModify, true
	}
	return "", false
}

// forward sends a decision to the process the hold's agent waits on and returns its
// result as if decided here.
func (m *Manager) forward(ctx context.Context, id, status, operator string, d Decision, params json.RawMessage) (Hold, error) {
	req, err := json.Marshal(forwardedDecision{Status: status, Operator: operator, Note: d.Note,
		Params: params, Override: d.Override, Remember: d.Remember})
	if err != nil {
		// The params are what the operator sent: invalid JSON cannot be forwarded.
		return Hold{}, &FieldError{Field: "params", Message: "params must be a JSON object"}
	}
	raw, err := m.forwarder.Forward(ctx, id, req)
	if err != nil {
		if !errors.Is(err, ErrNotForwarded) && !errors.Is(err, ErrOwnerUnavailable) {
			err = fmt.Errorf("holds: decide %s: %w", id, err)
		}
		// ErrOwnerUnavailable says which replica and why, for the operator as it is.
		return Hold{}, err
	}
	var ans forwardedAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return Hold{}, fmt.Errorf("holds: decide %s: the answer of the replica the step waits on: %w", id, err)
	}
	var h Hold
	if ans.Hold != nil {
		h = *ans.Hold
	}
	e := ans.Error
	if e == nil {
		return h, nil
	}
	switch e.Kind {
	case fwdField:
		return Hold{}, &FieldError{Field: e.Field, Message: e.Message}
	case fwdRulesDeny:
		var v EditVerdict
		if e.Verdict != nil {
			v = *e.Verdict
		}
		return Hold{}, &RulesDenyError{Verdict: v}
	case fwdConflict:
		if h.ID == "" {
			return Hold{}, fmt.Errorf("holds: hold %s has already ended: %w", id, ErrConflict)
		}
		return h, conflictError(h)
	case fwdNotFound:
		return Hold{}, fmt.Errorf("hold %s: %w", id, ErrNotFound)
	case fwdRememberFailed:
		return h, fmt.Errorf("holds: %w: %s", ErrRememberFailed, e.Message)
	case fwdUnavailable:
		return Hold{}, fmt.Errorf("%w: %s", ErrOwnerUnavailable, e.Message)
	}
	return Hold{}, fmt.Errorf("holds: decide %s on the replica the step waits on: %s", id, e.Message)
}

// serveForwarded decides a decision another process forwarded here, as decide would for
// one of this process's operators, and encodes the result for the sender.
func (m *Manager) serveForwarded(ctx context.Context, holdID string, decision []byte) []byte {
	var (
		h   Hold
		err error
	)
	var f forwardedDecision
	if jerr := json.Unmarshal(decision, &f); jerr != nil {
		err = fmt.Errorf("holds: a forwarded decision of hold %s does not decode: %w", holdID, jerr)
	} else if action, ok := actionOf(f.Status); !ok {
		err = fmt.Errorf("holds: a forwarded decision of hold %s has status %q", holdID, f.Status)
	} else {
		h, err = m.decideAt(ctx, holdID, f.Status, action,
			Decision{Operator: f.Operator, Note: f.Note, Remember: f.Remember, Override: f.Override}, f.Params, false)
	}
	ans := forwardedAnswer{}
	if h.ID != "" {
		ans.Hold = &h
	}
	if err != nil {
		ans.Error = m.forwardedErrorOf(holdID, err)
	}
	out, merr := json.Marshal(ans)
	if merr != nil {
		m.log.Error("could not encode the answer to a forwarded decision", "hold", holdID, "err", merr)
		out, _ = json.Marshal(forwardedAnswer{Error: &forwardedError{Kind: fwdInternal, Message: "the answer could not be encoded"}})
	}
	return out
}

func (m *Manager) forwardedErrorOf(holdID string, err error) *forwardedError {
	var (
		fe   *FieldError
		deny *RulesDenyError
	)
	switch {
	case errors.As(err, &deny):
		return &forwardedError{Kind: fwdRulesDeny, Message: deny.Error(), Verdict: &deny.Verdict}
	case errors.As(err, &fe):
		return &forwardedError{Kind: fwdField, Field: fe.Field, Message: fe.Message}
	case errors.Is(err, ErrConflict):
		return &forwardedError{Kind: fwdConflict, Message: err.Error()}
	case errors.Is(err, ErrNotFound):
		return &forwardedError{Kind: fwdNotFound, Message: err.Error()}
	case errors.Is(err, ErrRememberFailed):
		return &forwardedError{Kind: fwdRememberFailed, Message: err.Error()}
	case errors.Is(err, ErrClosed):
		return &forwardedError{Kind: fwdUnavailable, Message: "it is shutting down"}
	}
	// Details stay in this process's log, as for an API error here.
	m.log.Error("a decision forwarded from another replica failed", "hold", holdID, "err", err)
	return &forwardedError{Kind: fwdInternal, Message: "internal error; see the log of the replica the step waits on"}
}
