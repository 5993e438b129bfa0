package systest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/storage/sqlite"

	_ "modernc.org/sqlite"
)

const (
	soakAgents  = 8
	soakSlow    = 3 // websocket clients that read one frame every slowReadGap
	soakStalled = 3 // websocket clients that never read, reconnecting every stallFor
	slowReadGap = 5 * time.Millisecond
	stallFor    = 3 * time.Second
	// soakWALLimit bounds the WAL file. The guardian checkpoints it into the database as it
	// goes (and trims it to 64 MiB when it restarts), so under steady load it should stay
	// near that size; the load stops early once it is past this.
	soakWALLimit = 512 << 20
	// fdSlack allows for files the server opens lazily and keeps, e.g. one more pooled
	// SQLite connection (its database and WAL files).
	fdSlack = 2
)

// soakDuration is VIGIL_SOAK (a Go duration), 60s by default.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("VIGIL_SOAK")
	if v == "" {
		return 60 * time.Second
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "VIGIL_SOAK")
	require.GreaterOrEqual(t, d, 20*time.Second, "VIGIL_SOAK: too short to compare memory over time")
	return d
}

type sample struct {
	rssKB    int64
	fds      int
	thread   int64
	walBytes int64
}

// TestSoak drives the guardian at full speed from soakAgents agents for VIGIL_SOAK while
// websocket clients watch: one reads everything, some read slowly, some never read. It
// requires no failed agent request, flat memory (median RSS of the last quarter at most
// 1.5x that of the first, after warm-up), a bounded WAL file, every descriptor released and
// no goroutine left serving a connection once the clients leave, and the reading client to
// have received every stored step event, in seq order.
func TestSoak(t *testing.T) {
	bin := vigilBin(t)
	if runtime.GOOS != "linux" {
		t.Skip("the soak test samples /proc")
	}
	dur := soakDuration(t)
	dbPath := filepath.Join(t.TempDir(), "vigil.db")
	p := startVigil(t, bin, dbPath)
	client := newClient(soakAgents * 2)
	wsURL := "ws" + strings.TrimPrefix(p.URL, "http") + "/api/live"

	// The reading client starts from the beginning of the log, before any step.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reader := &liveReader{url: wsURL}
	var readerWG sync.WaitGroup
	readerWG.Go(func() { reader.run(ctx) })

	baseline, warmOK := warmUp(t, client, p)
	t.Logf("warm-up done; server at rest holds %d descriptors", baseline)

	// Slow and stalled consumers, churning connections for the whole run.
	var (
		wsWG sync.WaitGroup
		cons consumers
	)
	wsCtx, wsCancel := context.WithCancel(ctx)
	for range soakSlow {
		wsWG.Go(func() { cons.slow(wsCtx, wsURL) })
	}
	for range soakStalled {
		wsWG.Go(func() { cons.stalled(wsCtx, wsURL) })
	}

	// Sample the server while the agents run; samples is read once the sampler is done.
	start := time.Now()
	var samples []sample
	sampCtx, sampCancel := context.WithCancel(ctx)
	loadCtx, loadCancel := context.WithCancel(ctx)
	defer loadCancel()
	var (
		sampWG     sync.WaitGroup
		walTooBig  atomic.Int64 // the load time at which the WAL passed soakWALLimit
		walTooBigN atomic.Int64 // and its size then
	)
	sampWG.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			rss, err1 := procStatus(p.Pid(), "VmRSS")
			threads, err2 := procStatus(p.Pid(), "Threads")
			fds, err3 := openFDs(p.Pid())
			wal := fileSize(dbPath + "-wal")
			if err1 == nil && err2 == nil && err3 == nil {
				samples = append(samples, sample{rssKB: rss, fds: fds, thread: threads, walBytes: wal})
			}
			if wal > soakWALLimit && walTooBig.Load() == 0 {
				// Stop before the disk fills: the run has failed already.
				walTooBig.Store(int64(time.Since(start)))
				walTooBigN.Store(wal)
				loadCancel()
			}
			select {
			case <-sampCtx.Done():
				return
			case <-tick.C:
			}
		}
	})

	load := runAgents(loadCtx, client, p.URL, "soak", dur)
	sampCancel()
	sampWG.Wait()
	wsCancel()
	wsWG.Wait()
	client.CloseIdleConnections()

	// Every answered step reaches the reading client.
	var st struct {
		Steps int64 `json:"steps"`
	}
	getStats(t, client, p.URL, &st)
	require.Eventually(t, func() bool { return reader.stepCount() >= st.Steps }, 60*time.Second, 50*time.Millisecond,
		"the reading client got %d of %d steps", reader.stepCount(), st.Steps)
	cancel()
	readerWG.Wait()
	client.CloseIdleConnections()

	// Every connection the clients opened is closed again on the server.
	var fdsAfter int
	select {
	case <-p.exited:
		t.Fatalf("the server exited during the soak: %v\n%s", p.err, p.tail())
	default:
	}
	require.Eventually(t, func() bool {
		n, err := openFDs(p.Pid())
		fdsAfter = n
		return err == nil && n <= baseline+fdSlack
	}, 30*time.Second, 100*time.Millisecond, "descriptors after the clients left: %d, at rest before: %d\n%s", fdsAfter, baseline, p.tail())
	fdsAfter = settledFDs(t, p.Pid())
	require.LessOrEqual(t, fdsAfter, baseline+fdSlack)

	dbSize, walSize := fileSize(dbPath), fileSize(dbPath+"-wal")

	// No goroutine is left serving a connection. SIGQUIT also ends the server abruptly, so
	// the database is then read as after a crash.
	stacks := p.goroutines()
	var connStacks []string
	for _, g := range stacks {
		for _, fn := range connFuncs {
			if strings.Contains(g, fn) {
				connStacks = append(connStacks, g)
				break
			}
		}
	}
	dbCount, dbSum, dbMin, dbMax := stepSeqs(t, dbPath)
	require.NoError(t, sqlite.IntegrityCheck(context.Background(), dbPath))

	// The report: numbers for docs/testing.md.
	rss := make([]int64, len(samples))
	for i, s := range samples {
		rss[i] = s.rssKB
	}
	// The steady state starts after a tenth of the run; its first and last quarters compare.
	var first, last int64
	if warm := max(len(samples)/10, 3); len(samples)-warm >= 8 {
		steady := rss[warm:]
		q := len(steady) / 4
		first, last = median(steady[:q]), median(steady[len(steady)-q:])
	}
	peakFDs := 0
	for _, s := range samples {
		peakFDs = max(peakFDs, s.fds)
	}
	t.Logf("soak: %s of load, %d agents, %d requests (%.0f req/s), %d failed; latency p50 %s p99 %s max %s",
		load.elapsed.Round(time.Millisecond), soakAgents, load.ok+int64(load.errs.count()),
		float64(load.ok)/load.elapsed.Seconds(), load.errs.count(), load.p50, load.p99, load.max)
	t.Logf("soak: RSS MiB every second: %s", formatRSS(rss))
	require.NotEmpty(t, samples, "no samples of the server")
	t.Logf("soak: RSS median first quarter %.1f MiB, last quarter %.1f MiB (x%.2f), peak %.1f MiB; threads %d..%d",
		float64(first)/1024, float64(last)/1024, float64(last)/float64(first), float64(slices.Max(rss))/1024,
		samples[0].thread, samples[len(samples)-1].thread)
	t.Logf("soak: websocket: %d slow/stalled connections opened (%d failed to open), the slow ones saw "+
		"the server end theirs %d times (late: first they read what the kernel had buffered); "+
		"reading client: %d step events in order, %d reconnects",
		cons.dials.Load(), cons.errs.count(), cons.dropped.Load(), reader.stepCount(), reader.reconnects.Load())
	var wal []string
	for i := 0; i < len(samples); i += 10 {
		wal = append(wal, fmt.Sprintf("%.0f", float64(samples[i].walBytes)/(1<<20)))
	}
	t.Logf("soak: WAL MiB every 10 s: %s", strings.Join(wal, " "))
	t.Logf("soak: descriptors at rest %d, peak %d, after the clients left %d", baseline, peakFDs, fdsAfter)
	t.Logf("soak: %d goroutines at rest after the clients left, %d of them serving a connection",
		len(stacks), len(connStacks))
	t.Logf("soak: database %.1f MiB with %d steps, WAL %.1f MiB", float64(dbSize)/(1<<20), dbCount, float64(walSize)/(1<<20))

	require.Zero(t, walTooBig.Load(), "the WAL grew past %d MiB (%d MiB after %s of load): checkpoints "+
		"do not keep up with sustained writes, so it never restarts; disk use and the final "+
		"checkpoint grow without bound", soakWALLimit>>20, walTooBigN.Load()>>20,
		time.Duration(walTooBig.Load()).Round(time.Second))
	require.Empty(t, connStacks, "goroutines left serving connections; the first:\n%s", firstOf(connStacks))
	require.Positive(t, first, "too few RSS samples: %d", len(samples))
	require.Zero(t, load.errs.count(), "failed agent requests: %s", &load.errs)
	require.Positive(t, load.ok)
	require.EqualValues(t, load.ok+warmOK, st.Steps, "every answered step is stored once")
	require.LessOrEqual(t, float64(last), 1.5*float64(first), "memory grew: RSS medians %d kB then %d kB", first, last)
	require.Empty(t, reader.violation(), "the reading client saw events out of order")
	require.EqualValues(t, dbCount, reader.stepCount(), "the reading client got every stored step")
	reader.mu.Lock()
	require.Equal(t, []int64{dbSum, dbMin, dbMax}, []int64{reader.sum, reader.min, reader.max})
	reader.mu.Unlock()
	require.Positive(t, cons.dials.Load())
	require.Zero(t, cons.errs.count(), "websocket connections refused: %s", &cons.errs)
}

// connFuncs are functions only a goroutine serving an HTTP or websocket connection runs.
var connFuncs = []string{"net/http.(*conn).serve", "live.(*Hub).serve", "live.(*Hub).readLoop",
	"live.(*Hub).writeLoop", "live.(*Hub).replay", "live.(*Hub).ServeHTTP"}

// warmUp runs a short burst of traffic and reads, so the server opens the files it keeps
// (its pooled database connections), then waits for the descriptor count to settle. It
// returns that count and the number of steps answered.
func warmUp(t *testing.T, client *http.Client, p *proc) (fds int, answered int64) {
	t.Helper()
	ctx := context.Background()
	load := runAgents(ctx, client, p.URL, "warm", 2*time.Second)
	require.Zero(t, load.errs.count(), "warm-up: %s", &load.errs)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			var st struct{ Steps int64 }
			getStats(t, client, p.URL, &st)
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	return settledFDs(t, p.Pid()), load.ok
}

// settledFDs waits until the descriptor count stays the same for a second.
func settledFDs(t *testing.T, pid int) int {
	t.Helper()
	last, stable := -1, 0
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		n, err := openFDs(pid)
		require.NoError(t, err)
		if n == last {
			stable++
		} else {
			last, stable = n, 0
		}
		if stable >= 10 {
			return n
		}
		require.True(t, time.Now().Before(deadline), "descriptor count did not settle")
	}
	return last
}

type loadResult struct {
	ok            int64
	errs          counter
	elapsed       time.Duration
	p50, p99, max time.Duration
}

// runAgents drives soakAgents agents in a closed loop for d: each posts a step, waits for
// the answer, and posts the next.
func runAgents(ctx context.Context, client *http.Client, base, prefix string, d time.Duration) *loadResult {
	res := &loadResult{}
	lat := make([][]time.Duration, soakAgents)
	var wg sync.WaitGroup
	var ok atomic.Int64
	start := time.Now()
	stop := start.Add(d)
	for a := range soakAgents {
		wg.Go(func() {
			session := fmt.Sprintf("%s-a%d", prefix, a)
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				if err := postStep(ctx, client, base, stepBody(session, fmt.Sprintf("step-%d", i), i)); err != nil {
					if ctx.Err() == nil { // not a request the test itself called off
						res.errs.add(err)
					}
					continue
				}
				lat[a] = append(lat[a], time.Since(t0))
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.ok = ok.Load()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) > 0 {
		slices.Sort(all)
		res.p50, res.p99, res.max = all[len(all)/2], all[len(all)*99/100], all[len(all)-1]
	}
	return res
}

func getStats(t *testing.T, client *http.Client, base string, v any) {
	t.Helper()
	resp, err := client.Get(base + "/api/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

// liveReader reads every event from /api/live, from the start of the log, reconnecting with
// ?after= when the server drops it. It keeps a summary of the step seqs, not the seqs.
type liveReader struct {
	url        string
	reconnects atomic.Int64

	mu                   sync.Mutex
	last                 int64 // highest seq seen, any type
	count, sum, min, max int64 // of step seqs
	outOfOrder           []string
}

func (r *liveReader) run(ctx context.Context) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			r.reconnects.Add(1)
		}
		r.mu.Lock()
		after := r.last
		r.mu.Unlock()
		conn, _, err := d.DialContext(ctx, fmt.Sprintf("%s?after=%d", r.url, after), nil)
		if err != nil {
			pause(ctx)
			continue
		}
		stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				break
			}
			var ev struct {
				Seq  int64  `json:"seq"`
				Type string `json:"type"`
			}
			if json.Unmarshal(msg, &ev) != nil {
				r.violate(fmt.Sprintf("undecodable frame %.80s", msg))
				continue
			}
			if ev.Seq == 0 {
				continue // stats ticks are not part of the log
			}
			r.see(ev.Seq, ev.Type)
		}
		stop()
		_ = conn.Close()
	}
}

func (r *liveReader) see(seq int64, typ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq <= r.last {
		if len(r.outOfOrder) < 10 {
			r.outOfOrder = append(r.outOfOrder, fmt.Sprintf("seq %d after %d", seq, r.last))
		}
		return
	}
	r.last = seq
	if typ != "step" {
		return
	}
	if r.count == 0 {
		r.min = seq
	}
	r.count++
	r.sum += seq
	r.max = seq
}

func (r *liveReader) violate(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.outOfOrder) < 10 {
		r.outOfOrder = append(r.outOfOrder, s)
	}
}

func (r *liveReader) violation() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outOfOrder)
}

func (r *liveReader) stepCount() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// consumers are the websocket clients that do not keep up, with their tallies.
type consumers struct {
	dials, dropped atomic.Int64
	errs           counter
}

// slow follows the live stream reading one frame every slowReadGap, far below the event
// rate, so the server drops it; once it has read what was sent before the drop, it
// reconnects, live, and is dropped again.
func (c *consumers) slow(ctx context.Context, url string) {
	d := smallBufferDialer()
	for ctx.Err() == nil {
		conn, _, err := d.DialContext(ctx, url, nil)
		if err != nil {
			if ctx.Err() == nil {
				c.errs.add(err)
			}
			pause(ctx)
			continue
		}
		c.dials.Add(1)
		stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
		gap := time.NewTicker(slowReadGap)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				if ctx.Err() == nil {
					// The server ended the connection: with 1008 "too slow" when it could
					// still send the close frame, else by closing the socket.
					c.dropped.Add(1)
				}
				break
			}
			// A slow consumer by definition: the pause between reads is the point.
			select {
			case <-ctx.Done():
			case <-gap.C:
			}
		}
		gap.Stop()
		stop()
		_ = conn.Close()
	}
}

// stalled connects and never reads (a frozen browser tab), then after stallFor closes and
// connects again.
func (c *consumers) stalled(ctx context.Context, url string) {
	d := smallBufferDialer()
	for ctx.Err() == nil {
		conn, _, err := d.DialContext(ctx, url, nil)
		if err != nil {
			if ctx.Err() == nil {
				c.errs.add(err)
			}
			pause(ctx)
			continue
		}
		c.dials.Add(1)
		timer := time.NewTimer(stallFor)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
		_ = conn.Close()
	}
}

// smallBufferDialer dials with a small socket receive buffer, as a consumer across a slow
// network: what it does not read soon holds up the server's writes, instead of piling up
// in megabytes of loopback buffers.
func smallBufferDialer() *websocket.Dialer {
	nd := &net.Dialer{Timeout: 10 * time.Second}
	return &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := nd.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(8 << 10)
			}
			return c, nil
		},
	}
}

// pause waits a moment before a client dials again after a failed dial.
func pause(ctx context.Context) {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// stepSeqs summarises the stored step seqs, read from the file after the server exited
// (query_only, but allowed to recover the WAL index the server left).
func stepSeqs(t *testing.T, dbPath string) (count, sum, lo, hi int64) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=rw&_pragma=query_only(1)")
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.QueryRow(`SELECT count(*), coalesce(sum(seq), 0), coalesce(min(seq), 0),
		coalesce(max(seq), 0) FROM steps`).Scan(&count, &sum, &lo, &hi))
	return count, sum, lo, hi
}

// firstOf is the first of stacks, or "".
func firstOf(stacks []string) string {
	if len(stacks) == 0 {
		return ""
	}
	return stacks[0]
}

// fileSize is the size of the file at path, 0 when it does not exist.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func formatRSS(kb []int64) string {
	parts := make([]string, len(kb))
	for i, v := range kb {
		parts[i] = fmt.Sprintf("%.0f", float64(v)/1024)
	}
	return strings.Join(parts, " ")
}
