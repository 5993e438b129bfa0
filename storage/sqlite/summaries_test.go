package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// summaryOf is the summary writing steps one by one in seq order leaves.
func summaryOf(steps []*record.StepRecord) record.Session {
	var s record.Session
	for _, rec := range steps {
		var d storage.SessionDelta
		st := storage.SessionStepOf(rec)
		d.Add(&st, rec.Seq)
		d.ApplyTo(&s)
	}
	return s
}

// storedRows is every row of the sessions table as it is, read without the store's reads
// (which add what is owed).
func storedRows(t testing.TB, db *DB) map[string]record.Session {
	t.Helper()
	rows, err := db.Reader().Query(`SELECT ` + sessionColumns + ` FROM sessions s`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]record.Session{}
	for rows.Next() {
		s, err := storage.ScanSession(rows)
		require.NoError(t, err)
		out[s.ID] = s
	}
	require.NoError(t, rows.Err())
	return out
}

// randomStep is a step of one of sessions naming owners, names, peers and decisions at
// random, as the gateways' steps do.
func randomStep(rng *rand.Rand, sessions int, at time.Duration) *record.StepRecord {
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	rec := step(fmt.Sprint("s", rng.IntN(sessions)), pick("allow", "deny", "hold", "modify"), at)
	rec.Method = pick("steps/message", "steps/toolCallRequest", "steps/memoryStore")
	rec.AgentID, rec.KeyID = pick("", "agent-a", "agent-b"), pick("", "", "key_a", "key_b")
	rec.AgentName, rec.UserID = pick("", "A", "B"), pick("", "u1", "u2")
	if c := pick("", "", "inspector", "claude"); c != "" {
		rec.Client = &record.Peer{Name: c, Version: pick("", "1.0", "2.0")}
	}
	if s := pick("", "", "everything", "files"); s != "" {
		rec.Server = &record.Peer{Name: s, Version: pick("", "0.6")}
	}
	return rec
}

// Session summaries written behind their steps read, at every moment, as if each step had
// updated its row: through Session (which adds what is owed), through the session list (which
// writes it), in a copy taken meanwhile (as after a crash) and after a restart. Steps are
// saved in random runs over a few sessions, with queries that store steps but not
// summaries, owed rows past the cap, and the delay's expiry in between.
func TestSummariesBehindStepsReadWhole(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, "vigil.db")
			open := func(delay time.Duration) *DB {
				db, err := Open(ctx, path, Options{SummaryDelay: delay, ManualIndex: true})
				require.NoError(t, err)
				return db
			}
			db := open(time.Hour)
			if seed%2 == 1 {
				db.owed.max = 3 // the oldest owed rows are written past three
			}
			bySession := map[string][]*record.StepRecord{}
			check := func(db *DB) {
				t.Helper()
				for id, steps := range bySession {
					got, err := db.Session(ctx, id)
					require.NoError(t, err)
					require.Equal(t, summaryOf(steps), got, "session %s", id)
				}
			}
			var at time.Duration
			copies := 0
			for round := range 40 {
				for range 1 + rng.IntN(12) {
					at += time.Duration(rng.IntN(3)) * time.Second
					rec := save(t, db, randomStep(rng, 5, at))
					bySession[rec.SessionID] = append(bySession[rec.SessionID], rec)
				}
				switch rng.IntN(6) {
				case 0: // a query of steps: they are stored, their summaries stay owed
					_, err := db.Steps(ctx, record.StepQuery{SessionID: "s0"})
					require.NoError(t, err)
				case 1: // the session list writes every owed row
					page, err := db.Sessions(ctx, record.SessionQuery{Limit: 100})
					require.NoError(t, err)
					require.Len(t, page.Sessions, len(bySession))
					for _, s := range page.Sessions {
						require.Equal(t, summaryOf(bySession[s.ID]), s, "session %s", s.ID)
					}
					require.Len(t, storedRows(t, db), len(bySession))
				case 2: // a copy taken now is what a crash would leave, made whole
					copies++
					dest := filepath.Join(dir, fmt.Sprint("copy", round, ".db"))
					_, err := Backup(ctx, path, dest, false)
					require.NoError(t, err)
					c, err := Open(ctx, dest, Options{ManualIndex: true})
					require.NoError(t, err)
					rows := storedRows(t, c)
					require.Len(t, rows, len(bySession))
					for id, steps := range bySession {
						require.Equal(t, summaryOf(steps), rows[id], "copy, session %s", id)
					}
					require.NoError(t, c.Close())
				case 3: // a restart: Close writes what is owed
					require.NoError(t, db.Close())
					rowsAfterClose := func() map[string]record.Session {
						ro, err := Open(ctx, path, Options{ManualIndex: true, SummaryDelay: time.Hour})
						require.NoError(t, err)
						defer func() { require.NoError(t, ro.Close()) }()
						return storedRows(t, ro)
					}()
					for id, steps := range bySession {
						require.Equal(t, summaryOf(steps), rowsAfterClose[id], "after close, session %s", id)
					}
					db = open(time.Hour)
				}
				check(db)
			}
			require.NoError(t, db.Close())
			t.Logf("%d copies", copies)
		})
	}
}

// A session that keeps taking steps has its row written once for many of them: after steps
// are stored (a query of steps) the row still counts none of them, yet Session counts them
// all; the row is written when the delay has passed, on its own.
func TestSummaryWrittenAfterDelay(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), Options{SummaryDelay: 300 * time.Millisecond, ManualIndex: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var steps []*record.StepRecord
	for i := range 5 {
		steps = append(steps, save(t, db, step("busy", "allow", time.Duration(i)*time.Second)))
	}
	_, err = db.Step(ctx, steps[4].Seq) // stores the steps
	require.NoError(t, err)
	require.NotContains(t, storedRows(t, db), "busy", "the row is written behind its steps")
	got, err := db.Session(ctx, "busy")
	require.NoError(t, err)
	require.Equal(t, summaryOf(steps), got)

	require.Eventually(t, func() bool { _, ok := storedRows(t, db)["busy"]; return ok },
		10*time.Second, 20*time.Millisecond, "the writer writes the row once it is due")
	require.Equal(t, summaryOf(steps), storedRows(t, db)["busy"])
	require.Zero(t, db.owed.n.Load())
}

// Retention deletes the rows of sessions it empties: what they owed is written first, so
// a session whose steps all went does not come back with part of a count.
func TestRetentionWritesOwedSummariesFirst(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), Options{SummaryDelay: time.Hour, ManualIndex: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	old := save(t, db, step("old", "allow", 0))
	keep := save(t, db, step("kept", "deny", time.Hour))
	_, err = db.Step(ctx, keep.Seq)
	require.NoError(t, err)
	_, err = db.Prune(ctx, old.ReceivedAt.Add(30*time.Minute), record.Retention{MaxAge: time.Minute})
	require.NoError(t, err)
	require.NoError(t, db.Flush(ctx))
	rows := storedRows(t, db)
	require.NotContains(t, rows, "old")
	require.Equal(t, summaryOf([]*record.StepRecord{keep}), rows["kept"])
}
