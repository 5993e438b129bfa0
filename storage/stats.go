package storage

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
)

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
	statsMinutes = 60
	// RecentWindow is how many of the newest steps top rules, top tools and latency cover.
	RecentWindow = 1000
	statsTopN    = 10
)

// Stats computes the dashboard summary as of now.
func (db *DB) Stats(ctx context.Context, now time.Time) (Stats, error) {
	if err := db.Flush(ctx); err != nil {
		return Stats{}, fmt.Errorf("storage: stats: %w", err)
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Stats{}, fmt.Errorf("storage: stats: %w", err)
	}
	defer func() { _ = tx.Rollback() }()

	st := Stats{TopRules: []RuleCount{}, TopTools: []ToolCount{}}
	if err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(steps), 0) FROM sessions`).
		Scan(&st.Sessions, &st.Steps); err != nil {
		return Stats{}, fmt.Errorf("storage: stats: totals: %w", err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(pending), 0) FROM session_pending_holds`).
		Scan(&st.PendingHolds); err != nil {
		return Stats{}, fmt.Errorf("storage: stats: pending holds: %w", err)
	}
	if st.PerMinute, err = db.perMinute(ctx, tx, now); err != nil {
		return Stats{}, fmt.Errorf("storage: stats: per minute: %w", err)
	}
	if err := queryInto(ctx, tx, &st.TopRules, func(r *RuleCount) []any { return []any{&r.RuleID, &r.Matches} },
		`SELECT j.value ->> 'ruleId' AS rule, count(*) AS n
		FROM (SELECT matched_rules FROM steps ORDER BY seq DESC LIMIT ?) AS s, json_each(s.matched_rules) AS j
		WHERE rule IS NOT NULL AND rule <> ''
		GROUP BY rule ORDER BY n DESC, rule LIMIT ?`, RecentWindow, statsTopN); err != nil {
		return Stats{}, fmt.Errorf("storage: stats: top rules: %w", err)
	}
	if err := queryInto(ctx, tx, &st.TopTools, func(t *ToolCount) []any { return []any{&t.Tool, &t.Count} },
		`SELECT tool, count(*) AS n FROM (SELECT tool FROM steps ORDER BY seq DESC LIMIT ?)
		WHERE tool <> '' GROUP BY tool ORDER BY n DESC, tool LIMIT ?`, RecentWindow, statsTopN); err != nil {
		return Stats{}, fmt.Errorf("storage: stats: top tools: %w", err)
	}
	type timed struct {
		micros int64
		held   bool
	}
	var recent []timed
	if err := queryInto(ctx, tx, &recent, func(v *timed) []any { return []any{&v.micros, &v.held} },
		`SELECT latency_micros, held FROM steps ORDER BY seq DESC LIMIT ?`, RecentWindow); err != nil {
		return Stats{}, fmt.Errorf("storage: stats: latency: %w", err)
	}
	var guardian, review []int64
	for _, r := range recent {
		if r.held {
			review = append(review, r.micros)
		} else {
			guardian = append(guardian, r.micros)
		}
	}
	slices.Sort(guardian)
	slices.Sort(review)
	st.Latency = LatencyStats{P50Micros: percentile(guardian, 50), P99Micros: percentile(guardian, 99)}
	st.Review = ReviewStats{Held: int64(len(review)), P50Micros: percentile(review, 50), P99Micros: percentile(review, 99)}
	return st, nil
}

// perMinute counts steps by decision for each of the last 60 minutes, zeros included: from
// the in-memory counts when they cover the window, else from the index.
func (db *DB) perMinute(ctx context.Context, tx *sql.Tx, now time.Time) ([]MinuteStats, error) {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute)
	start := end.Add(-statsMinutes * time.Minute)
	if db.minutes != nil {
		out := make([]MinuteStats, statsMinutes)
		for i := range out {
			out[i].Minute = start.Add(time.Duration(i) * time.Minute)
		}
		if db.minutes.window(start, out) {
			return out, nil
		}
	}
	return perMinuteQuery(ctx, tx, now)
}

// perMinuteQuery counts the window from the steps of its minutes (the (received_at,
// decision) index finds them; held needs the row). It runs when the in-memory counts do not
// cover the window: at Open, to seed them.
func perMinuteQuery(ctx context.Context, tx *sql.Tx, now time.Time) ([]MinuteStats, error) {
	const minute = int64(time.Minute)
	end := now.UTC().Truncate(time.Minute).Add(time.Minute) // end of the current minute
	start := end.Add(-statsMinutes * time.Minute)
	out := make([]MinuteStats, statsMinutes)
	for i := range out {
		out[i].Minute = start.Add(time.Duration(i) * time.Minute)
	}
	rows, err := tx.QueryContext(ctx, `SELECT (received_at - ?1) / ?2 AS m,
		CASE WHEN held THEN 'hold' ELSE decision END AS outcome, count(*)
		FROM steps WHERE received_at >= ?1 AND received_at < ?3
		GROUP BY m, outcome`, start.UnixNano(), minute, end.UnixNano())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			m        int
			decision string
			n        int64
		)
		if err := rows.Scan(&m, &decision, &n); err != nil {
			return nil, err
		}
		if m < 0 || m >= statsMinutes {
			continue
		}
		switch decision {
		case "allow":
			out[m].Allow += n
		case "deny":
			out[m].Deny += n
		case "modify":
			out[m].Modify += n
		case "hold":
			out[m].Hold += n
		}
	}
	return out, rows.Err()
}

// outcome is the per-minute category of a step: "hold" when a person was asked, else its
// decision.
func outcome(decision string, held bool) string {
	if held {
		return "hold"
	}
	return decision
}

// queryInto appends one T per row to dst, scanning into the pointers fields returns.
func queryInto[T any](ctx context.Context, tx *sql.Tx, dst *[]T, fields func(*T) []any, query string, args ...any) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var v T
		if err := rows.Scan(fields(&v)...); err != nil {
			return err
		}
		*dst = append(*dst, v)
	}
	return rows.Err()
}

// percentile returns the nearest-rank p-th percentile of sorted values, 0 when empty.
func percentile(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}
