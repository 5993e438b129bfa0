package rules

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
)

// Verdict is the combined decision of a Program for one step.
type Verdict struct {
	Action Action `json:"action"`
	// RuleID is the deciding rule; "" when the default decision applied.
	RuleID string `json:"ruleId,omitempty"`
	// Message is the deciding rule's interpolated message, for the agent.
	Message string `json:"message"`
	// Reasoning explains the decision: deciding rule, other matches, errors.
	Reasoning string `json:"reasoning,omitempty"`
	// ReasonCodes are the codes of the enforced matches, deciding rule first.
	ReasonCodes []string `json:"reasonCodes,omitempty"`
	// Matches lists every rule that matched or failed, enforced ones first.
	Matches []Match `json:"matches,omitempty"`
	// Modify merges the enforced modify matches; set when Action is modify, or hold with
	// modify rules also matching (applied if the hold is approved).
	Modify *Modification `json:"modify,omitempty"`
	// Hold is the deciding hold rule's spec, defaults filled in; set when Action is hold.
	Hold *HoldSpec `json:"hold,omitempty"`
}

// Match is one rule that matched a step or failed evaluating it.
type Match struct {
	RuleID string `json:"ruleId"`
	// Action is the rule's action, or the error policy's action when Error is set.
	Action     Action `json:"action"`
	Mode       Mode   `json:"mode"`
	ReasonCode string `json:"reasonCode,omitempty"`
	Message    string `json:"message,omitempty"`
	// Error is the run-time error, when the rule failed.
	Error string `json:"error,omitempty"`
}

// RuleStats are a rule's counters since it was first loaded into the Engine.
type RuleStats struct {
	Evaluations int64   `json:"evaluations"`
	Matches     int64   `json:"matches"`
	Errors      int64   `json:"errors"`
	TotalMicros int64   `json:"totalMicros"`
	AvgMicros   float64 `json:"avgMicros"`
}

// timingSample: one evaluation in timingSample is timed. Reading the clock around each of
// a hundred rules costs more than some rules do; a sample gives the same average.
const timingSample = 16

// statShards is how many counters share a rule's evaluation count. Every step evaluates
// every rule, so one counter per rule would be written by all cores for every step and its
// cache line would bounce between them; each evaluation state counts in its own shard.
const statShards = 8

type ruleStats struct {
	evaluations [statShards]paddedCounter
	// matches and errors are rarer: one counter each.
	matches, errors atomic.Int64
	// timed evaluations and the nanoseconds they took.
	timed, nanos atomic.Int64
}

// paddedCounter fills a cache line, so neighbouring shards do not share one.
type paddedCounter struct {
	n atomic.Int64
	_ [56]byte
}

func (s *ruleStats) snapshot() RuleStats {
	var evals int64
	for i := range s.evaluations {
		evals += s.evaluations[i].n.Load()
	}
	out := RuleStats{
		Evaluations: evals,
		Matches:     s.matches.Load(),
		Errors:      s.errors.Load(),
	}
	if t := s.timed.Load(); t > 0 {
		avg := float64(s.nanos.Load()) / float64(t) / 1000
		out.AvgMicros = avg
		out.TotalMicros = int64(avg * float64(out.Evaluations))
	}
	return out
}

// hit is a rule that matched or failed during one evaluation.
type hit struct {
	r      *compiledRule
	action Action
	err    error
	set    map[string]any
	// decides is true when the hit takes part in the combination (enforced matches, and
	// errors whose policy is not allow).
	decides bool
}

// Evaluate runs every enabled, unexpired rule against env and combines the results. It
// does not modify env.
func (p *Program) Evaluate(env *Env) (v Verdict) {
	st := p.pool.Get().(*evalState)
	defer func() {
		// Rule errors are handled per rule; this is the last line for a bug in the engine
		// itself, which must not pass a step either.
		if r := recover(); r != nil {
			if p.opts.Logger != nil {
				p.opts.Logger.Error("rules evaluation panicked", "panic", r)
			}
			v = Verdict{Action: p.opts.OnErrorEnforce, Message: "the rules could not be evaluated",
				Reasoning: fmt.Sprintf("internal error: %v", r)}
			return // the state may be inconsistent: leave it to the garbage collector
		}
		st.reset()
		p.pool.Put(st)
	}()
	e := &st.env
	if env != nil {
		*e = *env
	}
	e.state = st
	if e.Now.IsZero() {
		e.Now = p.opts.Now()
	}
	if n := len(e.Session.Steps); n > p.opts.MaxHistory {
		e.Session.Steps = e.Session.Steps[n-p.opts.MaxHistory:]
		e.Session.counts = nil // they count the steps cut off too
	}

	var hits []hit
	m := &st.vm
	st.evaluations++
	timed := st.evaluations%timingSample == 1
	var t time.Time
	if timed {
		t = time.Now()
	}
	for _, r := range p.active {
		if r.ExpiresAt != nil && !e.Now.Before(*r.ExpiresAt) {
			continue
		}
		matched := true
		for _, g := range r.guards {
			if !g.pass(e) {
				matched = false
				break
			}
		}
		var out any
		var err error
		if matched {
			matched = false
			out, err = m.Run(r.when, e)
		}
		if err == nil {
			switch v := out.(type) {
			case bool:
				matched = v
			case nil:
				// A condition over a missing input (inputs.flag) is false, not an error.
			default:
				err = fmt.Errorf("condition returned %T, not bool", out)
			}
		}
		var set map[string]any
		if err == nil && matched && r.mode == ModeEnforce && len(r.set) > 0 {
			set, err = r.evalSet(m, e)
		}
		r.stats.evaluations[st.shard].n.Add(1)
		if timed {
			now := time.Now()
			r.stats.timed.Add(1)
			r.stats.nanos.Add(int64(now.Sub(t)))
			t = now
		}
		switch {
		case err != nil:
			n := r.stats.errors.Add(1)
			h := hit{r: r, err: err, action: p.opts.OnErrorEnforce}
			if r.mode == ModeMonitor {
				h.action = p.opts.OnErrorMonitor
			}
			// Fail open means "as if the rule did not match": an allow from an error must not
			// override a default deny.
			h.decides = h.action != ActionAllow
			hits = append(hits, h)
			if p.opts.Logger != nil && (n == 1 || n%1000 == 0) {
				p.opts.Logger.Warn("rule evaluation failed", "rule", r.ID, "mode", r.mode,
					"policy", h.action, "errors", n, "error", err)
			}
		case matched:
			r.stats.matches.Add(1)
			hits = append(hits, hit{r: r, action: r.Action, set: set, decides: r.mode == ModeEnforce})
		}
	}
	return p.combine(e, m, hits)
}

func (r *compiledRule) evalSet(m *vm.VM, e *Env) (map[string]any, error) {
	out := make(map[string]any, len(r.set))
	for _, s := range r.set {
		v, err := m.Run(s.prog, e)
		if err != nil {
			return nil, fmt.Errorf("modify.set.%s: %s", s.name, errorText(err))
		}
		out[s.name] = v
	}
	return out, nil
}

func (p *Program) combine(e *Env, m *vm.VM, hits []hit) Verdict {
	sort.SliceStable(hits, func(i, j int) bool {
		a, b := hits[i], hits[j]
		if a.decides != b.decides {
			return a.decides
		}
		if ra, rb := a.action.rank(), b.action.rank(); ra != rb {
			return ra > rb
		}
		if a.r.Priority != b.r.Priority {
			return a.r.Priority > b.r.Priority
		}
		return a.r.ID < b.r.ID
	})

	v := Verdict{Action: p.opts.DefaultDecision}
	var decider *hit
	if len(hits) > 0 && hits[0].decides {
		decider = &hits[0]
		v.Action = decider.action
		v.RuleID = decider.r.ID
	}

	if len(hits) > 0 {
		v.Matches = make([]Match, len(hits))
	}
	for i := range hits {
		h := &hits[i]
		mt := Match{RuleID: h.r.ID, Action: h.action, Mode: h.r.mode, ReasonCode: h.r.code}
		if h.err != nil {
			mt.Error = errorText(h.err)
		} else {
			mt.Message = h.r.msg.render(m, e)
		}
		v.Matches[i] = mt
		if h.decides && !contains(v.ReasonCodes, h.r.code) {
			v.ReasonCodes = append(v.ReasonCodes, h.r.code)
		}
	}

	switch {
	case decider == nil:
		v.Message = ""
	case decider.err != nil:
		v.Message = fmt.Sprintf("%s: rule %s could not be evaluated", pastTense(v.Action), decider.r.ID)
	case v.Matches[0].Message != "":
		v.Message = v.Matches[0].Message
	default:
		v.Message = fmt.Sprintf("%s by rule %s", pastTense(v.Action), decider.r.ID)
	}
	v.Reasoning = reasoning(v, decider, hits)

	if decider != nil && v.Action == ActionHold {
		hs := HoldSpec{Timeout: Duration(DefaultHoldTimeout), OnTimeout: ActionDeny}
		if decider.err == nil {
			hs = decider.r.hold
		}
		v.Hold = &hs
	}
	if v.Action == ActionModify || v.Action == ActionHold {
		v.Modify = mergeModify(hits)
	}
	return v
}

func reasoning(v Verdict, decider *hit, hits []hit) string {
	var b strings.Builder
	if decider == nil {
		fmt.Fprintf(&b, "no enforced rule matched; default decision %s", v.Action)
	} else if decider.err != nil {
		fmt.Fprintf(&b, "rule %s failed (%s); error policy decided %s", decider.r.ID, errorText(decider.err), v.Action)
	} else {
		fmt.Fprintf(&b, "rule %s decided %s (priority %d)", decider.r.ID, v.Action, decider.r.Priority)
	}
	var also, monitor, failed []string
	for i := range hits {
		h := &hits[i]
		if h == decider {
			continue
		}
		switch {
		case h.err != nil:
			failed = append(failed, fmt.Sprintf("%s (%s, %s: %s)", h.r.ID, h.r.mode, h.action, errorText(h.err)))
		case h.decides:
			also = append(also, fmt.Sprintf("%s (%s)", h.r.ID, h.action))
		default:
			monitor = append(monitor, fmt.Sprintf("%s (%s)", h.r.ID, h.action))
		}
	}
	if len(also) > 0 {
		b.WriteString("; also matched: ")
		b.WriteString(strings.Join(also, ", "))
	}
	if len(monitor) > 0 {
		b.WriteString("; monitor only: ")
		b.WriteString(strings.Join(monitor, ", "))
	}
	if len(failed) > 0 {
		b.WriteString("; failed: ")
		b.WriteString(strings.Join(failed, ", "))
	}
	return b.String()
}

// errorText is a one-line form of an evaluation error: expr's message and position,
// without its multi-line source snippet.
func errorText(err error) string {
	var fe *file.Error
	if errors.As(err, &fe) {
		if fe.Line > 0 {
			return fmt.Sprintf("%s (%d:%d)", fe.Message, fe.Line, fe.Column+1)
		}
		return fe.Message
	}
	return err.Error()
}

func pastTense(a Action) string {
	switch a {
	case ActionAllow:
		return "allowed"
	case ActionDeny:
		return "denied"
	case ActionModify:
		return "modified"
	case ActionHold:
		return "held"
	}
	return string(a)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
