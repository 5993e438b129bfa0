package rules

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ruleSet(prefix string, n int) []Rule {
	rs := make([]Rule, n)
	for i := range rs {
		rs[i] = rule(fmt.Sprintf("%s-%d", prefix, i), `tool == "x" && len(pii(text)) > 0`, []Action{ActionDeny, ActionHold, ActionModify}[i%3])
	}
	return rs
}

func TestEngineLoadIsAtomicUnderConcurrentEvaluate(t *testing.T) {
	e := NewEngine(Options{})
	require.NoError(t, e.Load(ruleSet("a", 10)))
	env := &Env{Tool: "x", Text: "mail bob@corp.example"}
	broken := append(ruleSet("c", 3), Rule{ID: "broken", When: "nope(", Action: ActionDeny})

	var stop atomic.Bool
	var evaluations atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				v := e.Evaluate(env)
				evaluations.Add(1)
				if len(v.Matches) != 10 && len(v.Matches) != 15 {
					errs <- fmt.Errorf("half-applied rule set: %d matches", len(v.Matches))
					return
				}
				prefix := v.Matches[0].RuleID[:2]
				for _, m := range v.Matches {
					if !strings.HasPrefix(m.RuleID, prefix) || m.Error != "" {
						errs <- fmt.Errorf("mixed or failing verdict: %+v", v.Matches)
						return
					}
				}
				if v.Action != ActionDeny {
					errs <- fmt.Errorf("unexpected decision %s", v.Action)
					return
				}
			}
		}()
	}
	for i := 0; i < 40; i++ {
		set := ruleSet("a", 10)
		if i%2 == 1 {
			set = ruleSet("b", 15)
		}
		require.NoError(t, e.Load(set))
		err := e.Load(broken)
		var ce CompileErrors
		require.True(t, errors.As(err, &ce))
		require.Equal(t, "broken", ce[0].RuleID)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.Positive(t, evaluations.Load())
	require.Len(t, e.Rules(), 15, "the last good load stays")
}

func TestEngineFailedLoadChangesNothing(t *testing.T) {
	e := NewEngine(Options{DefaultDecision: ActionDeny})
	require.Equal(t, ActionDeny, e.Evaluate(&Env{}).Action, "an engine without rules applies the default")
	require.Equal(t, ActionDeny, e.Options().DefaultDecision)
	require.NoError(t, e.Load([]Rule{rule("ok", `tool == "search"`, ActionAllow)}))
	p := e.Program()
	err := e.Load([]Rule{rule("ok", `tool == "search"`, ActionAllow), {ID: "bad", When: `tool ==`, Action: ActionDeny}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "rules: load:")
	require.Same(t, p, e.Program())
	require.Equal(t, ActionAllow, e.Evaluate(&Env{Tool: "search"}).Action)
}

func TestEngineStatsSurviveReload(t *testing.T) {
	e := NewEngine(Options{})
	require.NoError(t, e.Load([]Rule{rule("keep", `tool == "x"`, ActionDeny), rule("drop", `true`, ActionAllow)}))
	for i := 0; i < 5; i++ {
		e.Evaluate(&Env{Tool: "x"})
	}
	require.NoError(t, e.Load([]Rule{rule("keep", `tool == "x" || tool == "y"`, ActionDeny), rule("new", `true`, ActionAllow)}))
	e.Evaluate(&Env{Tool: "y"})
	s := e.Stats()
	require.Equal(t, int64(6), s["keep"].Evaluations)
	require.Equal(t, int64(6), s["keep"].Matches)
	require.Equal(t, int64(1), s["new"].Evaluations)
	_, ok := s["drop"]
	require.False(t, ok)
	require.Equal(t, []string{"keep", "new"}, []string{e.Rules()[0].ID, e.Rules()[1].ID})
}

// A rule's evaluations are the steps evaluated while it was active and unexpired, whether
// the rule index visited it or not, across reloads that disable and enable it again.
func TestEngineStatsActivePeriods(t *testing.T) {
	e := NewEngine(Options{})
	expired := t0.Add(-time.Hour)
	off := func(r *Rule) { r.Enabled = false }
	gone := func(r *Rule) { r.ExpiresAt = &expired }
	eval := func(n int, tool string) {
		for range n {
			e.Evaluate(&Env{Tool: tool, Now: t0})
		}
	}
	require.NoError(t, e.Load([]Rule{rule("t", `tool == "x"`, ActionDeny), rule("u", `true`, ActionAllow),
		rule("old", `true`, ActionDeny, gone)}))
	eval(3, "y") // "t" is filed under tool x and not visited for y: still evaluated
	eval(2, "x")
	require.NoError(t, e.Load([]Rule{rule("t", `tool == "x"`, ActionDeny, off), rule("u", `true`, ActionAllow),
		rule("old", `true`, ActionDeny, gone)}))
	eval(4, "x")
	require.Zero(t, e.Stats()["old"].Evaluations, "an expired rule is skipped")
	require.NoError(t, e.Load([]Rule{rule("t", `tool == "x"`, ActionDeny), rule("u", `true`, ActionAllow)}))
	eval(1, "x")
	s := e.Stats()
	require.Equal(t, int64(6), s["t"].Evaluations, "5 before it was disabled, 1 after")
	require.Equal(t, int64(3), s["t"].Matches)
	require.Equal(t, int64(10), s["u"].Evaluations)
	require.Equal(t, int64(10), s["u"].Matches)
}
