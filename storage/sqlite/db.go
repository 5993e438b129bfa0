package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Checkpoint cadence and the size the WAL is trimmed back to after a checkpoint.
const (
	// Steps are appended, so a checkpoint copies their pages once however rare it is; the
	// pages written over and over (index tails, session rows) are copied once per checkpoint.
	checkpointEvery = 8000 // writes
	walSizeLimit    = 64 << 20
)

// ErrClosed is returned by writes submitted after Close.
var ErrClosed = errors.New("storage: database is closed")

// Options tune Open. The zero value is a sensible configuration.
type Options struct {
	// Readers is the size of the read-only connection pool (default 4).
	Readers int
	// BusyTimeout bounds how long a connection waits on a lock held by another (default 5s).
	BusyTimeout time.Duration
	// MaxBatch caps how many queued writes (Exec, AppendEvent, Flush) the writer takes
	// into one transaction (default 256). Steps do not queue; see SaveStep.
	MaxBatch int
	// QueueSize is how many of those writes may wait for the writer before submitters
	// block (default 1024).
	QueueSize int
	// Logger receives failures the writer cannot return to a caller (default slog.Default()).
	Logger *slog.Logger
	// ManualIndex turns the background search indexer off: steps are searchable only after
	// IndexBatch or IndexComplete (tests that need to see the lag).
	ManualIndex bool
	// IngestDelay is the longest a saved step waits in the step journal before it is copied
	// into the tables, unless a query or another write needs it sooner (default 100ms).
	IngestDelay time.Duration
	// SummaryDelay is how long a stored step may wait before its session's summary row
	// counts it (default 5s; see summaries.go). Reads of sessions never wait for it: they
	// write or add what is owed. Below zero, a summary is written with its steps.
	SummaryDelay time.Duration
	// Beside lets Open succeed when another process holds the database (a running
	// guardian): the DB then reads, and makes the writes of the keys and users commands,
	// beside the holder without touching its step journal or taking seqs from it; the
	// audit entries of those writes wait in audit_outbox until the holder stores them
	// (within outboxInterval). Steps cannot be saved through such a DB. Without Beside, Open
	// refuses a database another process holds (ErrInUse).
	Beside bool
}

func (o Options) withDefaults() Options {
	if o.Readers <= 0 {
		o.Readers = 4
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1024
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.IngestDelay <= 0 {
		o.IngestDelay = ingestDelay
	}
	if o.SummaryDelay == 0 {
		o.SummaryDelay = summaryDelay
	}
	return o
}

// DB is the SQLite store. Steps are journaled by their callers (journalStep) and copied
// into SQLite by one writer goroutine that owns the only write connection and also runs
// every other write, whatever is queued as one transaction; queries use a separate pool of
// read-only connections, which WAL lets run alongside it.
type DB struct {
	path string
	opts Options
	log  *slog.Logger

	w     *sql.DB // exactly one connection, used only by the writer goroutine
	r     *sql.DB // read-only pool
	ckpt  *sql.DB // one connection for checkpoints
	stmts writeStmts
	reads readStmts

	// mu guards closed and the send side of ops: Close takes it exclusively before closing
	// ops, so no submitter can send on a closed channel.
	mu     sync.RWMutex
	closed bool
	ops    chan *op
	// writerDone is closed when the writer goroutine has drained ops and exited.
	writerDone chan struct{}
	// ckptKick asks the checkpointer for a checkpoint; Close closes it after the writer.
	ckptKick  chan struct{}
	ckptDone  chan struct{}
	closeOnce sync.Once
	closeErr  error

	// minutes counts recent steps per minute for Stats.
	minutes *minuteCounts

	// The step journal, guarded by jmu: SaveStep appends to journals[active] and pending;
	// the writer takes pending (switching SaveStep to the other, empty, file) to store it.
	// nextSeq is the seq the next step gets; pendSessions counts each session's journaled
	// steps not yet stored, so that a read of one session waits only when it must.
	jmu          sync.Mutex
	journals     [2]*journal
	active       int
	pending      []pendingStep
	pendingBytes int
	nextSeq      int64
	pendSessions map[string]int
	// pendingN counts journaled steps not yet stored (pending and in flight); room signals
	// (on jmu) that it went down, failing that storing them fails.
	pendingN atomic.Int64
	// backlogBytes is the JSON of those steps, which they hold in memory until stored.
	backlogBytes atomic.Int64
	room         *sync.Cond
	failing      atomic.Bool
	// kick starts the writer's ingestion timer; ingestKick asks for an ingestion now.
	kick, ingestKick chan struct{}
	// jq holds steps waiting for a journal write; jleader is set while a SaveStep leads
	// the writing, jwriting while it writes (without jmu). holdJournal stops new writes
	// (the writer taking the pending steps); jidle signals changes of these two.
	jq          []*jrec
	jleader     bool
	jwriting    bool
	holdJournal bool
	jidle       *sync.Cond
	// waiting counts SaveStep calls waiting for jmu; steps counts those past the closed check.
	waiting atomic.Int64
	steps   sync.WaitGroup

	// Writer-owned: steps taken from pending whose commit has not succeeded yet, and the
	// journal file holding them.
	inflight        []pendingStep
	inflightJournal *journal
	sinceCheckpoint int
	// owed are the session summaries the writer has still to write (summaries.go);
	// summariesAll makes its next transaction write all of them.
	owed         owedSummaries
	summariesAll bool

	// Writer counters, for WriterStats.
	batches, batchedOps atomic.Int64
	// journalBytes is the size of both journal files, for IngestStats.
	journalBytes atomic.Int64

	// lock excludes other processes from opening the database the same way (nil beside
	// a holder); beside is set when the DB was opened beside another process's (Beside).
	lock   *fileLock
	beside bool
	// writerReadOnly is set when SQLite could open the file for reading only (see
	// CheckWritable); fixed at Open, since the writer's connection is never reopened.
	writerReadOnly bool
	// companionsReadOnly is why SQLite may not write the write-ahead log or WAL index
	// found at Open (see companionsWritable), or nil.
	companionsReadOnly error

	// fileInfo is the database file as opened; watchFile compares the path with it and
	// sets fileLost when the file was deleted or replaced. stopWatch ends watchFile.
	fileInfo  os.FileInfo
	fileLost  atomic.Bool
	fileLogAt atomic.Int64 // unix nanoseconds of the last log of a lost file
	stopWatch chan struct{}
	watchDone chan struct{}
	// stopIndex ends the search indexer (indexSteps); indexDone closes when it has.
	stopIndex chan struct{}
	indexDone chan struct{}
	// stopOutbox ends drainOutbox; outboxDone closes when it has.
	stopOutbox chan struct{}
	outboxDone chan struct{}
}

// WriterStats counts the writer's work since Open.
type WriterStats struct {
	// Batches is the number of write transactions committed.
	Batches int64
	// Ops is the number of steps and other writes they carried; Ops/Batches is how many
	// share a transaction.
	Ops int64
}

// WriterStats reports how many transactions the writer ran and how many writes they held.
func (db *DB) WriterStats() WriterStats {
	return WriterStats{Batches: db.batches.Load(), Ops: db.batchedOps.Load()}
}

// IngestStats reports the ingestion backlog, for metrics.
func (db *DB) IngestStats() record.IngestStats {
	db.jmu.Lock()
	pb := db.pendingBytes
	db.jmu.Unlock()
	return record.IngestStats{PendingSteps: db.pendingN.Load(), PendingBytes: int64(pb), JournalBytes: db.journalBytes.Load()}
}

// Open opens (creating if needed) the database at path, applies pending migrations and
// starts the writer. The parent directory is created when missing.
func Open(ctx context.Context, path string, opts Options) (_ *DB, err error) {
	opts = opts.withDefaults()
	if path == "" {
		return nil, errors.New("storage: empty database path")
	}
	// The file itself, not a link to it: the lock, the journal and SQLite's own files belong
	// beside the database, and two names for one file must find the same lock.
	abs, err := ResolvePath(path)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("storage: create directory for %q: %w", abs, err)
	}

	db := &DB{
		path:       abs,
		opts:       opts,
		log:        opts.Logger,
		ops:        make(chan *op, opts.QueueSize),
		writerDone: make(chan struct{}),
		ckptKick:   make(chan struct{}, 1),
		ckptDone:   make(chan struct{}),

		pendSessions: make(map[string]int),
		kick:         make(chan struct{}, 1),
		ingestKick:   make(chan struct{}, 1),
	}
	db.owed.byID = make(map[string]*owedSummary)
	db.owed.delay, db.owed.max = opts.SummaryDelay, maxOwed
	db.room = sync.NewCond(&db.jmu)
	db.jidle = sync.NewCond(&db.jmu)

	defer func() {
		if err != nil {
			db.closeConns()
			// A database SQLite may not write fails where a start-up step first writes (a
			// migration, a replay of the journal) with SQLite's bare "attempt to write a
			// readonly database": the reason, known by then, comes first.
			if werr := db.CheckWritable(ctx); werr != nil && !errors.Is(err, storage.ErrReadOnly) {
				err = fmt.Errorf("%w (%w)", werr, err)
			}
		}
	}()
	if err := checkDatabaseFile(abs); err != nil {
		return nil, err
	}
	if db.lock, err = lockDatabase(abs); err != nil {
		if !errors.Is(err, ErrInUse) || !opts.Beside {
			return nil, err
		}
		db.beside = true
		db.opts.ManualIndex = true // the holder indexes
		db.owed.delay = -1         // the holder owns the summaries' mark
	}
	if !db.beside {
		if err := checkMissing(abs); err != nil {
			return nil, err
		}
		if err := createFile(ctx, abs); err != nil {
			return nil, err
		}
	}
	// Before tightenModes, which cannot change a companion owned by another user or made
	// immutable: the reason is then known when it fails.
	if err := companionsCreatable(abs); err != nil {
		return nil, err
	}
	db.companionsReadOnly = companionsWritable(abs)
	if !db.beside {
		if err := tightenModes(abs); err != nil {
			return nil, err
		}
	}
	if db.fileInfo, err = os.Stat(abs); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	// The writer pool is exactly one connection that never expires: the writer goroutine
	// is its only user, and statements prepared on it stay valid for the life of the DB.
	if db.w, err = openPool(ctx, abs, roleWriter, 1, opts.BusyTimeout); err != nil {
		return nil, err
	}
	if db.writerReadOnly, err = connReadOnly(ctx, db.w); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", abs, err)
	}
	if db.beside {
		// The holder migrated the database; a different schema is a different version of
		// Vigil, whose tables this one must not write.
		if err := sameSchema(ctx, db.w, migrationFiles); err != nil {
			return nil, fmt.Errorf("storage: %s: %w", abs, err)
		}
	} else if err := migrate(ctx, db.w, migrationFiles); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", abs, err)
	}
	if err := db.stmts.prepare(ctx, db.w); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", abs, err)
	}
	if !db.beside {
		// First: the summaries a crash left behind their stored steps, before the journal's
		// steps are added to them.
		if err := db.recoverSummaries(ctx); err != nil {
			return nil, fmt.Errorf("storage: %s: session summaries: %w", abs, err)
		}
		// Beside a holder, the journal is the holder's: replaying it here would store its
		// steps twice and empty it under the holder's feet.
		recs, err := db.openJournal()
		if err != nil {
			return nil, err
		}
		if err := db.replayJournal(ctx, recs); err != nil {
			return nil, fmt.Errorf("storage: %s: replay step journal: %w", abs, err)
		}
	}
	if db.ckpt, err = openPool(ctx, abs, roleCheckpointer, 1, opts.BusyTimeout); err != nil {
		return nil, err
	}
	if db.r, err = openPool(ctx, abs, roleReader, opts.Readers, opts.BusyTimeout); err != nil {
		return nil, err
	}
	if err := db.reads.prepare(ctx, db.r); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", abs, err)
	}

	if err := db.seedMinutes(ctx, time.Now()); err != nil {
		return nil, fmt.Errorf("storage: %s: read recent counts: %w", abs, err)
	}
	db.stopWatch, db.watchDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(db.watchDone)
		if db.beside {
			return // the holder watches the file and rescues it
		}
		db.watchFile(db.stopWatch, watchInterval)
	}()
	go db.writer()
	go db.checkpointer()
	db.stopOutbox, db.outboxDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(db.outboxDone)
		if !db.beside { // beside a holder, the holder stores the outbox
			db.drainOutbox(db.stopOutbox)
		}
	}()
	db.stopIndex, db.indexDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(db.indexDone)
		if !opts.ManualIndex {
			db.indexSteps(db.stopIndex)
		}
	}()
	return db, nil
}

// pageSize is the page size of databases Vigil creates: a WAL frame costs two system
// calls, and 16 KiB pages take a quarter of the frames 4 KiB pages do for the appended
// steps (storing a 1.5 KB step: 39 µs of CPU against 44 µs with 8 KiB pages).
const pageSize = 16384

// createFile creates the database file with Vigil's page size when it does not exist yet.
// The page size is fixed when the first page is written, and cannot change once the file
// is in WAL mode, which every connection's options set first: so a plain connection sets
// both, in that order, before any other opens the file. Existing files keep their size.
func createFile(ctx context.Context, abs string) error {
	if st, err := os.Stat(abs); err == nil && st.Size() > 0 {
		return nil
	}
	// Created first with its mode: SQLite would create it 0644, and its -wal and -shm
	// take the main file's mode.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, dbFileMode)
	if err != nil {
		return fmt.Errorf("storage: create %q: %w", abs, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("storage: create %q: %w", abs, err)
	}
	c, err := sql.Open("sqlite", fileURI(abs, nil))
	if err != nil {
		return fmt.Errorf("storage: create %q: %w", abs, err)
	}
	defer c.Close()
	c.SetMaxOpenConns(1)
	for _, q := range []string{fmt.Sprintf("PRAGMA page_size = %d", pageSize), "PRAGMA journal_mode = WAL"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("storage: create %q: %s: %w", abs, q, err)
		}
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("storage: create %q: %w", abs, err)
	}
	return nil
}

type connRole int

const (
	roleWriter connRole = iota
	roleReader
	roleCheckpointer
)

func openPool(ctx context.Context, abs string, role connRole, size int, busy time.Duration) (*sql.DB, error) {
	p, err := sql.Open("sqlite", dsn(abs, busy, role))
	if err != nil {
		return nil, fmt.Errorf("storage: open %q: %w", abs, err)
	}
	p.SetMaxOpenConns(size)
	p.SetMaxIdleConns(size)
	p.SetConnMaxLifetime(0)
	p.SetConnMaxIdleTime(0)
	if err := p.PingContext(ctx); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("storage: open %q: %w", abs, err)
	}
	return p, nil
}

// dsn builds a file: URI so that any path (spaces, '?', '#') reaches SQLite intact, with the
// pragmas each kind of connection needs. synchronous=NORMAL in WAL mode means a commit
// survives a process crash; only an OS crash or power loss can take the newest commits.
func dsn(abs string, busy time.Duration, role connRole) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	switch role {
	case roleReader:
		q.Add("_pragma", "query_only(1)")
	case roleWriter:
		// Take the write lock at BEGIN, so a transaction never fails half-way on upgrade.
		q.Set("_txlock", "immediate")
		// Checkpoints run on their own connection (see checkpointer), not inside the
		// writer's commits, where their fsyncs would stall every queued write.
		q.Add("_pragma", "wal_autocheckpoint(0)")
		// Once a checkpoint lets the WAL restart, shrink a file a burst made large.
		q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	}
	return fileURI(abs, q)
}

// fileURI is the file: URI of the absolute path abs with the query q (nil for none).
func fileURI(abs string, q url.Values) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // Windows drive paths: file:///C:/…
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

// JournalPaths are the two files of the step journal of the database at path. They belong
// with the database file (and its -wal) while Vigil runs; a clean Close leaves them empty.
func JournalPaths(path string) [2]string {
	return [2]string{path + "-steplog-0", path + "-steplog-1"}
}

// openJournal opens both journal files and returns the records they hold.
func (db *DB) openJournal() ([][]byte, error) {
	var all [][]byte
	for i, p := range JournalPaths(db.path) {
		j, recs, err := openJournal(p)
		if err != nil {
			return nil, err
		}
		// As the lock file: a journal root made must stay writable by the database's owner.
		if err := ownLikeDatabase(j.f, db.path); err != nil {
			_ = j.f.Close()
			return nil, fmt.Errorf("storage: step journal: %w", err)
		}
		j.total = &db.journalBytes
		db.journalBytes.Add(j.size)
		db.journals[i] = j
		all = append(all, recs...)
	}
	return all, nil
}

// Path is the absolute path of the database file.
func (db *DB) Path() string { return db.path }

// Describe names the database for logs and /api/info: its file.
func (db *DB) Describe() string { return db.path }

// Reader is the read-only connection pool, for queries of features that keep their own
// tables in this database. Writes through it fail (query_only). It does not wait for steps
// still in the journal: call Flush first to see every saved step.
func (db *DB) Reader() *sql.DB { return db.r }

// Close stops accepting writes, lets the writer commit everything already queued,
// checkpoints the WAL into the main file and closes all connections. It is safe to call
// more than once; later calls return the first call's result.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		// The indexer writes through the writer: it stops first.
		close(db.stopIndex)
		<-db.indexDone
		// So does the outbox's drain, which writes through the writer and reads the readers.
		close(db.stopOutbox)
		<-db.outboxDone
		db.mu.Lock()
		db.closed = true
		db.mu.Unlock()
		// Steps already past the closed check are journaled before the writer's last
		// ingestion (one may wait for a write the writer is running).
		db.steps.Wait()
		db.mu.Lock()
		close(db.ops)
		db.mu.Unlock()
		<-db.writerDone
		close(db.ckptKick)
		<-db.ckptDone
		close(db.stopWatch)
		<-db.watchDone

		var errs []error
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		if !db.beside {
			db.rescue(rctx)
		}
		rcancel()
		// Readers first: an open read snapshot would keep the checkpoint from truncating.
		db.reads.close()
		if err := db.r.Close(); err != nil {
			errs = append(errs, fmt.Errorf("storage: close readers: %w", err))
		}
		ctx, cancel := context.WithTimeout(context.Background(), db.opts.BusyTimeout)
		var busy, walFrames, copied int
		if db.beside {
			// The holder checkpoints its WAL; a TRUNCATE here would only wait for it.
		} else if db.CheckWritable(ctx) != nil {
			// No write could reach the WAL, and a checkpoint would fail as they did.
		} else if err := db.w.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").
			Scan(&busy, &walFrames, &copied); err != nil {
			errs = append(errs, fmt.Errorf("storage: checkpoint: %w", err))
		} else if busy != 0 {
			// Another process reads the database; the WAL stays and is replayed on next open.
			db.log.Warn("storage: final checkpoint incomplete", "walFrames", walFrames, "copied", copied)
		}
		cancel()
		if err := db.closeConns(); err != nil { // closing readers again is a no-op
			errs = append(errs, err)
		}
		db.closeErr = errors.Join(errs...)
	})
	return db.closeErr
}

// closeConns closes the prepared statements, every pool that is open and the journal.
func (db *DB) closeConns() error {
	db.stmts.close()
	db.reads.close()
	var errs []error
	for i, j := range db.journals {
		if j != nil {
			if err := j.close(); err != nil {
				errs = append(errs, err)
			}
			db.journals[i] = nil
		}
	}
	for _, p := range []*sql.DB{db.r, db.ckpt, db.w} {
		if p == nil {
			continue
		}
		if err := p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("storage: close: %w", err))
		}
	}
	// Last: the next opener may replay the journal only once this one is done with it.
	if err := db.lock.release(); err != nil {
		errs = append(errs, fmt.Errorf("storage: release lock: %w", err))
	}
	return errors.Join(errs...)
}

// checkpointer copies the WAL into the database file when the writer asks (every
// checkpointEvery writes), on its own connection, so the writer keeps committing meanwhile.
// PASSIVE never waits for readers or the writer; what it cannot copy now it copies next time.
func (db *DB) checkpointer() {
	defer close(db.ckptDone)
	for range db.ckptKick {
		ctx, cancel := context.WithTimeout(context.Background(), db.opts.BusyTimeout)
		// A passive checkpoint never catches up with a writer that never pauses, and the WAL
		// only restarts after a checkpoint that waited for readers: once the WAL is past its
		// limit, take the RESTART checkpoint so it cannot grow without bound.
		mode := "PASSIVE"
		if st, err := os.Stat(db.path + "-wal"); err == nil && st.Size() > walSizeLimit {
			mode = "RESTART"
		}
		if _, err := db.ckpt.ExecContext(ctx, "PRAGMA wal_checkpoint("+mode+")"); err != nil {
			db.log.Warn("storage: checkpoint failed", "err", err)
		}
		cancel()
	}
}

// DB is a complete storage backend.
var _ storage.Backend = (*DB)(nil)
