package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigil-guardian/vigil/guardian/holds"
)

// An operator's decision of a hold whose agent waits on another replica is carried there
// through the database: the deciding replica inserts it into vigil_hold_decisions and
// notifies the owner, the owner takes it (claimed_at), decides it exactly as a decision of
// its own operators (its matched modifications applied, the edit checked, the decision
// stored and audited) and stores the answer, and the deciding replica reads it back. Both
// sides listen on one channel and also poll at every heartbeat, so a lost notification
// costs a heartbeat, not the decision.
//
// A decision the owner has not taken within ForwardWait is withdrawn, so it is never
// applied later: the operator is told the replica is unavailable, and nothing changed.

// notifyChannel carries "d:<replica id>" (decisions wait for that replica) and
// "r:<request id>" (that request's answer is stored).
const notifyChannel = "vigil_cluster"

// replyWait bounds how long a decision the owner took may take to be answered.
const replyWait = 30 * time.Second

// ServeForwarded sets the function that decides what other replicas forward here. Until
// it is set, this replica takes no forwarded decision (they time out as unavailable).
func (r *Registry) ServeForwarded(f func(ctx context.Context, holdID string, decision []byte) []byte) {
	r.mu.Lock()
	r.serve = f
	r.mu.Unlock()
	r.wakeClaim()
}

// Forward hands decision to the replica whose agent waits on hold holdID and returns its
// answer. It returns holds.ErrNotForwarded when no other replica owns the hold, and an
// error wrapping holds.ErrOwnerUnavailable when the owner has stopped beating or did not
// take the decision within ForwardWait (then nothing was decided).
func (r *Registry) Forward(ctx context.Context, holdID string, decision []byte) ([]byte, error) {
	var (
		owner, addr string
		silent      *float64
	)
	qctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	err := r.opts.Pool.QueryRow(qctx, `SELECT h.replica_id, coalesce(r.addr, ''),
			extract(epoch FROM now() - r.heartbeat_at)::float8
		FROM vigil_replica_holds h LEFT JOIN vigil_replicas r ON r.id = h.replica_id
		WHERE h.hold_id = $1`, holdID).Scan(&owner, &addr, &silent)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, holds.ErrNotForwarded
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: owner of hold %s: %w", holdID, err)
	}
	if owner == r.id {
		// Ended here already (its row goes with the next beat): the store has the decision.
		return nil, holds.ErrNotForwarded
	}
	name := replica{id: owner, addr: addr}.name()
	if silent == nil || *silent > r.opts.ForwardWait.Seconds() {
		// Its agent's connection most likely died with it; a decision stored now would
		// never reach the agent, so none is.
		since := "ever"
		if silent != nil {
			since = time.Duration(*silent * float64(time.Second)).Round(time.Millisecond).String()
		}
		return nil, fmt.Errorf("%w: %s has sent no heartbeat for %s (if it stopped, its holds are ended as interrupted once it has been silent for %s); nothing was decided",
			holds.ErrOwnerUnavailable, name, since, r.opts.DeadAfter)
	}

	id := "d_" + strings.ToLower(rand.Text())
	woken := make(chan struct{}, 1)
	r.mu.Lock()
	r.waiting[id] = woken
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, id)
		r.mu.Unlock()
	}()
	if _, err := r.opts.Pool.Exec(qctx, `WITH q AS (INSERT INTO vigil_hold_decisions (id, hold_id, replica_id, request, expires_at)
			VALUES ($1, $2, $3, $4, now() + $5::interval) RETURNING replica_id)
		SELECT pg_notify($6, 'd:' || replica_id) FROM q`,
		id, holdID, owner, string(decision), r.opts.ForwardWait.String(), notifyChannel); err != nil {
		return nil, fmt.Errorf("cluster: forward the decision of hold %s: %w", holdID, err)
	}

	poll := time.NewTicker(r.opts.Heartbeat)
	defer poll.Stop()
	claimBy := time.NewTimer(r.opts.ForwardWait)
	defer claimBy.Stop()
	var answerBy <-chan time.Time
	for {
		select {
		case <-woken:
		case <-poll.C:
		case <-claimBy.C:
			wctx, wcancel := context.WithTimeout(ctx, opTimeout)
			tag, err := r.opts.Pool.Exec(wctx, `DELETE FROM vigil_hold_decisions WHERE id = $1 AND claimed_at IS NULL`, id)
			wcancel()
			if err != nil {
				return nil, fmt.Errorf("cluster: withdraw the decision of hold %s: %w", holdID, err)
			}
			if tag.RowsAffected() == 1 {
				return nil, fmt.Errorf("%w: %s did not take the decision within %s; nothing was decided",
					holds.ErrOwnerUnavailable, name, r.opts.ForwardWait)
			}
			// Taken: it is being decided there.
			t := time.NewTimer(replyWait)
			defer t.Stop()
			answerBy = t.C
		case <-answerBy:
			r.forget(ctx, id)
			return nil, fmt.Errorf("cluster: %s took the decision of hold %s but did not answer within %s; the hold shows what was decided",
				name, holdID, replyWait)
		case <-ctx.Done():
			// The operator went away. Unless the owner took it already (then it is being
			// decided, as a decision made there would be), the decision is withdrawn.
			r.forget(ctx, id)
			return nil, fmt.Errorf("cluster: forward the decision of hold %s: %w", holdID, ctx.Err())
		}
		var reply string
		rctx, rcancel := context.WithTimeout(ctx, opTimeout)
		err := r.opts.Pool.QueryRow(rctx, `DELETE FROM vigil_hold_decisions WHERE id = $1 AND reply IS NOT NULL
			RETURNING reply`, id).Scan(&reply)
		rcancel()
		switch {
		case err == nil:
			return []byte(reply), nil
		case errors.Is(err, pgx.ErrNoRows):
		case ctx.Err() != nil:
			// Handled by the select.
		case rctx.Err() != nil:
			// The database is slow to answer: read again at the next wake or poll.
			r.log.Warn("reading the answer to a forwarded decision timed out", "hold", holdID, "err", err)
		default:
			return nil, fmt.Errorf("cluster: answer to the decision of hold %s: %w", holdID, err)
		}
	}
}

// forget deletes a forwarded decision this replica no longer waits for.
func (r *Registry) forget(ctx context.Context, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := r.opts.Pool.Exec(cctx, `DELETE FROM vigil_hold_decisions WHERE id = $1`, id); err != nil {
		r.log.Warn("could not delete a forwarded decision; it goes within minutes", "request", id, "err", err)
	}
}

// wakeClaim makes the serving loop look for decisions forwarded here.
func (r *Registry) wakeClaim() {
	select {
	case r.claim <- struct{}{}:
	default:
	}
}

// wakeAll wakes every decision this replica waits for, after a notification may have been
// lost.
func (r *Registry) wakeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.waiting {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// listen receives the notifications of forwarded decisions and their answers on a
// connection of its own (a LISTEN belongs to its session), reconnecting until ctx ends.
func (r *Registry) listen(ctx context.Context) {
	backoff := listenRetry(0, true)
	for {
		listened, err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = listenRetry(backoff, true)
		}
		r.log.Warn("listening for forwarded decisions failed; retrying", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = listenRetry(backoff, false)
	}
}

// listenRetry is the wait before listening again after a wait of last: 100 ms after a
// connection that listened (its loss is a new failure, not the next of a series, as the
// event bus counts it), else twice the last, at most 5 s.
func listenRetry(last time.Duration, listened bool) time.Duration {
	if listened || last <= 0 {
		return 100 * time.Millisecond
	}
	return min(2*last, 5*time.Second)
}

// listenOnce listens until the connection fails; listened reports whether LISTEN took.
func (r *Registry) listenOnce(ctx context.Context) (listened bool, _ error) {
	pc, err := r.opts.Pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("cluster: listen: %w", err)
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	lctx, cancel := context.WithTimeout(ctx, opTimeout)
	_, err = conn.Exec(lctx, "LISTEN "+notifyChannel)
	cancel()
	if err != nil {
		return false, fmt.Errorf("cluster: listen: %w", err)
	}
	// Whatever was notified while not listening is found by looking now.
	r.wakeClaim()
	r.wakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, fmt.Errorf("cluster: listen: %w", err)
		}
		switch kind, arg, _ := strings.Cut(n.Payload, ":"); kind {
		case "d":
			if arg == r.id {
				r.wakeClaim()
			}
		case "r":
			r.mu.Lock()
			ch := r.waiting[arg]
			r.mu.Unlock()
			if ch != nil {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}
}

type forwardedDecision struct {
	id, holdID string
	request    []byte
}

// serveForwarded takes the decisions forwarded here and answers each, until ctx ends.
func (r *Registry) serveForwarded(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.claim:
		}
		r.mu.Lock()
		serve := r.serve
		r.mu.Unlock()
		if serve == nil {
			continue
		}
		qs, err := r.claimForwarded(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("could not take the decisions forwarded here", "err", err)
			}
			continue
		}
		for _, q := range qs {
			wg.Go(func() { r.answer(ctx, serve, q) })
		}
	}
}

// claimForwarded takes the decisions waiting for this replica that their senders have
// not withdrawn.
func (r *Registry) claimForwarded(ctx context.Context) ([]forwardedDecision, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	rows, err := r.opts.Pool.Query(ctx, `UPDATE vigil_hold_decisions SET claimed_at = now()
		WHERE replica_id = $1 AND claimed_at IS NULL AND expires_at > now()
		RETURNING id, hold_id, request`, r.id)
	if err != nil {
		return nil, fmt.Errorf("cluster: take forwarded decisions: %w", err)
	}
	defer rows.Close()
	var out []forwardedDecision
	for rows.Next() {
		var (
			q   forwardedDecision
			req string
		)
		if err := rows.Scan(&q.id, &q.holdID, &req); err != nil {
			return nil, fmt.Errorf("cluster: take forwarded decisions: %w", err)
		}
		q.request = []byte(req)
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cluster: take forwarded decisions: %w", err)
	}
	return out, nil
}

// answer decides one forwarded decision here and stores the answer for its sender.
func (r *Registry) answer(ctx context.Context, serve func(context.Context, string, []byte) []byte, q forwardedDecision) {
	dctx, cancel := context.WithTimeout(ctx, replyWait)
	reply := serve(dctx, q.holdID, q.request)
	cancel()
	// Stored even while this replica shuts down: the decision was made.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := r.opts.Pool.Exec(sctx, `WITH a AS (UPDATE vigil_hold_decisions SET reply = $2 WHERE id = $1 RETURNING id)
		SELECT pg_notify($3, 'r:' || id) FROM a`, q.id, string(reply), notifyChannel); err != nil {
		r.log.Error("could not answer a forwarded decision; its sender reports an unknown result", "hold", q.holdID, "err", err)
	}
}
