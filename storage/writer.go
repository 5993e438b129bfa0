package storage

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"
)

// op is one queued write. The writer runs it inside the batch transaction, sets err and
// closes done once the batch has committed (or failed). run may be called more than once
// when the batch is retried; only the last call's effects are committed.
type op struct {
	ctx context.Context
	run func(b *batchTx) error
	// savepoint isolates run's failure from the rest of the batch (Exec functions).
	savepoint bool
	done      chan struct{}
	err       error
}

// batchTx is the writer's transaction with its statements bound to it.
type batchTx struct {
	tx    *sql.Tx
	stmts *writeStmts
	bound map[*sql.Stmt]*sql.Stmt
}

// stmt returns s bound to the batch transaction, binding each statement once per batch.
func (b *batchTx) stmt(s *sql.Stmt) *sql.Stmt {
	if t, ok := b.bound[s]; ok {
		return t
	}
	t := b.tx.Stmt(s)
	b.bound[s] = t
	return t
}

// writeStmts are prepared once on the writer connection and reused by every batch.
type writeStmts struct {
	savepoint, release, rollbackTo *sql.Stmt
	insertEvent, insertStep        *sql.Stmt
	upsertSession                  *sql.Stmt
}

func (s *writeStmts) prepare(ctx context.Context, db *sql.DB) error {
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.savepoint, "SAVEPOINT op"},
		{&s.release, "RELEASE op"},
		{&s.rollbackTo, "ROLLBACK TO op"},
		{&s.insertEvent, sqlInsertEvent},
		{&s.insertStep, sqlInsertStep},
		{&s.upsertSession, sqlUpsertSession},
	} {
		st, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			s.close()
			return fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.dst = st
	}
	return nil
}

func (s *writeStmts) close() {
	for _, st := range []*sql.Stmt{s.savepoint, s.release, s.rollbackTo, s.insertEvent,
		s.insertStep, s.upsertSession} {
		if st != nil {
			_ = st.Close()
		}
	}
}

const sqlInsertEvent = `INSERT INTO events (type, session_id, at, payload) VALUES (?, ?, ?, ?)`

// submit queues o and waits for its batch to commit. A cancelled ctx returns ctx.Err() at
// once; the write itself may still commit if the writer had already started it.
func (db *DB) submit(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o.ctx = ctx
	o.done = make(chan struct{})

	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	select {
	case db.ops <- o:
		db.mu.RUnlock()
	case <-ctx.Done():
		db.mu.RUnlock()
		return ctx.Err()
	}

	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exec runs fn inside the writer's transaction, queued with every other write, and returns
// after the transaction has committed. fn runs under its own savepoint: if it returns an
// error (or panics) its changes are rolled back, the error is returned, and the other
// writes in the same batch are unaffected.
//
// fn runs on the writer goroutine, so it must be quick and must not call db's write
// methods (they would wait for the writer, which is running fn). It must not commit or roll
// back tx. It may be called more than once, when its batch has to be retried because
// another write in it failed; only the last call's changes are committed, so fn must have
// no effects outside tx other than resetting what it captures. Use NextSeqTx inside fn to
// append an event.
func (db *DB) Exec(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.submit(ctx, &op{savepoint: true, run: func(b *batchTx) error { return fn(b.tx) }})
}

// NextSeqTx appends an event inside a transaction given to an Exec function and returns its
// seq from the shared sequence. payload is the event's JSON body as published live (nil
// stores null). Steps are stored with SaveStep, never through here.
func (db *DB) NextSeqTx(tx *sql.Tx, typ, sessionID string, at time.Time, payload []byte) (int64, error) {
	ev, err := db.eventTx(tx, typ, sessionID, at, payload)
	return ev.Seq, err
}

// eventTx appends an event inside tx and returns it as it is published live.
func (db *DB) eventTx(tx *sql.Tx, typ, sessionID string, at time.Time, payload []byte) (Event, error) {
	p, err := checkEvent(typ, payload)
	if err != nil {
		return Event{}, err
	}
	if at.IsZero() {
		at = time.Now()
	}
	seq, err := insertEvent(tx.Stmt(db.stmts.insertEvent), typ, sessionID, at, p)
	if err != nil {
		return Event{}, err
	}
	return Event{Seq: seq, Type: typ, SessionID: sessionID, At: at, Payload: payload}, nil
}

func insertEvent(st *sql.Stmt, typ, sessionID string, at time.Time, payload any) (int64, error) {
	res, err := st.Exec(typ, sessionID, at.UnixNano(), payload)
	if err != nil {
		return 0, fmt.Errorf("storage: insert %s event: %w", typ, err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("storage: insert %s event: %w", typ, err)
	}
	return seq, nil
}

// checkEvent validates a non-step event and returns its payload as stored text.
func checkEvent(typ string, payload []byte) (string, error) {
	switch typ {
	case "":
		return "", errors.New("storage: event has no type")
	case EventStep:
		return "", errors.New(`storage: "step" events are written by SaveStep`)
	}
	if len(payload) == 0 {
		return "null", nil
	}
	if !json.Valid(payload) {
		return "", fmt.Errorf("storage: %s event payload is not valid JSON", typ)
	}
	return string(payload), nil
}

// EventStep is the type of the event stored with every step.
const EventStep = "step"

// AppendEvent stores a non-step event (hold, rule change, session control, audit), assigns
// ev.Seq and returns once committed. A zero ev.At is set to now; ev.At is normalised to
// UTC so that ev matches what EventsAfter returns.
func (db *DB) AppendEvent(ctx context.Context, ev *Event) error {
	p, err := checkEvent(ev.Type, ev.Payload)
	if err != nil {
		return err
	}
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	ev.At = time.Unix(0, ev.At.UnixNano()).UTC()
	typ, sid, at := ev.Type, ev.SessionID, ev.At
	var seq int64
	err = db.submit(ctx, &op{run: func(b *batchTx) error {
		var err error
		seq, err = insertEvent(b.stmt(b.stmts.insertEvent), typ, sid, at, p)
		return err
	}})
	if err != nil {
		return err
	}
	ev.Seq = seq
	return nil
}

// writer owns the write connection. It takes everything queued (up to MaxBatch), runs it as
// one transaction, commits, then releases every caller: one commit serves the whole burst.
func (db *DB) writer() {
	defer close(db.writerDone)
	batch := make([]*op, 0, db.opts.MaxBatch)
	sinceCheckpoint := 0
	for first := range db.ops {
		batch = db.collect(append(batch[:0], first))
		db.commitBatch(batch)
		db.batches.Add(1)
		db.batchedOps.Add(int64(len(batch)))
		sinceCheckpoint += len(batch)
		if sinceCheckpoint >= checkpointEvery {
			sinceCheckpoint = 0
			select {
			case db.ckptKick <- struct{}{}:
			default: // one is already pending
			}
		}
		clear(batch)
	}
}

// collect adds what is queued to batch, up to MaxBatch. Before settling for an empty queue
// it yields the processor a few times: the callers released by the previous commit are
// runnable but may not have queued their next write yet, and letting them (microseconds)
// turns many small commits into a few large ones. With a single caller it costs next to
// nothing.
func (db *DB) collect(batch []*op) []*op {
	yields := 0
	for len(batch) < db.opts.MaxBatch {
		select {
		case o, ok := <-db.ops:
			if !ok {
				return batch
			}
			batch = append(batch, o)
			continue
		default:
		}
		if yields == collectYields {
			return batch
		}
		yields++
		runtime.Gosched()
	}
	return batch
}

// collectYields is how often collect yields waiting for more writes.
const collectYields = 2

// commitBatch runs ops in as few transactions as possible and releases each caller once
// its outcome is known. An Exec function runs under its own savepoint, so its error (an
// expected one, such as a hold already decided) undoes only its own changes. The store's own
// writes (SaveStep, AppendEvent) run without one: they fail only when something is badly
// wrong, and then, as when anything ends the transaction early, the transaction is rolled
// back, the op that failed gets its error and the others run again in a new transaction.
func (db *DB) commitBatch(ops []*op) {
	for len(ops) > 0 {
		ops = db.attempt(ops)
	}
}

// attempt runs ops in one transaction. It returns the ops to run again when the
// transaction had to be abandoned because of one of them, and nil once all are settled.
func (db *DB) attempt(ops []*op) []*op {
	for _, o := range ops {
		o.err = nil // from an earlier attempt
	}
	tx, err := db.w.BeginTx(context.Background(), nil)
	if err != nil {
		err = fmt.Errorf("storage: begin write transaction: %w", err)
		db.log.Error("storage: write batch failed", "ops", len(ops), "err", err)
		finish(ops, err)
		return nil
	}
	b := &batchTx{tx: tx, stmts: &db.stmts, bound: make(map[*sql.Stmt]*sql.Stmt, 8)}

	ran := make([]*op, 0, len(ops))
	for i, o := range ops {
		if err := o.ctx.Err(); err != nil {
			// The caller has gone; do not write on its behalf.
			o.err = err
			close(o.done)
			continue
		}
		opErr, txErr := db.runOp(b, o)
		if txErr != nil {
			_ = tx.Rollback()
			db.log.Warn("storage: write failed; retrying the rest of its batch",
				"retry", len(ran)+len(ops)-i-1, "err", txErr)
			o.err = cmp.Or(opErr, txErr)
			close(o.done)
			return append(ran, ops[i+1:]...)
		}
		o.err = opErr
		ran = append(ran, o)
	}
	if err := tx.Commit(); err != nil {
		// A failed COMMIT can leave SQLite's transaction open; end it so the next BEGIN works.
		_, _ = db.w.Exec("ROLLBACK")
		err = fmt.Errorf("storage: commit: %w", err)
		db.log.Error("storage: write batch failed", "ops", len(ran), "err", err)
		finish(ran, err)
		return nil
	}
	for _, o := range ran {
		close(o.done)
	}
	return nil
}

// finish fails ops with err, except those that already failed on their own.
func finish(ops []*op, err error) {
	for _, o := range ops {
		if o.err == nil {
			o.err = err
		}
		close(o.done)
	}
}

// runOp runs o. opErr is o's own failure with its changes undone and the transaction still
// usable; txErr means the transaction holds partial changes or has ended, so it must be
// abandoned.
func (db *DB) runOp(b *batchTx, o *op) (opErr, txErr error) {
	if !o.savepoint {
		if err := protect(o.run, b); err != nil {
			return nil, err
		}
		return nil, nil
	}
	if _, err := b.stmt(b.stmts.savepoint).Exec(); err != nil {
		return nil, fmt.Errorf("storage: savepoint: %w", err)
	}
	opErr = protect(o.run, b)
	if opErr != nil {
		if _, err := b.stmt(b.stmts.rollbackTo).Exec(); err != nil {
			return opErr, fmt.Errorf("storage: rollback to savepoint: %w", err)
		}
	}
	if _, err := b.stmt(b.stmts.release).Exec(); err != nil {
		return opErr, fmt.Errorf("storage: release savepoint: %w", err)
	}
	return opErr, nil
}

// protect runs fn, turning a panic into an error so one bad write cannot stop the writer.
func protect(fn func(*batchTx) error, b *batchTx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("storage: write panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(b)
}
