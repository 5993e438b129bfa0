package record

import (
	"encoding/json"
	"time"
)

// Audit entry types written for holds and session controls.
const (
	AuditHoldCreated   = "hold.created"
	AuditHoldApproved  = "hold.approved"
	AuditHoldDenied    = "hold.denied"
	AuditHoldModified  = "hold.modified"
	AuditHoldTimedOut  = "hold.timedOut"
	AuditHoldAbandoned = "hold.abandoned"
	// AuditHoldInterrupted records a hold ended by the guardian stopping (HoldInterrupted).
	AuditHoldInterrupted = "hold.interrupted"

	AuditSessionPause  = "session.pause"
	AuditSessionResume = "session.resume"
	AuditSessionBlock  = "session.block"
)

// AuditEntry is one line of the audit log: who did what, when, and why. It is also the
// payload of the "audit" live event.
type AuditEntry struct {
	ID int64 `json:"id"`
	// Seq is the seq of the "audit" event that carried the entry live.
	Seq  int64     `json:"seq"`
	At   time.Time `json:"at"`
	Type string    `json:"type"`
	// Operator is who acted; empty for what the guardian did by itself (a hold created by a
	// rule, a timeout, a disconnected agent).
	Operator  string `json:"operator"`
	SessionID string `json:"sessionId"`
	HoldID    string `json:"holdId"`
	RuleID    string `json:"ruleId"`
	Decision  string `json:"decision"`
	Note      string `json:"note"`
	// Diff is the change an operator made to a step's params (a JSON Patch), or null.
	Diff json.RawMessage `json:"diff"`
	// Detail carries type-specific facts (the timeout, a remembered rule…), or is omitted.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// AuditQuery filters the audit log, newest first.
type AuditQuery struct {
	// Limit is clamped to 1..1000 and defaults to 100.
	Limit int
	// Before keeps entries with an id below it (the id of the last entry of the previous
	// page); 0 starts from the newest.
	Before int64
	// Type matches exactly, or, without a dot, as a prefix: "hold" matches "hold.approved".
	Type      string
	SessionID string
	Operator  string
	HoldID    string
	// Prefix matches SessionID, Operator and HoldID as the start of the entry's value (a
	// partial id typed in a filter), not as the whole value.
	Prefix bool
}
