package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/cluster"
	"github.com/vigil-guardian/vigil/guardian/holds"
)

// served records the decisions a replica was forwarded.
type served struct {
	mu  sync.Mutex
	got []string
}

func (s *served) serve(_ context.Context, holdID string, decision []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, holdID+" "+string(decision))
	return []byte(`{"answer":"` + holdID + `"}`)
}

func (s *served) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func TestForwardReachesTheReplicaTheAgentWaitsOn(t *testing.T) {
	p := pool(t)
	ctx := context.Background()
	s := newStore()
	owner, other := join(t, p, s, "a"), join(t, p, s, "b")
	var got served
	owner.ServeForwarded(got.serve)
	run(t, owner)
	run(t, other)
	require.NoError(t, owner.Own(ctx, "h1"))
	require.NoError(t, other.Own(ctx, "h2"))

	for i := range 5 {
		start := time.Now()
		answer, err := other.Forward(ctx, "h1", []byte(`{"n":1}`))
		require.NoError(t, err)
		require.JSONEq(t, `{"answer":"h1"}`, string(answer))
		t.Logf("round trip %d: %s", i, time.Since(start))
	}
	require.Len(t, got.all(), 5)
	require.Equal(t, `h1 {"n":1}`, got.all()[0])

	for _, id := range []string{"h2", "unowned"} {
		_, err := other.Forward(ctx, id, []byte(`{}`))
		require.ErrorIs(t, err, holds.ErrNotForwarded, "%s: its own hold, or one nobody owns, is decided in the store", id)
	}
	var left int
	require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM vigil_hold_decisions`).Scan(&left))
	require.Zero(t, left, "answered decisions are deleted")
}

// A decision for a hold whose replica cannot take it is refused, and never applied later.
func TestForwardToAnUnavailableReplicaDecidesNothing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		silent   bool          // its heartbeats stopped long ago
		atMost   time.Duration // how long the refusal may take
		atLeast  time.Duration
		contains string
	}{
		{"stopped beating", true, 5 * time.Second, 0, "has sent no heartbeat for"},
		{"beating but not taking it", false, 10 * time.Second, 300 * time.Millisecond, "did not take the decision within 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool(t)
			ctx := context.Background()
			s := newStore()
			owner := join(t, p, s, "10.0.0.9:7878")
			other := joinWith(t, cluster.Options{Pool: p, Holds: s, ForwardWait: 300 * time.Millisecond})
			require.NoError(t, owner.Own(ctx, "h1"))
			if tc.silent {
				silence(t, p, owner.ID())
			}
			// The owner's process is frozen (SIGSTOP, a stalled VM): registered, not serving.
			start := time.Now()
			_, err := other.Forward(ctx, "h1", []byte(`{}`))
			took := time.Since(start)
			require.ErrorIs(t, err, holds.ErrOwnerUnavailable)
			require.Contains(t, err.Error(), "replica "+owner.ID()+" (10.0.0.9:7878)")
			require.Contains(t, err.Error(), tc.contains)
			require.Contains(t, err.Error(), "nothing was decided")
			require.Less(t, took, tc.atMost)
			require.GreaterOrEqual(t, took, tc.atLeast)

			// It resumes: the refused decision is gone, never to be applied.
			var got served
			owner.ServeForwarded(got.serve)
			run(t, owner)
			require.NoError(t, owner.Own(ctx, "h2"))
			// The owner has only just started listening: give it the default ForwardWait,
			// not the 300 ms that made the frozen owner's refusal quick.
			sender := join(t, p, s, "")
			_, err = sender.Forward(ctx, "h2", []byte(`{}`))
			require.NoError(t, err)
			require.Equal(t, []string{"h2 {}"}, got.all())
		})
	}
}

func TestListenRetry(t *testing.T) {
	tests := []struct {
		last     time.Duration
		listened bool
		want     time.Duration
	}{
		{0, false, 100 * time.Millisecond},
		{100 * time.Millisecond, false, 200 * time.Millisecond},
		{4 * time.Second, false, 5 * time.Second},
		{5 * time.Second, false, 5 * time.Second},
		// Listening again resets the series: a later loss retries soon.
		{5 * time.Second, true, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, cluster.ListenRetry(tt.last, tt.listened), "%v %v", tt.last, tt.listened)
	}
}
