package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

// The in-memory per-minute counts answer exactly what the query over the index answers,
// live and after a reopen (seeded from the database).
func TestMinuteCountsMatchTheQuery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	ctx := context.Background()
	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	now := time.Now()
	decisions := []string{"allow", "deny", "modify", "hold", "allow"}
	for i := range 40 {
		rec := step("s", decisions[i%len(decisions)], 0)
		if rec.Decision == "hold" {
			rec.Decision, rec.Held = "deny", true // held, then denied
		}
		rec.ReceivedAt = now.Add(-time.Duration(i*97) * time.Second) // spans about 65 minutes
		save(t, db, rec)
	}
	query := func(db *DB) []record.MinuteStats {
		tx, err := db.Reader().BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		out, err := perMinuteQuery(ctx, tx, now)
		require.NoError(t, err)
		return out
	}
	st, err := db.Stats(ctx, now)
	require.NoError(t, err)
	want := query(db)
	require.Equal(t, want, st.PerMinute)
	total := int64(0)
	for _, m := range want {
		total += m.Allow + m.Deny + m.Modify + m.Hold
	}
	require.Greater(t, total, int64(30), "most steps fall in the window")
	held := int64(0)
	for _, m := range want {
		held += m.Hold
	}
	require.Positive(t, held, "held steps count as held, whatever their final decision")
	require.NoError(t, db.Close())

	db, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	defer db.Close()
	st, err = db.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, want, st.PerMinute, "seeded at open")
	require.True(t, db.minutes.window(now.UTC().Truncate(time.Minute).Add(-59*time.Minute), make([]record.MinuteStats, 1)))
}
