package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Stats is the dashboard summary at now, read in one REPEATABLE READ transaction so its
// parts agree.
func (db *DB) Stats(ctx context.Context, now time.Time) (_ record.Stats, err error) {
	ctx, done := db.boundSlow(ctx)
	defer done(&err)
	st := record.Stats{TopRules: []record.RuleCount{}, TopTools: []record.ToolCount{}}
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(steps), 0)::int8 FROM sessions`).
			Scan(&st.Sessions, &st.Steps); err != nil {
			return fmt.Errorf("totals: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM holds WHERE status = 'pending'`).
			Scan(&st.PendingHolds); err != nil {
			return fmt.Errorf("pending holds: %w", err)
		}
		var err error
		if st.PerMinute, err = perMinute(ctx, tx, now); err != nil {
			return fmt.Errorf("per minute: %w", err)
		}
		if err := queryInto(ctx, tx, &st.TopRules, func(r *record.RuleCount) []any { return []any{&r.RuleID, &r.Matches} },
			`SELECT j.rule, count(*) AS n
			FROM (SELECT matched_rules FROM steps ORDER BY seq DESC LIMIT $1) AS s,
				LATERAL (SELECT m ->> 'ruleId' AS rule FROM jsonb_array_elements(s.matched_rules::jsonb) AS m) AS j
			WHERE j.rule IS NOT NULL AND j.rule <> ''
			GROUP BY j.rule ORDER BY n DESC, j.rule COLLATE "C" LIMIT $2`, record.RecentWindow, record.StatsTopN); err != nil {
			return fmt.Errorf("top rules: %w", err)
		}
		if err := queryInto(ctx, tx, &st.TopTools, func(t *record.ToolCount) []any { return []any{&t.Tool, &t.Count} },
			`SELECT tool, count(*) AS n FROM (SELECT tool FROM steps ORDER BY seq DESC LIMIT $1) AS s
			WHERE tool <> '' GROUP BY tool ORDER BY n DESC, tool LIMIT $2`, record.RecentWindow, record.StatsTopN); err != nil {
			return fmt.Errorf("top tools: %w", err)
		}
		type timed struct {
			micros int64
			held   bool
		}
		var recent []timed
		if err := queryInto(ctx, tx, &recent, func(v *timed) []any { return []any{&v.micros, &v.held} },
			`SELECT latency_micros, held FROM steps ORDER BY seq DESC LIMIT $1`, record.RecentWindow); err != nil {
			return fmt.Errorf("latency: %w", err)
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
		return nil
	})
	if err != nil {
		return record.Stats{}, fmt.Errorf("storage: stats: %w", err)
	}
	return st, nil
}

// perMinute counts the last StatsMinutes minutes' steps by outcome, oldest minute first.
func perMinute(ctx context.Context, tx pgx.Tx, now time.Time) ([]record.MinuteStats, error) {
	out := storage.MinuteWindow(now)
	start, end := out[0].Minute, out[len(out)-1].Minute.Add(time.Minute)
	rows, err := tx.Query(ctx, `SELECT ((received_at - $1) / $2)::int AS m,
		CASE WHEN held THEN 'hold' ELSE decision END AS outcome, count(*)
		FROM steps WHERE received_at >= $1 AND received_at < $3
		GROUP BY m, outcome`, start.UnixNano(), int64(time.Minute), end.UnixNano())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return out, storage.CountMinutes(rows, out)
}

func queryInto[T any](ctx context.Context, tx pgx.Tx, dst *[]T, fields func(*T) []any, query string, args ...any) error {
	rows, err := tx.Query(ctx, query, args...)
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
