package sqlite

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"

	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func searchSteps(t *testing.T, db *DB, q record.SearchQuery) []int64 {
	t.Helper()
	require.NoError(t, db.IndexComplete(context.Background()))
	page, err := db.Search(context.Background(), q)
	require.NoError(t, err)
	seqs := make([]int64, len(page.Steps))
	for i, h := range page.Steps {
		seqs[i] = h.Seq
	}
	return seqs
}

// What a search finds is checked on both backends by storetest's "search" case; the
// tests here are about SQLite's own index (retention, catching up, snippets).

func TestSearchFollowsRetention(t *testing.T) {
	db := openTest(t)
	for i := range 10 {
		rec := step(fmt.Sprint("s", i), "allow", time.Duration(i)*time.Hour)
		rec.Text = "needle"
		save(t, db, rec)
	}
	require.Len(t, searchSteps(t, db, record.SearchQuery{Text: "needle"}), 10)
	_, err := db.Prune(context.Background(), t0.Add(20*time.Hour), record.Retention{MaxAge: 15 * time.Hour})
	require.NoError(t, err)
	require.Len(t, searchSteps(t, db, record.SearchQuery{Text: "needle"}), 5, "pruned steps leave the index")
}

func TestSnippet(t *testing.T) {
	long := strings.Repeat("lorem ipsum ", 60) + "NEEDLE here " + strings.Repeat("dolor sit ", 60)
	s := storage.Snippet(long, []string{"needle"})
	require.Contains(t, s, "NEEDLE here")
	require.True(t, strings.HasPrefix(s, "…") && strings.HasSuffix(s, "…"))
	require.LessOrEqual(t, len(s), record.SnippetBytes+2*len("…"))
	require.Equal(t, "short text", storage.Snippet("short\n text", nil))
	// Lower-casing may change lengths outside ASCII: never a panic, always valid UTF-8.
	odd := strings.Repeat("İ", 300) + "x"
	require.NotPanics(t, func() { _ = storage.Snippet(odd, []string{"x"}) })
}

func TestSearchIndexCatchesUp(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	for i := range 600 {
		rec := step("s", "allow", time.Duration(i)*time.Second)
		rec.Text = fmt.Sprint("word", i)
		save(t, db, rec)
	}
	// A batch at a time, in seq order: what is not indexed yet is counted as lag.
	storeAndIndex(t, db, 500, 500)
	page, err := db.Search(ctx, record.SearchQuery{Text: "word599"})
	require.NoError(t, err)
	require.Empty(t, page.Steps)
	require.Equal(t, int64(100), page.IndexLag)
	// The background indexer takes the rest.
	require.NoError(t, db.Close())
	db, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Eventually(t, func() bool {
		page, err := db.Search(ctx, record.SearchQuery{Text: "word599"})
		return err == nil && len(page.Steps) == 1 && page.IndexLag == 0
	}, 10*time.Second, 20*time.Millisecond)
	// Deleting an indexed step takes it out of the index; a step not indexed yet is skipped.
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`DELETE FROM steps WHERE text = 'word7'`)
		return err
	}))
	require.Empty(t, searchSteps(t, db, record.SearchQuery{Text: `"word7"`}))
	require.Len(t, searchSteps(t, db, record.SearchQuery{Text: `"word8"`}), 1)
}

// squashReplaceSQL is how the index squashed ids before vigil_squash: one replace() per
// separator. The function must give the same text for every input, or ids indexed before
// and after it would be found differently.
func squashReplaceSQL(col string) string {
	expr := col
	for _, c := range storage.IDSeparators {
		expr = "replace(" + expr + ", '" + string(c) + "', '')"
	}
	return expr
}

func TestSquashFunctionIsReplace(t *testing.T) {
	db := openTest(t)
	rng := rand.New(rand.NewPCG(16, 1))
	// Separators, letters, multi-byte text and bytes that are not UTF-8.
	alphabet := []string{"-", "_", ".", ":", "@", "/", "a", "Z", "7", " ", "é", "日", "\xff", "\xc3", "\x00"}
	inputs := []string{"", "sess-42", "a.b:c@d/e_f", "---", "plain", "\xffsess-\xc3"}
	for range 500 {
		var b strings.Builder
		for range rng.IntN(24) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		inputs = append(inputs, b.String())
	}
	q := `SELECT ` + squashSQL("?1") + ` = ` + squashReplaceSQL("?1") + `, hex(` + squashSQL("?1") + `), hex(` + squashReplaceSQL("?1") + `)`
	for _, in := range inputs {
		var same bool
		var got, want string
		require.NoError(t, db.r.QueryRow(q, in).Scan(&same, &got, &want))
		require.True(t, same, "%q: vigil_squash gave %s, replace() %s", in, got, want)
	}
	require.Equal(t, "sess42", squashBytes("sess-42"))
	require.Equal(t, storage.SquashID("a.b:c@d/e_f"), squashBytes("a.b:c@d/e_f"))
}

func TestNextIndexBatch(t *testing.T) {
	for _, c := range []struct {
		limit int
		busy  time.Duration
		want  int
	}{
		{indexBatchMin, time.Millisecond, 2 * indexBatchMin}, // quick: doubles
		{1024, indexBatchTime / 2, 2048},                     // half the time: twice the steps
		{1024, indexBatchTime * 3 / 4, 1365},                 // towards the target
		{1024, indexBatchTime, 1024},                         // on target: stays
		{1024, 2 * indexBatchTime, 512},                      // too long: shrinks
		{1024, 100 * indexBatchTime, 512},                    // at most halves at once
		{indexBatchMin, time.Second, indexBatchMin},          // never below the least
		{indexBatchMax, time.Microsecond, indexBatchMax},     // never above the most
		{256, 0, 512}, // no reading: grows
	} {
		require.Equal(t, c.want, nextIndexBatch(c.limit, c.busy), "limit %d busy %v", c.limit, c.busy)
	}
}

// storeAndIndex stores the journaled steps, then indexes a batch of up to limit of them,
// which must be want steps.
func storeAndIndex(t *testing.T, db *DB, limit, want int) {
	t.Helper()
	require.NoError(t, db.Flush(context.Background()))
	n, err := db.IndexBatch(context.Background(), limit)
	require.NoError(t, err)
	require.Equal(t, want, n)
}

// segments counts the search index's segments.
func segments(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.r.QueryRow(`SELECT count(DISTINCT segid) FROM step_search_idx`).Scan(&n))
	return n
}

func TestIndexMergesWhenIdle(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	// Forty small batches: forty segments, fewer than automerge's 16 a level would leave
	// merged while indexing.
	for b := range 40 {
		for i := range 5 {
			rec := step(fmt.Sprint("s", b), "allow", time.Duration(b*5+i)*time.Second)
			rec.Text = fmt.Sprintf("needle word%d", b)
			save(t, db, rec)
		}
		storeAndIndex(t, db, 100, 5)
	}
	before := segments(t, db)
	require.Greater(t, before, 8, "automerge at 16 leaves the segments for the idle merge")

	rounds := 0
	for {
		did, err := db.mergeIndex(ctx)
		require.NoError(t, err)
		if !did {
			break
		}
		rounds++
		require.Less(t, rounds, 100, "merging never ends")
	}
	require.Positive(t, rounds)
	after := segments(t, db)
	require.Less(t, after, before/2, "idle merging leaves %d of %d segments", after, before)
	// Merging keeps every step findable, by a common word and by a rare one.
	require.Len(t, searchSteps(t, db, record.SearchQuery{Text: "needle", Limit: 200}), 200)
	require.Len(t, searchSteps(t, db, record.SearchQuery{Text: "word17"}), 5)
	did, err := db.mergeIndex(ctx)
	require.NoError(t, err)
	require.False(t, did, "nothing left to merge")
}
