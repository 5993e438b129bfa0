package record

import "time"

// Stats is the dashboard summary served as GET /api/stats.
type Stats struct {
	// Steps and Sessions are totals from the session summaries.
	Steps    int64 `json:"steps"`
	Sessions int64 `json:"sessions"`
	// PerMinute has one entry per minute for the last 60 minutes, oldest first, the
	// current (partial) minute last.
	PerMinute []MinuteStats `json:"perMinute"`
	// TopRules, TopTools, Latency and Review describe the newest RecentWindow steps.
	TopRules []RuleCount `json:"topRules"`
	TopTools []ToolCount `json:"topTools"`
	// Latency is the guardian's own decision time, over the steps no person reviewed: a
	// held step's time is mostly a reviewer's, and would swamp it.
	Latency LatencyStats `json:"latency"`
	// Review is the time held steps waited for their outcome (reviewer or timeout).
	Review       ReviewStats `json:"review"`
	PendingHolds int64       `json:"pendingHolds"`
}

// ReviewStats are the held steps among the recent ones and how long they were held.
type ReviewStats struct {
	Held      int64 `json:"held"`
	P50Micros int64 `json:"p50Micros"`
	P99Micros int64 `json:"p99Micros"`
}

// MinuteStats counts one minute's steps by outcome: Hold counts the steps that were held for
// review (whatever their final decision), the others the rest by decision, so the four add
// up to the minute's steps.
type MinuteStats struct {
	Minute time.Time `json:"minute"`
	Allow  int64     `json:"allow"`
	Deny   int64     `json:"deny"`
	Modify int64     `json:"modify"`
	Hold   int64     `json:"hold"`
}

// Add counts n steps with decision in the minute; other decisions are not charted.
func (m *MinuteStats) Add(decision string, n int64) {
	switch decision {
	case "allow":
		m.Allow += n
	case "deny":
		m.Deny += n
	case "modify":
		m.Modify += n
	case "hold":
		m.Hold += n
	}
}

// RuleCount is how many recent steps a rule matched.
type RuleCount struct {
	RuleID  string `json:"ruleId"`
	Matches int64  `json:"matches"`
}

// ToolCount is how many recent steps called a tool.
type ToolCount struct {
	Tool  string `json:"tool"`
	Count int64  `json:"count"`
}

// LatencyStats are decision latency percentiles (nearest rank).
type LatencyStats struct {
	P50Micros int64 `json:"p50Micros"`
	P99Micros int64 `json:"p99Micros"`
}

// Stats window sizes: bounded so the query costs the same at any traffic level.
const (
	// StatsMinutes is how many minutes the per-minute series covers.
	StatsMinutes = 60
	// RecentWindow is how many of the newest steps top rules, top tools and latency cover.
	RecentWindow = 1000
	// StatsTopN is how many rules and tools the top lists hold.
	StatsTopN = 10
)
