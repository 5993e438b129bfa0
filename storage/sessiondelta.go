package storage

import (
	"strings"
	"time"

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

// Merge adds o's steps to d, as adding each of them would. o may hold older or newer steps
// than d; d keeps no reference to o's decisions.
func (d *SessionDelta) Merge(o *SessionDelta) {
	if o.Steps == 0 {
		return
	}
	if d.Steps == 0 {
		decisions := d.Decisions[:0]
		*d = *o
		d.Decisions = append(decisions, o.Decisions...)
		return
	}
	d.Steps += o.Steps
	d.First, d.Last = min(d.First, o.First), max(d.Last, o.Last)
	if o.LastSeq > d.LastSeq {
		d.LastSeq, d.LastMethod = o.LastSeq, o.LastMethod
	}
	if o.AgentName != "" && o.nameSeq > d.nameSeq {
		d.AgentName, d.nameSeq = o.AgentName, o.nameSeq
	}
	if o.UserID != "" && o.userSeq > d.userSeq {
		d.UserID, d.userSeq = o.UserID, o.userSeq
	}
	if o.ClientName != "" && o.clientSeq > d.clientSeq {
		d.ClientName, d.ClientVersion, d.clientSeq = o.ClientName, o.ClientVersion, o.clientSeq
	}
	if o.ServerName != "" && o.serverSeq > d.serverSeq {
		d.ServerName, d.ServerVersion, d.serverSeq = o.ServerName, o.ServerVersion, o.serverSeq
	}
	if o.AgentID != "" && (d.AgentID == "" || o.agentSeq < d.agentSeq) {
		d.AgentID, d.agentSeq = o.AgentID, o.agentSeq
	}
	if o.KeyID != "" && (d.KeyID == "" || o.keySeq < d.keySeq) {
		d.KeyID, d.keySeq = o.KeyID, o.keySeq
	}
outer:
	for _, c := range o.Decisions {
		for i := range d.Decisions {
			if d.Decisions[i].Decision == c.Decision {
				d.Decisions[i].N += c.N
				continue outer
			}
		}
		d.Decisions = append(d.Decisions, c)
	}
}

// Clone is a copy of d that shares no memory with it: its strings may point into a step's
// request, which a delta kept for a while must not hold on to.
func (d *SessionDelta) Clone() SessionDelta {
	c := *d
	for _, s := range []*string{&c.ID, &c.AgentID, &c.KeyID, &c.AgentName, &c.UserID, &c.LastMethod,
		&c.ClientName, &c.ClientVersion, &c.ServerName, &c.ServerVersion} {
		*s = strings.Clone(*s)
	}
	c.Decisions = make([]DecisionCount, len(d.Decisions))
	for i, dc := range d.Decisions {
		c.Decisions[i] = DecisionCount{strings.Clone(dc.Decision), dc.N}
	}
	return c
}

// ApplyTo adds d's steps to s, a summary as stored (or the zero Session when none is), as
// the backends' upserts do: s is then the summary writing d would leave.
func (d *SessionDelta) ApplyTo(s *record.Session) {
	if d.Steps == 0 {
		return
	}
	if s.ID == "" {
		s.ID, s.Control = d.ID, "active"
	}
	if d.ClientName != "" {
		s.Client = &record.Peer{Name: d.ClientName, Version: d.ClientVersion}
	}
	if d.ServerName != "" {
		s.Server = &record.Peer{Name: d.ServerName, Version: d.ServerVersion}
	}
	if s.AgentID == "" {
		s.AgentID = d.AgentID
	}
	if s.KeyID == "" {
		s.KeyID = d.KeyID
	}
	if d.AgentName != "" {
		s.AgentName = d.AgentName
	}
	if d.UserID != "" {
		s.UserID = d.UserID
	}
	first, last := time.Unix(0, d.First).UTC(), time.Unix(0, d.Last).UTC()
	if s.Steps == 0 {
		s.FirstSeen, s.LastSeen = first, last
	} else {
		if first.Before(s.FirstSeen) {
			s.FirstSeen = first
		}
		if last.After(s.LastSeen) {
			s.LastSeen = last
		}
	}
	if d.LastSeq > s.LastSeq {
		s.LastSeq, s.LastMethod = d.LastSeq, d.LastMethod
	}
	s.Steps += d.Steps
	if s.Decisions == nil {
		s.Decisions = make(map[string]int64, len(d.Decisions))
	}
	for _, c := range d.Decisions {
		s.Decisions[c.Decision] += c.N
	}
}
