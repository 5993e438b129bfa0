package record

import (
	"encoding/json"
	"errors"
	"time"
)

// ErrHoldDecided is returned when a hold is resolved that is no longer pending: the first
// decision (or its timeout) won.
var ErrHoldDecided = errors.New("hold already decided")

// Hold statuses. A hold starts pending and ends in exactly one of the others.
const (
	HoldPending   = "pending"
	HoldApproved  = "approved"
	HoldDenied    = "denied"
	HoldModified  = "modified"
	HoldTimedOut  = "timedOut"
	HoldAbandoned = "abandoned"
	// HoldInterrupted ends a hold whose guardian stopped before anyone decided: a graceful
	// shutdown answers its agent with a retryable deny; after a crash the agent got nothing
	// (its connection ended with the process) and the decision stays empty.
	HoldInterrupted = "interrupted"
)

// Live event types of holds and session controls.
const (
	EventHoldCreated    = "hold.created"
	EventHoldResolved   = "hold.resolved"
	EventSessionControl = "session.control"
)

// Hold is one step parked for an operator. It is also the payload of the hold.created and
// hold.resolved events.
type Hold struct {
	ID string `json:"id"`
	// Seq is the held step's seq once the step is stored (after its decision); 0 before.
	Seq       int64  `json:"seq"`
	SessionID string `json:"sessionId"`
	AgentID   string `json:"agentId"`
	Method    string `json:"method"`
	Kind      string `json:"kind"`
	Tool      string `json:"tool"`
	RuleID    string `json:"ruleId"`
	Message   string `json:"message"`
	// Request is the held JSON-RPC request as the agent sent it.
	Request   json.RawMessage `json:"request"`
	CreatedAt time.Time       `json:"createdAt"`
	Deadline  time.Time       `json:"deadline"`
	// OnTimeout is the decision answered when the deadline passes: allow or deny.
	OnTimeout string `json:"onTimeout"`
	Status    string `json:"status"`
	// Decision is the answer the agent got (allow, deny, modify); empty while pending, and
	// for a hold interrupted by a crash, whose agent got no answer.
	Decision  string    `json:"decision"`
	DecidedBy string    `json:"decidedBy"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	Note      string    `json:"note"`
	// Params are the operator's edited params of a modified hold.
	Params json.RawMessage `json:"params,omitempty"`
}

// HoldResolution is how a pending hold ended.
type HoldResolution struct {
	// Status is one of the final statuses (approved, denied, modified, timedOut, abandoned,
	// interrupted).
	Status string
	// Decision is the answer given to the agent: allow, deny or modify.
	Decision  string
	DecidedBy string
	DecidedAt time.Time
	Note      string
	Params    json.RawMessage
}

// Session controls as stored in sessions.control, and the operator actions that set them.
const (
	ControlActive  = "active"
	ControlPaused  = "paused"
	ControlBlocked = "blocked"

	ControlPause  = "pause"
	ControlResume = "resume"
	ControlBlock  = "block"
)

// ControlState maps an operator action (pause, resume, block) to the session state it
// sets (paused, active, blocked).
func ControlState(action string) (string, bool) {
	switch action {
	case ControlPause:
		return ControlPaused, true
	case ControlResume:
		return ControlActive, true
	case ControlBlock:
		return ControlBlocked, true
	}
	return "", false
}

// SessionControl is an operator's pause, resume or block of a session; it is also the
// payload of the session.control event.
type SessionControl struct {
	SessionID string `json:"sessionId"`
	// Control is the action: pause, resume or block.
	Control  string    `json:"control"`
	Operator string    `json:"operator"`
	Note     string    `json:"note"`
	At       time.Time `json:"-"`
}
