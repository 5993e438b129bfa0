// Package cluster keeps the registry of guardian replicas sharing one PostgreSQL database:
// which replicas are alive (a heartbeat each), which replica's agent waits on each pending
// hold, and what happens to the holds of a replica that stopped without ending them (a
// crash, SIGKILL, a lost machine): a surviving replica ends them as interrupted once the
// dead one's heartbeats stop, never approving them. It also carries an operator's decision
// to the replica whose agent waits on the hold (forward.go), so that the decision is made
// where the step and its matched modifications are.
//
// Its tables (vigil_replicas, vigil_replica_holds, vigil_hold_decisions) are its own,
// created on first use; the storage backend knows nothing of them. Times are the database
// server's (now()), so the replicas' clocks need not agree.
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

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
)

// HoldStore is what the sweep needs of the storage backend.
type HoldStore interface {
	ListHolds(ctx context.Context, status string, limit int) ([]record.Hold, error)
	ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *record.AuditEntry) (record.Hold, []record.Event, error)
	AppendAudit(ctx context.Context, e *record.AuditEntry) (record.Event, error)
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
	// at least 3 heartbeats). A replica also judges others only once its own heartbeats
	// have succeeded for DeadAfter without a break.
	DeadAfter time.Duration
	// ForwardWait is how long a decision forwarded to the replica whose agent waits on the
	// hold may wait for that replica to take it (3 heartbeats, at least 2s); a replica
	// that does not is reported unavailable and nothing is decided.
	ForwardWait time.Duration
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
	// beating is held by a heartbeat from its check of left to its commit, and by Leave
	// while it sets left: no heartbeat that began before Leave lands after its DELETE.
	beating sync.Mutex
	// interrupted, set by OnInterrupted before Run, is given each hold a sweep ends.
	interrupted func(ctx context.Context, h record.Hold)
	// serve decides what other replicas forward here (ServeForwarded); waiting are the
	// decisions this replica forwarded, by request id, woken when their answer is stored.
	serve   func(ctx context.Context, holdID string, decision []byte) []byte
	waiting map[string]chan struct{}
	// claim wakes the loop that takes the decisions forwarded here.
	claim chan struct{}

	// health is read and written by Run's goroutine only.
	health health
	// now is the local clock of the health streak (time.Now; tests replace it).
	now func() time.Time
	// afterBeat and afterSweep, when set (tests), are called after each heartbeat and
	// each sweep Run makes.
	afterBeat  func(err error)
	afterSweep func()
}

// OnInterrupted sets f to be called with each hold a sweep ends whose step was never
// stored (a held step is stored once decided, and its replica died first), so that the
// step can be stored from the hold. Call it before Run.
func (r *Registry) OnInterrupted(f func(ctx context.Context, h record.Hold)) {
	r.interrupted = f
}

// opTimeout bounds one statement of the registry made for a caller (owning a hold,
// forwarding a decision).
const opTimeout = 5 * time.Second

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
CREATE TABLE IF NOT EXISTS vigil_hold_decisions (
	id         text PRIMARY KEY,
	hold_id    text NOT NULL,
	replica_id text NOT NULL,
	request    text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	expires_at timestamptz NOT NULL,
	claimed_at timestamptz,
	reply      text
);
CREATE INDEX IF NOT EXISTS vigil_hold_decisions_open ON vigil_hold_decisions (replica_id) WHERE claimed_at IS NULL;
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
	if opts.ForwardWait <= 0 {
		opts.ForwardWait = max(3*opts.Heartbeat, 2*time.Second)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Registry{opts: opts, id: "r_" + strings.ToLower(rand.Text()[:10]),
		waiting: map[string]chan struct{}{}, claim: make(chan struct{}, 1), now: time.Now}
	r.health = health{need: opts.DeadAfter, maxGap: max(3*opts.Heartbeat, opts.DeadAfter/2)}
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

// Own records this replica as the owner of a hold about to be stored. It also registers
// the replica again should a survivor have removed it during a stall, so that no hold row
// ever names a replica the sweep cannot find.
func (r *Registry) Own(ctx context.Context, holdID string) error {
	// The hold's agent waits on this: a database that stopped answering must fail the
	// hold (its step is denied) rather than keep the agent.
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := r.opts.Pool.Exec(ctx, `WITH reg AS (INSERT INTO vigil_replicas (id, addr) VALUES ($2, $3)
			ON CONFLICT (id) DO UPDATE SET heartbeat_at = now())
		INSERT INTO vigil_replica_holds (hold_id, replica_id) VALUES ($1, $2)`, holdID, r.id, r.opts.Addr); err != nil {
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

// Run beats every Heartbeat until ctx ends, takes the decisions other replicas forward
// here, and sweeps the replicas that stopped, once this one has seen the database for
// DeadAfter without a break.
func (r *Registry) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { r.listen(ctx) })
	wg.Go(func() { r.serveForwarded(ctx) })

	t := time.NewTicker(r.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A beat that hangs (a stalled connection) is a failed beat, not a long one.
		bctx, bcancel := context.WithTimeout(ctx, r.opts.DeadAfter/2)
		err := r.beat(bctx)
		bcancel()
		if r.afterBeat != nil {
			r.afterBeat(err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if r.health.fail() {
				r.log.Warn("heartbeat failed; other replicas are not judged until the database has been reachable for the dead-after time again",
					"err", err, "deadAfter", r.opts.DeadAfter)
			} else {
				r.log.Warn("heartbeat failed", "err", err)
			}
			continue
		}
		r.wakeClaim() // a safety net for a notification lost with its connection
		if !r.health.ok(r.now()) {
			// Too soon after a start or an outage: a replica silent for DeadAfter may only
			// have lost the database as this one did, and be coming back now.
			continue
		}
		// Bounded below DeadAfter: beats wait for it, and a replica that stops beating
		// for that long is taken for dead. What a cut-short sweep ended stays ended; the
		// rest is found again by the next.
		sctx, scancel := context.WithTimeout(ctx, r.opts.DeadAfter/2)
		err = r.Sweep(sctx)
		scancel()
		if err != nil && ctx.Err() == nil {
			r.log.Warn("sweep of stopped replicas failed", "err", err)
		}
		if r.afterSweep != nil {
			r.afterSweep()
		}
	}
}

// health is the streak of this replica's successful heartbeats. A replica whose last
// heartbeat is older than DeadAfter may have stopped, or may have lost the database just
// as this replica did (an outage of PostgreSQL itself, a network partition): only a
// replica that has reached the database itself for DeadAfter without a break may tell
// the two apart, since the other then had that long to beat again.
type health struct {
	need   time.Duration // DeadAfter
	maxGap time.Duration // a longer wait between two successes breaks the streak
	since  time.Time     // start of the streak; zero when broken
	last   time.Time     // the streak's latest success
}

// ok records a successful heartbeat at now and reports whether the streak is long enough
// to judge other replicas.
func (h *health) ok(now time.Time) bool {
	if h.since.IsZero() || now.Sub(h.last) > h.maxGap {
		// The first success, or one after this process stalled (a frozen VM, a beat that
		// took too long): the database may have been out meanwhile.
		h.since = now
	}
	h.last = now
	return now.Sub(h.since) >= h.need
}

// fail breaks the streak and reports whether it was running.
func (h *health) fail() bool {
	was := !h.since.IsZero()
	h.since = time.Time{}
	return was
}

// beat reports this replica alive (again, should a survivor have swept it during a long
// stall: its later holds need an owner row that counts) and deletes disowned holds.
func (r *Registry) beat(ctx context.Context) error {
	r.beating.Lock()
	defer r.beating.Unlock()
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

// Sweep ends the holds of every replica silent for DeadAfter, and the pending holds no
// replica owns that are older than DeadAfter (left by a guardian that ran before the
// registry existed). Several survivors may sweep at once: each hold is taken by one of
// them (its registry row locked), and the store's first decision wins.
//
// Run sweeps only once this replica has seen the database for DeadAfter (see health);
// Sweep itself judges at once.
func (r *Registry) Sweep(ctx context.Context) error {
	dead, err := r.deadReplicas(ctx)
	if err != nil {
		return err
	}
	for _, d := range dead {
		if err := r.sweepReplica(ctx, d); err != nil {
			return err
		}
	}
	// Decisions forwarded long ago whose sender never came back for the answer.
	if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_hold_decisions WHERE created_at < now() - interval '10 minutes'`); err != nil {
		return fmt.Errorf("cluster: forget old forwarded decisions: %w", err)
	}
	return r.sweepUnowned(ctx)
}

type replica struct {
	id, addr  string
	heartbeat time.Time
	silent    time.Duration
}

func (d replica) name() string {
	if d.addr == "" {
		return "replica " + d.id
	}
	return fmt.Sprintf("replica %s (%s)", d.id, d.addr)
}

func (r *Registry) deadReplicas(ctx context.Context) ([]replica, error) {
	rows, err := r.opts.Pool.Query(ctx, `SELECT id, addr, heartbeat_at, extract(epoch FROM now() - heartbeat_at)::float8
		FROM vigil_replicas WHERE id <> $1 AND heartbeat_at < now() - $2::interval`, r.id, r.opts.DeadAfter.String())
	if err != nil {
		return nil, fmt.Errorf("cluster: stopped replicas: %w", err)
	}
	defer rows.Close()
	var out []replica
	for rows.Next() {
		var (
			d       replica
			seconds float64
		)
		if err := rows.Scan(&d.id, &d.addr, &d.heartbeat, &seconds); err != nil {
			return nil, fmt.Errorf("cluster: stopped replicas: %w", err)
		}
		d.silent = time.Duration(seconds * float64(time.Second)).Round(time.Millisecond)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cluster: stopped replicas: %w", err)
	}
	return out, nil
}

// sweepReplica ends the holds of the silent replica d and then forgets it. Its registry
// rows stay locked while their holds are ended, so a survivor sweeping at once skips them
// (each hold's step is stored once), and come back should this sweep fail, for the next.
func (r *Registry) sweepReplica(ctx context.Context, d replica) error {
	tx, err := r.opts.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("cluster: sweep %s: %w", d.id, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `SELECT hold_id FROM vigil_replica_holds WHERE replica_id = $1
		ORDER BY hold_id FOR UPDATE SKIP LOCKED`, d.id)
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
	ended := 0
	for _, id := range ids {
		done, err := r.endHold(ctx, id, d)
		if err != nil {
			return err
		}
		if done {
			ended++
		}
	}
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM vigil_replica_holds WHERE hold_id = ANY($1)`, ids); err != nil {
			return fmt.Errorf("cluster: forget holds of %s: %w", d.id, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("cluster: forget holds of %s: %w", d.id, err)
	}
	// Forgotten once none of its holds is left (another survivor may still be ending
	// some), so a failed sweep finds the replica again.
	if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_replicas WHERE id = $1 AND heartbeat_at < now() - $2::interval
		AND NOT EXISTS (SELECT 1 FROM vigil_replica_holds WHERE replica_id = $1)`,
		d.id, r.opts.DeadAfter.String()); err != nil {
		return fmt.Errorf("cluster: forget %s: %w", d.id, err)
	}
	if ended > 0 {
		r.log.Warn("replica silent past the dead-after time; its holds are ended as interrupted",
			"silent", d.id, "addr", d.addr, "for", d.silent, "holds", ended)
	} else if len(ids) == 0 {
		r.log.Info("replica silent past the dead-after time; it had no pending holds", "silent", d.id, "addr", d.addr, "for", d.silent)
	}
	return nil
}

// endHold ends one hold of the silent replica d, whose agent's connection died with it (or
// waits on a replica that can no longer store its answer). It reports whether it ended
// anything.
//
// A pending hold becomes interrupted with decision deny: a step nobody reviewed is never
// let through. A hold already decided (an operator, its timeout) whose step was never
// stored was not answered either: a replica stores a held step before it answers, and d
// stopped in between. Its decision stays as recorded; an audit entry says the agent never
// got it, and its step is stored as denied, like the others.
func (r *Registry) endHold(ctx context.Context, id string, d replica) (bool, error) {
	note := fmt.Sprintf("interrupted: %s stopped or lost the database (no heartbeat for %s)", d.name(), d.silent)
	detail := map[string]string{"reason": "no heartbeat", "replica": d.id, "addr": d.addr,
		"lastHeartbeat": d.heartbeat.UTC().Format(time.RFC3339Nano), "silentFor": d.silent.String(), "sweptBy": r.id}
	h, err := r.interrupt(ctx, id, note, detail)
	switch {
	case errors.Is(err, record.ErrNotFound):
		return false, nil // owned but never stored: its replica died between the two
	case errors.Is(err, record.ErrHoldDecided):
		if h.Seq != 0 {
			return false, nil // decided, answered and stored
		}
		if h.Status != record.HoldInterrupted {
			if err := r.auditUnanswered(ctx, h, d, detail); err != nil {
				return false, err
			}
		}
		// An interrupted one was ended by a sweep that failed before storing its step.
	case err != nil:
		return false, err
	}
	if r.interrupted != nil && h.Seq == 0 {
		r.interrupted(ctx, h)
	}
	return true, nil
}

// auditUnanswered records that a decided hold's agent never received the decision.
func (r *Registry) auditUnanswered(ctx context.Context, h record.Hold, d replica, detail map[string]string) error {
	decided := h.Status
	if h.DecidedBy != "" {
		decided += " by " + h.DecidedBy
	}
	detail["reason"] = "no heartbeat before the answer"
	detail["status"], detail["decision"] = h.Status, h.Decision
	det, _ := json.Marshal(detail) // strings always marshal
	note := fmt.Sprintf("interrupted: %s stopped or lost the database after the hold was %s, before its agent was answered (no heartbeat for %s); the agent got no answer and the step is stored as denied",
		d.name(), decided, d.silent)
	a := &record.AuditEntry{Type: record.AuditHoldInterrupted, SessionID: h.SessionID, HoldID: h.ID,
		RuleID: h.RuleID, Decision: "deny", Note: note, Detail: det}
	ev, err := r.opts.Holds.AppendAudit(ctx, a)
	if err != nil {
		return fmt.Errorf("cluster: audit hold %s: %w", h.ID, err)
	}
	r.log.Warn("hold decided but never answered: its replica stopped first", "hold", h.ID,
		"session", h.SessionID, "status", h.Status, "replica", d.id)
	if r.opts.Publish != nil {
		r.opts.Publish(ev)
	}
	return nil
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
	if err := rows.Err(); err != nil {
		// Not "no owner": a failed read must not end holds whose owners are alive.
		return fmt.Errorf("cluster: hold owners: %w", err)
	}
	for _, id := range old {
		if owned[id] {
			continue
		}
		h, err := r.interrupt(ctx, id, "interrupted: no running replica owns it",
			map[string]string{"reason": "no owner", "sweptBy": r.id})
		switch {
		case errors.Is(err, record.ErrHoldDecided), errors.Is(err, record.ErrNotFound):
			continue // decided meanwhile
		case err != nil:
			return err
		}
		if r.interrupted != nil && h.Seq == 0 {
			r.interrupted(ctx, h)
		}
	}
	return nil
}

// interrupt ends one pending hold as interrupted. The agent got no answer; the stored
// decision is a deny (a step nobody reviewed is never let through) and the note and audit
// entry say what happened. A hold no longer pending is returned with an error wrapping
// record.ErrHoldDecided.
func (r *Registry) interrupt(ctx context.Context, id, note string, detail map[string]string) (record.Hold, error) {
	d, _ := json.Marshal(detail) // strings always marshal
	h, events, err := r.opts.Holds.ResolveHold(ctx, id, record.HoldResolution{
		Status: record.HoldInterrupted, Decision: "deny", DecidedAt: time.Now().UTC(), Note: note,
	}, &record.AuditEntry{Type: record.AuditHoldInterrupted, Note: note, Detail: d})
	switch {
	case errors.Is(err, record.ErrHoldDecided), errors.Is(err, record.ErrNotFound):
		return h, err
	case err != nil:
		return record.Hold{}, fmt.Errorf("cluster: end hold %s: %w", id, err)
	}
	r.log.Warn("hold ended as interrupted", "hold", id, "session", h.SessionID, "note", note)
	if r.opts.Publish != nil {
		for _, ev := range events {
			r.opts.Publish(ev)
		}
	}
	return h, nil
}

// Leave removes this replica from the registry after a graceful shutdown, once its own
// holds are ended (holds.Manager.Shutdown), so no survivor sweeps it.
func (r *Registry) Leave(ctx context.Context) error {
	r.beating.Lock() // waits for a heartbeat under way (bounded by DeadAfter/2)
	r.mu.Lock()
	r.left = true
	r.mu.Unlock()
	r.beating.Unlock()
	if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_replica_holds WHERE replica_id = $1`, r.id); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	if _, err := r.opts.Pool.Exec(ctx, `DELETE FROM vigil_replicas WHERE id = $1`, r.id); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	r.log.Info("replica left")
	return nil
}

var _ holds.Forwarder = (*Registry)(nil)
