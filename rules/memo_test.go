package rules

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memoRules ask the history questions the session memo answers.
var memoRules = []string{
	`sessionHas(session, "a", "secret")`, `sessionHas(session, "*", "x")`, `sessionHas(session, "a*", "SECRET")`,
	`sessionHas(session, "toolResult", "")`, `sessionHas(session, tool, "x")`,
	`countToolWithin(session, "a", duration("30s")) >= 2`, `countToolWithin(session, "a*", duration("1m")) > 3`,
	`countToolWithin(session, "*", duration("10s")) == 1`, `countToolWithin(session, "b", duration("2m")) == 0`,
	`sessionText(session) contains "secret"`, `sessionText(session) endsWith "x"`, `len(sessionText(session)) > 40`,
	`sessionText(session) contains "a Secret"`, `sessionText(session) contains "Secret x"`,
	`sessionText(session) contains "x\nSECRET"`, `tool == "b" && sessionText(session) contains "ET x"`,
	`any(session.steps, .decision == "deny" && .tool == "a")`, `none(session.steps, .kind == "toolResult")`,
	`all(session.steps, .tool startsWith "a")`, `any(session.steps, .text matches "(?i)sec")`,
	`tool == "a" && any(session.steps, .decision in ["deny", "hold"])`,
}

// The memo must answer exactly as the scan does: random histories growing step by step,
// windows of the newest steps, reloads (a new memo), and older snapshots asked after newer
// ones, with times that sometimes go back.
func TestSessionMemoAgreesWithScan(t *testing.T) {
	var rs []Rule
	for i, w := range memoRules {
		rs = append(rs, rule(fmt.Sprintf("m%d", i), w, ActionDeny))
	}
	p := mustCompile(t, Options{Budget: -1}, rs...)
	r := rand.New(rand.NewPCG(3, 5))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	answered := 0
	for session := range 60 {
		max := 1 + r.IntN(12)
		backwards := session%4 == 0
		var all []HistoryStep
		memo := newSessionMemo()
		at := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
		type snap struct {
			steps []HistoryStep
			count int
		}
		var snaps []snap
		for range 40 {
			at = at.Add(time.Duration(r.IntN(20)) * time.Second)
			if backwards && r.IntN(5) == 0 {
				at = at.Add(-30 * time.Second)
			}
			all = append(all, HistoryStep{Kind: pick("toolCall", "toolResult"), Tool: pick("a", "ab", "b"),
				Decision: pick("allow", "deny", "hold"), Text: pick("", "x", "a Secret", "SECRET x", "plain", "a Sec", "ret x"), ReceivedAt: at})
			if r.IntN(10) == 0 {
				memo = newSessionMemo() // the session was evicted and loaded again
			}
			lo := len(all) - max
			if lo < 0 {
				lo = 0
			}
			snaps = append(snaps, snap{all[lo:len(all):len(all)], len(all)})
			asked := []snap{snaps[len(snaps)-1]}
			if r.IntN(3) == 0 {
				asked = append(asked, snaps[r.IntN(len(snaps))]) // an older snapshot, late
			}
			for _, sn := range asked {
				now := at.Add(time.Duration(r.IntN(5)) * time.Second)
				plain := &Env{Tool: pick("a", "b"), Now: now, Session: Session{ID: "s", StepCount: sn.count, Steps: sn.steps}}
				withMemo := *plain
				c := CountSteps(sn.steps)
				c.memo = memo
				withMemo.Session = withMemo.Session.WithCounts(c)
				want, got := p.Evaluate(plain), p.Evaluate(&withMemo)
				require.Equal(t, want.Matches, got.Matches, "session %d, window %d of %d", session, len(sn.steps), sn.count)

				if text, ok := memo.sessionText(withMemo.Session); ok {
					answered++
					require.Equal(t, sessionTextOf(&Env{}, plain.Session), text)
				}
				for _, name := range []string{"a", "a*", "*"} {
					st := &evalState{memo: map[memoKey]memoEntry{}}
					e := withMemo
					e.state = st
					wantN, err := countToolWithin(p.cache, &Env{Now: now}, plain.Session, name, 20*time.Second)
					require.NoError(t, err)
					if n, ok, err := memo.countWithin(p.cache, e.Session, name, now.Add(-20*time.Second)); ok {
						answered++
						require.NoError(t, err)
						require.Equal(t, wantN, n, "countToolWithin %q", name)
					}
				}
			}
		}
	}
	require.Greater(t, answered, 1000, "the memo answered")
}

// The memo keeps about two windows of what it aggregates, however long the session.
func TestSessionMemoBounded(t *testing.T) {
	const window = 50
	memo := newSessionMemo()
	c := &regexCache{}
	var all []HistoryStep
	at := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	for i := range 5000 {
		all = append(all, HistoryStep{Kind: "toolCall", Tool: "a", Text: strings.Repeat("x", 100), ReceivedAt: at.Add(time.Duration(i) * time.Second)})
		lo := max(0, len(all)-window)
		s := Session{StepCount: len(all), Steps: all[lo:]}
		_, ok, err := memo.countWithin(c, s, "a", at)
		require.True(t, ok)
		require.NoError(t, err)
		_, ok = memo.sessionText(s)
		require.True(t, ok)
		_, ok, err = memo.sessionHas(c, s, "a", "y")
		require.True(t, ok)
		require.NoError(t, err)
	}
	require.LessOrEqual(t, len(memo.within["a"].cum), 2*window+64+1)
	require.LessOrEqual(t, len(memo.text.buf), 2*window*101+4096+101)
	require.Len(t, memo.has, 1)
}
