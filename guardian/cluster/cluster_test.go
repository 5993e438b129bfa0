package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/cluster"
	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &pg)) }

// holdStore is the backend's holds, first decision wins.
type holdStore struct {
	mu      sync.Mutex
	holds   map[string]record.Hold
	audit   []record.AuditEntry
	resolve int
}

func newStore(hs ...record.Hold) *holdStore {
	s := &holdStore{holds: map[string]record.Hold{}}
	for _, h := range hs {
		s.holds[h.ID] = h
	}
	return s
}

func (s *holdStore) ListHolds(_ context.Context, status string, _ int) ([]record.Hold, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []record.Hold
	for _, h := range s.holds {
		if h.Status == status {
			out = append(out, h)
		}
	}
	return out, nil
}

func (s *holdStore) ResolveHold(_ context.Context, id string, res record.HoldResolution, a *record.AuditEntry) (record.Hold, []record.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.holds[id]
	if !ok {
		return record.Hold{}, nil, record.ErrNotFound
	}
	if h.Status != record.HoldPending {
		return h, nil, fmt.Errorf("hold %s: %w", id, record.ErrHoldDecided)
	}
	h.Status, h.Decision, h.Note = res.Status, res.Decision, res.Note
	s.holds[id] = h
	s.audit = append(s.audit, *a)
	s.resolve++
	return h, []record.Event{{Type: record.EventHoldResolved}}, nil
}

func (s *holdStore) get(id string) record.Hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds[id]
}

func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), pgtest.Need(t, pg))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func join(t *testing.T, p *pgxpool.Pool, s *holdStore, addr string) *cluster.Registry {
	t.Helper()
	r, err := cluster.Join(context.Background(), cluster.Options{Pool: p, Holds: s, Addr: addr,
		// A live replica must beat within DeadAfter even on a loaded CI machine, where a
		// goroutine can wait hundreds of milliseconds for a core: 300 ms once let a live
		// replica's hold be ended as a dead one's.
		Heartbeat: 10 * time.Millisecond, DeadAfter: 1500 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return r
}

func run(t *testing.T, r *cluster.Registry) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func pending(id string) record.Hold {
	return record.Hold{ID: id, Status: record.HoldPending, CreatedAt: time.Now()}
}

func TestDeadReplicasHoldsAreInterruptedByASurvivor(t *testing.T) {
	p := pool(t)
	s := newStore(pending("h1"), pending("h2"), pending("h3"))
	ctx := context.Background()
	// Three replicas join at once: the tables are created once.
	var wg sync.WaitGroup
	regs := make([]*cluster.Registry, 3)
	for i := range regs {
		wg.Go(func() { regs[i] = join(t, p, s, fmt.Sprintf("10.0.0.%d:7878", i)) })
	}
	wg.Wait()
	dead, alive, survivor := regs[0], regs[1], regs[2]
	require.NoError(t, dead.Own(ctx, "h1"))
	require.NoError(t, alive.Own(ctx, "h2"))
	require.NoError(t, alive.Own(ctx, "h3"))
	// h3 ended on its replica; its row goes with the next beat.
	s.mu.Lock()
	h3 := s.holds["h3"]
	h3.Status = record.HoldApproved
	s.holds["h3"] = h3
	s.mu.Unlock()
	alive.Disown("h3")
	// Either live replica's sweep may end h1: whichever does hands its step over.
	stepsOf := make(chan record.Hold, 4)
	alive.OnInterrupted(func(_ context.Context, h record.Hold) { stepsOf <- h })
	survivor.OnInterrupted(func(_ context.Context, h record.Hold) { stepsOf <- h })
	run(t, alive)
	stopSurvivor := run(t, survivor)
	// dead never beats: it was SIGKILLed.
	require.Eventually(t, func() bool { return s.get("h1").Status == record.HoldInterrupted }, 10*time.Second, 5*time.Millisecond)
	h1 := s.get("h1")
	require.Equal(t, "deny", h1.Decision, "never approved, whatever its onTimeout")
	require.Contains(t, h1.Note, "replica "+dead.ID()+" (10.0.0.0:7878) stopped")
	select {
	case h := <-stepsOf:
		require.Equal(t, "h1", h.ID, "its step is handed over to be stored")
	case <-time.After(10 * time.Second):
		t.Fatal("the interrupted hold was not handed over")
	}
	stopSurvivor()
	require.NoError(t, survivor.Sweep(ctx))
	require.Equal(t, record.HoldPending, s.get("h2").Status, "a live replica's hold stays")
	s.mu.Lock()
	require.Equal(t, 1, s.resolve)
	require.Equal(t, record.AuditHoldInterrupted, s.audit[0].Type)
	require.Contains(t, string(s.audit[0].Detail), dead.ID())
	s.mu.Unlock()
	var n int
	require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM vigil_replicas WHERE id = $1`, dead.ID()).Scan(&n))
	require.Zero(t, n, "the dead replica is forgotten")
}

func TestUnownedOldPendingHoldsAreInterrupted(t *testing.T) {
	p := pool(t)
	old := pending("old")
	old.CreatedAt = time.Now().Add(-time.Hour)
	s := newStore(old, pending("new"))
	r := join(t, p, s, "")
	require.NoError(t, r.Sweep(context.Background()))
	require.Equal(t, record.HoldInterrupted, s.get("old").Status)
	require.Equal(t, record.HoldPending, s.get("new").Status, "a hold is checked for an owner only once it is old")
}

func TestLeaveIsNotADeath(t *testing.T) {
	p := pool(t)
	s := newStore(pending("h1"))
	ctx := context.Background()
	a, b := join(t, p, s, ""), join(t, p, s, "")
	require.NoError(t, a.Own(ctx, "h1"))
	s.mu.Lock()
	h := s.holds["h1"]
	h.Status = record.HoldInterrupted // its graceful shutdown ended it
	s.holds["h1"] = h
	s.mu.Unlock()
	run(t, a) // still beating while the server shuts down
	require.NoError(t, a.Leave(ctx))
	require.NoError(t, b.Sweep(ctx))
	// No later heartbeat registers it again.
	time.Sleep(50 * time.Millisecond) // several heartbeat periods of a registry that must stay silent
	var n int
	require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM vigil_replicas WHERE id = $1`, a.ID()).Scan(&n))
	require.Zero(t, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Zero(t, s.resolve)
}
