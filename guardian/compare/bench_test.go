package compare

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkCompare1M times GET /api/compare's work (two sessions read from SQLite, their
// requests decoded, aligned and diffed, the answer encoded) for two sessions of 1000 steps each in a database
// of 1,000,000 stored steps (1000 sessions, interleaved). Filling the database takes a
// while before the timer starts.
func BenchmarkCompare1M(b *testing.B) {
	const sessions, perSession = 1000, 1000
	db := openDB(b)
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = "sess-" + strconv.Itoa(i)
	}
	bulk(b, db, ids, perSession)
	// The second session differs from the first here and there.
	require.NoError(b, db.Exec(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE steps SET decision = 'deny' WHERE session_id = ? AND seq % 37 = 0`, ids[500])
		return err
	}))
	svc := New(db, nil)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := svc.Compare(ctx, ids[1], ids[500])
		require.NoError(b, err)
		require.Equal(b, perSession, res.A.Steps)
		require.Positive(b, res.Summary.Differ)
		// The answer as the API sends it.
		require.NoError(b, json.NewEncoder(io.Discard).Encode(res))
	}
}
