// Package cluster keeps the registry of guardian replicas sharing one PostgreSQL database:
// which replicas are alive (a heartbeat each), which replica's agent waits on each pending
// hold, and what happens to the holds of a replica that stopped without ending them (a
// crash, SIGKILL, a lost machine): a surviving replica ends them as interrupted once the
// dead one's heartbeats stop, never approving them.
//
// Its tables (vigil_replicas, vigil_replica_holds) are its own, created on first use; the
// storage backend knows nothing of them. Times are the database server's (now()), so the
// replicas' clocks need not agree.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vigil-guardian/vigil/record"
)

// HoldStore is what the sweep needs of the storage backend.
type HoldStore interface {
	ListHolds(ctx context.Context, status string, limit int) ([]record.Hold, error)
	ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *record.AuditEntry) (record.Hold, []record.Event, error)
}

// Options configure a Registry.
type Options struct {
	Pool  *pgxpool.Pool
	Holds HoldStore
	// Addr is this replica's address, shown in logs and audit entries of its holds.
	Addr string
	// Heartbeat is how often this replica reports itself alive and sweeps (1s).
	Heartbeat time.Duration
	// DeadAfter is how long a replica may stay silent before its holds are ended (10s;
	// at least 3 heartbeats).
	DeadAfter time.Duration
	// Publish passes the events of holds ended by a sweep to this replica's local
	// consumers (metrics, webhooks); nil drops them. Live clients get them from the bus.
	Publish func(record.Event)
	Logger  *slog.Logger
}

// Registry is this replica's entry in the registry. Create it with Join; Run keeps it
// alive; Leave removes it on a graceful shutdown.
type Registry struct {
	opts Options
	id   string
	log  *slog.Logger

	// disowned are hold ids to delete from vigil_replica_holds on the next beat: Disown
	// must not block, and a batch costs one statement.
	mu       sync.Mutex
	disowned []string
	// left is set by Leave: no more heartbeats, which would register the replica again.
	left bool
	// interrupted, set by OnInterrupted before Run, is given each hold a sweep ends.
	interrupted func(ctx context.Context, h record.Hold)
}

// OnInterrupted sets f to be called with each hold a sweep ends whose step was never
// stored (a held step is stored once decided, and its replica died first), so that the
// step can be stored from the hold. Call it before Run.
func (r *Registry) OnInterrupted(f func(ctx context.Context, h record.Hold)) {
	r.interrupted = f
}

// schemaLock serialises the creation of the tables by replicas starting together.
const schemaLock = 0x76696769 // "vigi"

const schema = `
CREATE TABLE IF NOT EXISTS vigil_replicas (
	id           text PRIMARY KEY,
	addr         text NOT NULL DEFAULT '',
	started_at   timestamptz NOT NULL DEFAULT now(),
	heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS vigil_replica_holds (
	hold_id    text PRIMARY KEY,
	replica_id text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS vigil_replica_holds_replica ON vigil_replica_holds (replica_id);
`

// Join creates the tables if needed and registers this replica under a new id.
func Join(ctx context.Context, opts Options) (*Registry, error) {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = time.Second
	}
	if opts.DeadAfter <= 0 {
		opts.DeadAfter = 10 * time.Second
	}
	opts.DeadAfter = max(opts.DeadAfter, 3*opts.Heartbeat)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Registry{opts: opts, id: "r_" + strings.ToLower(rand.Text()[:10])}
	r.log = opts.Logger.With("component", "cluster", "replica", r.id)
	tx, err := opts.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
		return nil, fmt.Errorf("cluster: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("cluster: create tables: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO vigil_replicas (id, addr) VALUES ($1, $2)`, r.id, opts.Addr); err != nil {
		return nil, fmt.Errorf("cluster: register: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("cluster: register: %w", err)
	}
	r.log.Info("replica joined", "addr", opts.Addr)
	return r, nil
}

// ID is this replica's id.
func (r *Registry) ID() string { return r.id }

// Own records this replica as the owner of a hold about to be stored.
func (r *Registry) Own(ctx context.Context, holdID string) error {
	if _, err := r.opts.Pool.Exec(ctx, `INSERT INTO vigil_replica_holds (hold_id, replica_id) VALUES ($1, $2)`, holdID, r.id); err != nil {
		return fmt.Errorf("cluster: own hold %s: %w", holdID, err)
	}
	return nil
}

// Disown forgets a hold that ended here; the row goes with the next heartbeat.
func (r *Registry) Disown(holdID string) {
	r.mu.Lock()
	r.disowned = append(r.disowned, holdID)
	r.mu.Unlock()
}

// Run beats and sweeps every Heartbeat until ctx ends.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.beat(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("heartbeat failed", "err", err)
			continue
		}
		if err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("sweep of stopped replicas failed", "err", err)
		}
	}
}

// beat reports this replica alive (again, should a survivor have swept it during a long
// stall: its later holds need an owner row that counts) and deletes disowned holds.
func (r *Registry) beat(ctx context.Context) error {
	r.mu.Lock()
	left := r.left
	r.mu.Unlock()
	if left {
		return nil
	}
	if _, err := r.opts.Pool.Exec(ctx, `INSERT INTO vigil_replicas (id, addr) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`, r.id, r.opts.Addr); err != nil {
		return fmt.Errorf("cluster: heartbeat: %w", err)
	}
	r.mu.Lock()
	ids := r.disowned
	r.disowned = nil
	r.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_replica_holds WHERE hold_id = ANY($1)`, ids); err != nil {
		r.mu.Lock()
		r.disowned = append(r.disowned, ids...)
		r.mu.Unlock()
		return fmt.Errorf("cluster: forget ended holds: %w", err)
	}
	return nil
}

// Sweep ends the pending holds of every replica silent for DeadAfter, and the pending
// holds no replica owns that are older than DeadAfter (left by a guardian that ran before
// the registry existed). Several survivors may sweep at once: the store's first decision
// wins, and the others' attempts conflict harmlessly.
func (r *Registry) Sweep(ctx context.Context) error {
	dead, err := r.deadReplicas(ctx)
	if err != nil {
		return err
	}
	for _, d := range dead {
		rows, err := r.opts.Pool.Query(ctx, `SELECT hold_id FROM vigil_replica_holds WHERE replica_id = $1`, d.id)
		if err != nil {
			return fmt.Errorf("cluster: holds of %s: %w", d.id, err)
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("cluster: holds of %s: %w", d.id, err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("cluster: holds of %s: %w", d.id, err)
		}
		for _, id := range ids {
			note := fmt.Sprintf("interrupted: replica %s stopped", d.id)
			if d.addr != "" {
				note = fmt.Sprintf("interrupted: replica %s (%s) stopped", d.id, d.addr)
			}
			if err := r.interrupt(ctx, id, note, map[string]string{
				"reason": "replica stopped", "replica": d.id, "addr": d.addr,
				"lastHeartbeat": d.heartbeat.UTC().Format(time.RFC3339Nano), "sweptBy": r.id}); err != nil {
				return err
			}
		}
		// Removed once its holds are ended, so a failed sweep is tried again.
		if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_replica_holds WHERE replica_id = $1`, d.id); err != nil {
			return fmt.Errorf("cluster: forget holds of %s: %w", d.id, err)
		}
		if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_replicas WHERE id = $1 AND heartbeat_at < now() - $2::interval`,
			d.id, r.opts.DeadAfter.String()); err != nil {
			return fmt.Errorf("cluster: forget %s: %w", d.id, err)
		}
		if len(ids) > 0 {
			r.log.Warn("replica stopped without ending its holds; they are ended as interrupted",
				"stopped", d.id, "addr", d.addr, "holds", len(ids))
		} else {
			r.log.Info("replica stopped; it had no pending holds", "stopped", d.id, "addr", d.addr)
		}
	}
	return r.sweepUnowned(ctx)
}

type replica struct {
	id, addr  string
	heartbeat time.Time
}

func (r *Registry) deadReplicas(ctx context.Context) ([]replica, error) {
	rows, err := r.opts.Pool.Query(ctx, `SELECT id, addr, heartbeat_at FROM vigil_replicas
		WHERE id <> $1 AND heartbeat_at < now() - $2::interval`, r.id, r.opts.DeadAfter.String())
	if err != nil {
		return nil, fmt.Errorf("cluster: stopped replicas: %w", err)
	}
	defer rows.Close()
	var out []replica
	for rows.Next() {
		var d replica
		if err := rows.Scan(&d.id, &d.addr, &d.heartbeat); err != nil {
			return nil, fmt.Errorf("cluster: stopped replicas: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cluster: stopped replicas: %w", err)
	}
	return out, nil
}

// maxUnowned bounds the pending holds one sweep looks at for a missing owner.
const maxUnowned = 1000

func (r *Registry) sweepUnowned(ctx context.Context) error {
	pending, err := r.opts.Holds.ListHolds(ctx, record.HoldPending, maxUnowned)
	if err != nil {
		return fmt.Errorf("cluster: pending holds: %w", err)
	}
	var cutoff time.Time
	if err := r.opts.Pool.QueryRow(ctx, `SELECT now() - $1::interval`, r.opts.DeadAfter.String()).Scan(&cutoff); err != nil {
		return fmt.Errorf("cluster: clock: %w", err)
	}
	var old []string
	for _, h := range pending {
		if h.CreatedAt.Before(cutoff) {
			old = append(old, h.ID)
		}
	}
	if len(old) == 0 {
		return nil
	}
	rows, err := r.opts.Pool.Query(ctx, `SELECT hold_id FROM vigil_replica_holds WHERE hold_id = ANY($1)`, old)
	if err != nil {
		return fmt.Errorf("cluster: hold owners: %w", err)
	}
	owned := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("cluster: hold owners: %w", err)
		}
		owned[id] = true
	}
	rows.Close()
	for _, id := range old {
		if owned[id] {
			continue
		}
		if err := r.interrupt(ctx, id, "interrupted: no running replica owns it",
			map[string]string{"reason": "no owner", "sweptBy": r.id}); err != nil {
			return err
		}
	}
	return nil
}

// interrupt ends one hold whose agent's connection died with its replica. The agent got no
// answer; the stored decision is a deny (a step nobody reviewed is never let through) and
// the note and audit entry say what happened.
func (r *Registry) interrupt(ctx context.Context, id, note string, detail map[string]string) error {
	d, _ := json.Marshal(detail) // strings always marshal
	h, events, err := r.opts.Holds.ResolveHold(ctx, id, record.HoldResolution{
		Status: record.HoldInterrupted, Decision: "deny", DecidedAt: time.Now().UTC(), Note: note,
	}, &record.AuditEntry{Type: record.AuditHoldInterrupted, Note: note, Detail: d})
	switch {
	case errors.Is(err, record.ErrHoldDecided), errors.Is(err, record.ErrNotFound):
		return nil // decided meanwhile, or owned but never stored
	case err != nil:
		return fmt.Errorf("cluster: end hold %s: %w", id, err)
	}
	r.log.Warn("hold ended as interrupted", "hold", id, "session", h.SessionID, "note", note)
	if r.opts.Publish != nil {
		for _, ev := range events {
			r.opts.Publish(ev)
		}
	}
	if r.interrupted != nil && h.Seq == 0 {
		r.interrupted(ctx, h)
	}
	return nil
}

// Leave removes this replica from the registry after a graceful shutdown, once its own
// holds are ended (holds.Manager.Shutdown), so no survivor sweeps it.
func (r *Registry) Leave(ctx context.Context) error {
	r.mu.Lock()
	r.left = true
	r.mu.Unlock()
	if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_replica_holds WHERE replica_id = $1`, r.id); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_replicas WHERE id = $1`, r.id); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	r.log.Info("replica left")
	return nil
}
