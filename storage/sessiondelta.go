package storage

import (
	"github.com/vigil-guardian/vigil/record"
)

// SessionStep is what a stored step tells its session's summary row. Both backends keep it
// in the step they prepare for their writers and sum a batch's into a SessionDelta, so that
// the rules for which step's values a summary keeps live in one place.
type SessionStep struct {
	SessionID, AgentID, AgentName, UserID, KeyID string
	Method, Decision                             string
	ReceivedAt                                   int64 // Unix nanoseconds
	// The client and server the step names to its session; "" when it names none.
	ClientName, ClientVersion, ServerName, ServerVersion string
}

// SessionStepOf is rec's SessionStep. A peer without a name names nothing: the session
// keeps the one it knows.
func SessionStepOf(rec *record.StepRecord) SessionStep {
	s := SessionStep{
		SessionID: rec.SessionID, AgentID: rec.AgentID, AgentName: rec.AgentName,
		UserID: rec.UserID, KeyID: rec.KeyID, Method: rec.Method, Decision: rec.Decision,
		ReceivedAt: rec.ReceivedAt.UnixNano(),
	}
	if rec.Client != nil && rec.Client.Name != "" {
		s.ClientName, s.ClientVersion = rec.Client.Name, rec.Client.Version
	}
	if rec.Server != nil && rec.Server.Name != "" {
		s.ServerName, s.ServerVersion = rec.Server.Name, rec.Server.Version
	}
	return s
}

// SessionDelta sums what a batch's steps of one session change in its summary, so that a
// backend writes the summary row once per batch rather than once per step. The steps may
// be added in any order: the delta is what writing them one by one in seq order would
// change.
type SessionDelta struct {
	ID string
	// The session's owners: the agent and API key of the oldest step naming one (the
	// summary keeps the first it is told).
	AgentID, KeyID string
	// The newest step's method, and the agent name and user of the newest step naming one.
	AgentName, UserID, LastMethod string
	First, Last                   int64 // the steps' earliest and latest ReceivedAt
	LastSeq, Steps                int64
	// Decisions counts the steps by decision, in the order each decision first came.
	Decisions []DecisionCount
	// The newest client and server named (name and version together).
	ClientName, ClientVersion, ServerName, ServerVersion string

	// The seqs of the steps each value kept came from.
	agentSeq, keySeq, nameSeq, userSeq, clientSeq, serverSeq int64
}

// DecisionCount is how many of a delta's steps had one decision.
type DecisionCount struct {
	Decision string
	N        int64
}

// Add counts the step with seq s into d.
func (d *SessionDelta) Add(s *SessionStep, seq int64) {
	if d.Steps == 0 {
		d.ID, d.First, d.Last = s.SessionID, s.ReceivedAt, s.ReceivedAt
	}
	d.Steps++
	d.First, d.Last = min(d.First, s.ReceivedAt), max(d.Last, s.ReceivedAt)
	if seq > d.LastSeq {
		d.LastSeq, d.LastMethod = seq, s.Method
	}
	// The newest step naming a name or user wins, as it would step by step.
	if s.AgentName != "" && seq > d.nameSeq {
		d.AgentName, d.nameSeq = s.AgentName, seq
	}
	if s.UserID != "" && seq > d.userSeq {
		d.UserID, d.userSeq = s.UserID, seq
	}
	if s.ClientName != "" && seq > d.clientSeq {
		d.ClientName, d.ClientVersion, d.clientSeq = s.ClientName, s.ClientVersion, seq
	}
	if s.ServerName != "" && seq > d.serverSeq {
		d.ServerName, d.ServerVersion, d.serverSeq = s.ServerName, s.ServerVersion, seq
	}
	if s.AgentID != "" && (d.AgentID == "" || seq < d.agentSeq) {
		d.AgentID, d.agentSeq = s.AgentID, seq
	}
	if s.KeyID != "" && (d.KeyID == "" || seq < d.keySeq) {
		d.KeyID, d.keySeq = s.KeyID, seq
	}
	for i := range d.Decisions {
		if d.Decisions[i].Decision == s.Decision {
			d.Decisions[i].N++
			return
		}
	}
	d.Decisions = append(d.Decisions, DecisionCount{s.Decision, 1})
}
