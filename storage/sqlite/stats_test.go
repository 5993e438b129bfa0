package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

func TestStatsEmpty(t *testing.T) {
	db := openTest(t)
	st, err := db.Stats(context.Background(), t0)
	require.NoError(t, err)
	require.Zero(t, st.Steps)
	require.Zero(t, st.Sessions)
	require.Len(t, st.PerMinute, 60)
	require.Equal(t, []record.RuleCount{}, st.TopRules)
	require.Equal(t, []record.ToolCount{}, st.TopTools)
	require.Equal(t, record.LatencyStats{}, st.Latency)

	b, err := json.Marshal(st)
	require.NoError(t, err)
	require.Contains(t, string(b), `"topRules":[]`)
	require.Contains(t, string(b), `"minute":"`)
}

func TestStats(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	now := time.Date(2025, 5, 5, 10, 30, 20, 0, time.UTC)
	minute := func(ago int) time.Time { return now.Truncate(time.Minute).Add(-time.Duration(ago) * time.Minute) }

	add := func(sid, decision string, at time.Time, tool string, latency int64, rules ...string) {
		rec := step(sid, decision, 0)
		rec.ReceivedAt, rec.Tool, rec.LatencyMicros = at, tool, latency
		// A step is stored with its final decision; "hold" here means it was held first.
		if decision == "hold" {
			rec.Decision, rec.Held = "allow", true
		}
		for _, r := range rules {
			rec.MatchedRules = append(rec.MatchedRules, record.RuleMatch{RuleID: r, Action: decision, Mode: "enforce"})
		}
		save(t, db, rec)
	}
	// Outside the 60-minute window: counted in totals, not per minute.
	add("old", "deny", minute(60), "", 1)
	add("old", "deny", now.Add(time.Hour), "", 1) // clock skew into the future
	// Inside: current minute and 59 minutes ago (the window's edges).
	add("a", "allow", minute(0).Add(5*time.Second), "search", 100)
	add("a", "allow", minute(0), "search", 200, "r-allow")
	add("a", "deny", minute(0), "send_email", 300, "r-deny", "r-audit")
	add("b", "modify", minute(59), "send_email", 400, "r-redact")
	add("b", "hold", minute(59).Add(59*time.Second), "transfer", 500, "r-hold", "r-audit")
	add("b", "hold", minute(30), "search", 600)
	add("b", "custom", minute(30), "", 700) // not a charted decision

	st, err := db.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, int64(9), st.Steps)
	require.Equal(t, int64(3), st.Sessions)
	require.Zero(t, st.PendingHolds)

	require.Len(t, st.PerMinute, 60)
	for i, m := range st.PerMinute {
		require.Equal(t, minute(59-i), m.Minute, "minute %d", i)
	}
	require.Equal(t, record.MinuteStats{Minute: minute(0), Allow: 2, Deny: 1}, st.PerMinute[59])
	require.Equal(t, record.MinuteStats{Minute: minute(59), Modify: 1, Hold: 1}, st.PerMinute[0])
	require.Equal(t, record.MinuteStats{Minute: minute(30), Hold: 1}, st.PerMinute[29])
	var total int64
	for _, m := range st.PerMinute {
		total += m.Allow + m.Deny + m.Modify + m.Hold
	}
	require.Equal(t, int64(6), total)

	require.Equal(t, []record.ToolCount{{Tool: "search", Count: 3}, {Tool: "send_email", Count: 2}, {Tool: "transfer", Count: 1}}, st.TopTools)
	require.Equal(t, []record.RuleCount{{RuleID: "r-audit", Matches: 2}, {RuleID: "r-allow", Matches: 1}, {RuleID: "r-deny", Matches: 1}, {RuleID: "r-hold", Matches: 1}, {RuleID: "r-redact", Matches: 1}}, st.TopRules)
	// The guardian's latency leaves out the held steps (500, 600): of 1,1,100,200,300,400,700
	// the nearest-rank p50 is the 4th. Their time is review time.
	require.Equal(t, record.LatencyStats{P50Micros: 200, P99Micros: 700}, st.Latency)
	require.Equal(t, record.ReviewStats{Held: 2, P50Micros: 500, P99Micros: 600}, st.Review)

	b, err := json.Marshal(st.PerMinute[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"minute":"2025-05-05T09:31:00Z","allow":0,"deny":0,"modify":1,"hold":1}`, string(b))
}

func TestStatsRecentWindowIsBounded(t *testing.T) {
	db := openTest(t)
	// Old steps with a slow tool, then RecentWindow newer fast ones: only these count.
	saveMany(t, db, 50, func(i int) *record.StepRecord {
		rec := step(fmt.Sprint("old", i), "allow", 0)
		rec.Tool, rec.LatencyMicros = "old_tool", 1_000_000
		return rec
	})
	bulkSteps(t, db, "new", "new_tool", record.RecentWindow)
	st, err := db.Stats(context.Background(), t0)
	require.NoError(t, err)
	require.Equal(t, []record.ToolCount{{Tool: "new_tool", Count: record.RecentWindow}}, st.TopTools)
	require.Equal(t, record.LatencyStats{P50Micros: 500, P99Micros: 990}, st.Latency)
	require.Equal(t, int64(50), st.Steps, "totals come from the session summaries")
}
