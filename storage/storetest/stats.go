package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

var statsCases = []testCase{
	{"StatsEmpty", func(t *testing.T, db storage.Backend) {
		st, err := db.Stats(bg(), t0)
		require.NoError(t, err)
		require.Zero(t, st.Steps)
		require.Zero(t, st.Sessions)
		require.Len(t, st.PerMinute, record.StatsMinutes)
		require.Equal(t, []record.RuleCount{}, st.TopRules)
		require.Equal(t, []record.ToolCount{}, st.TopTools)
	}},
	{"Stats", func(t *testing.T, db storage.Backend) {
		now := time.Now().UTC()
		mk := func(sid, decision, tool string, ago time.Duration, micros int64, held bool, ruleIDs ...string) {
			rec := step(sid, decision, 0)
			rec.ReceivedAt, rec.Tool, rec.LatencyMicros, rec.Held = now.Add(-ago), tool, micros, held
			for _, id := range ruleIDs {
				rec.MatchedRules = append(rec.MatchedRules, record.RuleMatch{RuleID: id, Action: "deny", Mode: "enforce"})
			}
			save(t, db, rec)
		}
		mk("a", "allow", "search", 0, 100, false, "r1")
		mk("a", "deny", "email", 0, 300, false, "r1", "r2")
		mk("b", "allow", "search", 2*time.Minute, 200, false)
		mk("b", "allow", "transfer", 2*time.Minute, 9_000_000, true, "r3")
		mk("c", "modify", "", 2*time.Hour, 400, false)
		_, err := db.CreateHold(bg(), newHold("h", "a"), nil)
		require.NoError(t, err)

		st, err := db.Stats(bg(), now)
		require.NoError(t, err)
		require.Equal(t, int64(5), st.Steps)
		require.Equal(t, int64(3), st.Sessions)
		require.Equal(t, int64(1), st.PendingHolds)
		require.Len(t, st.PerMinute, record.StatsMinutes)
		last := st.PerMinute[record.StatsMinutes-1]
		require.Equal(t, now.Truncate(time.Minute), last.Minute)
		require.Equal(t, record.MinuteStats{Minute: last.Minute, Allow: 1, Deny: 1}, last)
		two := st.PerMinute[record.StatsMinutes-3]
		require.Equal(t, record.MinuteStats{Minute: now.Truncate(time.Minute).Add(-2 * time.Minute), Allow: 1, Hold: 1}, two)
		var total int64
		for _, m := range st.PerMinute {
			total += m.Allow + m.Deny + m.Modify + m.Hold
		}
		require.Equal(t, int64(4), total, "the two-hour-old step is outside the window")
		require.Equal(t, []record.RuleCount{{RuleID: "r1", Matches: 2}, {RuleID: "r2", Matches: 1}, {RuleID: "r3", Matches: 1}}, st.TopRules)
		require.Equal(t, []record.ToolCount{{Tool: "search", Count: 2}, {Tool: "email", Count: 1}, {Tool: "transfer", Count: 1}}, st.TopTools)
		require.Equal(t, record.LatencyStats{P50Micros: 200, P99Micros: 400}, st.Latency, "held steps are left out")
		require.Equal(t, record.ReviewStats{Held: 1, P50Micros: 9_000_000, P99Micros: 9_000_000}, st.Review)
	}},
}
