package storetest

import (
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/storage"
)

// approvalAge is the age the approval cases give the ledger.
const approvalAge = time.Hour

// approvalKey is a key as the gateway makes them: a digest.
func approvalKey(name string) []byte {
	k := sha256.Sum256([]byte(name))
	return k[:]
}

func approvalKeys(names ...string) [][]byte {
	out := make([][]byte, len(names))
	for i, n := range names {
		out[i] = approvalKey(n)
	}
	return out
}

func recordApproval(t testing.TB, db storage.Backend, name string, allowed bool, at time.Time) {
	t.Helper()
	require.NoError(t, db.RecordApproval(bg(), approvalKey(name), allowed, at, approvalAge))
}

// requireTaken takes names at now and requires every one marked answered.
func requireTaken(t testing.TB, db storage.Backend, now time.Time, names ...string) {
	t.Helper()
	bad, state, ok, err := db.TakeApprovals(bg(), approvalKeys(names...), now, approvalAge)
	require.NoError(t, err)
	require.True(t, ok, "take %v refused at %d (state %d)", names, bad, state)
}

// requireNotTaken takes names at now and requires the refusal of the one at index bad,
// in state.
func requireNotTaken(t testing.TB, db storage.Backend, now time.Time, bad int, state storage.ApprovalState, names ...string) {
	t.Helper()
	gotBad, gotState, ok, err := db.TakeApprovals(bg(), approvalKeys(names...), now, approvalAge)
	require.NoError(t, err)
	require.False(t, ok, "take %v", names)
	require.Equal(t, bad, gotBad, "take %v: the first not answerable", names)
	require.Equal(t, state, gotState, "take %v: its state", names)
}

var approvalCases = []testCase{
	{"ApprovalRecordTakeRestore", func(t *testing.T, db storage.Backend) {
		recordApproval(t, db, "a", true, t0)
		requireNotTaken(t, db, t0, 0, storage.ApprovalUnknown, "never recorded")
		requireTaken(t, db, t0.Add(time.Second), "a")
		requireNotTaken(t, db, t0.Add(time.Second), 0, storage.ApprovalAnswered, "a")
		require.NoError(t, db.RestoreApprovals(bg(), approvalKeys("a")))
		requireTaken(t, db, t0.Add(2*time.Second), "a")
		require.NoError(t, db.RestoreApprovals(bg(), nil))
	}},
	{"ApprovalDenialSticks", func(t *testing.T, db storage.Backend) {
		recordApproval(t, db, "denied first", false, t0)
		recordApproval(t, db, "denied first", true, t0.Add(time.Second))
		requireNotTaken(t, db, t0.Add(time.Second), 0, storage.ApprovalDenied, "denied first")
		recordApproval(t, db, "denied later", true, t0)
		recordApproval(t, db, "denied later", false, t0.Add(time.Second))
		requireNotTaken(t, db, t0.Add(time.Second), 0, storage.ApprovalDenied, "denied later")
		// Judged again after it was answered: the new verdict holds.
		recordApproval(t, db, "asked twice", true, t0)
		requireTaken(t, db, t0, "asked twice")
		recordApproval(t, db, "asked twice", true, t0.Add(time.Second))
		requireTaken(t, db, t0.Add(time.Second), "asked twice")
		// A denial too old to know does not stick.
		recordApproval(t, db, "denied long ago", false, t0)
		recordApproval(t, db, "denied long ago", true, t0.Add(approvalAge))
		requireTaken(t, db, t0.Add(approvalAge), "denied long ago")
	}},
	{"ApprovalRestoreOnlyAnswered", func(t *testing.T, db storage.Backend) {
		recordApproval(t, db, "allowed", true, t0)
		recordApproval(t, db, "denied", false, t0)
		require.NoError(t, db.RestoreApprovals(bg(), approvalKeys("allowed", "denied", "unknown")))
		requireNotTaken(t, db, t0, 0, storage.ApprovalDenied, "denied")
		requireNotTaken(t, db, t0, 0, storage.ApprovalUnknown, "unknown")
		requireTaken(t, db, t0, "allowed")
		requireNotTaken(t, db, t0, 0, storage.ApprovalAnswered, "allowed")
	}},
	{"ApprovalTakeAllOrNothing", func(t *testing.T, db storage.Backend) {
		recordApproval(t, db, "a", true, t0)
		recordApproval(t, db, "b", true, t0)
		recordApproval(t, db, "d", false, t0)
		requireNotTaken(t, db, t0, 2, storage.ApprovalUnknown, "a", "b", "c")
		requireNotTaken(t, db, t0, 1, storage.ApprovalDenied, "a", "d", "b")
		requireNotTaken(t, db, t0, 1, storage.ApprovalAnswered, "a", "a")
		// None of those takes marked a or b answered.
		requireTaken(t, db, t0, "b", "a")
		requireNotTaken(t, db, t0, 0, storage.ApprovalAnswered, "a")
		requireNotTaken(t, db, t0, 0, storage.ApprovalAnswered, "b")
	}},
	{"ApprovalExpiry", func(t *testing.T, db storage.Backend) {
		for _, n := range []string{"young", "old", "judged again"} {
			recordApproval(t, db, n, true, t0)
		}
		requireTaken(t, db, t0.Add(approvalAge-time.Nanosecond), "young")
		requireNotTaken(t, db, t0.Add(approvalAge), 0, storage.ApprovalUnknown, "old")
		// Answered, then too old: unknown too.
		requireNotTaken(t, db, t0.Add(approvalAge), 0, storage.ApprovalUnknown, "young")
		// Its age counts from the last verdict.
		recordApproval(t, db, "judged again", true, t0.Add(approvalAge/2))
		requireTaken(t, db, t0.Add(approvalAge), "judged again")
	}},
	{"ApprovalPrune", func(t *testing.T, db storage.Backend) {
		recordApproval(t, db, "old", true, t0)
		recordApproval(t, db, "old denied", false, t0.Add(time.Minute))
		recordApproval(t, db, "new", true, t0.Add(approvalAge/2))
		now := t0.Add(approvalAge + time.Minute)
		n, err := db.PruneApprovals(bg(), now, approvalAge)
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		n, err = db.PruneApprovals(bg(), now, approvalAge)
		require.NoError(t, err)
		require.Zero(t, n)
		// Gone, not only too old: a take with a longer age does not find them.
		_, state, ok, err := db.TakeApprovals(bg(), approvalKeys("old"), now, 10*approvalAge)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, storage.ApprovalUnknown, state)
		recordApproval(t, db, "old denied", true, now)
		requireTaken(t, db, now, "old denied")
		requireTaken(t, db, now, "new")
	}},
	{"ApprovalConcurrentTake", func(t *testing.T, db storage.Backend) {
		// Several guardians take the same requests at once, some in the other order:
		// exactly one take succeeds, and every other finds a request answered.
		recordApproval(t, db, "a", true, t0)
		recordApproval(t, db, "b", true, t0)
		const takers = 8
		type result struct {
			state storage.ApprovalState
			ok    bool
			err   error
		}
		results := make(chan result, takers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range takers {
			names := []string{"a", "b"}
			if i%2 == 1 {
				names = []string{"b", "a"}
			}
			wg.Go(func() {
				<-start
				_, state, ok, err := db.TakeApprovals(bg(), approvalKeys(names...), t0, approvalAge)
				results <- result{state, ok, err}
			})
		}
		close(start)
		wg.Wait()
		close(results)
		won := 0
		for r := range results {
			require.NoError(t, r.err)
			if r.ok {
				won++
				continue
			}
			require.Equal(t, storage.ApprovalAnswered, r.state)
		}
		require.Equal(t, 1, won)
	}},
}
