package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Source is the event log: the storage backend.
type Source interface {
	EventsPage(ctx context.Context, after int64, p record.EventPage) ([]record.Event, error)
}

// PostgresOptions configure a Postgres bus.
type PostgresOptions struct {
	// Pool gives the bus its listening connection (taken out of the pool for good).
	Pool *pgxpool.Pool
	// Source is read for the events after the cursor.
	Source Source
	// Poll is how often the log is read without a notification, a safety net for a
	// notification lost with its connection (1s).
	Poll time.Duration
	// PageEvents and PageBytes bound one read of the log, and so the bus's memory (500
	// events, 4 MiB: a page always holds at least one event, whatever its size).
	PageEvents, PageBytes int
	// Retry is the first wait before reconnecting; it doubles up to 5s (100ms).
	Retry  time.Duration
	Logger *slog.Logger
}

// Postgres is the bus of replicas sharing one PostgreSQL database. Create it with
// NewPostgres, Subscribe, Start, then Run.
type Postgres struct {
	opts PostgresOptions
	log  *slog.Logger

	mu   sync.Mutex
	subs []Subscriber

	// cursor is the highest seq delivered (or known to precede every event to deliver).
	cursor     atomic.Int64
	started    atomic.Bool
	delivered  atomic.Int64
	reconnects atomic.Int64
	polls      atomic.Int64
	// conn is the LISTEN connection Start opened, handed to Run.
	conn *pgx.Conn
}

var _ Bus = (*Postgres)(nil)

// NewPostgres returns a bus reading opts.Source, woken by notifications on storage.NotifyChannel.
func NewPostgres(opts PostgresOptions) *Postgres {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.PageEvents <= 0 {
		opts.PageEvents = 500
	}
	if opts.PageBytes <= 0 {
		opts.PageBytes = 4 << 20
	}
	if opts.Retry <= 0 {
		opts.Retry = 100 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Postgres{opts: opts, log: opts.Logger.With("component", "bus")}
}

// Subscribe implements Bus.
func (b *Postgres) Subscribe(s Subscriber) {
	b.mu.Lock()
	b.subs = append(b.subs, s)
	b.mu.Unlock()
}

// Shared implements Bus.
func (b *Postgres) Shared() bool { return true }

// Publish implements Subscriber. The event reaches the subscribers from the log, in seq
// order with every other replica's, so there is nothing to do here.
func (b *Postgres) Publish(record.Event) {}

// PublishStep implements Subscriber, like Publish.
func (b *Postgres) PublishStep(*record.StepRecord) {}

// Cursor returns the highest seq delivered.
func (b *Postgres) Cursor() int64 { return b.cursor.Load() }

// Stats are the bus's counters.
type Stats struct {
	Cursor, Delivered, Reconnects int64
	// Polls counts reads of the log woken by the poll interval rather than a notification.
	Polls int64
}

// Stats returns the bus's counters.
func (b *Postgres) Stats() Stats {
	return Stats{Cursor: b.cursor.Load(), Delivered: b.delivered.Load(), Reconnects: b.reconnects.Load(),
		Polls: b.polls.Load()}
}

// Start listens on storage.NotifyChannel and sets the cursor to the newest committed seq: Run delivers
// every event committed after Start returned (and perhaps a few just before). Call it
// before loading the state the events change (rules, session controls), so no change
// falls between that load and the first event delivered.
func (b *Postgres) Start(ctx context.Context) error {
	conn, err := b.listen(ctx)
	if err != nil {
		return err
	}
	head, err := storage.NewestSeq(ctx, b.opts.Source)
	if err != nil {
		_ = conn.Close(context.Background())
		return fmt.Errorf("bus: read the newest seq: %w", err)
	}
	b.cursor.Store(head)
	b.mu.Lock()
	b.conn = conn
	b.mu.Unlock()
	b.started.Store(true)
	return nil
}

// StartAt is Start with a given cursor (tests, and a caller that knows where it stands).
func (b *Postgres) StartAt(ctx context.Context, after int64) error {
	conn, err := b.listen(ctx)
	if err != nil {
		return err
	}
	b.cursor.Store(after)
	b.mu.Lock()
	b.conn = conn
	b.mu.Unlock()
	b.started.Store(true)
	return nil
}

func (b *Postgres) listen(ctx context.Context) (*pgx.Conn, error) {
	pc, err := b.opts.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: connect: %w", err)
	}
	// A dedicated connection: a LISTEN belongs to its session, which the pool must not
	// hand to anyone else.
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+storage.NotifyChannel); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("bus: listen: %w", err)
	}
	return conn, nil
}

// Close releases the listening connection of a bus started but never run (a start that
// failed later); a running bus closes it when its context ends.
func (b *Postgres) Close() {
	b.mu.Lock()
	conn := b.conn
	b.conn = nil
	b.mu.Unlock()
	if conn != nil {
		_ = conn.Close(context.Background())
	}
}

// Run delivers events until ctx ends, reconnecting after a lost connection and reading on
// from its cursor, so no committed event is skipped. Call it once, after Start.
func (b *Postgres) Run(ctx context.Context) {
	if !b.started.Load() {
		b.log.Error("bus: Run before Start")
		return
	}
	b.mu.Lock()
	conn := b.conn
	b.conn = nil
	b.mu.Unlock()
	if conn == nil {
		return // closed
	}
	retry := b.opts.Retry
	for {
		if conn == nil {
			var err error
			if conn, err = b.listen(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				b.log.Warn("bus: reconnect failed; events wait in the database", "err", err, "retry", retry)
				select {
				case <-ctx.Done():
					return
				case <-time.After(retry):
				}
				retry = min(2*retry, 5*time.Second)
				continue
			}
			b.reconnects.Add(1)
			b.log.Info("bus: listening again", "after", b.cursor.Load())
		}
		err := b.serve(ctx, conn)
		_ = conn.Close(context.Background())
		conn = nil
		if ctx.Err() != nil {
			return
		}
		b.log.Warn("bus: connection lost; reconnecting", "err", err)
		retry = b.opts.Retry
	}
}

// serve reads what was missed, then waits for notifications (or the poll interval) and
// reads on. It returns when the connection fails or ctx ends.
func (b *Postgres) serve(ctx context.Context, conn *pgx.Conn) error {
	if err := b.catchUp(ctx); err != nil {
		return err
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, b.opts.Poll)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && conn.IsClosed():
			return fmt.Errorf("bus: wait for notification: %w", err)
		case err != nil && !errors.Is(err, context.DeadlineExceeded) && !pgconnTimeout(err):
			return fmt.Errorf("bus: wait for notification: %w", err)
		}
		if err != nil {
			b.polls.Add(1)
		}
		if err == nil && n != nil {
			// Notifications of events already read (a page often covers many) cost no read.
			if seq, perr := strconv.ParseInt(n.Payload, 10, 64); perr == nil && seq <= b.cursor.Load() {
				continue
			}
		}
		if err := b.catchUp(ctx); err != nil {
			return err
		}
	}
}

// pgconnTimeout reports a wait that ended by its deadline.
func pgconnTimeout(err error) bool {
	var to interface{ Timeout() bool }
	return errors.As(err, &to) && to.Timeout()
}

// catchUp delivers every event after the cursor, a page at a time.
func (b *Postgres) catchUp(ctx context.Context) error {
	for {
		after := b.cursor.Load()
		evs, err := b.opts.Source.EventsPage(ctx, after, record.EventPage{Limit: b.opts.PageEvents, MaxBytes: b.opts.PageBytes})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The log is read through the backend's own pool: a failure here says nothing
			// about the listening connection, so it is retried on the next wake-up.
			b.log.Warn("bus: read events", "after", after, "err", err)
			return nil
		}
		n := 0
		for _, ev := range evs {
			if ev.Seq <= after {
				continue
			}
			b.deliver(ev)
			after = ev.Seq
			b.cursor.Store(after)
			n++
		}
		if n == 0 {
			return nil
		}
	}
}

// deliver hands one event to every subscriber. Steps go as events too, their payload the
// stored record's JSON, undecoded: most subscribers need nothing of most steps (the live
// hub sends the payload as is; a session history wants only steps of sessions it holds),
// and decoding every replica's every step on every replica would cost each of them the
// JSON work of the whole cluster.
func (b *Postgres) deliver(ev record.Event) {
	b.mu.Lock()
	subs := b.subs
	b.mu.Unlock()
	b.delivered.Add(1)
	for _, s := range subs {
		s.Publish(ev)
	}
}
