// Package storage keeps steps, sessions and the event log in SQLite.
//
// A step is stored first in an append-only step journal (one write shared by concurrent
// steps), which makes it durable; one writer goroutine owns the SQLite write connection and
// copies journaled steps into the tables in large transactions, along with every other
// write. Readers use a separate pool and wait for the journal when they must. Every write
// gets a seq from one sequence shared by all event types, which is what the live stream
// resumes from.
package record

import (
	"encoding/json"
	"errors"
	"time"
)

// ErrNotFound is returned when a session or step does not exist.
var ErrNotFound = errors.New("not found")

// StepRecord is one stored step with its decision.
type StepRecord struct {
	Seq       int64  `json:"seq"`
	SessionID string `json:"sessionId"`
	TurnID    string `json:"turnId,omitempty"`
	StepID    string `json:"stepId,omitempty"`
	Method    string `json:"method"`
	Kind      string `json:"kind"`
	AgentID   string `json:"agentId,omitempty"`
	AgentName string `json:"agentName,omitempty"`
	UserID    string `json:"userId,omitempty"`
	// KeyID is the id of the API key the step's request authenticated with; empty without.
	KeyID string `json:"keyId,omitempty"`
	// Client and Server are the programs at the two ends of the gateway session the step
	// came through, as they name themselves (an MCP session's clientInfo and serverInfo);
	// nil when unknown. The step's session keeps the newest.
	Client *Peer `json:"client,omitempty"`
	Server *Peer `json:"server,omitempty"`
	// Tool is the tool id of a tool call, or the MCP tool name, when there is one.
	Tool       string    `json:"tool,omitempty"`
	Decision   string    `json:"decision"`
	ReceivedAt time.Time `json:"receivedAt"`
	// Request is the request as received; Response the answer sent (null for notifications).
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response"`
	// MatchedRules lists every rule that matched, enforced and monitor-mode alike.
	MatchedRules  []RuleMatch `json:"matchedRules"`
	LatencyMicros int64       `json:"latencyMicros"`
	// Text is the step's human-readable text, kept for the session history rules see.
	Text string `json:"text,omitempty"`
	// Held is true when the step waited for an operator.
	Held bool `json:"held,omitempty"`
	// Truncated marks a copy of a step that left its bulky fields out (see Truncate): the
	// live stream sends big steps so; GET /api/steps/{seq} has the whole step.
	Truncated bool `json:"truncated,omitempty"`
	// TrustedJSON says Request and Response are known to be valid JSON (the guardian
	// parsed or built them), so SaveStep need not scan them again.
	TrustedJSON bool `json:"-"`
}

// RuleMatch records one rule that matched a step (or failed evaluating it).
type RuleMatch struct {
	RuleID     string `json:"ruleId"`
	Action     string `json:"action"`
	Mode       string `json:"mode"`
	ReasonCode string `json:"reasonCode,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Session is the summary of one agent session.
type Session struct {
	ID string `json:"id"`
	// AgentID and KeyID own the session: the agent id and API key id of its first steps
	// that carried one (see the guardian's session ownership).
	AgentID   string           `json:"agentId,omitempty"`
	KeyID     string           `json:"keyId,omitempty"`
	AgentName string           `json:"agentName,omitempty"`
	UserID    string           `json:"userId,omitempty"`
	FirstSeen time.Time        `json:"firstSeen"`
	LastSeen  time.Time        `json:"lastSeen"`
	LastSeq   int64            `json:"lastSeq"`
	Steps     int64            `json:"steps"`
	Decisions map[string]int64 `json:"decisions"`
	// LastMethod is the method of the newest step.
	LastMethod string `json:"lastMethod,omitempty"`
	// Control is the operator's control of the session: active, paused or blocked.
	Control string `json:"control"`
	// PendingHolds counts the session's steps waiting for an operator.
	PendingHolds int64 `json:"pendingHolds"`
	// Client and Server are the newest Client and Server its steps named (an MCP session's
	// clientInfo and serverInfo); nil when none did.
	Client *Peer `json:"client,omitempty"`
	Server *Peer `json:"server,omitempty"`
}

// Peer is a program at one end of a gateway session as it names itself.
type Peer struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// SessionQuery pages through sessions newest first (by last activity).
type SessionQuery struct {
	// Before is an opaque cursor returned as Next by the previous page; empty for the first.
	Before string
	Limit  int
	// Search matches session, agent or user ids, the agent name, or the client or server
	// name (record.Peer) by case-insensitive substring when set.
	Search string
}

// SessionPage is one page of sessions.
type SessionPage struct {
	Sessions []Session `json:"sessions"`
	Next     string    `json:"next,omitempty"`
}

// StepQuery pages through a session's steps in arrival order.
type StepQuery struct {
	SessionID string
	After     int64
	Limit     int
	// MaxBytes, when positive, ends the page with the step that brings the steps' stored
	// size (storage.StepBytes) to it or past it; the first step always comes. It bounds what
	// a read of big steps holds, whatever Limit says.
	MaxBytes int
}

// StepRange pages through the steps of every session in arrival order: After < seq <
// Before (Before 0: no upper bound), with Limit and MaxBytes as in StepQuery.
type StepRange struct {
	After, Before int64
	Limit         int
	MaxBytes      int
}

// Event is one entry of the event log: a stored step, a hold, a rule or session change.
// Payload is the event's JSON body as published on the live stream.
type Event struct {
	Seq       int64           `json:"seq"`
	Type      string          `json:"type"`
	SessionID string          `json:"sessionId,omitempty"`
	At        time.Time       `json:"at"`
	Payload   json.RawMessage `json:"payload"`
}

// Event types of the event log besides the hold and session-control ones (holds.go).
const (
	// EventStep is the type of the event stored with every step.
	EventStep = "step"
	// EventStepRejected takes the seq of a step the store refused after it was answered
	// and published, so the seq is never given to anything else.
	EventStepRejected = "step.rejected"
	// EventAudit is the live event type that carries each new audit entry.
	EventAudit = "audit"
	// EventRuleChanged is the type of the event stored with every change of the rule set.
	EventRuleChanged = "rule.changed"
)

// IngestStats is a backend's ingestion backlog: what is durable but not yet in its tables
// (SQLite's step journal; zero for a backend that writes steps straight to its tables).
type IngestStats struct {
	// PendingSteps are journaled steps not yet stored in SQLite (the ingestion lag);
	// PendingBytes their encoded size, before the writer takes them.
	PendingSteps int64
	PendingBytes int64
	// JournalBytes is the size of the journal files.
	JournalBytes int64
}
