package rulesapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// seedSteps stores a small history over two sessions and returns the records in order.
func seedSteps(t *testing.T, db *storage.DB) []storage.StepRecord {
	t.Helper()
	return []storage.StepRecord{
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
	// The live rules say nothing about email; a draft that denies it changes four steps.
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
	require.Equal(t, 5, res.Changed)
	require.Equal(t, map[string]int{"allow->deny": 4, "deny->allow": 1}, res.ByChange)
	require.Equal(t, map[string]int{"deny": 4, "allow": 2, "hold": 1}, res.Decisions)
	require.Equal(t, steps[0].Seq, res.FromSeq)
	require.Equal(t, steps[6].Seq, res.ToSeq)
	require.Len(t, res.Examples, 5)
	ex := res.Examples[0]
	require.Equal(t, steps[0].Seq, ex.Seq)
	require.Equal(t, "s1", ex.SessionID)
	require.Equal(t, "send_email", ex.Tool)
	require.Equal(t, "allow", ex.Before)
	require.Equal(t, "deny", ex.After)
	require.Equal(t, []string{"no-email"}, ex.Rules)
	require.Equal(t, "send_email is not allowed", ex.Message)
	require.Equal(t, steps[3].Seq, res.Examples[2].Seq)
	require.Equal(t, "deny->allow", res.Examples[2].Before+"->"+res.Examples[2].After)
	require.Positive(t, res.AvgMicros)

	// History is the earlier steps of the same session inside the window.
	byCount := []rules.Rule{{ID: "busy", When: `session.stepCount >= 2 && len(session.steps) == session.stepCount`, Action: rules.ActionDeny, Enabled: true}}
	res = backtest(map[string]any{"rules": byCount})
	require.Equal(t, map[string]int{"allow->deny": 3, "deny->allow": 1, "hold->allow": 1}, res.ByChange)
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

	// Without rules the stored set is replayed: it agrees with the stored decisions, but
	// for the held transfer that no stored rule holds.
	res = backtest(map[string]any{})
	require.Equal(t, map[string]int{"hold->allow": 1}, res.ByChange)

	var e apiErr
	f.call("POST", "/api/rules/backtest", map[string]any{"limit": 10001}, http.StatusBadRequest, &e)
	f.call("POST", "/api/rules/backtest", map[string]any{"rules": []rules.Rule{{ID: "x", When: "tool ==", Action: "deny"}}},
		http.StatusBadRequest, &e)
	require.Equal(t, "invalid_rule", e.Error.Code)
}

func TestBacktestCountsUndecodableSteps(t *testing.T) {
	f := newFixture(t)
	seedSteps(t, f.db)
	// params that are not an object: the fake env builder refuses them.
	rec := storage.StepRecord{SessionID: "s3", Method: "steps/toolCallRequest", Decision: "allow",
		Request: json.RawMessage(`{"method":"steps/toolCallRequest","params":[1,2]}`)}
	require.NoError(t, f.db.SaveStep(context.Background(), &rec))
	var res BacktestResult
	f.call("POST", "/api/rules/backtest", map[string]any{"rules": []rules.Rule{}}, http.StatusOK, &res)
	require.Equal(t, 1, res.Skipped)
	require.Equal(t, 7, res.Evaluated)
	require.Equal(t, map[string]int{"deny->allow": 1, "hold->allow": 1}, res.ByChange)
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
	require.Equal(t, &StoredDecision{Decision: "allow", MatchedRules: []storage.RuleMatch{}}, res.Stored)

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
