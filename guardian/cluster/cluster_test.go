package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
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

func (s *holdStore) AppendAudit(_ context.Context, e *record.AuditEntry) (record.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audit = append(s.audit, *e)
	return record.Event{Type: record.EventAudit}, nil
}

func (s *holdStore) set(h record.Hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds[h.ID] = h
}

func (s *holdStore) audits() []record.AuditEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]record.AuditEntry(nil), s.audit...)
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
	return joinWith(t, cluster.Options{Pool: p, Holds: s, Addr: addr})
}

// joinWith joins with the tests' heartbeat and dead-after unless o sets them.
func joinWith(t *testing.T, o cluster.Options) *cluster.Registry {
	t.Helper()
	if o.Heartbeat == 0 {
		o.Heartbeat = 10 * time.Millisecond
	}
	if o.DeadAfter == 0 {
		// A live replica must beat within DeadAfter even on a loaded CI machine, where a
		// goroutine can wait hundreds of milliseconds for a core: 300 ms once let a live
		// replica's hold be ended as a dead one's.
		o.DeadAfter = 1500 * time.Millisecond
	}
	o.Logger = slog.New(slog.DiscardHandler)
	r, err := cluster.Join(context.Background(), o)
	require.NoError(t, err)
	return r
}

// silence makes replica id look silent for an hour, as after a SIGKILL long ago.
func silence(t *testing.T, p *pgxpool.Pool, id string) {
	t.Helper()
	_, err := p.Exec(context.Background(), `UPDATE vigil_replicas SET heartbeat_at = now() - interval '1 hour' WHERE id = $1`, id)
	require.NoError(t, err)
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
	// The live replica whose sweep ended h1 forgets the dead one once its transaction
	// commits, which may be after the hand-over above; the survivor's sweep skips the
	// locked rows meanwhile and leaves the forgetting to it.
	require.Eventually(t, func() bool {
		var n int
		err := p.QueryRow(ctx, `SELECT count(*) FROM vigil_replicas WHERE id = $1`, dead.ID()).Scan(&n)
		return err == nil && n == 0
	}, 10*time.Second, 5*time.Millisecond, "the dead replica is forgotten")
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

func poolOf(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// A silent replica's holds end by what they were: a pending one is interrupted; one
// decided but whose step was never stored (its replica stopped between the decision and
// the answer, so the agent got nothing) keeps its decision, is audited as never answered,
// and has its step stored as denied; one answered and stored is left alone.
func TestSweepEndsEachHoldOfASilentReplicaByItsState(t *testing.T) {
	approved := func(seq int64) record.Hold {
		h := pending("h")
		h.Status, h.Decision, h.DecidedBy, h.Seq = record.HoldApproved, "allow", "alice", seq
		return h
	}
	interrupted := pending("h")
	interrupted.Status, interrupted.Decision = record.HoldInterrupted, "deny"
	for _, tc := range []struct {
		name       string
		hold       *record.Hold
		wantStatus string
		stored     bool   // its step is handed over to be stored
		audit      string // the reason of the audit entry the sweep writes, "" for none
	}{
		{"pending", new(pending("h")), record.HoldInterrupted, true, "no heartbeat"},
		{"decided, never answered", new(approved(0)), record.HoldApproved, true, "no heartbeat before the answer"},
		{"decided and stored", new(approved(42)), record.HoldApproved, false, ""},
		{"interrupted by a sweep that failed before storing", &interrupted, record.HoldInterrupted, true, ""},
		{"owned, never stored", nil, "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool(t)
			ctx := context.Background()
			s := newStore()
			if tc.hold != nil {
				s.set(*tc.hold)
			}
			dead, survivor := join(t, p, s, "10.0.0.1:7878"), join(t, p, s, "")
			require.NoError(t, dead.Own(ctx, "h"))
			silence(t, p, dead.ID())
			var handed []record.Hold
			survivor.OnInterrupted(func(_ context.Context, h record.Hold) { handed = append(handed, h) })

			require.NoError(t, survivor.Sweep(ctx))
			if tc.hold != nil {
				require.Equal(t, tc.wantStatus, s.get("h").Status)
				if tc.wantStatus == record.HoldInterrupted {
					require.Equal(t, "deny", s.get("h").Decision, "never approved")
				}
			}
			if tc.stored {
				require.Len(t, handed, 1)
				require.Equal(t, "h", handed[0].ID)
			} else {
				require.Empty(t, handed)
			}
			audits := s.audits()
			if tc.audit == "" {
				require.Empty(t, audits)
			} else {
				require.Len(t, audits, 1)
				require.Equal(t, record.AuditHoldInterrupted, audits[0].Type)
				var detail map[string]string
				require.NoError(t, json.Unmarshal(audits[0].Detail, &detail))
				require.Equal(t, tc.audit, detail["reason"])
				require.Equal(t, dead.ID(), detail["replica"])
				require.Equal(t, survivor.ID(), detail["sweptBy"])
				require.Contains(t, audits[0].Note, "replica "+dead.ID()+" (10.0.0.1:7878) stopped or lost the database")
				if tc.name == "decided, never answered" {
					require.Equal(t, "h", audits[0].HoldID)
					require.Equal(t, "deny", audits[0].Decision, "what its step is stored with")
					require.Contains(t, audits[0].Note, "after the hold was approved by alice, before its agent was answered")
				}
			}
			// Done with: a second sweep ends nothing more, and the replica is forgotten.
			require.NoError(t, survivor.Sweep(ctx))
			require.Len(t, handed, map[bool]int{true: 1, false: 0}[tc.stored])
			var n int
			require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM vigil_replicas WHERE id = $1`, dead.ID()).Scan(&n))
			require.Zero(t, n)
		})
	}
}

// Survivors sweeping the same replica at once end each of its holds once: one step stored
// and one audit entry per hold.
func TestSurvivorsSweepingTogetherEndEachHoldOnce(t *testing.T) {
	p := pool(t)
	ctx := context.Background()
	s := newStore()
	dead := join(t, p, s, "")
	var ids []string
	for i := range 20 {
		h := pending(fmt.Sprint("h", i))
		if i%2 == 0 {
			h.Status, h.Decision, h.DecidedBy = record.HoldDenied, "deny", "bob"
		}
		s.set(h)
		require.NoError(t, dead.Own(ctx, h.ID))
		ids = append(ids, h.ID)
	}
	silence(t, p, dead.ID())
	var (
		mu     sync.Mutex
		handed = map[string]int{}
	)
	survivors := make([]*cluster.Registry, 3)
	for i := range survivors {
		survivors[i] = join(t, p, s, "")
		survivors[i].OnInterrupted(func(_ context.Context, h record.Hold) {
			mu.Lock()
			handed[h.ID]++
			mu.Unlock()
		})
	}
	var wg sync.WaitGroup
	for _, r := range survivors {
		wg.Go(func() { require.NoError(t, r.Sweep(ctx)) })
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, 1, handed[id], id)
	}
	require.Len(t, s.audits(), len(ids), "one entry per hold: interrupted, or decided and never answered")
}

// An outage of PostgreSQL longer than DeadAfter silences every replica. The first one back
// must not take the others for dead: it waits until it has reached the database for
// DeadAfter itself, which gives them that long to come back.
func TestAnOutageIsNotADeath(t *testing.T) {
	dsn := pgtest.Need(t, pg)
	direct := poolOf(t, dsn)
	px := newProxy(t, fmt.Sprintf("127.0.0.1:%d", pg.Port()))
	viaProxy := poolOf(t, strings.Replace(dsn, fmt.Sprintf(":%d/", pg.Port()), fmt.Sprintf(":%d/", px.port()), 1))
	s := newStore(pending("h1"))
	ctx := context.Background()
	a := join(t, direct, s, "a") // the agent of h1 waits here
	b := join(t, viaProxy, s, "b")
	require.NoError(t, a.Own(ctx, "h1"))
	beats := make(chan error, 1000)
	swept := make(chan struct{}, 1000)
	cluster.SetHooks(b, func(err error) { beats <- err }, func() { swept <- struct{}{} })
	next := func(ch chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatal("timed out")
		}
	}
	stopA := run(t, a)
	run(t, b)
	next(swept) // b has judged the others for a while: a is alive

	// The outage: neither reaches the database; a's last heartbeat grows old.
	px.setCut(true)
	stopA()
	silence(t, direct, a.ID())
	for err := range beats {
		if err != nil {
			break // b noticed
		}
	}
	px.setCut(false)
	for len(swept) > 0 {
		<-swept
	}
	var back time.Time
	require.NoError(t, direct.QueryRow(ctx, `SELECT now()`).Scan(&back))
	require.Eventually(t, func() bool {
		var landed bool
		err := direct.QueryRow(ctx, `SELECT heartbeat_at > $2 FROM vigil_replicas WHERE id = $1`, b.ID(), back).Scan(&landed)
		return err == nil && landed
	}, 20*time.Second, 5*time.Millisecond, "b is back")
	require.Equal(t, record.HoldPending, s.get("h1").Status, "b's first beats after the outage judge nobody")
	run(t, a) // a is back too, a moment later

	next(swept) // b judges again, DeadAfter after it came back
	require.Equal(t, record.HoldPending, s.get("h1").Status, "a came back in time: its hold keeps waiting")
	s.mu.Lock()
	require.Zero(t, s.resolve)
	s.mu.Unlock()
}
