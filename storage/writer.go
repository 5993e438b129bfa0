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
	// step, when set, makes this a SaveStep: the writer journals it instead of running run.
	step *stepOp
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
	insertEvent, insertStepEvent   *sql.Stmt
	insertStep, upsertSession      *sql.Stmt
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
		{&s.insertStepEvent, sqlInsertStepEvent},
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
		s.insertStepEvent, s.insertStep, s.upsertSession} {
		if st != nil {
			_ = st.Close()
		}
	}
}

const sqlInsertEvent = `INSERT INTO events (type, session_id, at, payload) VALUES (?, ?, ?, ?)`

// A journaled step already has its seq.
const sqlInsertStepEvent = `INSERT INTO events (seq, type, session_id, at, payload)
	VALUES (?, 'step', ?, ?, NULL)`

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

// writer owns the write connection and the step journal. It takes everything queued (up to
// MaxBatch): new steps are appended to the journal with one write and their callers
// released; other writes run in one transaction that first copies the journaled steps into
// SQLite, so every seq below theirs is in the tables. Journaled steps are also copied once
// enough have gathered or ingestDelay after the first of them, whichever comes first.
func (db *DB) writer() {
	defer close(db.writerDone)
	batch := make([]*op, 0, db.opts.MaxBatch)
	ingest := time.NewTimer(time.Hour)
	ingest.Stop()
	armed := false
	for {
		var (
			first *op
			ok    bool
		)
		switch {
		case len(db.pending) == 0:
			if armed {
				ingest.Stop()
				armed = false
			}
			first, ok = <-db.ops
		default:
			if !armed {
				ingest.Reset(db.ingestWait)
				armed = true
			}
			select {
			case first, ok = <-db.ops:
			case <-ingest.C:
				armed = false
				db.commitBatch(nil)
				continue
			}
		}
		if !ok {
			break
		}
		batch = db.collect(append(batch[:0], first))
		db.runBatch(batch)
		clear(batch)
	}
	if len(db.pending) > 0 {
		if err := db.commitBatch(nil); err != nil {
			db.log.Error("storage: journaled steps stay in the journal for the next start",
				"steps", len(db.pending), "journal", db.journal.path, "err", err)
		}
	}
}

// Ingestion thresholds: a transaction copies about this many journaled steps, or bytes of
// them, and a step waits at most Options.IngestDelay (ingestDelay by default) in the
// journal alone.
const (
	ingestSteps = 512
	ingestBytes = 8 << 20
	ingestDelay = 100 * time.Millisecond
	// ingestRetry is the wait after a failed ingestion before the next try.
	ingestRetry = time.Second
	// maxPending is how many journaled steps may wait for SQLite before new steps are
	// refused: reached only when SQLite keeps failing (a full disk), and then the guardian
	// must answer with errors rather than grow the journal without bound.
	maxPending = 16 * ingestSteps
)

// ErrBacklog is returned by SaveStep while SQLite cannot take the journaled steps.
var ErrBacklog = errors.New("storage: steps are not reaching the database; refusing new ones")

func (db *DB) runBatch(batch []*op) {
	var steps, others []*op
	for _, o := range batch {
		if o.step != nil {
			steps = append(steps, o)
		} else {
			others = append(others, o)
		}
	}
	if len(steps) > 0 {
		db.journalSteps(steps)
	}
	if len(others) > 0 || len(db.pending) >= ingestSteps || db.pendingBytes >= ingestBytes {
		_ = db.commitBatch(others) // failures went to the callers and the log
	}
}

// journalSteps gives each step the next seq, appends them all to the journal with one write
// and releases their callers.
func (db *DB) journalSteps(ops []*op) {
	size := 0
	for _, o := range ops {
		size += journalHeader + 24 + len(o.step.fields)
	}
	buf := make([]byte, 0, size)
	seq := db.nextSeq
	kept := ops[:0]
	for _, o := range ops {
		if err := o.ctx.Err(); err != nil {
			o.err = err // the caller has gone; do not write on its behalf
			close(o.done)
			continue
		}
		if len(db.pending)+len(kept) >= maxPending {
			o.err = ErrBacklog
			close(o.done)
			continue
		}
		head := len(buf)
		buf = append(buf, make([]byte, journalHeader)...)
		buf = appendStepJSON(buf, seq, o.step.fields)
		payload := buf[head+journalHeader : len(buf) : len(buf)]
		appendRecordHeader(buf[head:head], payload)
		o.step.seq, o.step.json = seq, payload
		seq++
		kept = append(kept, o)
	}
	if len(kept) == 0 {
		return
	}
	if err := db.journal.write(buf); err != nil {
		db.log.Error("storage: step journal write failed", "steps", len(kept), "err", err)
		for _, o := range kept {
			o.err = err
			o.step.seq, o.step.json = 0, nil
			close(o.done)
		}
		return
	}
	db.nextSeq = seq
	for _, o := range kept {
		db.pending = append(db.pending, pendingStep{seq: o.step.seq, args: o.step.args, json: o.step.json})
		db.pendingBytes += len(o.step.json)
	}
	// Marked before any caller is released, so a read that follows an answer waits for it.
	db.markPending(kept)
	for _, o := range kept {
		close(o.done)
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

// commitBatch runs ops in as few transactions as possible, each beginning with the
// journaled steps, and releases each caller once its outcome is known. An Exec function
// runs under its own savepoint, so its error (an expected one, such as a hold already
// decided) undoes only its own changes. The store's own writes (AppendEvent) run without
// one: they fail only when something is badly wrong, and then, as when anything ends the
// transaction early, the transaction is rolled back, the op that failed gets its error and
// the others run again in a new transaction. It returns the error that kept journaled steps
// out of SQLite, if any.
func (db *DB) commitBatch(ops []*op) error {
	for {
		rest, err := db.attempt(ops)
		if rest == nil {
			return err
		}
		ops = rest
	}
}

// attempt runs ops in one transaction, after copying the journaled steps. It returns the
// ops to run again when the transaction had to be abandoned because of one of them, and nil
// once all are settled.
func (db *DB) attempt(ops []*op) ([]*op, error) {
	for _, o := range ops {
		o.err = nil // from an earlier attempt
	}
	tx, err := db.w.BeginTx(context.Background(), nil)
	if err != nil {
		err = fmt.Errorf("storage: begin write transaction: %w", err)
		db.log.Error("storage: write batch failed", "ops", len(ops), "err", err)
		finish(ops, err)
		db.ingestWait = ingestRetry
		return nil, err
	}
	b := &batchTx{tx: tx, stmts: &db.stmts, bound: make(map[*sql.Stmt]*sql.Stmt, 8)}

	ingested := len(db.pending)
	if ingested > 0 {
		if err := db.ingestTx(b); err != nil {
			_ = tx.Rollback()
			// A step SQLite refuses must not hold back the others: sort them out one by one.
			if serr := db.salvage(); serr != nil {
				serr = fmt.Errorf("storage: store journaled steps: %w", serr)
				db.log.Error("storage: journaled steps not stored; will retry",
					"steps", len(db.pending), "err", serr)
				finish(ops, serr)
				db.ingestWait = ingestRetry
				return nil, serr
			}
			return ops, nil
		}
	}

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
			return append(ran, ops[i+1:]...), nil
		}
		o.err = opErr
		ran = append(ran, o)
	}
	var last int64
	if len(ran) > 0 {
		// Events of these ops took seqs after every journaled step's; carry on after them.
		if err := tx.QueryRow(`SELECT coalesce(max(seq), 0) FROM events`).Scan(&last); err != nil {
			_ = tx.Rollback()
			err = fmt.Errorf("storage: read last seq: %w", err)
			finish(ran, err)
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		// A failed COMMIT can leave SQLite's transaction open; end it so the next BEGIN works.
		_, _ = db.w.Exec("ROLLBACK")
		err = fmt.Errorf("storage: commit: %w", err)
		db.log.Error("storage: write batch failed", "ops", len(ran), "steps", ingested, "err", err)
		finish(ran, err)
		db.ingestWait = ingestRetry
		return nil, err
	}
	if len(ran) > 0 {
		db.nextSeq = max(db.nextSeq, last+1)
	}
	if ingested > 0 {
		db.ingestedAll()
	}
	db.committed(ingested + len(ran))
	for _, o := range ran {
		close(o.done)
	}
	return nil, nil
}

// ingestTx copies every journaled step into the transaction, then updates each session's
// summary once.
func (db *DB) ingestTx(b *batchTx) error {
	deltas := make(map[string]*sessionDelta)
	var order []*sessionDelta
	for i := range db.pending {
		p := &db.pending[i]
		if err := p.args.insertRow(b, p.seq); err != nil {
			return err
		}
		d := deltas[p.args.sessionID]
		if d == nil {
			d = &sessionDelta{}
			deltas[p.args.sessionID] = d
			order = append(order, d)
		}
		d.add(p.args, p.seq)
	}
	for _, d := range order {
		if err := d.apply(b); err != nil {
			return err
		}
	}
	return nil
}

// salvage stores the journaled steps one by one, each under a savepoint, and sets aside the
// ones SQLite refuses for a reason of their own (a constraint): they go to the rejected
// file and the log, so that one bad step cannot keep every later one out. Any other error
// (a full disk, an I/O error) concerns them all: nothing is committed and it is returned.
func (db *DB) salvage() error {
	tx, err := db.w.BeginTx(context.Background(), nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	b := &batchTx{tx: tx, stmts: &db.stmts, bound: make(map[*sql.Stmt]*sql.Stmt, 8)}
	var rejected []rejectedStep
	for _, p := range db.pending {
		opErr, txErr := db.runOp(b, &op{savepoint: true, run: func(b *batchTx) error {
			return p.args.insert(b, p.seq)
		}})
		if txErr == nil && opErr != nil && !isConstraint(opErr) {
			txErr = opErr
		}
		if txErr != nil {
			_ = tx.Rollback()
			return txErr
		}
		if opErr != nil {
			rejected = append(rejected, rejectedStep{p, opErr})
		}
	}
	if err := tx.Commit(); err != nil {
		_, _ = db.w.Exec("ROLLBACK")
		return fmt.Errorf("commit: %w", err)
	}
	db.reject(rejected)
	db.committed(len(db.pending) - len(rejected))
	db.ingestedAll()
	return nil
}

// ingestedAll forgets the journaled steps, now in SQLite, and empties the journal.
func (db *DB) ingestedAll() {
	clear(db.pending)
	db.pending = db.pending[:0]
	db.pendingBytes = 0
	db.ingestWait = db.opts.IngestDelay
	db.clearPending()
	if err := db.journal.reset(); err != nil {
		// Harmless: the next start skips records whose seq is already stored.
		db.log.Warn("storage: step journal not emptied", "err", err)
	}
}

// committed counts a committed transaction and asks for a checkpoint every so often.
func (db *DB) committed(writes int) {
	db.batches.Add(1)
	db.batchedOps.Add(int64(writes))
	db.sinceCheckpoint += writes
	if db.sinceCheckpoint >= checkpointEvery {
		db.sinceCheckpoint = 0
		select {
		case db.ckptKick <- struct{}{}:
		default: // one is already pending
		}
	}
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
