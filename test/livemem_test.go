package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

const (
	// liveMemSteps steps of about liveMemStepBytes of text each (request and text: twice that, under
	// the 64 KiB a live frame carries whole), and liveMemBigSteps of 1 MB (sent truncated).
	liveMemSteps     = 2000
	liveMemStepBytes = 16 << 10
	liveMemBigSteps  = 5
	// liveMemClients stalled consoles replay the whole log (?after=0) and never read.
	liveMemClients = 200
	// liveMemHold is how long they stay connected while the server's RSS is sampled: past the
	// time their replays need to fill their sockets and block.
	liveMemHold = 5 * time.Second
	// liveMemPeakGrowthMiB bounds the server's RSS growth over its idle RSS with the log stored
	// while every client is stalled (each may hold one replay page of 256 KiB and one frame;
	// the rest is garbage the collector has not reached yet). Before the replay was paged
	// in bytes, each client held 500 steps (16 MB here) and the server grew by gigabytes.
	liveMemPeakGrowthMiB = 200
	// liveMemRoundGrowthMiB bounds how much more RSS a second round of clients leaves than the
	// first: nothing of a client is kept once it is gone.
	liveMemRoundGrowthMiB = 64
	// liveMemSettle bounds the wait for the server to let go of closed connections.
	liveMemSettle = 30 * time.Second
)

// TestLiveReplayMemory stores a log of big steps, connects liveMemClients websocket clients that
// replay it from the start and never read, and samples the server's RSS (VmRSS) while they
// are connected; then closes them, waits until the server has let go of every connection,
// and does it all again. Memory per live client is bounded, replay included: the peak
// stays within liveMemPeakGrowthMiB of the idle RSS, the second round needs no more memory than
// the first, and at the end no goroutine serves a live connection (nothing of the clients
// is kept). One client more than --max-live-clients is refused.
//
// The server runs with GOGC=100 so that RSS reflects what the clients make it hold rather
// than the collector's headroom: vigil's default of 400 lets the heap grow to five times
// its live size between collections, whoever allocates.
//
// It takes about half a minute and a few hundred megabytes; it runs when VIGIL_MEMTEST=1.
func TestLiveReplayMemory(t *testing.T) {
	bin := vigilBin(t)
	if os.Getenv("VIGIL_MEMTEST") != "1" {
		t.Skip("set VIGIL_MEMTEST=1 to run the live replay memory test")
	}
	t.Setenv("GOGC", "100")
	p := startVigil(t, bin, filepath.Join(t.TempDir(), "vigil.db"),
		"--max-live-clients", fmt.Sprint(liveMemClients), "--max-live-per-client", fmt.Sprint(liveMemClients))
	client := newClient(8)
	defer client.CloseIdleConnections()
	storeBigSteps(t, client, p.URL)

	base := settledRSS(t, p.Pid())
	sockets := openSockets(t, p.Pid())
	liveURL := "ws" + strings.TrimPrefix(p.URL, "http") + "/api/live?after=0"
	var peaks, afters []int64
	for round := range 2 {
		peak := stallClients(t, p, liveURL, base, round == 0)
		// The server notices the closes and lets go of the connections.
		waitUntil(t, liveMemSettle, func() bool { return openSockets(t, p.Pid()) <= sockets },
			"the server still holds connections of clients that left")
		after := rssKB(t, p.Pid())
		t.Logf("round %d: %d stalled clients replaying %d steps of %d KiB and %d of 1 MiB: RSS idle %.0f MiB, "+
			"peak %.0f MiB (+%.0f), once they left %.0f MiB (+%.0f)", round+1,
			liveMemClients, liveMemSteps, liveMemStepBytes>>10, liveMemBigSteps, mib(base), mib(peak), mib(peak-base), mib(after), mib(after-base))
		peaks, afters = append(peaks, peak), append(afters, after)
	}
	for _, peak := range peaks {
		require.LessOrEqual(t, peak-base, int64(liveMemPeakGrowthMiB<<10), "RSS grew too much with stalled live clients")
	}
	require.LessOrEqual(t, afters[1]-afters[0], int64(liveMemRoundGrowthMiB<<10),
		"the second round of clients needed memory the first did not give back")
	// Nothing serves the clients any more: no goroutine is left in the hub's handlers.
	for _, g := range p.goroutines() {
		for _, fn := range connFuncs {
			if strings.HasPrefix(fn, "live.") {
				require.NotContains(t, g, fn, "a live connection's goroutine outlived its client")
			}
		}
	}
}

// stallClients connects liveMemClients clients that never read, samples the server's RSS for
// liveMemHold, closes them and returns the highest RSS seen. With refuse, it also checks that a
// client beyond --max-live-clients is refused.
func stallClients(t *testing.T, p *proc, liveURL string, base int64, refuse bool) int64 {
	t.Helper()
	conns := make([]*websocket.Conn, liveMemClients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	var (
		wg   sync.WaitGroup
		errs counter
	)
	sem := make(chan struct{}, 16)
	for i := range conns {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			conn, resp, err := smallBufferDialer().Dial(liveURL, nil)
			if err != nil {
				errs.add(err)
				return
			}
			_ = resp.Body.Close()
			conns[i] = conn
		})
	}
	wg.Wait()
	require.Zero(t, errs.count(), "connecting: %v", &errs)

	if refuse {
		_, resp, err := smallBufferDialer().Dial(liveURL, nil)
		require.ErrorIs(t, err, websocket.ErrBadHandshake)
		var body struct{ Error struct{ Code string } }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		_ = resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Equal(t, "too_many_live_clients", body.Error.Code)
	}

	var peak int64
	deadline := time.Now().Add(liveMemHold)
	for time.Now().Before(deadline) {
		peak = max(peak, rssKB(t, p.Pid()))
		// Past four times the bound the outcome is clear: stop before the machine suffers.
		if peak-base > 4*liveMemPeakGrowthMiB<<10 {
			break
		}
		pause(context.Background())
	}
	return peak
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, d, 100*time.Millisecond, msg)
}

// storeBigSteps posts liveMemSteps messages of liveMemStepBytes of text and liveMemBigSteps of 1 MB.
func storeBigSteps(t *testing.T, client *http.Client, base string) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		errs counter
	)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				size := liveMemStepBytes
				if i < liveMemBigSteps {
					size = 1 << 20
				}
				if err := postStep(context.Background(), client, base, messageBody(i, size)); err != nil {
					errs.add(err)
				}
			}
		})
	}
	for i := range liveMemSteps + liveMemBigSteps {
		next <- i
	}
	close(next)
	wg.Wait()
	require.Zero(t, errs.count(), "storing steps: %v", &errs)
}

// messageBody is a steps/message whose text is size bytes.
func messageBody(i, size int) []byte {
	text := strings.Repeat(fmt.Sprintf("line %06d of a long answer. ", i), size/30+1)[:size]
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"steps/message","params":{"context":{"agent":{"id":"agent-1","name":"Writer","instructions":"Write.","version":"1","provider":{"name":"corp","url":"https://corp.example"}},"session":{"id":"mem-%d"},"turnId":"t1","stepId":"s%d","timestamp":"2026-11-22T08:00:00Z"},"message":{"id":"m%d","role":"agent","content":[{"kind":"text","text":%q}]}}}`,
		i, i%50, i, i, text)
}

func rssKB(t *testing.T, pid int) int64 {
	t.Helper()
	kb, err := procStatus(pid, "VmRSS")
	require.NoError(t, err)
	return kb
}

// settledRSS is the server's RSS once it stops changing much: the storing's garbage
// collected, the writer idle.
func settledRSS(t *testing.T, pid int) int64 {
	t.Helper()
	prev := rssKB(t, pid)
	for range 20 {
		pause(context.Background())
		cur := rssKB(t, pid)
		if d := cur - prev; d < 1<<10 && d > -1<<10 {
			return cur
		}
		prev = cur
	}
	return prev
}

// openSockets counts the process's open sockets (database files and the like left out: the
// reader pool may grow with the replays and stay).
func openSockets(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}

func mib(kb int64) float64 { return float64(kb) / 1024 }
