package rules

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A hold rule that names no timeout waits Options.HoldTimeout (the guardian's
// --hold-timeout); one that names its own keeps it; without the option the compiled
// default applies.
func TestHoldTimeoutOption(t *testing.T) {
	own := rule("own", `true`, ActionHold)
	own.Hold = &HoldSpec{Timeout: Duration(30 * time.Second), OnTimeout: ActionAllow}
	onlyOnTimeout := rule("allow-on-timeout", `true`, ActionHold)
	onlyOnTimeout.Hold = &HoldSpec{OnTimeout: ActionAllow}
	for _, tc := range []struct {
		name string
		opts Options
		r    Rule
		want HoldSpec
	}{
		{name: "no spec, option", opts: Options{HoldTimeout: 7 * time.Minute}, r: rule("plain", `true`, ActionHold),
			want: HoldSpec{Timeout: Duration(7 * time.Minute), OnTimeout: ActionDeny}},
		{name: "onTimeout only, option", opts: Options{HoldTimeout: 7 * time.Minute}, r: onlyOnTimeout,
			want: HoldSpec{Timeout: Duration(7 * time.Minute), OnTimeout: ActionAllow}},
		{name: "own timeout wins", opts: Options{HoldTimeout: 7 * time.Minute}, r: own,
			want: HoldSpec{Timeout: Duration(30 * time.Second), OnTimeout: ActionAllow}},
		{name: "no option", r: rule("plain", `true`, ActionHold),
			want: HoldSpec{Timeout: Duration(DefaultHoldTimeout), OnTimeout: ActionDeny}},
		{name: "error policy hold, option", opts: Options{HoldTimeout: 7 * time.Minute, OnErrorEnforce: ActionHold},
			r: rule("bad", `inputs.n > 1`, ActionAllow), want: HoldSpec{Timeout: Duration(7 * time.Minute), OnTimeout: ActionDeny}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &Env{Inputs: map[string]any{"n": "text"}}
			v := mustCompile(t, tc.opts, tc.r).Evaluate(env)
			require.Equal(t, ActionHold, v.Action)
			require.Equal(t, &tc.want, v.Hold)

			// An engine gives its loaded rules the same default, and hands it on to the
			// drafts, tests and backtests compiled with its Options.
			e := NewEngine(tc.opts)
			require.NoError(t, e.Load([]Rule{tc.r}))
			require.Equal(t, &tc.want, e.Evaluate(env).Hold)
			require.Equal(t, &tc.want, mustCompile(t, e.Options(), tc.r).Evaluate(env).Hold)
		})
	}
}

// clock is a settable Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A rule that fails on every step logs at most one line a minute, and the next line
// counts the errors held back; each rule is paced on its own.
func TestRuleErrorLogIsPaced(t *testing.T) {
	var buf bytes.Buffer
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	p := mustCompile(t, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Now: clk.Now},
		rule("bad-a", `inputs.n > 1`, ActionDeny), rule("bad-b", `inputs.n < 1`, ActionDeny, mode(ModeMonitor)))
	env := &Env{Inputs: map[string]any{"n": "text"}}
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	for range 2000 {
		p.Evaluate(env)
	}
	got := lines()
	require.Len(t, got, 2, "one line per rule")
	for _, l := range got {
		require.Contains(t, l, "rule evaluation failed")
		require.Contains(t, l, "errors=1 suppressed=0")
	}
	clk.Add(59 * time.Second)
	for range 10 {
		p.Evaluate(env)
	}
	require.Len(t, lines(), 2, "nothing more within the minute")

	clk.Add(time.Second)
	p.Evaluate(env)
	got = lines()
	require.Len(t, got, 4)
	require.Contains(t, got[2], "rule=bad-a")
	require.Contains(t, got[2], "errors=2011 suppressed=2009")
	require.Contains(t, got[3], "rule=bad-b")
	require.Contains(t, got[3], "policy=allow")
	require.Contains(t, got[3], "errors=2011 suppressed=2009")
	require.Equal(t, int64(2011), p.Stats()["bad-a"].Errors, "every error is counted")
}

// vigil_rule_evaluation_seconds_total is a counter: the total a rule's stats report must
// never fall, whatever the durations of the evaluations that follow.
func TestRuleTimeTotalNeverDecreases(t *testing.T) {
	p := mustCompile(t, Options{}, rule("loop", `all(inputs.items, # >= 0)`, ActionDeny))
	slow := &Env{Inputs: map[string]any{"items": make([]any, 5000)}}
	for i := range slow.Inputs["items"].([]any) {
		slow.Inputs["items"].([]any)[i] = i
	}
	fast := &Env{Inputs: map[string]any{"items": []any{1}}}
	var last int64
	for i := range 8 * timingSample {
		env := slow
		if i >= 4*timingSample {
			env = fast
		}
		p.Evaluate(env)
		s := p.Stats()["loop"]
		require.GreaterOrEqual(t, s.TotalMicros, last, "evaluation %d", i)
		last = s.TotalMicros
		if s.Evaluations > 0 {
			require.Positive(t, s.AvgMicros)
		}
	}
	require.Positive(t, last)
}
