// Package postgres is the PostgreSQL storage backend: the same tables as storage/sqlite,
// shared by every replica of the guardian that points at one database.
//
// Ordering: every transaction that writes events first locks the one counter row
// (vigil_seq), takes its seqs from it, and sets it before committing; seqs therefore grow
// in commit order across connections and processes, which is what a live reader resuming
// with EventsAfter relies on. Each such transaction also runs pg_notify(NotifyChannel,
// highest seq), delivered on commit, so other replicas learn of new events without polling.
//
// Steps are written by a few committer goroutines: concurrent SaveStep calls are gathered
// into one transaction (group commit), so the counter lock and the commit are paid once per
// batch rather than once per step.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// NotifyChannel is the channel every event-writing transaction notifies with the highest
// seq it committed: storage.NotifyChannel, which the replicas' bus listens on.
const NotifyChannel = storage.NotifyChannel

// ErrSchemaTooNew is returned by Open and OpenReadOnly for a database migrated by a newer
// version of Vigil.
var ErrSchemaTooNew = errors.New("database schema is newer than this version of Vigil supports")

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("storage: database is closed")

// ErrTimeout is returned by a call the database did not answer within Options.QueryTimeout.
var ErrTimeout = errors.New("storage: the database did not answer in time")

//go:embed migrations/*.sql
var migrationFiles embed.FS

var _ storage.Backend = (*DB)(nil)

// Options tune a DB.
type Options struct {
	Logger *slog.Logger
	// MaxConns bounds the connection pool (default 16; a pool_max_conns parameter in the
	// URL wins). The committers hold one each while they write; the rest serve reads and
	// the other writes.
	MaxConns int32
	// Committers is how many step batches may be in flight at once (default 4): while one
	// commits, the next gathers the steps that arrived meanwhile and waits on the seq lock.
	Committers int
	// MaxBatch caps the steps of one transaction (default 512).
	MaxBatch int
	// QueryTimeout bounds each call of the backend on the guardian's request paths (a step
	// batch's commit, a hold, a read of a session or of the console), its wait for a pooled
	// connection included (default 5s); Search, Stats and the session list get six times
	// as long. A database that stops answering without closing the connection (a stalled
	// network path, a frozen server) then fails the request in bounded time, well within
	// the HTTP write timeout, instead of holding it as long as the stall: the guardian
	// answers an internal error and never a step it could not store. Export, Load and a
	// retention pass as a whole are not bounded (each of its batches is).
	QueryTimeout time.Duration
	// ConnectTimeout bounds opening one connection (default 5s; a connect_timeout in the
	// URL wins).
	ConnectTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 16
	}
	if o.Committers <= 0 {
		o.Committers = 4
	}
	if o.Committers >= int(o.MaxConns) {
		o.Committers = max(1, int(o.MaxConns)/2)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 5 * time.Second
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	return o
}

// bound gives a call of the backend its deadline (QueryTimeout), unless ctx ends sooner,
// and returns with it the function to defer with the call's error: `defer done(&err)`.
// pgx gives up on a statement whose context ends (it closes the connection), so a stalled
// connection frees its caller too. An error past that deadline is ErrTimeout, not the
// context's: the caller did not cancel anything, and must not report that it did.
func (db *DB) bound(ctx context.Context) (context.Context, func(*error)) {
	return db.boundFor(ctx, db.opts.QueryTimeout)
}

// boundSlow is bound for the console's reads that may scan much (search, statistics, the
// session list with a filter).
func (db *DB) boundSlow(ctx context.Context) (context.Context, func(*error)) {
	return db.boundFor(ctx, 6*db.opts.QueryTimeout)
}

func (db *DB) boundFor(parent context.Context, d time.Duration) (context.Context, func(*error)) {
	ctx, cancel := context.WithTimeout(parent, d)
	return ctx, func(err *error) {
		// Read before cancel, which ends ctx too.
		expired := ctx.Err() != nil && parent.Err() == nil
		cancel()
		if *err != nil && expired {
			// Not %w for the original error: it wraps context.DeadlineExceeded, which
			// callers read as their own request having been cancelled.
			*err = fmt.Errorf("%w (%s): %v", ErrTimeout, d, *err)
		}
	}
}

// DB is an open PostgreSQL database.
type DB struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	opts Options
	desc string

	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup // SaveStep calls between the closed check and their answer
	stepq    chan *stepReq
	stop     chan struct{}
	workers  sync.WaitGroup

	// batches and batchedSteps count the step transactions committed and their steps.
	batches, batchedSteps atomic.Int64
}

// IsURL reports whether dsn names a PostgreSQL database (postgres:// or postgresql://)
// rather than a SQLite file.
func IsURL(dsn string) bool {
	l := strings.ToLower(dsn)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// Open connects to the database dsn names, brings its schema up to date (refusing one
// newer than this code) and starts the step committers.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	opts = opts.withDefaults()
	pool, desc, err := connect(ctx, dsn, &opts)
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("storage: %s: %w", desc, err)
	}
	db := &DB{
		pool: pool, log: opts.Logger, opts: opts, desc: desc,
		stepq: make(chan *stepReq, 4*opts.MaxBatch),
		stop:  make(chan struct{}),
	}
	for range opts.Committers {
		db.workers.Go(db.committer)
	}
	return db, nil
}

// connect parses dsn, opens the pool and checks that the server answers. It adjusts
// opts.Committers to the pool's size.
func connect(ctx context.Context, dsn string, opts *Options) (*pgxpool.Pool, string, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, "", urlError(dsn, err)
	}
	// A pool_max_conns the URL names wins over the default.
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = opts.MaxConns
	}
	// Without one, a dial to a host that drops packets waits for the kernel (minutes).
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	}
	if opts.Committers >= int(cfg.MaxConns) {
		opts.Committers = max(1, int(cfg.MaxConns)/2)
	}
	desc := describe(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("storage: connect to %s: %w", desc, err)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout+opts.QueryTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, "", fmt.Errorf("storage: connect to %s: %w", desc, err)
	}
	return pool, desc, nil
}

// ErrNoSchema is returned by OpenReadOnly for a database Vigil has not created its tables
// in (an empty database, or the wrong one).
var ErrNoSchema = errors.New("database has no Vigil schema")

// ErrSchemaTooOld is returned by OpenReadOnly for a database an older version of Vigil
// migrated: only a guardian (Open) upgrades a schema.
var ErrSchemaTooOld = errors.New("database schema is older than this version of Vigil")

// schemaError is OpenReadOnly's refusal of a database's schema: its message says what is
// wrong and what to do, and errors.Is matches its kind (ErrNoSchema, ErrSchemaTooOld,
// ErrSchemaTooNew).
type schemaError struct {
	kind error
	msg  string
}

func (e *schemaError) Error() string { return e.msg }
func (e *schemaError) Unwrap() error { return e.kind }

// ReadOnly is a read-only handle on a Vigil database, for the commands that only read it
// (vigil export, vigil keys list, vigil users list). Unlike Open, OpenReadOnly never
// creates or migrates the schema: a command that reads must not give an empty (or
// mistyped) database Vigil's tables, nor upgrade a schema older replicas still run on, and
// it must work for a role that may only SELECT. It starts no committers and offers no
// writes.
type ReadOnly struct {
	db *DB
}

// OpenReadOnly connects to the database dsn names and checks that its schema is the one
// this code knows, changing nothing: it refuses a database without Vigil's schema
// (ErrNoSchema) and one older (ErrSchemaTooOld) or newer (ErrSchemaTooNew) than this
// code's, each with what to do about it. Reads need the SELECT privilege on Vigil's tables
// only.
func OpenReadOnly(ctx context.Context, dsn string, opts Options) (*ReadOnly, error) {
	opts = opts.withDefaults()
	pool, desc, err := connect(ctx, dsn, &opts)
	if err != nil {
		return nil, err
	}
	qctx, cancel := context.WithTimeout(ctx, opts.QueryTimeout)
	defer cancel()
	if err := checkSchema(qctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("storage: %s: %w", desc, err)
	}
	return &ReadOnly{db: &DB{pool: pool, log: opts.Logger, opts: opts, desc: desc, stop: make(chan struct{})}}, nil
}

// checkSchema compares the schema version the database records with this code's, with
// one SELECT (no lock, no table created: unlike migrate).
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	known := SchemaVersion()
	var current int
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM vigil_migrations`).Scan(&current)
	const create = "create it with `vigil serve --db URL`, or copy a SQLite installation into it with `vigil migrate --from FILE --to URL`"
	switch {
	case pgCode(err) == "42P01": // undefined_table
		return &schemaError{ErrNoSchema, ErrNoSchema.Error() + " (no vigil_migrations table): " + create}
	case err != nil:
		return fmt.Errorf("read schema version: %w", err)
	case current == 0:
		return &schemaError{ErrNoSchema, ErrNoSchema.Error() + " (no migration recorded in vigil_migrations): " + create}
	case current < known:
		return &schemaError{ErrSchemaTooOld, fmt.Sprintf("schema version %d is older than this Vigil's (%d): "+
			"upgrade it first by starting this version's guardian on it (`vigil serve --db URL`), "+
			"or use the Vigil that runs on it", current, known)}
	case current > known:
		return &schemaError{ErrSchemaTooNew, fmt.Sprintf("schema version %d is newer than this Vigil's (%d): "+
			"use the newer Vigil that migrated it", current, known)}
	}
	return nil
}

// Export writes records as DB.Export does.
func (ro *ReadOnly) Export(ctx context.Context, w io.Writer, opts record.ExportOptions) (record.ExportResult, error) {
	return ro.db.Export(ctx, w, opts)
}

// APIKeys lists every key as DB.APIKeys does (vigil keys list).
func (ro *ReadOnly) APIKeys(ctx context.Context) ([]record.APIKey, error) { return ro.db.APIKeys(ctx) }

// Users lists every account as DB.Users does (vigil users list).
func (ro *ReadOnly) Users(ctx context.Context) ([]record.User, error) { return ro.db.Users(ctx) }

// Describe names the database without its password.
func (ro *ReadOnly) Describe() string { return ro.db.desc }

// Close closes the connection pool.
func (ro *ReadOnly) Close() error { return ro.db.Close() }

// urlError reports why pgx refused dsn: its reason, which names the parameter at fault,
// without the connection string pgx quotes (pgx masks passwords there on a best-effort
// basis only) and with every password dsn holds masked, since a reason may quote a value
// (a password put in the wrong parameter).
func urlError(dsn string, err error) error {
	reason := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// Its text is "cannot parse `DSN`: REASON" or "… REASON (CAUSE)".
		reason = pe.Error()
		cause := ""
		if c := pe.Unwrap(); c != nil {
			cause = " (" + c.Error() + ")"
		}
		head := strings.TrimSuffix(reason, cause)
		if i := strings.LastIndex(head, "`: "); i >= 0 {
			reason = head[i+len("`: "):] + cause
		}
	}
	return errors.New("storage: invalid PostgreSQL URL: " + Redact(dsn, reason))
}

// Redact masks in s every password dsn holds: the URL's user info and password and
// sslpassword parameters, or a keyword/value DSN's password and sslpassword, each as
// written and percent-decoded. A malformed DSN is read every plausible way: masking too
// much of a message costs less than showing a password.
func Redact(dsn, s string) string {
	secrets := passwords(dsn)
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, p := range secrets {
		s = strings.ReplaceAll(s, p, "xxxxx")
	}
	return s
}

// kvPassword finds the values of the password and sslpassword keywords of a keyword/value
// DSN: quoted, quoted without the closing quote (the rest of the DSN), or plain.
var kvPassword = regexp.MustCompile(`(?i)(?:^|\s)(?:ssl)?password\s*=\s*(?:'((?:[^'\\]|\\.)*)'|'(.*)$|(\S+))`)

// passwords are the candidate passwords of dsn (see Redact).
func passwords(dsn string) []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		out = append(out, p)
		for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if d, err := unescape(p); err == nil && d != p && d != "" {
				out = append(out, d)
			}
		}
		if d := strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(p); d != p {
			out = append(out, d)
		}
	}
	if IsURL(dsn) {
		_, rest, _ := strings.Cut(dsn, "://")
		// The user info ends at an '@': pgx takes the last one before the path, but a
		// password with an unescaped '/', '?' or '@' makes that ambiguous, so each '@'
		// ends a candidate.
		for i := range len(rest) {
			if rest[i] != '@' {
				continue
			}
			if _, pw, ok := strings.Cut(rest[:i], ":"); ok {
				add(pw)
			}
		}
		for _, kv := range strings.FieldsFunc(rest, func(r rune) bool { return r == '?' || r == '&' }) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			if dk, err := url.QueryUnescape(k); err == nil {
				k = dk
			}
			if k = strings.ToLower(strings.TrimSpace(k)); k == "password" || k == "sslpassword" {
				add(v)
			}
		}
		return out
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		for _, v := range m[1:] {
			add(v)
		}
	}
	return out
}

// describe names the database without its password.
func describe(c *pgx.ConnConfig) string {
	host := c.Host
	if !strings.HasPrefix(host, "/") {
		host = net.JoinHostPort(host, strconv.Itoa(int(c.Port)))
	}
	return fmt.Sprintf("postgres://%s@%s/%s", c.User, host, c.Database)
}

// Describe names the database for logs and /api/info: its URL without the password.
func (db *DB) Describe() string { return db.desc }

// Pool is the connection pool, for LISTEN on NotifyChannel.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// IngestStats is zero: SaveStep writes straight to the tables.
func (db *DB) IngestStats() record.IngestStats { return record.IngestStats{} }

// Close waits for the steps being saved, stops the committers and closes the pool.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	db.mu.Unlock()
	db.inflight.Wait()
	close(db.stop)
	db.workers.Wait()
	db.pool.Close()
	return nil
}

func (db *DB) isClosed() bool {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return db.closed
}

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var ms []migration
	for i, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 {
			return nil, fmt.Errorf("migration %s: want number %03d", base, i+1)
		}
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	return ms, nil
}

// migrateLock is the advisory lock key replicas starting together migrate under, so that
// only one applies each migration ("vigilmig" in ASCII).
const migrateLock = 0x7669_6769_6c6d_6967

// migrate applies the migrations the database lacks, each in its own transaction with its
// row in vigil_migrations.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must go even when ctx ended.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, int64(migrateLock)); err != nil {
			conn.Conn().Close(uctx) // a session lock dies with its connection
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS vigil_migrations (
		version    integer PRIMARY KEY,
		name       text    NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM vigil_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	if current > len(ms) {
		return fmt.Errorf("%w: schema version %d, this build knows %d", ErrSchemaTooNew, current, len(ms))
	}
	for _, m := range ms[current:] {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO vigil_migrations (version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: %s: %w", m.name, err)
		}
	}
	return nil
}

// SchemaVersion is the number of migrations this build applies.
func SchemaVersion() int {
	ms, _ := migrations()
	return len(ms)
}

// seqTx is a transaction that writes events: it holds the counter row's lock from its
// first statement, takes seqs from it in memory, and stores the new value and notifies at
// the end (finish).
type seqTx struct {
	pgx.Tx
	ctx  context.Context
	next int64 // the last seq handed out
	base int64 // the counter's value when locked
}

// lockSeq locks the counter row and reads it.
func lockSeq(ctx context.Context, tx pgx.Tx) (*seqTx, error) {
	var cur int64
	if err := tx.QueryRow(ctx, `SELECT seq FROM vigil_seq WHERE id = 1 FOR UPDATE`).Scan(&cur); err != nil {
		return nil, fmt.Errorf("lock seq: %w", err)
	}
	return &seqTx{Tx: tx, ctx: ctx, next: cur, base: cur}, nil
}

// take hands out n seqs and returns the first.
func (t *seqTx) take(n int) int64 {
	first := t.next + 1
	t.next += int64(n)
	return first
}

// finish stores the counter and notifies listeners, when any seq was taken.
func (t *seqTx) finish() error {
	if t.next == t.base {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE vigil_seq SET seq = $1 WHERE id = 1`, t.next)
	b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, strconv.FormatInt(t.next, 10))
	if err := t.SendBatch(t.ctx, b).Close(); err != nil {
		return fmt.Errorf("store seq: %w", err)
	}
	return nil
}

// event inserts one event with the next seq and returns it as published.
func (t *seqTx) event(typ, sessionID string, at time.Time, payload []byte) (record.Event, error) {
	seq := t.take(1)
	if _, err := t.Exec(t.ctx, `INSERT INTO events (seq, type, session_id, at, payload)
		VALUES ($1, $2, $3, $4, $5)`, seq, typ, sessionID, at.UnixNano(), nullText(payload)); err != nil {
		return record.Event{}, fmt.Errorf("insert %s event: %w", typ, err)
	}
	return record.Event{Seq: seq, Type: typ, SessionID: sessionID, At: at, Payload: payload}, nil
}

// writeTx runs fn in a transaction that holds the seq lock, retrying it after a deadlock or
// serialization failure (fn must be safe to run again).
func (db *DB) writeTx(ctx context.Context, fn func(t *seqTx) error) error {
	if db.isClosed() {
		return ErrClosed
	}
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			t, err := lockSeq(ctx, tx)
			if err != nil {
				return err
			}
			if err := fn(t); err != nil {
				return err
			}
			return t.finish()
		})
		if err == nil || attempt >= 3 || !retryable(err) {
			return err
		}
	}
}

// plainTx runs fn in a transaction that writes no events (and so takes no seq lock).
func (db *DB) plainTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if db.isClosed() {
		return ErrClosed
	}
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, db.pool, fn)
		if err == nil || attempt >= 3 || !retryable(err) {
			return err
		}
	}
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// nullText stores JSON as text and an absent value as NULL.
func nullText(raw []byte) *string {
	if len(raw) == 0 {
		return nil
	}
	s := string(raw)
	return &s
}

// cleanText replaces what PostgreSQL text cannot hold (NUL bytes, invalid UTF-8) with
// U+FFFD.
func cleanText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// cleanJSON is cleanText for JSON: invalid UTF-8 inside its strings becomes U+FFFD (a NUL
// byte cannot be in valid JSON: it is escaped as \u0000).
func cleanJSON(raw []byte) []byte {
	if utf8.Valid(raw) {
		return raw
	}
	return []byte(strings.ToValidUTF8(string(raw), "\uFFFD"))
}

// nanos is how a time is stored: unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// norm is a time as stored and read back: UTC, nanosecond precision.
func norm(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(0, t.UnixNano()).UTC()
}
