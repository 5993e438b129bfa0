package rulesapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// Backtest limits.
const (
	DefaultBacktestLimit = 1000
	MaxBacktestLimit     = 10000
	maxBacktestExamples  = 50
	// backtestPage is the most steps of the window read at a time.
	backtestPage = 500
)

// compileDraft compiles a draft rule set; nil rules means the live set.
func (s *Service) compileDraft(ctx context.Context, draft []rules.Rule) (*rules.Program, error) {
	if draft == nil {
		cur, err := s.store.ListRules(ctx)
		if err != nil {
			return nil, err
		}
		draft = cur
	}
	p, err := rules.Compile(draft, s.draftOptions())
	if err != nil {
		return nil, asInvalid(err)
	}
	return p, nil
}

// admit takes a turn in sem for a test or backtest, waiting at most DraftQueueWait; the
// caller calls release when done.
func (s *Service) admit(ctx context.Context, sem chan struct{}, what string) (release func(), err error) {
	release = func() { <-sem }
	select {
	case sem <- struct{}{}:
		return release, nil
	default:
	}
	wait := time.NewTimer(s.opts.DraftQueueWait)
	defer wait.Stop()
	select {
	case sem <- struct{}{}:
		return release, nil
	case <-wait.C:
		return nil, fmt.Errorf("%d %s already running; try again shortly: %w", cap(sem), what, ErrBusy)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// draftRun admits a test or backtest and bounds it by DraftTimeout. The returned context
// ends when the client leaves or the time is up; done releases the turn.
func (s *Service) draftRun(ctx context.Context, backtest bool) (context.Context, func(), error) {
	release, err := s.admit(ctx, s.drafts, "rule tests or backtests are")
	if err != nil {
		return nil, nil, err
	}
	if backtest {
		releaseBacktest, err := s.admit(ctx, s.backtests, "backtest is")
		if err != nil {
			release()
			return nil, nil, err
		}
		release = func() { releaseBacktest(); <-s.drafts }
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.opts.DraftTimeout, ErrTimeout)
	return ctx, func() { cancel(); release() }, nil
}

// draftErr names the time limit when it is why ctx ended.
func (s *Service) draftErr(ctx context.Context, what string, err error) error {
	if errors.Is(context.Cause(ctx), ErrTimeout) {
		return fmt.Errorf("the %s did not finish within %s: %w", what, s.opts.DraftTimeout, ErrTimeout)
	}
	return err
}

// TestRequest is the body of POST /api/rules/test: draft rules (absent: the stored ones)
// against either a step given as method and params, or a stored step by seq.
type TestRequest struct {
	Rules []rules.Rule    `json:"rules"`
	Step  *rules.TestStep `json:"step,omitempty"`
	Seq   int64           `json:"seq,omitempty"`
}

// TestResult is the draft's verdict on the step.
type TestResult struct {
	Decision   rules.Action        `json:"decision"`
	RuleID     string              `json:"ruleId,omitempty"`
	Message    string              `json:"message"`
	Reasoning  string              `json:"reasoning,omitempty"`
	ReasonCode []string            `json:"reasonCode"`
	Matches    []rules.Match       `json:"matches"`
	Modify     *rules.Modification `json:"modify,omitempty"`
	Hold       *rules.HoldSpec     `json:"hold,omitempty"`
	// ModifiedRequest is the request as a modify decision would forward it.
	ModifiedRequest json.RawMessage `json:"modifiedRequest,omitempty"`
	// Stored is the stored step's actual decision, for a test by seq.
	Stored        *StoredDecision `json:"stored,omitempty"`
	ElapsedMicros int64           `json:"elapsedMicros"`
}

// StoredDecision is what a stored step was decided when it arrived.
type StoredDecision struct {
	Decision     string             `json:"decision"`
	Held         bool               `json:"held,omitempty"`
	MatchedRules []record.RuleMatch `json:"matchedRules"`
}

// Test evaluates draft rules against one step.
func (s *Service) Test(ctx context.Context, req TestRequest) (TestResult, error) {
	prog, err := s.compileDraft(ctx, req.Rules)
	if err != nil {
		return TestResult{}, err
	}
	ctx, done, err := s.draftRun(ctx, false)
	if err != nil {
		return TestResult{}, err
	}
	defer done()
	var (
		env    *rules.Env
		method string
		params json.RawMessage
		stored *StoredDecision
	)
	switch {
	case req.Step != nil && req.Seq != 0:
		return TestResult{}, fmt.Errorf("give either step or seq, not both: %w", ErrBadRequest)
	case req.Step != nil:
		if s.opts.EnvForDraft == nil {
			return TestResult{}, errors.New("rulesapi: testing a draft step is not configured")
		}
		if req.Step.Method == "" {
			return TestResult{}, fmt.Errorf("step.method is required: %w", ErrBadRequest)
		}
		method, params = req.Step.Method, req.Step.Params
		env, err = s.opts.EnvForDraft(method, params)
		if err != nil {
			return TestResult{}, &stepError{what: "step", method: method, err: err}
		}
	case req.Seq > 0:
		rec, err := s.store.Step(ctx, req.Seq)
		if err != nil {
			return TestResult{}, err
		}
		hist, err := s.store.SessionStepsBefore(ctx, rec.SessionID, rec.Seq, s.opts.HistorySize)
		if err != nil {
			return TestResult{}, err
		}
		env, err = s.envForStep(ctx, rec, hist)
		if err != nil {
			return TestResult{}, &stepError{what: fmt.Sprintf("stored step %d", rec.Seq), method: rec.Method, err: err}
		}
		method, params = requestParams(rec)
		stored = &StoredDecision{Decision: rec.Decision, Held: rec.Held, MatchedRules: rec.MatchedRules}
	default:
		return TestResult{}, fmt.Errorf("give a step ({method, params}) or the seq of a stored step: %w", ErrBadRequest)
	}

	start := time.Now()
	v, err := prog.EvaluateContext(ctx, env)
	if err != nil {
		return TestResult{}, s.draftErr(ctx, "rule test", err)
	}
	out := TestResult{
		Decision: v.Action, RuleID: v.RuleID, Message: v.Message, Reasoning: v.Reasoning,
		ReasonCode: v.ReasonCodes, Matches: v.Matches, Modify: v.Modify, Hold: v.Hold,
		Stored: stored, ElapsedMicros: time.Since(start).Microseconds(),
	}
	if out.ReasonCode == nil {
		out.ReasonCode = []string{}
	}
	if out.Matches == nil {
		out.Matches = []rules.Match{}
	}
	if v.Action == rules.ActionModify && s.opts.ModifiedRequest != nil {
		mr, err := s.opts.ModifiedRequest(method, params, v)
		if err != nil {
			return TestResult{}, fmt.Errorf("rulesapi: render modified request: %w", err)
		}
		out.ModifiedRequest = mr
	}
	return out, nil
}

// stepError is a step the rules cannot be run on because it does not decode: a bad request.
// Its message is the AOS error's own, as the agent sending that step would read it, without
// the prefixes the error picks up on its way ("ruleenv: jsonrpc -32602: "), which mean
// nothing to an operator. The cause stays reachable with errors.As.
type stepError struct {
	what, method string
	err          error
}

func (e *stepError) Error() string {
	msg := e.err.Error()
	var ae *aos.Error
	if errors.As(e.err, &ae) {
		msg = ae.Message
		if ae.Code == aos.CodeMethodNotFound {
			msg = fmt.Sprintf("%q is not an AOS method", e.method)
		}
	}
	return e.what + " does not decode: " + msg
}

func (e *stepError) Unwrap() []error { return []error{e.err, ErrBadRequest} }

func (s *Service) envForStep(ctx context.Context, rec record.StepRecord, hist []record.StepRecord) (*rules.Env, error) {
	if s.opts.EnvForStep == nil {
		return nil, errors.New("rulesapi: replaying stored steps is not configured")
	}
	env, err := s.opts.EnvForStep(ctx, rec, hist)
	if err != nil {
		return nil, err
	}
	if env == nil {
		env = &rules.Env{}
	}
	// Replay at the step's own time, so expiries and time windows judge it as they did.
	if env.Now.IsZero() {
		env.Now = rec.ReceivedAt
	}
	return env, nil
}

// requestParams extracts the method and params of a stored JSON-RPC request.
func requestParams(rec record.StepRecord) (string, json.RawMessage) {
	var req struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	_ = json.Unmarshal(rec.Request, &req) // a stored request that is not an object has no params
	if req.Method == "" {
		req.Method = rec.Method
	}
	return req.Method, req.Params
}

// BacktestRequest is the body of POST /api/rules/backtest.
type BacktestRequest struct {
	// Rules is the draft set; absent means the stored rules.
	Rules []rules.Rule `json:"rules"`
	// Limit is how many of the newest steps to replay: 0 means the default (1000), a limit
	// above MaxBacktestLimit is lowered to it, as the console API lowers a list's limit, and
	// a negative one is refused.
	Limit int `json:"limit"`
	// Before, when set, ends the window before this seq; a negative one is refused.
	Before int64 `json:"before,omitempty"`
}

// BacktestResult reports which decisions the draft would change. Both sides are fresh
// evaluations of the same stored steps with the same history: the baseline is the current
// rule set, the candidate the draft. What the stored decisions say only counts in
// OutsideRules, as information.
type BacktestResult struct {
	Evaluated int `json:"evaluated"`
	// Changed counts the steps whose candidate decision differs from the baseline's.
	Changed int `json:"changed"`
	// ByChange counts changes as "baseline->candidate", e.g. "allow->deny".
	ByChange map[string]int `json:"byChange"`
	// Decisions counts the candidate's decisions over the window, BaselineDecisions the
	// current rules'.
	Decisions         map[string]int    `json:"decisions"`
	BaselineDecisions map[string]int    `json:"baselineDecisions"`
	Examples          []BacktestExample `json:"examples"`
	// OutsideRules counts the steps whose stored decision differs from the baseline for
	// reasons the draft has nothing to do with.
	OutsideRules OutsideRules `json:"outsideRules"`
	// Skipped counts stored steps whose environment could not be rebuilt.
	Skipped int `json:"skipped"`
	// RuleErrors counts draft rule evaluations that failed at run time.
	RuleErrors int `json:"ruleErrors"`
	// FromSeq and ToSeq bound the replayed window (0 when it is empty).
	FromSeq int64 `json:"fromSeq"`
	ToSeq   int64 `json:"toSeq"`
	// EvalMicros is the time spent evaluating both sets; AvgMicros per step.
	EvalMicros int64   `json:"evalMicros"`
	AvgMicros  float64 `json:"avgMicros"`
}

// BacktestExample is one step whose decision the draft would change.
type BacktestExample struct {
	Seq       int64  `json:"seq"`
	Method    string `json:"method"`
	SessionID string `json:"sessionId"`
	Tool      string `json:"tool,omitempty"`
	// Before is the current rules' decision, After the draft's.
	Before string `json:"before"`
	After  string `json:"after"`
	// Stored is the decision the step was given when it arrived.
	Stored string `json:"stored"`
	// Rules are the draft rules that matched or failed, deciding rule first.
	Rules   []string `json:"rules"`
	Message string   `json:"message,omitempty"`
}

// Reasons a stored decision differs from the current rules' decision.
const (
	// OutsideSessionBlocked: an operator had blocked the session.
	OutsideSessionBlocked = "sessionBlocked"
	// OutsideSessionPaused: an operator had paused the session, so the step was held.
	OutsideSessionPaused = "sessionPaused"
	// OutsideRemembered: a remembered approval let a held step through.
	OutsideRemembered = "rememberedApproval"
	// OutsideHeld: the rules hold the step, and a person (or the hold's timeout) decided.
	OutsideHeld = "held"
	// OutsideRulesChanged: the rules were different when the step arrived.
	OutsideRulesChanged = "rulesChanged"
)

// OutsideRules summarises stored decisions that differ from the current rules' decision.
type OutsideRules struct {
	Total int `json:"total"`
	// ByReason counts them by reason (the Outside* constants).
	ByReason map[string]int   `json:"byReason"`
	Examples []OutsideExample `json:"examples"`
}

// OutsideExample is one step whose stored decision the current rules would not reach.
type OutsideExample struct {
	Seq       int64  `json:"seq"`
	Method    string `json:"method"`
	SessionID string `json:"sessionId"`
	Tool      string `json:"tool,omitempty"`
	Stored    string `json:"stored"`
	Held      bool   `json:"held,omitempty"`
	Baseline  string `json:"baseline"`
	Reason    string `json:"reason"`
	// RuleID is the stored deciding rule, when the response names one.
	RuleID string `json:"ruleId,omitempty"`
}

// storedRuleID is the deciding rule a stored step's response names (result.data.ruleId);
// "" for a notification or a default decision.
func storedRuleID(rec record.StepRecord) string {
	var resp struct {
		Result struct {
			Data struct {
				RuleID string `json:"ruleId"`
			} `json:"data"`
		} `json:"result"`
	}
	_ = json.Unmarshal(rec.Response, &resp) // a response of another shape names no rule
	return resp.Result.Data.RuleID
}

// outsideReason explains why a stored decision differs from the current rules' baseline.
func outsideReason(rec record.StepRecord, ruleID, baseline string) string {
	matched := func(id string) bool {
		return slices.ContainsFunc(rec.MatchedRules, func(m record.RuleMatch) bool { return m.RuleID == id })
	}
	switch {
	case ruleID == holds.BlockRuleID || matched(holds.BlockRuleID):
		return OutsideSessionBlocked
	case ruleID == holds.PauseRuleID || matched(holds.PauseRuleID):
		return OutsideSessionPaused
	case !rec.Held && holds.IsRemembered(ruleID):
		return OutsideRemembered
	case rec.Held && baseline == string(rules.ActionHold):
		return OutsideHeld
	}
	return OutsideRulesChanged
}

const maxOutsideExamples = 20

// Backtest replays the current rule set (the baseline) and a draft set (the candidate)
// over the newest stored steps and reports the steps where they decide differently. Each
// step's environment is built once and both sets see it: the earlier steps of its session
// within the window as its history, as it would have live. Comparing two fresh
// evaluations, rather than the draft with the stored decisions, keeps out of the changes
// everything that is not the draft: session blocks and pauses, remembered approvals,
// people's decisions on holds and rules changed since the step arrived. Those are counted
// apart, in OutsideRules.
func (s *Service) Backtest(ctx context.Context, req BacktestRequest) (BacktestResult, error) {
	// A negative limit or seq names no window, so it is refused rather than replaced by the
	// default in silence; a limit above the maximum is lowered, as every list the console
	// API pages through lowers it.
	if req.Limit < 0 {
		return BacktestResult{}, positive("limit", "integer", int64(req.Limit))
	}
	if req.Before < 0 {
		return BacktestResult{}, positive("before", "seq", req.Before)
	}
	limit := req.Limit
	if limit == 0 {
		limit = DefaultBacktestLimit
	}
	limit = min(limit, MaxBacktestLimit)
	if s.opts.EnvForStep == nil {
		return BacktestResult{}, errors.New("rulesapi: replaying stored steps is not configured")
	}
	base, err := s.compileDraft(ctx, nil)
	if err != nil {
		return BacktestResult{}, fmt.Errorf("rulesapi: compile the current rules: %w", err)
	}
	cand := base
	if req.Rules != nil {
		if cand, err = s.compileDraft(ctx, req.Rules); err != nil {
			return BacktestResult{}, err
		}
	}
	ctx, done, err := s.draftRun(ctx, true)
	if err != nil {
		return BacktestResult{}, err
	}
	defer done()
	// The window is fixed first (steps stored meanwhile are not in it) and then read a page
	// at a time, each bounded by bytes: the steps may be megabytes each, and only their
	// history (storage.AsHistory) stays in memory past their page.
	after, last, err := s.store.StepWindow(ctx, req.Before, limit)
	if err != nil {
		return BacktestResult{}, err
	}

	res := BacktestResult{ByChange: map[string]int{}, Decisions: map[string]int{},
		BaselineDecisions: map[string]int{}, Examples: []BacktestExample{},
		OutsideRules: OutsideRules{ByReason: map[string]int{}, Examples: []OutsideExample{}}}
	history := map[string][]record.StepRecord{}
	var evalTime time.Duration
	for read := 0; after < last && read < limit; {
		page, err := s.store.StepsIn(ctx, record.StepRange{After: after, Before: last + 1,
			Limit: min(backtestPage, limit-read), MaxBytes: s.opts.BacktestPageBytes})
		if err != nil {
			return BacktestResult{}, err
		}
		if len(page) == 0 {
			break
		}
		if res.FromSeq == 0 {
			res.FromSeq = page[0].Seq
		}
		res.ToSeq = page[len(page)-1].Seq
		read += len(page)
		after = page[len(page)-1].Seq
		for i := range page {
			if err := ctx.Err(); err != nil {
				return BacktestResult{}, s.draftErr(ctx, "backtest", err)
			}
			d, err := s.backtestStep(ctx, &res, base, cand, page[i], history)
			if err != nil {
				return BacktestResult{}, err
			}
			evalTime += d
			page[i] = record.StepRecord{} // judged: the collector may have its request now
		}
	}
	res.EvalMicros = evalTime.Microseconds()
	if res.Evaluated > 0 {
		res.AvgMicros = float64(evalTime.Nanoseconds()) / 1000 / float64(res.Evaluated)
	}
	return res, nil
}

// backtestStep judges one step of a backtest's window with the current rules (base) and
// the draft (cand), counting it into res, and returns the time the rules took. history
// holds the earlier steps of each session in the window, as history.
func (s *Service) backtestStep(ctx context.Context, res *BacktestResult, base, cand *rules.Program,
	rec record.StepRecord, history map[string][]record.StepRecord) (time.Duration, error) {
	hist := history[rec.SessionID]
	if len(hist) > s.opts.HistorySize {
		hist = hist[len(hist)-s.opts.HistorySize:]
	}
	history[rec.SessionID] = append(hist, storage.AsHistory(rec))
	env, err := s.envForStep(ctx, rec, hist)
	if err != nil {
		res.Skipped++
		return 0, nil
	}
	// The engine copies the env it is given, so both sets see the same one.
	start := time.Now()
	bv, err := base.EvaluateContext(ctx, env)
	if err != nil {
		return 0, s.draftErr(ctx, "backtest", err)
	}
	cv := bv
	if cand != base {
		if cv, err = cand.EvaluateContext(ctx, env); err != nil {
			return 0, s.draftErr(ctx, "backtest", err)
		}
	}
	took := time.Since(start)
	res.Evaluated++
	before, after := string(bv.Action), string(cv.Action)
	res.BaselineDecisions[before]++
	res.Decisions[after]++
	var ruleIDs []string
	for _, m := range cv.Matches {
		if m.Error != "" {
			res.RuleErrors++
		}
		ruleIDs = append(ruleIDs, m.RuleID)
	}
	if rec.Decision != before {
		res.outside(rec, before)
	}
	if before == after {
		return took, nil
	}
	res.Changed++
	res.ByChange[before+"->"+after]++
	if len(res.Examples) < maxBacktestExamples {
		if ruleIDs == nil {
			ruleIDs = []string{}
		}
		res.Examples = append(res.Examples, BacktestExample{Seq: rec.Seq, Method: rec.Method,
			SessionID: rec.SessionID, Tool: rec.Tool, Before: before, After: after, Stored: rec.Decision,
			Rules: ruleIDs, Message: cv.Message})
	}
	return took, nil
}

// outside counts a step whose stored decision differs from the baseline.
func (res *BacktestResult) outside(rec record.StepRecord, baseline string) {
	ruleID := storedRuleID(rec)
	reason := outsideReason(rec, ruleID, baseline)
	o := &res.OutsideRules
	o.Total++
	o.ByReason[reason]++
	if len(o.Examples) < maxOutsideExamples {
		o.Examples = append(o.Examples, OutsideExample{Seq: rec.Seq, Method: rec.Method, SessionID: rec.SessionID,
			Tool: rec.Tool, Stored: rec.Decision, Held: rec.Held, Baseline: baseline, Reason: reason, RuleID: ruleID})
	}
}
