package rulesapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// hostile is the red-team rule: seconds of toJSON over a 100 KB step.
var hostile = rules.Rule{ID: "hostile", When: `all(1..20000, len(toJSON(params)) > 0)`,
	Action: rules.ActionAllow, Enabled: true}

// bigParams is about 100 KB of params.
func bigParams() map[string]any {
	p := map[string]any{}
	for i := range 100 {
		p[strings.Repeat("k", i+1)] = strings.Repeat("lorem ipsum ", 85)
	}
	return p
}

// TestTestEndpointCutsOffHostileRule: the rule fails within its budget, and the error
// policy decides for it.
func TestTestEndpointCutsOffHostileRule(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.EnvForDraft = func(method string, params json.RawMessage) (*rules.Env, error) {
			return &rules.Env{Method: method, Params: bigParams()}, nil
		}
	})
	var res TestResult
	start := time.Now()
	f.call("POST", "/api/rules/test", map[string]any{"rules": []rules.Rule{hostile},
		"step": map[string]any{"method": "steps/toolCallRequest"}}, http.StatusOK, &res)
	t.Logf("POST /api/rules/test answered after %s", time.Since(start))
	require.Equal(t, rules.ActionDeny, res.Decision)
	require.Len(t, res.Matches, 1)
	require.Contains(t, res.Matches[0].Error, "evaluation budget exceeded (")
}

// TestDraftRunsStopWithTheirContext: a test or backtest whose client leaves stops at once,
// not after its rules or steps have run.
func TestDraftRunsStopWithTheirContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var built atomic.Int32
	// The engine has no time budget: only the context can stop the rule.
	f := newFixture(t, func(o *Options) {
		o.EngineOptions = rules.Options{Budget: -1}
		o.EnvForDraft = func(method string, params json.RawMessage) (*rules.Env, error) {
			p := bigParams()
			p["stop"] = cancelOnJSON(cancel)
			return &rules.Env{Method: method, Params: p}, nil
		}
		o.EnvForStep = func(ctx context.Context, rec record.StepRecord, h []record.StepRecord) (*rules.Env, error) {
			if built.Add(1) == 2 {
				cancel()
			}
			return fakeEnvForStep(ctx, rec, h)
		}
	})
	_, err := f.svc.Test(ctx, TestRequest{Rules: []rules.Rule{hostile}, Step: &rules.TestStep{Method: "m"}})
	require.ErrorIs(t, err, context.Canceled)

	for range 300 {
		saveStep(t, f.db, "s1", "read", "allow", false)
	}
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	_, err = f.svc.Backtest(ctx, BacktestRequest{Rules: []rules.Rule{denyTool("x", "x")}})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 2, built.Load(), "the backtest stops at the step after the cancellation")
}

// cancelOnJSON cancels when a rule first turns it into JSON.
type cancelOnJSON context.CancelFunc

func (c cancelOnJSON) MarshalJSON() ([]byte, error) {
	c()
	return []byte(`"stop"`), nil
}

func TestDraftRunsTimeOut(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.EngineOptions = rules.Options{Budget: -1}
		o.DraftTimeout = 20 * time.Millisecond
		o.EnvForDraft = func(method string, params json.RawMessage) (*rules.Env, error) {
			return &rules.Env{Method: method, Params: bigParams()}, nil
		}
	})
	var e apiErr
	f.call("POST", "/api/rules/test", map[string]any{"rules": []rules.Rule{hostile},
		"step": map[string]any{"method": "m"}}, http.StatusServiceUnavailable, &e)
	require.Equal(t, "timeout", e.Error.Code)
	require.Equal(t, "the rule test did not finish within 20ms", e.Error.Message)
}

// TestDraftRunsAreCapped: two tests or backtests run at once; a third is refused with 429
// once its short wait for a turn is over.
func TestDraftRunsAreCapped(t *testing.T) {
	entered := make(chan struct{})
	unblock := make(chan struct{})
	release := sync.OnceFunc(func() { close(unblock) })
	f := newFixture(t, func(o *Options) {
		o.DraftQueueWait = time.Millisecond
		o.EnvForDraft = func(method string, params json.RawMessage) (*rules.Env, error) {
			entered <- struct{}{}
			<-unblock
			return fakeEnvForDraft(method, params)
		}
	})
	// A failure must still let the blocked runs finish, or closing the server (a cleanup
	// registered before this one, so run after it) waits for them for ever.
	t.Cleanup(release)
	seedSteps(t, f.db)
	body := map[string]any{"rules": []rules.Rule{}, "step": map[string]any{"method": "m"}}
	statuses := make(chan int, 2)
	for range 2 {
		go func() {
			code, _ := f.do("POST", "/api/rules/test", body)
			statuses <- code
		}()
		<-entered
	}

	backtest := map[string]any{"rules": []rules.Rule{}}
	for path, body := range map[string]any{"/api/rules/test": body, "/api/rules/backtest": backtest} {
		var e apiErr
		f.call("POST", path, body, http.StatusTooManyRequests, &e)
		require.Equal(t, "busy", e.Error.Code)
		require.Equal(t, "2 rule tests or backtests are already running; try again shortly", e.Error.Message)
	}

	release()
	require.Equal(t, http.StatusOK, <-statuses)
	require.Equal(t, http.StatusOK, <-statuses)
	f.call("POST", "/api/rules/backtest", backtest, http.StatusOK, nil)
}
