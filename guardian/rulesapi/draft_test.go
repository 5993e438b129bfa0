package rulesapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// seedSteps stores a small history over two sessions and returns the records in order.
func seedSteps(t *testing.T, db *sqlite.DB) []record.StepRecord {
	t.Helper()
	return []record.StepRecord{
		saveStep(t, db, "s1", "send_email", "allow", false), // 0
		saveStep(t, db, "s1", "read_file", "allow", false),  // 1
		saveStep(t, db, "s1", "send_email", "allow", false), // 2
		saveStep(t, db, "s2", "rm", "deny", false),          // 3
		saveStep(t, db, "s2", "transfer", "allow", true),    // 4: held, then approved
		saveStep(t, db, "s2", "send_email", "allow", false), // 5
		saveStep(t, db, "s1", "send_email", "allow", false), // 6
	}
}

func TestBacktest(t *testing.T) {
	f := newFixture(t)
	steps := seedSteps(t, f.db)
	// The live rules say nothing about email; a draft that denies it changes four steps, and
	// its hold rule a fifth. The draft leaves out no-rm, so the denied rm now passes.
	f.call("POST", "/api/rules", denyTool("no-rm", "rm"), http.StatusCreated, nil)

	hold := rules.Rule{ID: "hold-transfer", When: `tool == "transfer"`, Action: rules.ActionHold, Enabled: true}
	draft := []rules.Rule{denyTool("no-email", "send_email"), hold}

	// A fresh result each time: decoding into a used one would merge the maps.
	backtest := func(body map[string]any) BacktestResult {
		var res BacktestResult
		f.call("POST", "/api/rules/backtest", body, http.StatusOK, &res)
		return res
	}
	res := backtest(map[string]any{"rules": draft})
	require.Equal(t, 7, res.Evaluated)
	require.Equal(t, 6, res.Changed)
	require.Equal(t, map[string]int{"allow->deny": 4, "deny->allow": 1, "allow->hold": 1}, res.ByChange)
	require.Equal(t, map[string]int{"deny": 4, "allow": 2, "hold": 1}, res.Decisions)
	require.Equal(t, map[string]int{"allow": 6, "deny": 1}, res.BaselineDecisions)
	require.Zero(t, res.OutsideRules.Total)
	require.Equal(t, steps[0].Seq, res.FromSeq)
	require.Equal(t, steps[6].Seq, res.ToSeq)
	require.Len(t, res.Examples, 6)
	ex := res.Examples[0]
	require.Equal(t, steps[0].Seq, ex.Seq)
	require.Equal(t, "s1", ex.SessionID)
	require.Equal(t, "send_email", ex.Tool)
	require.Equal(t, "allow", ex.Before)
	require.Equal(t, "deny", ex.After)
	require.Equal(t, "allow", ex.Stored)
	require.Equal(t, []string{"no-email"}, ex.Rules)
	require.Equal(t, "send_email is not allowed", ex.Message)
	require.Equal(t, steps[3].Seq, res.Examples[2].Seq)
	require.Equal(t, "deny->allow", res.Examples[2].Before+"->"+res.Examples[2].After)
	require.Positive(t, res.AvgMicros)

	// History is the earlier steps of the same session inside the window.
	byCount := []rules.Rule{{ID: "busy", When: `session.stepCount >= 2 && len(session.steps) == session.stepCount`, Action: rules.ActionDeny, Enabled: true}}
	res = backtest(map[string]any{"rules": byCount})
	require.Equal(t, map[string]int{"allow->deny": 3, "deny->allow": 1}, res.ByChange)
	seqs := []int64{}
	for _, e := range res.Examples {
		if e.After == "deny" {
			seqs = append(seqs, e.Seq)
		}
	}
	require.Equal(t, []int64{steps[2].Seq, steps[5].Seq, steps[6].Seq}, seqs)

	// A window of the last two steps: neither has earlier steps of its session in it.
	res = backtest(map[string]any{"rules": byCount, "limit": 2})
	require.Equal(t, 2, res.Evaluated)
	require.Zero(t, res.Changed)
	require.Equal(t, steps[5].Seq, res.FromSeq)

	// A window ending before a seq.
	res = backtest(map[string]any{"rules": draft, "before": steps[3].Seq})
	require.Equal(t, 3, res.Evaluated)
	require.Equal(t, map[string]int{"allow->deny": 2}, res.ByChange)

	// Without rules the stored set is replayed against itself: nothing changes.
	res = backtest(map[string]any{})
	require.Zero(t, res.Changed)
	require.Equal(t, map[string]int{}, res.ByChange)

	var e apiErr
	f.call("POST", "/api/rules/backtest", map[string]any{"rules": []rules.Rule{{ID: "x", When: "tool ==", Action: "deny"}}},
		http.StatusBadRequest, &e)
	require.Equal(t, "invalid_rule", e.Error.Code)
}

// limitStore records the window a backtest asks the store for.
type limitStore struct {
	*sqlite.DB
	limit  int
	before int64
}

func (s *limitStore) StepWindow(ctx context.Context, before int64, limit int) (int64, int64, error) {
	s.limit, s.before = limit, before
	return s.DB.StepWindow(ctx, before, limit)
}

// pageStore records the pages a backtest reads its window in.
type pageStore struct {
	*sqlite.DB
	pages []int
}

func (s *pageStore) StepsIn(ctx context.Context, r record.StepRange) ([]record.StepRecord, error) {
	steps, err := s.DB.StepsIn(ctx, r)
	s.pages = append(s.pages, len(steps))
	return steps, err
}

// TestBacktestReadsItsWindowInPagesBoundedByBytes: a window of big steps is read a few
// steps at a time (it was read whole: 10 000 steps of megabytes each), and the result is
// the same as when it is read in one page.
func TestBacktestReadsItsWindowInPagesBoundedByBytes(t *testing.T) {
	run := func(pageBytes int) (BacktestResult, []int) {
		store := &pageStore{}
		f := newFixture(t, func(o *Options) {
			store.DB = o.Store.(*sqlite.DB)
			o.Store = store
			o.BacktestPageBytes = pageBytes
		})
		seedSteps(t, f.db)
		store.pages = nil
		res, err := f.svc.Backtest(context.Background(), BacktestRequest{Rules: []rules.Rule{
			{ID: "second-email", Enabled: true, When: `tool == "send_email" && countTool(session, "send_email") >= 1`,
				Action: rules.ActionDeny}}})
		require.NoError(t, err)
		res.EvalMicros, res.AvgMicros = 0, 0
		return res, store.pages
	}
	whole, pages := run(DefaultBacktestPageBytes)
	require.Equal(t, []int{whole.Evaluated + whole.Skipped}, pages, "small steps: one page")
	require.Equal(t, 2, whole.Changed, "each session's second email: the history spans pages")
	paged, pages := run(1)
	require.Equal(t, whole, paged, "the same result page by page")
	require.Len(t, pages, whole.Evaluated+whole.Skipped, "a page per step at a bound of one byte")
	for _, n := range pages {
		require.Equal(t, 1, n)
	}
}

// TestBacktestWindowLimits: the window's limits follow the console API's convention (see
// /api/sessions): left out means the default, 0 or less is refused, a limit above the
// maximum is lowered to it. A limit of 0 or -5 used to be replaced by the default in
// silence, while 10001 was refused.
func TestBacktestWindowLimits(t *testing.T) {
	store := &limitStore{}
	f := newFixture(t, func(o *Options) {
		store.DB = o.Store.(*sqlite.DB)
		o.Store = store
	})
	steps := seedSteps(t, f.db)

	refused := []struct {
		body    string
		message string
	}{
		{`{"limit":-5}`, "limit: must be a positive integer, not -5"},
		{`{"limit":0}`, "limit: must be a positive integer, not 0"},
		{`{"before":-1}`, "before: must be a positive seq, not -1"},
		{`{"before":0}`, "before: must be a positive seq, not 0"},
	}
	for _, tc := range refused {
		t.Run(tc.body, func(t *testing.T) {
			var e apiErr
			f.callIn(t, "POST", "/api/rules/backtest", tc.body, http.StatusBadRequest, &e)
			require.Equal(t, "invalid_request", e.Error.Code)
			require.Equal(t, tc.message, e.Error.Message)
		})
	}

	accepted := []struct {
		body   string
		limit  int
		before int64
	}{
		{`{}`, DefaultBacktestLimit, 0},
		{`{"limit":null,"before":null}`, DefaultBacktestLimit, 0},
		{`{"limit":3}`, 3, 0},
		{`{"limit":10001}`, MaxBacktestLimit, 0},
		{`{"limit":1000000}`, MaxBacktestLimit, 0},
		{fmt.Sprintf(`{"before":%d}`, steps[3].Seq), DefaultBacktestLimit, steps[3].Seq},
	}
	for _, tc := range accepted {
		t.Run(tc.body, func(t *testing.T) {
			f.callIn(t, "POST", "/api/rules/backtest", tc.body, http.StatusOK, nil)
			require.Equal(t, tc.limit, store.limit)
			require.Equal(t, tc.before, store.before)
		})
	}

	// The Go API: zero values mean the defaults, negative ones are refused.
	ctx := context.Background()
	_, err := f.svc.Backtest(ctx, BacktestRequest{})
	require.NoError(t, err)
	require.Equal(t, DefaultBacktestLimit, store.limit)
	_, err = f.svc.Backtest(ctx, BacktestRequest{Limit: MaxBacktestLimit + 1})
	require.NoError(t, err)
	require.Equal(t, MaxBacktestLimit, store.limit)
	_, err = f.svc.Backtest(ctx, BacktestRequest{Limit: -1})
	require.ErrorIs(t, err, ErrBadRequest)
	_, err = f.svc.Backtest(ctx, BacktestRequest{Before: -1})
	require.ErrorIs(t, err, ErrBadRequest)
}

func TestBacktestCountsUndecodableSteps(t *testing.T) {
	f := newFixture(t)
	seedSteps(t, f.db)
	// params that are not an object: the fake env builder refuses them.
	rec := record.StepRecord{SessionID: "s3", Method: "steps/toolCallRequest", Decision: "allow",
		Request: json.RawMessage(`{"method":"steps/toolCallRequest","params":[1,2]}`)}
	require.NoError(t, f.db.SaveStep(context.Background(), &rec))
	var res BacktestResult
	f.call("POST", "/api/rules/backtest", map[string]any{"rules": []rules.Rule{}}, http.StatusOK, &res)
	require.Equal(t, 1, res.Skipped)
	require.Equal(t, 7, res.Evaluated)
	// No rules are stored and the draft is empty: nothing changes, but the denied rm was
	// decided by rules that are gone.
	require.Equal(t, map[string]int{}, res.ByChange)
	require.Equal(t, OutsideRules{Total: 1, ByReason: map[string]int{OutsideRulesChanged: 1},
		Examples: []OutsideExample{{Seq: res.OutsideRules.Examples[0].Seq, Method: "steps/toolCallRequest",
			SessionID: "s2", Tool: "rm", Stored: "deny", Baseline: "allow", Reason: OutsideRulesChanged}}}, res.OutsideRules)
}

func TestTestEndpoint(t *testing.T) {
	f := newFixture(t)
	steps := seedSteps(t, f.db)
	f.call("POST", "/api/rules", denyTool("no-read", "read_file"), http.StatusCreated, nil)
	step := func(tool string) map[string]any {
		return map[string]any{"method": "steps/toolCallRequest",
			"params": map[string]any{"tool": tool, "inputs": map[string]any{"to": "x@example.com"}}}
	}
	draft := []rules.Rule{denyTool("no-email", "send_email")}

	var res TestResult
	f.call("POST", "/api/rules/test", map[string]any{"rules": draft, "step": step("send_email")}, http.StatusOK, &res)
	require.Equal(t, rules.ActionDeny, res.Decision)
	require.Equal(t, "no-email", res.RuleID)
	require.Equal(t, "send_email is not allowed", res.Message)
	require.Equal(t, []string{"NO_send_email"}, res.ReasonCode)
	require.Len(t, res.Matches, 1)
	require.Nil(t, res.Stored)

	// An empty draft decides by default; no rules at all means the stored ones.
	f.call("POST", "/api/rules/test", map[string]any{"rules": []rules.Rule{}, "step": step("read_file")}, http.StatusOK, &res)
	require.Equal(t, rules.ActionAllow, res.Decision)
	require.Equal(t, []string{}, res.ReasonCode)
	f.call("POST", "/api/rules/test", map[string]any{"step": step("read_file")}, http.StatusOK, &res)
	require.Equal(t, rules.ActionDeny, res.Decision)

	redact := rules.Rule{ID: "redact", When: `tool == "send_email"`, Action: rules.ActionModify, Enabled: true,
		Modify: &rules.ModifySpec{Redact: []string{`x@example\.com`}}}
	f.call("POST", "/api/rules/test", map[string]any{"rules": []rules.Rule{redact}, "step": step("send_email")}, http.StatusOK, &res)
	require.Equal(t, rules.ActionModify, res.Decision)
	require.JSONEq(t, `{"jsonrpc":"2.0","method":"steps/toolCallRequest","params":{"tool":"send_email","inputs":{"to":"[REDACTED]"}}}`,
		string(res.ModifiedRequest))

	// A stored step, with its session history and its stored decision for comparison.
	busy := []rules.Rule{{ID: "busy", When: `session.stepCount == 2 && session.steps[1].tool == "read_file"`, Action: rules.ActionHold, Enabled: true}}
	f.call("POST", "/api/rules/test", map[string]any{"rules": busy, "seq": steps[2].Seq}, http.StatusOK, &res)
	require.Equal(t, rules.ActionHold, res.Decision)
	require.NotNil(t, res.Hold)
	require.Equal(t, &StoredDecision{Decision: "allow", MatchedRules: []record.RuleMatch{}}, res.Stored)

	var e apiErr
	for _, body := range []map[string]any{
		{"rules": draft},
		{"rules": draft, "seq": steps[0].Seq, "step": step("x")},
		{"rules": draft, "step": map[string]any{"params": map[string]any{}}},
		{"rules": draft, "step": map[string]any{"method": "m", "params": []int{1}}},
	} {
		f.call("POST", "/api/rules/test", body, http.StatusBadRequest, &e)
		require.Equal(t, "invalid_request", e.Error.Code)
	}
	f.call("POST", "/api/rules/test", map[string]any{"rules": draft, "seq": 99999}, http.StatusNotFound, &e)
	f.call("POST", "/api/rules/test", map[string]any{"rules": []rules.Rule{{ID: "x", When: "1 +", Action: "deny"}}, "step": step("x")},
		http.StatusBadRequest, &e)
	require.Equal(t, "invalid_rule", e.Error.Code)
}

// storeDecided stores a tool call decided as the guardian records it: the deciding rule in
// the response's data.ruleId, the rules that matched in MatchedRules.
func storeDecided(t *testing.T, db *sqlite.DB, sid, tool, decision string, held bool, ruleID string, matched ...record.RuleMatch) record.StepRecord {
	t.Helper()
	params, err := json.Marshal(fakeParams{Tool: tool})
	require.NoError(t, err)
	req, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "steps/toolCallRequest", "params": json.RawMessage(params)})
	require.NoError(t, err)
	result := map[string]any{"decision": decision}
	if ruleID != "" {
		result["data"] = map[string]any{"ruleId": ruleID}
	}
	resp, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "result": result})
	require.NoError(t, err)
	if matched == nil {
		matched = []record.RuleMatch{}
	}
	rec := record.StepRecord{SessionID: sid, Method: "steps/toolCallRequest", Kind: "toolCall", Tool: tool,
		Decision: decision, Held: held, ReceivedAt: t0, Request: req, Response: resp, MatchedRules: matched}
	require.NoError(t, db.SaveStep(context.Background(), &rec))
	return rec
}

// TestBacktestReportsOnlyTheDraftsDifference replays steps whose stored decisions the
// current rules would not reach for reasons that are not rules: an unchanged rule set must
// change nothing, and those steps are reported apart.
func TestBacktestReportsOnlyTheDraftsDifference(t *testing.T) {
	f := newFixture(t)
	holdTransfer := rules.Rule{ID: "hold-transfer", When: `tool == "transfer"`, Action: rules.ActionHold, Enabled: true}
	remembered := rules.Rule{ID: "remember-agent-transfer-0a1b2c3d", When: `tool == "transfer"`, Action: rules.ActionAllow,
		Enabled: true, Priority: 1000, ReasonCode: "REMEMBERED_APPROVAL"}
	f.call("POST", "/api/rules", holdTransfer, http.StatusCreated, nil)
	f.call("POST", "/api/rules", remembered, http.StatusCreated, nil)

	holdMatch := record.RuleMatch{RuleID: "hold-transfer", Action: "hold", Mode: "enforce"}
	rememberMatch := record.RuleMatch{RuleID: remembered.ID, Action: "allow", Mode: "enforce", ReasonCode: "REMEMBERED_APPROVAL"}
	steps := []record.StepRecord{
		// Stored before no-rm was created.
		storeDecided(t, f.db, "s1", "rm", "allow", false, ""),
		storeDecided(t, f.db, "s1", "rm", "allow", false, ""),
		// An operator had blocked s2 and paused s3 (then denied its step).
		storeDecided(t, f.db, "s2", "read_file", "deny", false, "session-blocked"),
		storeDecided(t, f.db, "s3", "read_file", "deny", true, "session-paused"),
		// Held, then approved by a person; later let through by the remembered approval.
		storeDecided(t, f.db, "s4", "transfer", "allow", true, "hold-transfer", holdMatch),
		storeDecided(t, f.db, "s4", "transfer", "allow", false, remembered.ID, holdMatch, rememberMatch),
		// Held and denied by a person: the person's decision, not the rules'.
		storeDecided(t, f.db, "s5", "transfer", "deny", true, "hold-transfer", holdMatch),
		// Decided as the current rules decide.
		storeDecided(t, f.db, "s1", "read_file", "allow", false, ""),
	}
	noRm := denyTool("no-rm", "rm")
	f.call("POST", "/api/rules", noRm, http.StatusCreated, nil)

	var current struct{ Rules []ruleJSON }
	f.call("GET", "/api/rules", nil, http.StatusOK, &current)
	unchanged := make([]rules.Rule, len(current.Rules))
	for i, r := range current.Rules {
		unchanged[i] = r.Rule
	}

	wantOutside := map[string]int{OutsideRulesChanged: 2, OutsideSessionBlocked: 1, OutsideSessionPaused: 1,
		OutsideHeld: 2, OutsideRemembered: 1}
	for name, body := range map[string]map[string]any{
		"the current set, as the editor sends it": {"rules": unchanged},
		"no rules: the stored set":                {},
	} {
		t.Run(name, func(t *testing.T) {
			var res BacktestResult
			f.call("POST", "/api/rules/backtest", body, http.StatusOK, &res)
			require.Equal(t, len(steps), res.Evaluated)
			require.Zero(t, res.Changed)
			require.Equal(t, map[string]int{}, res.ByChange)
			require.Empty(t, res.Examples)
			require.Equal(t, res.BaselineDecisions, res.Decisions)
			require.Equal(t, map[string]int{"deny": 2, "allow": 3, "hold": 3}, res.BaselineDecisions)
			require.Equal(t, 7, res.OutsideRules.Total)
			require.Equal(t, wantOutside, res.OutsideRules.ByReason)
			reasons := map[int64]string{}
			for _, e := range res.OutsideRules.Examples {
				reasons[e.Seq] = e.Reason
			}
			require.Equal(t, map[int64]string{
				steps[0].Seq: OutsideRulesChanged, steps[1].Seq: OutsideRulesChanged,
				steps[2].Seq: OutsideSessionBlocked, steps[3].Seq: OutsideSessionPaused,
				steps[4].Seq: OutsideHeld, steps[5].Seq: OutsideRemembered, steps[6].Seq: OutsideHeld,
			}, reasons)
		})
	}

	// A real change: transfers are denied rather than held. Exactly the three transfers
	// change, whatever was stored for them.
	draft := append([]rules.Rule(nil), unchanged...)
	for i := range draft {
		if draft[i].ID == "hold-transfer" {
			draft[i].Action = rules.ActionDeny
		}
	}
	var res BacktestResult
	f.call("POST", "/api/rules/backtest", map[string]any{"rules": draft}, http.StatusOK, &res)
	require.Equal(t, 3, res.Changed)
	require.Equal(t, map[string]int{"hold->deny": 3}, res.ByChange)
	var seqs []int64
	for _, e := range res.Examples {
		seqs = append(seqs, e.Seq)
		require.Equal(t, []string{"hold-transfer", remembered.ID}, e.Rules)
	}
	require.Equal(t, []int64{steps[4].Seq, steps[5].Seq, steps[6].Seq}, seqs)
	require.Equal(t, []string{"allow", "allow", "deny"}, []string{res.Examples[0].Stored, res.Examples[1].Stored, res.Examples[2].Stored})
	require.Equal(t, 7, res.OutsideRules.Total, "what is outside the rules does not depend on the draft")
}
