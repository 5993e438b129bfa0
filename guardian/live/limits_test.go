package live

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// allocSource is a log of n step events of size bytes each that, like a real store,
// allocates the payloads of every page it returns, and records what it was asked.
type allocSource struct {
	n, size int

	mu    sync.Mutex
	pages []record.EventPage
	bytes int // payload bytes returned
}

func (s *allocSource) EventsPage(ctx context.Context, after int64, p record.EventPage) ([]record.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var (
		evs  []record.Event
		size int
	)
	for seq := after + 1; seq <= int64(s.n) && len(evs) < p.Limit; seq++ {
		if len(evs) > 0 && p.MaxBytes > 0 && size+s.size > p.MaxBytes {
			break
		}
		payload := make([]byte, s.size)
		copy(payload, `{"x":"`)
		for i := 6; i < s.size-2; i++ {
			payload[i] = 'x'
		}
		copy(payload[s.size-2:], `"}`)
		evs = append(evs, record.Event{Seq: seq, Type: record.EventStep, SessionID: "s1",
			At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Payload: payload})
		size += s.size
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pages = append(s.pages, p)
	s.bytes += size
	return evs, nil
}

func (s *allocSource) read() (pages []record.EventPage, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]record.EventPage(nil), s.pages...), s.bytes
}

// stalledDial connects a client that never reads, with a small receive buffer, so the
// server's writes soon block as they would towards a frozen browser tab.
func stalledDial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(8 << 10)
		}
		return c, err
	}}
	conn, resp, err := d.Dial(url, nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Clients replaying a big log without reading each hold one page, bounded in bytes: the
// replay reads the next page only once the previous one is written. Before, each read 500
// events at once, whatever their size, and held them while its writes waited.
func TestStalledReplaysHoldOnePageEach(t *testing.T) {
	const clients, size = 16, 16 << 10
	src := &allocSource{n: 4000, size: size} // 64 MB of log
	e := start(t, Options{Source: src, WriteTimeout: time.Minute})
	base := heapInUse()

	for range clients {
		stalledDial(t, e.url("?after=0"))
	}
	// Every replay has read at least once and wrote until its socket filled.
	waitFor(t, func() bool {
		pages, _ := src.read()
		return len(pages) >= clients
	}, "replays did not start")
	held := int64(heapInUse()) - int64(base)
	t.Logf("%d stalled replays hold %.1f MiB", clients, float64(held)/(1<<20))
	// One page (replayPageBytes) and one frame per client, with room for the runtime (and
	// the race detector's own allocations); the unbounded replay held about 120 MiB here.
	require.Less(t, held, int64(clients*(replayPageBytes+2*size)+16<<20))

	pages, bytes := src.read()
	for _, p := range pages {
		if p.Limit != replayPage {
			continue // the hub's start: finding the newest seq
		}
		require.Positive(t, p.MaxBytes)
		require.LessOrEqual(t, p.MaxBytes, replayPageBytes)
		require.Equal(t, defaultMaxStepBytes, p.MaxStepBulk, "steps come truncated as live frames are")
	}
	require.Less(t, bytes, clients*8<<20, "the log was read far ahead of what the clients took")
}

// A replay across pages that the byte bound cut short still delivers the whole log, then
// goes live: a short page is not the end of the log.
func TestReplayAcrossShortPages(t *testing.T) {
	const n = 40
	src := &allocSource{n: n, size: replayPageBytes / 3}
	e := start(t, Options{Source: src})
	conn := e.dial(t, "?after=0", nil)
	for want := int64(1); want <= n; want++ {
		require.Equal(t, want, readEvent(t, conn).Seq)
	}
	pages, _ := src.read()
	require.Greater(t, len(pages), n/3, "pages of three events each")
}

// A client that never reads is dropped once the frames queued for it pass
// ClientBufferBytes, long before its ClientBuffer of events fills: 256 queued 1 MB steps
// would otherwise be 256 MB for one client.
func TestClientBufferBoundedInBytes(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st, ClientBuffer: 256, ClientBufferBytes: 1 << 20, WriteTimeout: time.Minute})
	stalled := stalledDial(t, e.url(""))
	waitFor(t, func() bool { return e.hub.Clients() == 1 }, "client not registered")

	// 200 frames of 128 KiB: 25 MB, well within 256 events. The kernel's socket buffers
	// take a few megabytes; the hub must not queue the rest.
	// Not steps: a big step is sent truncated to MaxStepBytes.
	payload := `{"blob":"` + strings.Repeat("x", 128<<10) + `"}`
	for range 200 {
		e.hub.Publish(st.add("hold.created", "s1", payload))
	}
	waitFor(t, func() bool { return e.hub.Clients() == 0 }, "a client holding 25 MB of frames was not dropped")
	require.EqualValues(t, 1, e.hub.Counters().SlowClients)
	// Closing ends the write the server is blocked in (reading on would take a while
	// through an 8 KiB window); the close code of a dropped client is tested above.
	require.NoError(t, stalled.Close())
}

// A client with nothing queued still gets a frame bigger than ClientBufferBytes.
func TestFrameBiggerThanClientBufferBytes(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st, ClientBufferBytes: 1024})
	conn := e.dial(t, "", nil)
	e.hub.Publish(st.add("hold.created", "s1", `{"blob":"`+strings.Repeat("x", 4096)+`"}`))
	require.EqualValues(t, 1, readEvent(t, conn).Seq)
	require.Zero(t, e.hub.Counters().SlowClients)
}

// Live steps over MaxStepBytes go out truncated; smaller ones whole.
func TestBigStepsTruncatedLive(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st, MaxStepBytes: 1024})
	conn := e.dial(t, "", nil)
	small := &record.StepRecord{Seq: 1, SessionID: "s1", Method: "steps/message", Decision: "allow",
		Request: json.RawMessage(`{"id":1}`), Response: json.RawMessage(`{"result":{}}`), Text: "hi"}
	big := *small
	big.Seq = 2
	big.Request = json.RawMessage(`{"t":"` + strings.Repeat("y", 2048) + `"}`)
	st.add("step", "s1", `{}`)
	st.add("step", "s1", `{}`)
	e.hub.PublishStep(small)
	e.hub.PublishStep(&big)

	var got record.StepRecord
	require.NoError(t, json.Unmarshal(readEvent(t, conn).Payload, &got))
	require.False(t, got.Truncated)
	require.JSONEq(t, `{"id":1}`, string(got.Request))

	got = record.StepRecord{}
	require.NoError(t, json.Unmarshal(readEvent(t, conn).Payload, &got))
	require.True(t, got.Truncated)
	require.Equal(t, "null", string(got.Request))
	require.Equal(t, "hi", got.Text)
	require.Len(t, big.Request, 2048+8, "the published record is not changed")
}

// Connections are capped per identity (429) and in total (503), with the API's error body;
// a closed connection frees its place.
func TestConnectionCaps(t *testing.T) {
	e := start(t, Options{
		Source:                &memStore{},
		MaxClients:            3,
		MaxClientsPerIdentity: 2,
		Identify:              func(r *http.Request) string { return r.Header.Get("X-Who") },
	})
	as := func(who string) http.Header { return http.Header{"X-Who": {who}} }

	a1 := e.dial(t, "", as("a"))
	e.dial(t, "?after=0", as("a"))
	status, code := e.dialStatus(t, "", as("a"))
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "too_many_live_connections", code)

	e.dial(t, "", as("b"))
	status, code = e.dialStatus(t, "", as("c"))
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "too_many_live_clients", code)
	require.EqualValues(t, 2, e.hub.Counters().Refused)

	require.NoError(t, a1.Close())
	waitFor(t, func() bool {
		st, _ := e.dialStatus(t, "", as("c"))
		return st == http.StatusSwitchingProtocols
	}, "a closed connection did not free its place")
}

// Without Identify, a client is its IP address: every connection from one address counts
// against the same cap.
func TestConnectionCapDefaultsToClientAddress(t *testing.T) {
	e := start(t, Options{Source: &memStore{}, MaxClientsPerIdentity: 1})
	e.dial(t, "", nil)
	status, code := e.dialStatus(t, "", nil)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "too_many_live_connections", code)
}

func TestDefaultLimits(t *testing.T) {
	h := NewHub(Options{})
	require.Equal(t, 256, h.opts.MaxClients)
	require.Equal(t, 16, h.opts.MaxClientsPerIdentity)
	require.Equal(t, 4<<20, h.opts.ClientBufferBytes)
	require.Equal(t, 64<<10, h.opts.MaxStepBytes)
	require.Equal(t, "192.0.2.1", h.opts.Identify(&http.Request{RemoteAddr: "192.0.2.1:5555"}))
	require.Equal(t, fmt.Sprint(0), fmt.Sprint(h.Counters().Refused))
}

// Steps published as stored events (the replicas' bus passes them undecoded) go out like
// PublishStep's: whole when small, truncated over MaxStepBytes.
func TestBigStepEventsTruncatedLive(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st, MaxStepBytes: 1024})
	conn := e.dial(t, "", nil)
	small := st.add("step", "s1", `{"seq":1,"sessionId":"s1","method":"steps/message","decision":"allow","request":{"id":1},"response":null,"text":"hi"}`)
	big := st.add("step", "s1", `{"seq":2,"sessionId":"s1","method":"steps/message","decision":"allow","request":{"t":"`+strings.Repeat("y", 2048)+`"},"response":null,"text":"hi"}`)
	e.hub.Publish(small)
	e.hub.Publish(big)

	var got record.StepRecord
	require.NoError(t, json.Unmarshal(readEvent(t, conn).Payload, &got))
	require.False(t, got.Truncated)
	require.JSONEq(t, `{"id":1}`, string(got.Request))

	got = record.StepRecord{}
	ev := readEvent(t, conn)
	require.EqualValues(t, 2, ev.Seq)
	require.NoError(t, json.Unmarshal(ev.Payload, &got))
	require.True(t, got.Truncated)
	require.Equal(t, "null", string(got.Request))
	require.Equal(t, "hi", got.Text)
}
