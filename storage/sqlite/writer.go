package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"time"
)

// op is one queued write. The writer runs it inside the batch transaction, sets err and
// closes done once the batch has committed (or failed). run may be called more than once
// when the batch is retried; only the last call's effects are committed.
type op struct {
	ctx context.Context
	run func(b *batchTx) error
	// flush marks a Flush: it needs the journaled steps stored, and runs nothing.
	flush bool
	// summaries asks for every session summary the writer owes to be written first (see
	// summaries.go): for readers of the whole sessions table and writes that change it.
	summaries bool
	// savepoint isolates run's failure from the rest of the batch (Exec functions).
	savepoint bool
	// alone marks a write that takes no seq and needs no journaled step stored first (the
	// search indexer's): it runs in a transaction of its own and leaves the journal to its
	// timer, so it does not break up the steps' ingestion batches.
	alone bool
	done  chan struct{}
	err   error
	// started is when the writer began running the op; busy, once done, how long the
	// writer took from then until its transaction committed (the indexer sizes its batches
	// by it, commit included: FTS5 writes its segment then).
	started time.Time
	busy    time.Duration
}

// batchTx is the writer's transaction with its statements bound to it.
type batchTx struct {
	tx    *sql.Tx
	stmts *writeStmts
	bound map[*sql.Stmt]*sql.Stmt
	// plan is what the transaction did to the owed session summaries, applied on commit.
	plan *summaryPlan
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
	insertMarker                   *sql.Stmt
	insertStep, upsertSession      *sql.Stmt
	setSummaryMark                 *sql.Stmt
}

func (s *writeStmts) prepare(ctx context.Context, db *sql.DB) error {
	return prepareAll(ctx, db, s.close, []stmtSpec{
		{&s.savepoint, "SAVEPOINT op"},
		{&s.release, "RELEASE op"},
		{&s.rollbackTo, "ROLLBACK TO op"},
		{&s.insertEvent, sqlInsertEvent},
		{&s.insertStepEvent, sqlInsertStepEvent},
		{&s.insertMarker, sqlInsertMarker},
		{&s.insertStep, sqlInsertStep},
		{&s.upsertSession, sqlUpsertSession},
		{&s.setSummaryMark, sqlSetSummaryMark},
	})
}

// stmtSpec is a statement to prepare and where to keep it.
type stmtSpec struct {
	dst **sql.Stmt
	sql string
}

// prepareAll prepares every statement of specs on db; on a failure it calls closeAll
// (which closes those prepared so far) and names the statement.
func prepareAll(ctx context.Context, db *sql.DB, closeAll func(), specs []stmtSpec) error {
	for _, p := range specs {
		st, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			closeAll()
			return fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.dst = st
	}
	return nil
}

func (s *writeStmts) close() {
	for _, st := range []*sql.Stmt{s.savepoint, s.release, s.rollbackTo, s.insertEvent,
		s.insertStepEvent, s.insertMarker, s.insertStep, s.upsertSession, s.setSummaryMark} {
		if st != nil {
			_ = st.Close()
		}
	}
}

const sqlInsertEvent = `INSERT INTO events (type, session_id, at, payload) VALUES (?, ?, ?, ?)`

// A marker event takes a given seq (see salvage).
const sqlInsertMarker = `INSERT INTO events (seq, type, session_id, at, payload) VALUES (?, ?, ?, ?, ?)`

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

// execSummaries is Exec for writes that change session summaries (retention deletes
// sessions): every summary the writer owes is written first, in the same transaction.
func (db *DB) execSummaries(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.submit(ctx, &op{savepoint: true, summaries: true, run: func(b *batchTx) error { return fn(b.tx) }})
}

// execAlone runs fn in a write transaction of its own, without storing the journaled
// steps first: for writes that take no seq and read no step newer than what is stored.
func (db *DB) execAlone(ctx context.Context, fn func(tx *sql.Tx) error) (busy time.Duration, err error) {
	o := &op{savepoint: true, alone: true, run: func(b *batchTx) error { return fn(b.tx) }}
	if err := db.submit(ctx, o); err != nil {
		return 0, err
	}
	return o.busy, nil
}

// NextSeqTx appends an event inside a transaction given to an Exec function and returns its
// seq from the shared sequence. payload is the event's JSON body as published live (nil
// stores null). Steps are stored with SaveStep, never through here.
func (db *DB) NextSeqTx(tx *sql.Tx, typ, sessionID string, at time.Time, payload []byte) (int64, error) {
	ev, err := db.eventTx(tx, typ, sessionID, at, payload)
	return ev.Seq, err
}

// eventTx appends an event inside tx and returns it as it is published live.
func (db *DB) eventTx(tx *sql.Tx, typ, sessionID string, at time.Time, payload []byte) (record.Event, error) {
	p, err := checkEvent(typ, payload)
	if err != nil {
		return record.Event{}, err
	}
	if at.IsZero() {
		at = time.Now()
	}
	seq, err := insertEvent(tx.Stmt(db.stmts.insertEvent), typ, sessionID, at, p)
	if err != nil {
		return record.Event{}, err
	}
	return record.Event{Seq: seq, Type: typ, SessionID: sessionID, At: at, Payload: payload}, nil
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
	case record.EventStep:
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

// AppendEvent stores a non-step event (hold, rule change, session control, audit), assigns
// ev.Seq and returns once committed. A zero ev.At is set to now; ev.At is normalised to
// UTC so that ev matches what EventsAfter returns.
func (db *DB) AppendEvent(ctx context.Context, ev *record.Event) error {
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

// writer owns the write connection. Steps do not pass through it: SaveStep appends them to
// the journal itself (journalStep). The writer copies journaled steps into SQLite in large
// transactions, when enough have gathered, Options.IngestDelay after the first, or when a
// query needs them (Flush), and runs every other write queued with Exec or AppendEvent.
func (db *DB) writer() {
	defer close(db.writerDone)
	batch := make([]*op, 0, db.opts.MaxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	var deadline time.Time
	// arm sets the timer for the next ingestion (IngestDelay after the first step waiting
	// for one) or, with no step waiting, for the oldest owed session summary.
	arm := func() {
		var next time.Time
		if db.inflight != nil || db.pendingN.Load() > 0 {
			wait := db.opts.IngestDelay
			if db.failing.Load() {
				wait = ingestRetry // the last ingestion failed
			}
			next = time.Now().Add(wait)
		} else if at, ok := db.owed.due(); ok {
			next = at
			if !at.After(time.Now()) {
				// Due already: the last write of them failed, or a batch of other writes
				// ran past it; either way not at once again.
				next = time.Now().Add(ingestRetry)
			}
		} else {
			return
		}
		if armed && !next.Before(deadline) {
			return
		}
		timer.Reset(time.Until(next))
		armed, deadline = true, next
	}
	// The steps Open replayed from the journal may owe their summaries already.
	arm()
	for {
		select {
		case first, ok := <-db.ops:
			if !ok {
				db.finalIngest()
				return
			}
			batch = db.collect(append(batch[:0], first))
			db.runBatch(batch)
			clear(batch)
		case <-db.kick:
		case <-db.ingestKick:
			_ = db.ingest()
		case <-timer.C:
			armed = false
			if db.ingest() == nil {
				db.writeDueSummaries()
			}
		}
		arm()
	}
}

// Ingestion thresholds: a transaction copies about this many journaled steps, or bytes of
// them, and a step waits at most Options.IngestDelay (ingestDelay by default) in the
// journal alone. A transaction rewrites every page it touches whole, and a batch's steps
// touch the session index and the session rows at as many places as there are sessions:
// 2048 steps a transaction instead of 512 stored a step for 21.5 µs of CPU instead of 25
// (BenchmarkStepCPU); 4096 gained nothing more. Below 20 000 steps a second the delay
// comes first anyway.
const (
	ingestSteps = 2048
	ingestBytes = 8 << 20
	ingestDelay = 100 * time.Millisecond
	// ingestRetry is the wait after a failed ingestion before the next try.
	ingestRetry = time.Second
	// maxPending is how many journaled steps may wait for SQLite. Past it a new step waits
	// for the writer to store some, or, while storing fails (a full disk), is refused: the
	// guardian must answer with errors rather than grow the journal without bound.
	maxPending = 4 * ingestSteps
	// maxBacklogBytes bounds the same backlog by size: the steps wait in memory (with their
	// requests) until stored, and a few large ones weigh more than thousands of small ones.
	maxBacklogBytes = 16 * ingestBytes
)

// ErrBacklog is returned by SaveStep while SQLite cannot take the journaled steps.
var ErrBacklog = errors.New("storage: steps are not reaching the database; refusing new ones")

// stepHeadroom is the room SaveStep leaves in front of a step's fields for the record
// header and the seq, so that the record is completed in place.
const stepHeadroom = journalHeader + len(`{"seq":`) + 20

// journalStep gives a step the next seq and appends it to the journal. Concurrent steps
// share a write: the first to find no write going on leads, writing every record queued by
// then with one call, and passes the lead to the owner of the next queued record, if any.
// The journal stays in seq order; what takes time, building the JSON, happened before, in
// parallel. buf holds the step's fields (appendStepFields) after stepHeadroom bytes.
func (db *DB) journalStep(a *stepArgs, buf []byte) (int64, error) {
	db.waiting.Add(1)
	db.jmu.Lock()
	db.waiting.Add(-1)
	for db.pendingN.Load() >= maxPending || db.backlogBytes.Load() >= maxBacklogBytes {
		// Steps come faster than SQLite takes them: wait for room, unless it is failing.
		if db.failing.Load() {
			db.jmu.Unlock()
			return 0, ErrBacklog
		}
		notify(db.ingestKick)
		db.room.Wait()
	}
	r := &jrec{args: a, buf: buf, wake: make(chan bool, 1)}
	db.jq = append(db.jq, r)
	if db.jleader {
		db.jmu.Unlock()
		if lead := <-r.wake; !lead {
			return r.result()
		}
		db.jmu.Lock()
	}
	db.jleader = true
	db.lead(r)
	return r.result()
}

// jrec is a step in the journal queue.
type jrec struct {
	seq  int64
	args *stepArgs
	buf  []byte
	// frame is the record as written, payload its JSON; set with seq by the leader.
	frame, payload []byte
	// wake tells the owner its record is written (false) or that it leads now (true).
	wake chan bool
	err  error
}

// complete puts the seq in front of the fields and the header in front of that.
func (r *jrec) complete() {
	var prefix [stepHeadroom]byte
	p := record.AppendStepPrefix(prefix[:0], r.seq)
	start := stepHeadroom - len(p)
	copy(r.buf[start:], p)
	r.payload = r.buf[start:]
	appendRecordHeader(r.buf[start-journalHeader:start-journalHeader], r.payload)
	r.frame = r.buf[start-journalHeader:]
}

func (r *jrec) result() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	return r.seq, nil
}

// lead writes the queued records, own among them, then passes the lead on. jmu is held on
// entry and released on return.
func (db *DB) lead(own *jrec) {
	for db.holdJournal {
		db.jidle.Wait()
	}
	batch := db.jq
	db.jq = nil
	// Seqs are given here, not when queued: whoever holds the journal (holdJournalWrites)
	// then knows that every seq given is in a pending step or lost to a failed write.
	for _, r := range batch {
		r.seq = db.nextSeq
		db.nextSeq++
	}
	j := db.journals[db.active]
	db.jwriting = true
	db.jmu.Unlock()
	for _, r := range batch {
		r.complete()
	}
	err := j.writeFrames(batch)
	db.jmu.Lock()
	db.jwriting = false
	if err != nil {
		// Their seqs stay unused: the live stream skips a seq the store never gets.
		db.log.Error("storage: step journal write failed", "steps", len(batch), "err", err)
	}
	for _, r := range batch {
		if err != nil {
			r.err = err
			continue
		}
		db.pending = append(db.pending, pendingStep{seq: r.seq, args: r.args, json: r.payload})
		db.pendingBytes += len(r.payload)
		db.backlogBytes.Add(int64(len(r.payload)))
		db.pendSessions[r.args.SessionID]++
	}
	if err == nil {
		if db.pendingN.Add(int64(len(batch))) == int64(len(batch)) {
			notify(db.kick) // the first pending steps: start the ingestion timer
		}
		if len(db.pending) >= ingestSteps || db.pendingBytes >= ingestBytes {
			notify(db.ingestKick)
		}
	}
	db.jidle.Broadcast()
	for _, r := range batch {
		if r != own {
			r.wake <- false
		}
	}
	if len(db.jq) > 0 {
		db.jq[0].wake <- true
	} else {
		db.jleader = false
	}
	db.jmu.Unlock()
}

// holdJournalWrites stops journal writes and waits for the one going on, so that the
// caller can take the pending steps or run writes that take seqs. jmu must be held;
// releaseJournalWrites undoes it.
func (db *DB) holdJournalWrites() {
	db.holdJournal = true
	for db.jwriting {
		db.jidle.Wait()
	}
}

func (db *DB) releaseJournalWrites() {
	db.holdJournal = false
	db.jidle.Broadcast()
}

// notify sends on a one-slot channel without waiting: one pending signal is enough.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// runBatch runs queued ops: Flush requests need only the journaled steps copied; other
// writes take seqs, so they run with the journal held still, after every journaled step.
func (db *DB) runBatch(batch []*op) {
	var flushes, others, alone []*op
	for _, o := range batch {
		switch {
		case o.flush:
			flushes = append(flushes, o)
		case o.alone:
			alone = append(alone, o)
		default:
			others = append(others, o)
		}
	}
	if len(alone) > 0 {
		_ = db.commit(nil, alone) // each op has its own error
		if len(others) == 0 && len(flushes) == 0 {
			return
		}
	}
	var err error
	if len(others) > 0 {
		err = db.runOthers(others)
	} else {
		err = db.ingest()
	}
	if err == nil && slices.ContainsFunc(flushes, func(o *op) bool { return o.summaries }) {
		err = db.writeAllSummaries()
	}
	for _, o := range flushes {
		o.err = err
		close(o.done)
	}
}

// ingest copies the journaled steps into SQLite: it takes them (and switches SaveStep to
// the other journal file) under the lock, then commits without it, so steps keep being
// journaled meanwhile. Steps whose commit failed are retried first, alone; only then are
// the newer ones taken, so that a successful ingest leaves nothing journaled behind.
func (db *DB) ingest() error {
	if err := db.storeInflight(); err != nil {
		return err
	}
	db.jmu.Lock()
	if len(db.pending) == 0 {
		db.jmu.Unlock()
		return nil
	}
	db.holdJournalWrites()
	db.inflight, db.pending = db.pending, nil
	db.inflightJournal = db.journals[db.active]
	db.active ^= 1 // empty: its steps were stored before these were taken
	db.pendingBytes = 0
	db.releaseJournalWrites()
	db.jmu.Unlock()
	return db.storeInflight()
}

// storeInflight commits the steps ingest took, then forgets them and empties their journal
// file. A failure leaves them in flight, to be retried after ingestRetry, and makes steps
// waiting for room give up.
func (db *DB) storeInflight() error {
	if db.inflight == nil {
		return nil
	}
	if err := db.commit(db.inflight, nil); err != nil {
		db.log.Error("storage: journaled steps not stored; will retry",
			"steps", len(db.inflight), "err", err)
		db.jmu.Lock()
		db.failing.Store(true)
		db.room.Broadcast() // steps waiting for room are refused now
		db.jmu.Unlock()
		return err
	}
	db.jmu.Lock()
	db.forget(db.inflight)
	db.jmu.Unlock()
	db.resetJournal(db.inflightJournal)
	db.inflight, db.inflightJournal = nil, nil
	return nil
}

// runOthers runs writes that take seqs: with the journal locked, so no step takes a seq
// meanwhile, it stores every journaled step and then the writes, in one transaction.
func (db *DB) runOthers(ops []*op) error {
	if err := db.storeInflight(); err != nil {
		finish(ops, err)
		return err
	}
	db.jmu.Lock()
	db.holdJournalWrites()
	defer func() {
		db.releaseJournalWrites()
		db.jmu.Unlock()
	}()
	steps := db.pending
	if err := db.commit(steps, ops); err != nil {
		return err // the steps stay pending; the ops have their errors
	}
	db.pending, db.pendingBytes = nil, 0
	db.forget(steps)
	db.resetJournal(db.journals[db.active])
	return nil
}

// forget drops the marks of steps now in SQLite. jmu must be held.
func (db *DB) forget(steps []pendingStep) {
	for _, p := range steps {
		if n := db.pendSessions[p.args.SessionID] - 1; n > 0 {
			db.pendSessions[p.args.SessionID] = n
		} else {
			delete(db.pendSessions, p.args.SessionID)
		}
	}
	db.pendingN.Add(-int64(len(steps)))
	var n int64
	for _, p := range steps {
		n += int64(len(p.json))
	}
	db.backlogBytes.Add(-n)
	db.failing.Store(false)
	db.room.Broadcast()
}

func (db *DB) resetJournal(j *journal) {
	if j == nil {
		return // opened beside a holder: the journal is the holder's (Options.Beside)
	}
	if err := j.reset(); err != nil {
		// Harmless: the next start skips records whose seq is already stored.
		db.log.Warn("storage: step journal not emptied", "err", err)
	}
}

// finalIngest stores what is journaled when the writer stops; what cannot be stored stays
// in the journal for the next Open.
func (db *DB) finalIngest() {
	if err := db.ingest(); err != nil {
		db.log.Error("storage: journaled steps stay in the journal for the next start",
			"steps", db.pendingN.Load(), "err", err)
		return
	}
	if err := db.writeAllSummaries(); err != nil {
		db.log.Error("storage: session summaries are brought up to date at the next start", "err", err)
	}
}

// writeAllSummaries writes every session summary the writer owes.
func (db *DB) writeAllSummaries() error {
	if db.owed.head == nil {
		return nil
	}
	db.summariesAll = true
	defer func() { db.summariesAll = false }()
	return db.commit(nil, nil)
}

// writeDueSummaries writes the owed session summaries that are due, when no ingestion
// has (the writer is otherwise idle).
func (db *DB) writeDueSummaries() {
	if at, ok := db.owed.due(); ok && !time.Now().Before(at) {
		if err := db.commit(nil, nil); err != nil {
			db.log.Warn("storage: session summaries not written; will retry", "err", err)
		}
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

// commit stores steps and runs ops in as few transactions as possible, releasing each op's
// caller once its outcome is known. An Exec function runs under its own savepoint, so its
// error (an expected one, such as a hold already decided) undoes only its own changes. The
// store's own writes (AppendEvent) run without one: they fail only when something is badly
// wrong, and then, as when anything ends the transaction early, the transaction is rolled
// back, the op that failed gets its error and the others run again in a new transaction.
// It returns an error only when the steps could not be stored.
func (db *DB) commit(steps []pendingStep, ops []*op) error {
	for {
		stored, retry, err := db.attempt(steps, ops)
		if !stored && err != nil {
			return err
		}
		if stored {
			steps = nil
		}
		if retry == nil {
			return nil
		}
		ops = retry
	}
}

// attempt stores steps and runs ops in one transaction. stored reports that the steps are
// in SQLite (or set aside); retry lists the ops to run again when the transaction had to be
// abandoned because of one of them. err is what kept the steps out.
func (db *DB) attempt(steps []pendingStep, ops []*op) (stored bool, retry []*op, err error) {
	for _, o := range ops {
		o.err = nil // from an earlier attempt
	}
	tx, err := db.w.BeginTx(context.Background(), nil)
	if err != nil {
		err = fmt.Errorf("storage: begin write transaction: %w", err)
		db.log.Error("storage: write batch failed", "ops", len(ops), "err", err)
		finish(ops, err)
		return len(steps) == 0, nil, err
	}
	b := &batchTx{tx: tx, stmts: &db.stmts, bound: make(map[*sql.Stmt]*sql.Stmt, 8)}

	all := db.summariesAll || slices.ContainsFunc(ops, func(o *op) bool { return o.summaries })
	if len(steps) > 0 || all || !slices.ContainsFunc(ops, func(o *op) bool { return o.alone }) {
		deltas, err := ingestTx(b, steps)
		if err == nil {
			err = db.summariesTx(b, deltas, lastOf(steps), all)
		}
		if err != nil {
			_ = tx.Rollback()
			// A step SQLite refuses must not hold back the others: sort them out one by one.
			if serr := db.salvage(steps); serr != nil {
				serr = fmt.Errorf("storage: store journaled steps: %w", serr)
				finish(ops, serr)
				return false, nil, serr
			}
			if len(ops) == 0 {
				return true, nil, nil
			}
			return true, ops, nil
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
		o.started = time.Now()
		opErr, txErr := db.runOp(b, o)
		if txErr != nil {
			_ = tx.Rollback()
			db.log.Warn("storage: write failed; retrying the rest of its batch",
				"retry", len(ran)+len(ops)-i-1, "err", txErr)
			o.err = cmp.Or(opErr, txErr)
			close(o.done)
			return false, append(ran, ops[i+1:]...), nil
		}
		o.err = opErr
		ran = append(ran, o)
	}
	var last int64
	// Ops that run alone take no seq and run without jmu: they leave nextSeq alone.
	seqs := slices.ContainsFunc(ran, func(o *op) bool { return !o.alone })
	if seqs {
		// The ops' events took seqs after every journaled step's; steps carry on after them.
		if last, err = lastSeq(context.Background(), tx); err != nil {
			_ = tx.Rollback()
			finish(ran, err)
			return false, nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		// A failed COMMIT can leave SQLite's transaction open; end it so the next BEGIN works.
		_, _ = db.w.Exec("ROLLBACK")
		err = fmt.Errorf("storage: commit: %w", err)
		db.log.Error("storage: write batch failed", "ops", len(ran), "steps", len(steps), "err", err)
		finish(ran, err)
		return false, nil, err
	}
	db.summariesCommitted(b)
	if seqs {
		db.nextSeq = max(db.nextSeq, last+1) // jmu is held when there are such ops
	}
	db.committed(len(steps) + len(ran))
	for _, o := range ran {
		o.busy = time.Since(o.started)
		close(o.done)
	}
	return true, nil, nil
}

// ingestTx copies steps into the transaction and sums them by session, for their summaries
// (summariesTx), in the order of each session's first step.
func ingestTx(b *batchTx, steps []pendingStep) ([]*txDelta, error) {
	var d deltaSet
	for i := range steps {
		p := &steps[i]
		// One statement a row: a statement of many rows needs a statement journal (the
		// foreign key to events may abort it half-way), which cost more than the
		// per-statement work it saved.
		if err := p.args.insertRow(b, p.seq); err != nil {
			return nil, err
		}
		d.add(p)
	}
	return d.order, nil
}

// deltaSet sums steps by session.
type deltaSet struct {
	byID  map[string]*txDelta
	order []*txDelta
}

func (s *deltaSet) add(p *pendingStep) {
	if s.byID == nil {
		s.byID = make(map[string]*txDelta)
	}
	t := s.byID[p.args.SessionID]
	if t == nil {
		t = &txDelta{first: p.seq}
		s.byID[p.args.SessionID] = t
		s.order = append(s.order, t)
	}
	t.d.Add(&p.args.SessionStep, p.seq)
}

// lastOf is the newest seq of steps (in seq order), 0 for none.
func lastOf(steps []pendingStep) int64 {
	if len(steps) == 0 {
		return 0
	}
	return steps[len(steps)-1].seq
}

// salvage stores steps one by one, each under a savepoint, and sets aside the ones SQLite
// refuses for a reason of their own (a constraint): they go to the rejected file and the
// log, so that one bad step cannot keep every later one out. Any other error (a full disk,
// an I/O error) concerns them all: nothing is committed and it is returned.
func (db *DB) salvage(steps []pendingStep) error {
	tx, err := db.w.BeginTx(context.Background(), nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	b := &batchTx{tx: tx, stmts: &db.stmts, bound: make(map[*sql.Stmt]*sql.Stmt, 8)}
	var (
		rejected []rejectedStep
		stored   deltaSet
	)
	for _, p := range steps {
		opErr, txErr := db.runOp(b, &op{savepoint: true, run: func(b *batchTx) error {
			return p.args.insertRow(b, p.seq)
		}})
		if txErr == nil && opErr != nil && !isConstraint(opErr) {
			txErr = opErr
		}
		if txErr != nil {
			_ = tx.Rollback()
			return txErr
		}
		if opErr != nil {
			// The step's seq was given out (to the agent, to the live stream). A new seq is
			// max(seq)+1, so without a row of its own the next event would take it again:
			// a marker keeps it, and tells readers of the event log why the step is missing.
			marker, _ := json.Marshal(map[string]string{"error": opErr.Error()})
			if _, err := b.stmt(b.stmts.insertMarker).Exec(p.seq, record.EventStepRejected,
				p.args.SessionID, p.args.ReceivedAt, string(marker)); err != nil && !isConstraint(err) {
				// (A constraint here means the seq is stored already: nothing can take it.)
				_ = tx.Rollback()
				return fmt.Errorf("storage: keep the seq of refused step %d: %w", p.seq, err)
			}
			rejected = append(rejected, rejectedStep{p, opErr})
			continue
		}
		stored.add(&p)
	}
	if err := db.summariesTx(b, stored.order, lastOf(steps), db.summariesAll); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		_, _ = db.w.Exec("ROLLBACK")
		return fmt.Errorf("commit: %w", err)
	}
	db.summariesCommitted(b)
	db.reject(rejected)
	db.committed(len(steps) - len(rejected))
	return nil
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
			return opErr, afterOp(opErr, fmt.Errorf("storage: rollback to savepoint: %w", err))
		}
	}
	if _, err := b.stmt(b.stmts.release).Exec(); err != nil {
		return opErr, afterOp(opErr, fmt.Errorf("storage: release savepoint: %w", err))
	}
	return opErr, nil
}

// afterOp is the error of a savepoint statement that failed after the op failed with
// opErr (nil: the op succeeded). Some errors (a full disk, an I/O error) make SQLite roll
// back the whole transaction, savepoint included, so the rollback then fails with "no such
// savepoint": opErr is the cause and comes first, so that the log names it and errors.As
// finds it before the rollback's.
func afterOp(opErr, err error) error {
	if opErr == nil {
		return err
	}
	return fmt.Errorf("%w; then %w", opErr, err)
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
