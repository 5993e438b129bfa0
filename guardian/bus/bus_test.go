package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/bus"
	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &pg)) }

// recorder collects what a subscriber receives, in order.
type recorder struct {
	mu    sync.Mutex
	seqs  []int64
	steps []*record.StepRecord
	got   chan int64
}

func newRecorder() *recorder { return &recorder{got: make(chan int64, 100000)} }

func (r *recorder) Publish(ev record.Event) {
	r.mu.Lock()
	r.seqs = append(r.seqs, ev.Seq)
	if ev.Type == record.EventStep {
		rec := new(record.StepRecord)
		if json.Unmarshal(ev.Payload, rec) == nil {
			r.steps = append(r.steps, rec)
		}
	}
	r.mu.Unlock()
	r.got <- ev.Seq
}

func (r *recorder) PublishStep(rec *record.StepRecord) {
	r.mu.Lock()
	r.seqs = append(r.seqs, rec.Seq)
	r.steps = append(r.steps, rec)
	r.mu.Unlock()
	r.got <- rec.Seq
}

// waitFor reads deliveries until seq arrives.
func (r *recorder) waitFor(t *testing.T, seq int64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-r.got:
			if s >= seq {
				return
			}
		case <-deadline:
			t.Fatalf("seq %d not delivered", seq)
		}
	}
}

func TestLocalDeliversSynchronously(t *testing.T) {
	b := bus.NewLocal()
	r1, r2 := newRecorder(), newRecorder()
	b.Subscribe(r1)
	b.Subscribe(r2)
	require.False(t, b.Shared())
	b.Publish(record.Event{Seq: 2, Type: record.EventAudit})
	b.PublishStep(&record.StepRecord{Seq: 3})
	// No goroutine in between: both have it when Publish returns.
	require.Equal(t, []int64{2, 3}, r1.seqs)
	require.Equal(t, []int64{2, 3}, r2.seqs)
}

// logTable is a tiny event log in PostgreSQL with the backend's notification contract:
// every transaction that appends events notifies vigil_events with its highest seq.
type logTable struct{ pool *pgxpool.Pool }

func newLog(t *testing.T) *logTable {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.Need(t, pg))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE TABLE ev (seq bigint PRIMARY KEY, type text NOT NULL, session_id text NOT NULL DEFAULT '', payload jsonb NOT NULL)`)
	require.NoError(t, err)
	return &logTable{pool: pool}
}

// append commits events with the given seqs in one transaction and notifies.
func (l *logTable) append(t *testing.T, typ string, seqs ...int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := l.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var top int64
	for _, s := range seqs {
		payload := `{"n":1}`
		if typ == record.EventStep {
			payload = fmt.Sprintf(`{"seq":%d,"sessionId":"s1","method":"steps/toolCall","kind":"toolCall","decision":"allow","receivedAt":"2026-01-01T00:00:00Z","request":null,"response":null,"matchedRules":[],"latencyMicros":1,"text":"t%d"}`, s, s)
		}
		_, err := tx.Exec(ctx, `INSERT INTO ev (seq, type, payload) VALUES ($1, $2, $3)`, s, typ, payload)
		require.NoError(t, err)
		top = max(top, s)
	}
	_, err = tx.Exec(ctx, `SELECT pg_notify('vigil_events', $1)`, fmt.Sprint(top))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

func (l *logTable) EventsPage(ctx context.Context, after int64, p record.EventPage) ([]record.Event, error) {
	rows, err := l.pool.Query(ctx, `SELECT seq, type, session_id, payload FROM ev WHERE seq > $1 ORDER BY seq LIMIT $2`, after, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []record.Event
	for rows.Next() {
		var ev record.Event
		var payload []byte
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.SessionID, &payload); err != nil {
			return nil, err
		}
		ev.Payload = json.RawMessage(payload)
		out = append(out, ev)
	}
	return out, rows.Err()
}

func startBus(t *testing.T, l *logTable, opts bus.PostgresOptions, subs ...bus.Subscriber) *bus.Postgres {
	t.Helper()
	opts.Pool, opts.Source = l.pool, l
	b := bus.NewPostgres(opts)
	for _, s := range subs {
		b.Subscribe(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, b.Start(ctx))
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

func TestPostgresStartsAtTheHeadAndDeliversInOrderWithGaps(t *testing.T) {
	l := newLog(t)
	l.append(t, record.EventAudit, 1, 2)
	r := newRecorder()
	// A long poll: deliveries below must come from notifications.
	b := startBus(t, l, bus.PostgresOptions{Poll: time.Minute}, r)
	require.True(t, b.Shared())
	require.EqualValues(t, 2, b.Cursor())
	l.append(t, record.EventAudit, 3, 7)
	l.append(t, record.EventStep, 8)
	l.append(t, record.EventAudit, 12)
	r.waitFor(t, 12)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Equal(t, []int64{3, 7, 8, 12}, r.seqs)
	require.Len(t, r.steps, 1)
	require.Equal(t, "t8", r.steps[0].Text, "a step event carries its record")
	require.Equal(t, "s1", r.steps[0].SessionID)
}

func TestPostgresManyWritersEveryEventOnceInOrder(t *testing.T) {
	l := newLog(t)
	r := newRecorder()
	startBus(t, l, bus.PostgresOptions{Poll: time.Minute, PageEvents: 7}, r)
	// Three writers (replicas) commit interleaved, each in seq order of its own commits
	// (the backend's guarantee: seqs increase in commit order).
	var mu sync.Mutex
	next := int64(0)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for range 30 {
				mu.Lock()
				next += 2
				s := next
				l.append(t, record.EventAudit, s-1, s)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.waitFor(t, 180)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.seqs, 180)
	for i, s := range r.seqs {
		require.EqualValues(t, i+1, s)
	}
}

func TestPostgresResumesAfterALostConnection(t *testing.T) {
	l := newLog(t)
	r := newRecorder()
	b := startBus(t, l, bus.PostgresOptions{Poll: time.Minute, Retry: 10 * time.Millisecond}, r)
	l.append(t, record.EventAudit, 1)
	r.waitFor(t, 1)
	ctx := context.Background()
	// The server ends the listening session: what is committed meanwhile (no notification
	// reaches this bus) must still arrive once it is back.
	var n int
	// This test's database only: another test's listener may still be on its way out.
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&n))
	require.Equal(t, 1, n)
	l.append(t, record.EventAudit, 2, 3)
	l.append(t, record.EventAudit, 4)
	r.waitFor(t, 4)
	require.Eventually(t, func() bool { return b.Stats().Reconnects >= 1 }, 10*time.Second, 10*time.Millisecond)
	l.append(t, record.EventAudit, 5)
	r.waitFor(t, 5)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Equal(t, []int64{1, 2, 3, 4, 5}, r.seqs)
}

func TestPostgresPollCatchesUpWithoutNotification(t *testing.T) {
	l := newLog(t)
	r := newRecorder()
	b := startBus(t, l, bus.PostgresOptions{Poll: 5 * time.Millisecond}, r)
	_, err := l.pool.Exec(context.Background(), `INSERT INTO ev (seq, type, payload) VALUES (1, 'audit', '{}')`)
	require.NoError(t, err)
	r.waitFor(t, 1)
	// Waits that end by the poll interval keep the listening connection: notifications
	// still arrive on it, and it was never replaced.
	require.Eventually(t, func() bool { return b.Stats().Polls >= 5 }, 10*time.Second, time.Millisecond)
	l.append(t, record.EventAudit, 2)
	r.waitFor(t, 2)
	require.Zero(t, b.Stats().Reconnects)
}
