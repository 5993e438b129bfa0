package sqlite

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"

	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
)

// Stats computes the dashboard summary as of now.
func (db *DB) Stats(ctx context.Context, now time.Time) (record.Stats, error) {
	if err := db.Flush(ctx); err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: %w", err)
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: %w", err)
	}
	defer func() { _ = tx.Rollback() }()

	st := record.Stats{TopRules: []record.RuleCount{}, TopTools: []record.ToolCount{}}
	if err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(steps), 0) FROM sessions`).
		Scan(&st.Sessions, &st.Steps); err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: totals: %w", err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(pending), 0) FROM session_pending_holds`).
		Scan(&st.PendingHolds); err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: pending holds: %w", err)
	}
	if st.PerMinute, err = db.perMinute(ctx, tx, now); err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: per minute: %w", err)
	}
	if err := queryInto(ctx, tx, &st.TopRules, func(r *record.RuleCount) []any { return []any{&r.RuleID, &r.Matches} },
		`SELECT j.value ->> 'ruleId' AS rule, count(*) AS n
		FROM (SELECT matched_rules FROM steps ORDER BY seq DESC LIMIT ?) AS s, json_each(s.matched_rules) AS j
		WHERE rule IS NOT NULL AND rule <> ''
		GROUP BY rule ORDER BY n DESC, rule LIMIT ?`, record.RecentWindow, record.StatsTopN); err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: top rules: %w", err)
	}
	if err := queryInto(ctx, tx, &st.TopTools, func(t *record.ToolCount) []any { return []any{&t.Tool, &t.Count} },
		`SELECT tool, count(*) AS n FROM (SELECT tool FROM steps ORDER BY seq DESC LIMIT ?)
		WHERE tool <> '' GROUP BY tool ORDER BY n DESC, tool LIMIT ?`, record.RecentWindow, record.StatsTopN); err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: top tools: %w", err)
	}
	type timed struct {
		micros int64
		held   bool
	}
	var recent []timed
	if err := queryInto(ctx, tx, &recent, func(v *timed) []any { return []any{&v.micros, &v.held} },
		`SELECT latency_micros, held FROM steps ORDER BY seq DESC LIMIT ?`, record.RecentWindow); err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: latency: %w", err)
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
	st.Latency = record.LatencyStats{P50Micros: storage.Percentile(guardian, 50), P99Micros: storage.Percentile(guardian, 99)}
	st.Review = record.ReviewStats{Held: int64(len(review)), P50Micros: storage.Percentile(review, 50), P99Micros: storage.Percentile(review, 99)}
	return st, nil
}

// perMinute counts steps by decision for each of the last 60 minutes, zeros included: from
// the in-memory counts when they cover the window, else from the index.
func (db *DB) perMinute(ctx context.Context, tx *sql.Tx, now time.Time) ([]record.MinuteStats, error) {
	if db.minutes != nil {
		out := storage.MinuteWindow(now)
		if db.minutes.window(out[0].Minute, out) {
			return out, nil
		}
	}
	return perMinuteQuery(ctx, tx, now)
}

// perMinuteQuery counts the window from the steps of its minutes (the (received_at,
// decision) index finds them; held needs the row). It runs when the in-memory counts do not
// cover the window: at Open, to seed them.
func perMinuteQuery(ctx context.Context, tx *sql.Tx, now time.Time) ([]record.MinuteStats, error) {
	out := storage.MinuteWindow(now)
	start, end := out[0].Minute, out[len(out)-1].Minute.Add(time.Minute)
	rows, err := tx.QueryContext(ctx, `SELECT (received_at - ?1) / ?2 AS m,
		CASE WHEN held THEN 'hold' ELSE decision END AS outcome, count(*)
		FROM steps WHERE received_at >= ?1 AND received_at < ?3
		GROUP BY m, outcome`, start.UnixNano(), int64(time.Minute), end.UnixNano())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return out, storage.CountMinutes(rows, out)
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
