package guardian

import (
	"context"
	"encoding/json"

	"github.com/vigil-guardian/vigil/guardian/aos"
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
}

// HoldService parks held steps until an operator or a timeout decides, and knows which
// sessions an operator paused or blocked.
type HoldService interface {
	// Control reports "active", "paused" or "blocked" for a session.
	Control(sessionID string) string
	// Hold blocks until the step is decided; ctx ends when the agent goes away.
	Hold(ctx context.Context, req HoldRequest) (HoldOutcome, error)
}
