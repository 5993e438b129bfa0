package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
)

func step(sid string) *record.StepRecord {
	return &record.StepRecord{SessionID: sid, Method: "steps/toolCallRequest", Kind: "toolCall", Decision: "allow"}
}

func TestMigrationsAreTrackedAndReopenIsANoop(t *testing.T) {
	dsn := pgtest.Need(t, srv)
	ctx := context.Background()
	db, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	rec := step("s")
	require.NoError(t, db.SaveStep(ctx, rec))
	require.NoError(t, db.Close())

	// Replicas starting together: every Open migrates under one lock, none fails.
	var wg sync.WaitGroup
	dbs := make([]*DB, 4)
	errs := make([]error, 4)
	for i := range dbs {
		wg.Go(func() { dbs[i], errs[i] = Open(ctx, dsn, Options{}) })
	}
	wg.Wait()
	for i := range dbs {
		require.NoError(t, errs[i])
		defer dbs[i].Close()
	}
	got, err := dbs[0].Step(ctx, rec.Seq)
	require.NoError(t, err)
	require.Equal(t, "s", got.SessionID)
	var versions []int
	rows, err := dbs[0].Pool().Query(ctx, `SELECT version FROM vigil_migrations ORDER BY version`)
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Len(t, versions, SchemaVersion())
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.Need(t, srv)
	ctx := context.Background()
	db, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	_, err = db.Pool().Exec(ctx, `INSERT INTO vigil_migrations (version, name) VALUES ($1, 'from the future')`, SchemaVersion()+1)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = Open(ctx, dsn, Options{})
	require.ErrorIs(t, err, ErrSchemaTooNew)
}

func TestDescribeHasNoPassword(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://vigil:s3cret@db.example:5433/guard?sslmode=require", "postgres://vigil@db.example:5433/guard"},
		{"postgresql://vigil@localhost/guard?password=s3cret", "postgres://vigil@localhost:5432/guard"},
	} {
		cfg, err := pgx.ParseConfig(tc.dsn)
		require.NoError(t, err)
		require.Equal(t, tc.want, describe(cfg))
	}
	_, err := Open(context.Background(), "postgres://u:s3cret@host:notaport/db", Options{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}

func TestIsURL(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://h/db": true, "postgresql://h/db": true, "POSTGRES://h/db": true,
		"vigil.db": false, "/var/lib/vigil/vigil.db": false, "postgres.db": false,
	} {
		require.Equal(t, want, IsURL(dsn), dsn)
	}
}

// TestNotifyOnCommit: every event-writing transaction notifies NotifyChannel with the
// highest seq it committed.
func TestNotifyOnCommit(t *testing.T) {
	db := openTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := db.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+NotifyChannel)
	require.NoError(t, err)
	next := func() int64 {
		n, err := conn.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		require.Equal(t, NotifyChannel, n.Channel)
		seq, err := strconv.ParseInt(n.Payload, 10, 64)
		require.NoError(t, err)
		return seq
	}
	rec := step("s")
	require.NoError(t, db.SaveStep(ctx, rec))
	require.Equal(t, rec.Seq, next())
	events, err := db.CreateHold(ctx, &record.Hold{ID: "h", SessionID: "s", Method: "m", OnTimeout: "deny"},
		&record.AuditEntry{Type: record.AuditHoldCreated})
	require.NoError(t, err)
	require.Equal(t, events[1].Seq, next(), "the highest seq of the transaction")
	// A write without events (and a failed one) notifies nothing.
	require.NoError(t, db.SetHoldSeq(ctx, "h", rec.Seq))
	_, _, err = db.ResolveHold(ctx, "nope", record.HoldResolution{Status: record.HoldDenied, Decision: "deny"}, nil)
	require.ErrorIs(t, err, record.ErrNotFound)
	ev := &record.Event{Type: "x"}
	require.NoError(t, db.AppendEvent(ctx, ev))
	require.Equal(t, ev.Seq, next())
}

// TestTwoProcessesShareOneSeqOrder: two DBs (as two replicas would) write concurrently;
// their seqs are one sequence, and a poller on either never skips an event.
func TestTwoProcessesShareOneSeqOrder(t *testing.T) {
	dsn := pgtest.Need(t, srv)
	ctx := context.Background()
	a, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	defer a.Close()
	b, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	defer b.Close()

	done := make(chan struct{})
	seenc := make(chan []int64, 1)
	go func() {
		var seen []int64
		var after int64
		poll := func() int {
			evs, err := b.EventsAfter(ctx, after, 5)
			if err != nil {
				t.Error(err)
				return 0
			}
			for _, e := range evs {
				seen = append(seen, e.Seq)
				after = e.Seq
			}
			return len(evs)
		}
		for {
			select {
			case <-done:
				for poll() > 0 {
				}
				seenc <- seen
				return
			default:
				poll()
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 8 {
		db := a
		if w%2 == 1 {
			db = b
		}
		wg.Go(func() {
			for i := range 40 {
				if i%10 == 9 {
					if _, err := db.AppendAudit(ctx, &record.AuditEntry{Type: "x.y"}); err != nil {
						t.Error(err)
					}
					continue
				}
				if err := db.SaveStep(ctx, step(fmt.Sprint("s", w))); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	close(done)
	seen := <-seenc
	var all []int64
	var after int64
	for {
		evs, err := a.EventsAfter(ctx, after, 1000)
		require.NoError(t, err)
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			all = append(all, e.Seq)
		}
		after = evs[len(evs)-1].Seq
	}
	require.Len(t, all, 8*40)
	require.Equal(t, all, seen)
}

// TestResolveHoldAcrossProcesses: of two replicas deciding one hold, one wins.
func TestResolveHoldAcrossProcesses(t *testing.T) {
	dsn := pgtest.Need(t, srv)
	ctx := context.Background()
	a, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	defer a.Close()
	b, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	defer b.Close()
	for round := range 10 {
		id := fmt.Sprint("h", round)
		_, err := a.CreateHold(ctx, &record.Hold{ID: id, SessionID: "s", Method: "m", OnTimeout: "deny"}, nil)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, db := range []*DB{a, b} {
			wg.Go(func() {
				_, _, errs[i] = db.ResolveHold(ctx, id, record.HoldResolution{Status: record.HoldApproved,
					Decision: "allow", DecidedBy: fmt.Sprint("replica", i)}, nil)
			})
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
			} else {
				require.ErrorIs(t, err, record.ErrHoldDecided)
			}
		}
		require.Equal(t, 1, wins)
	}
}

func TestWritesAfterCloseFail(t *testing.T) {
	db, err := Open(context.Background(), pgtest.Need(t, srv), Options{})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "Close twice is fine")
	require.ErrorIs(t, db.SaveStep(context.Background(), step("s")), ErrClosed)
	require.ErrorIs(t, db.AppendEvent(context.Background(), &record.Event{Type: "x"}), ErrClosed)
}

func TestContextCancellation(t *testing.T) {
	db := openTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, db.SaveStep(ctx, step("s")), context.Canceled)
	err := db.AppendEvent(ctx, &record.Event{Type: "x"})
	require.True(t, errors.Is(err, context.Canceled), err)
	_, err = db.Sessions(ctx, record.SessionQuery{})
	require.ErrorIs(t, err, context.Canceled)
}

// TestCloseWaitsForSavesInFlight: SaveStep calls racing Close either succeed (and their
// step is stored) or get ErrClosed; none is lost or hangs.
func TestCloseWaitsForSavesInFlight(t *testing.T) {
	dsn := pgtest.Need(t, srv)
	ctx := context.Background()
	db, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		saved []int64
	)
	for i := range 50 {
		wg.Go(func() {
			rec := step(fmt.Sprint("s", i%5))
			err := db.SaveStep(ctx, rec)
			if err == nil {
				mu.Lock()
				saved = append(saved, rec.Seq)
				mu.Unlock()
			} else if !errors.Is(err, ErrClosed) {
				t.Error(err)
			}
		})
	}
	require.NoError(t, db.Close())
	wg.Wait()
	db2, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	defer db2.Close()
	for _, seq := range saved {
		_, err := db2.Step(ctx, seq)
		require.NoError(t, err)
	}
}

// TestRefusedStepFailsAlone: a step PostgreSQL refuses (here an id too big for its index)
// fails its own SaveStep only; the steps that shared its batch are stored.
func TestRefusedStepFailsAlone(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	huge := make([]byte, 64<<10)
	_, _ = rand.Read(huge)
	var (
		wg   sync.WaitGroup
		bad  error
		errs = make([]error, 40)
	)
	wg.Go(func() { bad = db.SaveStep(ctx, step(hex.EncodeToString(huge))) })
	for i := range errs {
		wg.Go(func() { errs[i] = db.SaveStep(ctx, step(fmt.Sprint("s", i%4))) })
	}
	wg.Wait()
	require.Error(t, bad)
	for _, err := range errs {
		require.NoError(t, err)
	}
	page, err := db.Sessions(ctx, record.SessionQuery{})
	require.NoError(t, err)
	require.Len(t, page.Sessions, 4)
}

// stepBytes reads the steps' size total (counting what is not yet counted first) and
// recounts it from the steps.
func stepBytes(t *testing.T, db *DB) (total, recount int64) {
	t.Helper()
	ctx := context.Background()
	_, err := db.UsedBytes(ctx)
	require.NoError(t, err)
	var seq, upto int64
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT step_bytes, step_bytes_upto, seq, (SELECT coalesce(sum(vigil_step_bytes(s.request,
		s.response, s.matched_rules, s.text, s.search, s.peers)), 0) FROM steps s) FROM vigil_seq`).Scan(&total, &upto, &seq, &recount))
	require.Equal(t, seq, upto, "counted up to the newest seq")
	return total, recount
}

// TestStepBytesFollowTheSteps: the total retention by size reads is what the stored steps
// add up to after every kind of write, whether their steps were counted before or not, and
// close to what they take on disk.
func TestStepBytesFollowTheSteps(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	requireTotal := func(msg string) int64 {
		t.Helper()
		total, recount := stepBytes(t, db)
		require.Equal(t, recount, total, msg)
		return total
	}
	require.Zero(t, requireTotal("empty"))
	save := func(n int) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := range n {
					rec := step(fmt.Sprint("s", i%5))
					rec.ReceivedAt = time.Now().Add(time.Duration(w*n+i-4*n) * time.Hour)
					// A few KB that compress badly, and some large enough to be stored out of line.
					rec.Text = hex.EncodeToString([]byte(rand.Text() + strings.Repeat(rand.Text(), i*(1+w%2))))
					rec.Request = json.RawMessage(`{"text":"` + rec.Text + `"}`)
					if err := db.SaveStep(ctx, rec); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	// Counted while steps commit: each counted once.
	counting := make(chan struct{})
	go func() {
		defer close(counting)
		for range 20 {
			if _, err := db.UsedBytes(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	save(50)
	<-counting
	full := requireTotal("after concurrent batches")
	require.Positive(t, full)

	// Close to the tables' size once they hold nothing else (measured within 10 %; a
	// looser bound here, for small tables).
	for _, tbl := range []string{"steps", "events"} {
		_, err := db.Pool().Exec(ctx, `VACUUM FULL `+tbl)
		require.NoError(t, err)
	}
	var disk int64
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT pg_total_relation_size('steps') + pg_total_relation_size('events')`).Scan(&disk))
	require.InEpsilon(t, disk, full, 0.3, "estimate %d, tables %d", full, disk)
	require.Equal(t, full, requireTotal("a rewrite of the table changes nothing"))

	res, err := db.Prune(ctx, time.Now(), record.Retention{MaxAge: 100 * time.Hour, BatchSize: 30})
	require.NoError(t, err)
	require.Positive(t, res.Steps)
	afterAge := requireTotal("after pruning by age")
	require.Less(t, afterAge, full)
	require.Equal(t, res.UsedBefore-res.UsedAfter, full-afterAge, "the used size falls by what the steps counted")

	// Steps deleted before they were counted, and after.
	save(5)
	for _, which := range []string{"max", "min"} {
		_, err = db.Pool().Exec(ctx, `DELETE FROM steps WHERE seq = (SELECT `+which+`(seq) FROM steps)`)
		require.NoError(t, err)
		requireTotal("after an administrator's delete of the " + which + " seq")
	}
	_, err = db.Pool().Exec(ctx, `UPDATE steps SET text = text || text WHERE seq = (SELECT max(seq) FROM steps)`)
	require.NoError(t, err)
	requireTotal("after an update")
	_, err = db.Pool().Exec(ctx, `TRUNCATE steps`)
	require.NoError(t, err)
	require.Zero(t, requireTotal("after a truncate"))
}

// TestLoadedStepsAreCounted: the steps `vigil migrate` loads are counted as any others.
func TestLoadedStepsAreCounted(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	var steps []record.StepRecord
	for i := range 3 * stepBytesChunk / 2 {
		rec := step(fmt.Sprint("s", i%3))
		rec.Seq, rec.ReceivedAt = int64(2*i+1), time.Now()
		rec.Text = strings.Repeat(fmt.Sprint(i), 100)
		steps = append(steps, *rec)
	}
	_, err := db.Load(ctx, func(l *Loader) error { return l.Steps(steps) })
	require.NoError(t, err)
	got, want := stepBytes(t, db)
	require.Positive(t, want)
	require.Equal(t, want, got, "counted in several chunks")
	require.NoError(t, db.SaveStep(ctx, step("s0")))
	got, want = stepBytes(t, db)
	require.Equal(t, want, got, "and on after the load")
}

// TestSurvivesKilledConnections: connections the server ends (a restart, a failover, an
// administrator) cost at most the writes in flight; the pool reconnects for the next ones.
func TestSurvivesKilledConnections(t *testing.T) {
	dsn := pgtest.Need(t, srv)
	db := openTest(t)
	ctx := context.Background()
	require.NoError(t, db.SaveStep(ctx, step("s")))
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	require.NoError(t, err)
	// The first use of a dead connection may fail; within a few tries the pool has new ones.
	var saved int
	for range 10 {
		if db.SaveStep(ctx, step("s")) == nil {
			saved++
		}
	}
	require.GreaterOrEqual(t, saved, 5)
	s, err := db.Session(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(saved+1), s.Steps)
}

// TestEventOfAMissingStepIsNull: a step row deleted apart from its event (pruned between
// the two reads of a page) is published as null rather than failing the page.
func TestEventOfAMissingStepIsNull(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	var seqs []int64
	for range 3 {
		rec := step("s")
		require.NoError(t, db.SaveStep(ctx, rec))
		seqs = append(seqs, rec.Seq)
	}
	_, err := db.Pool().Exec(ctx, `DELETE FROM steps WHERE seq = $1`, seqs[1])
	require.NoError(t, err)
	for _, p := range []record.EventPage{{}, {MaxStepBulk: 10}, {MaxBytes: 1 << 20}} {
		evs, err := db.EventsPage(ctx, 0, p)
		require.NoError(t, err)
		require.Len(t, evs, 3)
		require.Equal(t, "null", string(evs[1].Payload))
		require.Contains(t, string(evs[0].Payload), `"seq":`)
		require.Contains(t, string(evs[2].Payload), `"seq":`)
	}
}

// TestOpenNamesWhatIsWrongWithTheURL: a URL the driver cannot parse is reported with the
// driver's reason, which names the parameter, and without the password wherever it was
// (user info, a password or sslpassword parameter, a keyword/value DSN), also when the
// driver quotes the connection string or a bad value that is the password.
func TestOpenNamesWhatIsWrongWithTheURL(t *testing.T) {
	const pw = "s3cretPW"
	tests := []struct{ dsn, want string }{
		{"postgres://vigil:" + pw + "@127.0.0.1:42999/vigil?sslmode=bogus", "sslmode is invalid"},
		{"postgres://vigil:" + pw + "@127.0.0.1:42999/vigil?pool_max_conns=0", "pool_max_conns too small"},
		{"postgres://vigil:" + pw + "@127.0.0.1:42999/vigil?pool_max_conns=" + pw, "cannot parse pool_max_conns"},
		{"postgres://vigil:" + pw + "%21@127.0.0.1:42999/vigil?connect_timeout=" + pw + "%21", "invalid connect_timeout"},
		{"postgres://vigil:" + pw + "@127.0.0.1:notaport/vigil", "invalid port"},
		{"postgres://vigil:" + pw + "/x@127.0.0.1/vigil?sslmode=bogus", "invalid port"},
		{"postgres://vigil:" + pw + " x@127.0.0.1/vigil", "spaces found in password"},
		{"postgresql://vigil@127.0.0.1:42999/vigil?password=" + pw + "&connect_timeout=" + pw, "invalid connect_timeout"},
		{"postgres://vigil@127.0.0.1:42999/vigil?sslpassword=" + pw + "&pool_max_conn_lifetime=" + pw, "cannot parse pool_max_conn_lifetime"},
		{"postgres://vigil@127.0.0.1:42999/vigil?PassWord=" + pw + "&sslmode=bogus", "sslmode is invalid"},
		{"host=127.0.0.1 port=42999 user=vigil password=" + pw + " sslmode=bogus", "sslmode is invalid"},
		{"host=127.0.0.1 user=vigil password='" + pw + "' connect_timeout=" + pw, "invalid connect_timeout"},
		{"host=127.0.0.1 user=vigil password='" + pw + " x", "unterminated quoted string"},
	}
	for _, tc := range tests {
		_, err := Open(context.Background(), tc.dsn, Options{})
		require.Error(t, err, tc.dsn)
		require.Contains(t, err.Error(), "storage: invalid PostgreSQL URL: ", tc.dsn)
		require.Contains(t, err.Error(), tc.want, tc.dsn)
		require.NotContains(t, err.Error(), pw, tc.dsn)
		require.NotContains(t, err.Error(), strings.ToLower(pw), tc.dsn)
	}
}
