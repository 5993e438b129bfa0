package rules

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"sync"
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
	// LastError is the text of the rule's most recent run-time error (a budget overrun
	// reads "evaluation budget exceeded (…)"), at LastErrorAt.
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
}

// timingSample: one evaluation in timingSample is timed. Reading the clock around each of
// a hundred rules costs more than some rules do; a sample gives the same average, and
// timingSample times the sampled durations estimates the total.
const timingSample = 64

// ruleStats are a rule's counters. Its evaluations are not counted one by one: every
// active rule is evaluated on every step (or skipped by its guards, which counts as
// evaluated and not matched), so they are the steps its rule set counted while the rule
// was active, minus the ones on which it had expired. A reload that enables or disables
// the rule can misattribute the few evaluations running at that instant.
type ruleStats struct {
	// mu guards the active periods, which only Engine.Load and snapshots touch.
	mu      sync.Mutex
	counter *evalCounter
	active  bool
	// since is counter.sum() when the rule last became active; base sums the earlier
	// active periods.
	since, base int64
	// skipped counts evaluations that passed over the rule because it had expired.
	skipped         atomic.Int64
	matches, errors atomic.Int64
	// timed evaluations and the nanoseconds they took: running sums, so the total time
	// derived from them only grows.
	timed, nanos atomic.Int64
	// lastError is the most recent run-time error, nil before the first.
	lastError atomic.Pointer[lastError]
	// errLog paces the log lines of the rule's run-time errors.
	errLog logLimiter
}

// errorLogInterval is the least time between two log lines of one rule's run-time errors.
// A rule can fail on every step; the counters and the step's matches record every error,
// the log only needs to say that it keeps happening.
const errorLogInterval = time.Minute

// logLimiter lets one log line through per errorLogInterval and counts the ones it holds
// back, for the next line to report.
type logLimiter struct {
	// next is the Unix time in nanoseconds before which lines are held back.
	next       atomic.Int64
	suppressed atomic.Int64
}

// allow reports whether a line may be logged at now, and how many were held back since the
// last one that was.
func (l *logLimiter) allow(now time.Time) (ok bool, suppressed int64) {
	next := l.next.Load()
	if now.UnixNano() < next || !l.next.CompareAndSwap(next, now.Add(errorLogInterval).UnixNano()) {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}

// lastError is a rule's most recent run-time error and the evaluation time it happened at.
type lastError struct {
	text string
	at   time.Time
}

// setActive records that the rule is (or is no longer) active from the moment now, a
// reading of its counter.
func (s *ruleStats) setActive(active bool, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case active && !s.active:
		s.since = now
	case !active && s.active:
		s.base += now - s.since
	}
	s.active = active
}

func (s *ruleStats) evaluations() int64 {
	s.mu.Lock()
	n := s.base
	if s.active {
		n += s.counter.sum() - s.since
	}
	s.mu.Unlock()
	return max(0, n-s.skipped.Load())
}

func (s *ruleStats) snapshot() RuleStats {
	out := RuleStats{
		Evaluations: s.evaluations(),
		Matches:     s.matches.Load(),
		Errors:      s.errors.Load(),
	}
	if le := s.lastError.Load(); le != nil {
		at := le.at
		out.LastError, out.LastErrorAt = le.text, &at
	}
	if t := s.timed.Load(); t > 0 {
		nanos := float64(s.nanos.Load())
		out.AvgMicros = nanos / float64(t) / 1000
		// Each timed evaluation stands for timingSample of them. The total is a running
		// sum, never avg × evaluations: that product falls whenever a cheap evaluation
		// lowers the average, and the metric built from it is a counter.
		out.TotalMicros = int64(nanos * timingSample / 1000)
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
// does not modify env. Each rule runs within the Options' budget; one that exceeds it
// fails, and the error policy decides for it.
func (p *Program) Evaluate(env *Env) Verdict {
	v, _ := p.evaluate(context.Background(), env)
	return v
}

// EvaluateContext is Evaluate that gives up when ctx is done, returning ctx's error: for
// tests and backtests, which must not keep burning CPU for a client that has left.
func (p *Program) EvaluateContext(ctx context.Context, env *Env) (Verdict, error) {
	if err := ctx.Err(); err != nil {
		return Verdict{}, err
	}
	return p.evaluate(ctx, env)
}

func (p *Program) evaluate(ctx context.Context, env *Env) (v Verdict, cerr error) {
	if ctx.Done() == nil {
		ctx = nil // never cancelled: the loop below and the budget skip their checks
	}
	st := p.pool.Get().(*evalState)
	defer func() {
		// Rule errors are handled per rule; this is the last line for a bug in the engine
		// itself, which must not pass a step either.
		if r := recover(); r != nil {
			if p.opts.Logger != nil {
				if ok, suppressed := p.panicLog.allow(p.opts.Now()); ok {
					p.opts.Logger.Error("rules evaluation panicked", "panic", r, "suppressed", suppressed)
				}
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
	st.budget.limit, st.budget.ctx = p.opts.Budget, ctx
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
	p.counter.add(st.shard)
	st.mask = p.index.candidates(st.mask, e, p.active, timed)
	for w, word := range st.mask {
		for ; word != 0; word &= word - 1 {
			r := p.active[w*64+bits.TrailingZeros64(word)]
			if ctx != nil {
				if err := ctx.Err(); err != nil {
					return Verdict{}, err
				}
			}
			matched, set, err := r.evaluate(e, m)
			if err != nil && ctx != nil && ctx.Err() != nil {
				return Verdict{}, ctx.Err()
			}
			if timed {
				now := time.Now()
				r.stats.timed.Add(1)
				r.stats.nanos.Add(int64(now.Sub(t)))
				t = now
			}
			switch {
			case err != nil:
				n := r.stats.errors.Add(1)
				r.stats.lastError.Store(&lastError{text: errorText(err), at: e.Now})
				h := hit{r: r, err: err, action: p.opts.OnErrorEnforce}
				if r.mode == ModeMonitor {
					h.action = p.opts.OnErrorMonitor
				}
				// Fail open means "as if the rule did not match": an allow from an error must
				// not override a default deny.
				h.decides = h.action != ActionAllow
				hits = append(hits, h)
				if p.opts.Logger != nil {
					if ok, suppressed := r.stats.errLog.allow(p.opts.Now()); ok {
						p.opts.Logger.Warn("rule evaluation failed", "rule", r.ID, "mode", r.mode,
							"policy", h.action, "errors", n, "suppressed", suppressed, "error", errorText(err))
					}
				}
			case matched:
				r.stats.matches.Add(1)
				hits = append(hits, hit{r: r, action: r.Action, set: set, decides: r.mode == ModeEnforce})
			}
		}
	}
	return p.combine(e, m, hits), nil
}

// evaluate runs the rule's guards, then its condition and, for an enforced match, its
// modify.set expressions.
func (r *compiledRule) evaluate(e *Env, m *vm.VM) (matched bool, set map[string]any, err error) {
	for _, g := range r.guards {
		if !g.pass(e) {
			return false, nil, nil
		}
	}
	if r.reads != 0 && e.deferred != nil {
		e.fill(r.reads)
	}
	b := &e.state.budget
	b.begin()
	if r.whole {
		matched = true
	} else {
		out, err := m.Run(r.when, e)
		if err == nil {
			// A helper that ran past the budget may have finished its own work; the rule
			// is over the budget all the same.
			err = b.err
		}
		if err != nil {
			return false, nil, budgetError(err)
		}
		switch v := out.(type) {
		case bool:
			matched = v
		case nil:
			// A condition over a missing input (inputs.flag) is false, not an error.
		default:
			return false, nil, fmt.Errorf("condition returned %T, not bool", out)
		}
	}
	if matched && r.mode == ModeEnforce && len(r.set) > 0 {
		set, err = r.evalSet(m, e)
	}
	return matched, set, err
}

func (r *compiledRule) evalSet(m *vm.VM, e *Env) (map[string]any, error) {
	out := make(map[string]any, len(r.set))
	for _, s := range r.set {
		v, err := m.Run(s.prog, e)
		if err == nil {
			// The value goes into the forwarded request: what it references counts as built.
			err = spend(e, 0, sizeOf(v, MaxProduced+1))
		}
		if err != nil {
			return nil, fmt.Errorf("modify.set.%s: %s", s.name, errorText(budgetError(err)))
		}
		out[s.name] = v
	}
	return out, nil
}

func (p *Program) combine(e *Env, m *vm.VM, hits []hit) Verdict {
	if len(hits) == 0 {
		// Most steps match nothing: no sorting, and the reasoning is always the same.
		return Verdict{Action: p.opts.DefaultDecision, Reasoning: p.noMatch}
	}
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
		// An allow rule takes no part in a deny, hold or modify: its code would read as a
		// second reason for a refusal (and a hook could no longer tell a step that only
		// asks the user from one another rule refused).
		if h.decides && !contains(v.ReasonCodes, h.r.code) && (h.action != ActionAllow || v.Action == ActionAllow) {
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
		hs := HoldSpec{Timeout: Duration(p.opts.HoldTimeout), OnTimeout: ActionDeny}
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

// reasoning explains a verdict. It is built on every step with a match (a monitor rule
// matching every step is common), so it concatenates rather than going through fmt.
func reasoning(v Verdict, decider *hit, hits []hit) string {
	var b strings.Builder
	switch {
	case decider == nil:
		b.WriteString("no enforced rule matched; default decision ")
		b.WriteString(string(v.Action))
	case decider.err != nil:
		b.WriteString("rule " + decider.r.ID + " failed (" + errorText(decider.err) + "); error policy decided " + string(v.Action))
	default:
		b.WriteString("rule " + decider.r.ID + " decided " + string(v.Action) + " (priority " + strconv.Itoa(decider.r.Priority) + ")")
	}
	var also, monitor, failed []string
	for i := range hits {
		h := &hits[i]
		if h == decider {
			continue
		}
		switch {
		case h.err != nil:
			failed = append(failed, h.r.ID+" ("+string(h.r.mode)+", "+string(h.action)+": "+errorText(h.err)+")")
		case h.decides:
			also = append(also, h.r.ID+" ("+string(h.action)+")")
		default:
			monitor = append(monitor, h.r.ID+" ("+string(h.action)+")")
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
