package guardian

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// The cache keeps the counts of each snapshot's window up to date as steps come and the
// oldest leave, across the slice's periodic cut; a snapshot overtaken by a new step has none.
func TestSessionCounts(t *testing.T) {
	for _, max := range []int{1, 2, 5} {
		t.Run(fmt.Sprint("history ", max), func(t *testing.T) {
			s := &sessionState{id: "s", max: max, loaded: true, counts: rules.CountSteps(nil)}
			for i := range 40 {
				kind := "toolCall"
				if i%5 == 0 {
					kind = "toolResult"
				}
				s.add(storage.StepRecord{Seq: int64(i + 1), Method: fmt.Sprint("m", i%2), Kind: kind,
					Tool: fmt.Sprint("t", i%3), Decision: []string{"allow", "deny", "hold"}[i%3]})
				h := s.snapshot()
				require.Len(t, h.Steps, min(i+1, max))
				require.Equal(t, rules.CountSteps(h.Steps), h.Counts(), "after step %d", i)
			}
			h := s.snapshot()
			s.add(storage.StepRecord{Seq: 99, Method: "m", Decision: "allow"})
			require.Nil(t, h.Counts(), "a newer step makes the snapshot's counts unknown")
		})
	}
	require.Nil(t, (&History{}).Counts())
}

// Counts lent to a snapshot stay as they were while newer steps of the session arrive;
// once returned, the cache changes its counts in place again.
func TestSessionCountsLent(t *testing.T) {
	s := &sessionState{id: "s", max: 10, loaded: true, counts: rules.CountSteps(nil)}
	add := func(tool string) {
		s.add(storage.StepRecord{Method: "m", Kind: "toolCall", Tool: tool, Decision: "allow"})
	}
	add("a")
	h := s.snapshot()
	c := h.Counts()
	want := rules.CountSteps(h.Steps)
	require.Equal(t, want, c)
	require.Same(t, c, h.Counts(), "one loan per snapshot")
	add("b") // another step of the session, decided meanwhile
	require.Equal(t, want, c, "lent counts do not change")
	h.release()

	h2 := s.snapshot()
	c2 := h2.Counts()
	require.NotSame(t, c, c2)
	require.Equal(t, rules.CountSteps(h2.Steps), c2)
	h2.release()
	h.release() // a second release changes nothing
	add("c")
	require.Same(t, c2, s.counts, "returned counts are changed in place")
	require.Equal(t, rules.CountSteps(s.window()), s.counts)
	require.Zero(t, s.lent)
}

// A step's strings may share its request's memory (aos.ParseStep). What the session cache
// keeps (the session id, a history step's tool) is its own copy: changing the request's
// bytes afterwards changes nothing there.
func TestSessionCacheKeepsCopies(t *testing.T) {
	db, err := storage.Open(context.Background(), filepath.Join(t.TempDir(), "v.db"), storage.Options{})
	require.NoError(t, err)
	defer db.Close()
	buf := []byte("sess-1 send_email")
	id, tool := unsafe.String(&buf[0], 6), unsafe.String(&buf[7], 10)
	c := newSessionCache(10, 5, db)
	s := c.get(context.Background(), id)
	h := HistoryStep(storage.StepRecord{Tool: tool, Method: "m", Decision: "allow"})
	s.add(storage.StepRecord{SessionID: id, Tool: tool, Method: "m", Kind: "toolCall", Decision: "allow"})
	copy(buf, "XXXXXXXXXXXXXXXXX")
	require.Equal(t, "sess-1", s.id)
	require.Same(t, s, c.get(context.Background(), "sess-1"))
	require.Equal(t, []string{"sess-1"}, c.order)
	require.Equal(t, "send_email", h.Tool)
	require.Equal(t, "send_email", s.steps[0].Tool)
	require.Equal(t, 1, s.counts.Tools["send_email"])
}
