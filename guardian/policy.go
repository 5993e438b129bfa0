package guardian

import (
	"context"
	"encoding/json"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Verdict is what a policy decides about one step, before holds are resolved, and what
// DecideStep returns once they are: the final decision every front end applies in its own
// protocol (allow, deny or modify, never hold).
type Verdict struct {
	// Decision is allow, deny, modify, or hold.
	Decision string
	// RuleID is the deciding rule; empty when the default decision applied.
	RuleID      string
	Message     string
	Reasoning   string
	ReasonCodes []string
	// Matches lists every matching rule (enforced and monitor mode) and every rule error.
	Matches []record.RuleMatch
	// ModifiedParams replaces the step's params when Decision is modify.
	ModifiedParams json.RawMessage
	// Modify is the merged modification of the enforced modify rules that matched (nil when
	// none did). With a hold (a hold rule, or a paused session) it applies to whatever lets
	// the step through: an approval, an operator's edit, a remembered approval, an allow on
	// timeout.
	Modify *rules.Modification
	// HoldTimeout and HoldOnTimeout apply when Decision is hold.
	HoldTimeout   time.Duration
	HoldOnTimeout string

	// ModifiedRequest is the whole modified JSON-RPC request built from ModifiedParams,
	// set by the pipeline when the final Decision is modify.
	ModifiedRequest json.RawMessage
	// Held is true when the step waited for an operator; HoldID names the hold.
	Held   bool
	HoldID string
}

// DecisionHold parks a step until an operator decides; it is never sent to an agent.
const DecisionHold = "hold"

// History is what the guardian knows of a session when a step arrives.
type History struct {
	SessionID string
	// StepCount counts every step of the session stored so far.
	StepCount int
	// Steps holds the newest steps, oldest first, at most Config.HistorySize.
	Steps []rules.HistoryStep

	// from and fromCount say which session cache entry, at which step count, the snapshot
	// was taken from, for Counts; counts are the ones lent by it.
	from      *sessionState
	fromCount int
	counts    *rules.SessionCounts
	lent      bool
}

// Counts returns the counts of Steps (see rules.Session.WithCounts), kept up to date by the
// session cache, or nil when they are not at hand (a step of the session was added since the
// snapshot, or the History was built elsewhere): the rules then count the steps themselves.
// They are the cache's own, lent until the policy's Decide returns: read them only until
// then.
func (h *History) Counts() *rules.SessionCounts {
	if h == nil || h.from == nil {
		return nil
	}
	if !h.lent {
		h.counts, h.lent = h.from.lendCounts(h.fromCount), true
	}
	return h.counts
}

// release returns the counts Counts lent.
func (h *History) release() {
	if h.counts != nil {
		h.from.returnCounts(h.counts)
		h.counts = nil
	}
}

// Policy decides steps. The rules engine is one; AllowAll is the fallback.
type Policy interface {
	Decide(ctx context.Context, step *aos.Step, hist *History, now time.Time) Verdict
}

// AllowAll answers allow to every step; it is the policy when no rules are configured.
type AllowAll struct{}

// Decide implements Policy.
func (AllowAll) Decide(context.Context, *aos.Step, *History, time.Time) Verdict {
	return Verdict{Decision: string(aos.Allow), Message: "No rule matched; allowed by default."}
}
