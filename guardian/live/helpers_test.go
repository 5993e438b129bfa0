package live

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

// testTimeout bounds every wait in these tests; nothing should come near it.
const testTimeout = 15 * time.Second

// memStore is an in-memory event log standing in for the SQLite store: add "commits" an
// event with the next seq, and EventsPage sees everything committed.
type memStore struct {
	mu     sync.Mutex
	events []record.Event // ascending seq
	// hook, when set, runs at the start of EventsPage, outside the lock, so a test can hold
	// a reader at a chosen point.
	hook func(after int64, p record.EventPage)
	// err, when set, fails reads.
	err error
}

func (s *memStore) add(typ, session, payload string) record.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := int64(1)
	if n := len(s.events); n > 0 {
		seq = s.events[n-1].Seq + 1
	}
	return s.put(seq, typ, session, payload)
}

// put stores an event with a given seq; callers keep seqs ascending. s.mu must be held.
func (s *memStore) put(seq int64, typ, session, payload string) record.Event {
	ev := record.Event{
		Seq:       seq,
		Type:      typ,
		SessionID: session,
		At:        time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(seq) * time.Millisecond),
		Payload:   json.RawMessage(payload),
	}
	s.events = append(s.events, ev)
	return ev
}

func (s *memStore) setHook(f func(after int64, p record.EventPage)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = f
}

// EventsPage pages like a storage backend's EventsPage, bytes counted as payload lengths; it does
// not truncate steps.
func (s *memStore) EventsPage(ctx context.Context, after int64, p record.EventPage) ([]record.Event, error) {
	s.mu.Lock()
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		hook(after, p)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	i := sort.Search(len(s.events), func(i int) bool { return s.events[i].Seq > after })
	end, size := i, 0
	for end < len(s.events) && end-i < p.Limit {
		size += len(s.events[end].Payload)
		if end > i && p.MaxBytes > 0 && size > p.MaxBytes {
			break
		}
		end++
	}
	return slices.Clone(s.events[i:end]), nil
}

type testEnv struct {
	hub     *Hub
	srv     *httptest.Server
	stop    context.CancelFunc
	runDone chan struct{}
}

// start runs a hub behind a real HTTP server; cleanup stops both.
func start(t testing.TB, opts Options) *testEnv {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	hub := NewHub(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		hub.Run(ctx)
	}()
	srv := httptest.NewServer(hub)
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Error("hub did not stop")
		}
		srv.Close()
	})
	return &testEnv{hub: hub, srv: srv, stop: cancel, runDone: done}
}

func (e *testEnv) url(query string) string {
	return "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/api/live" + query
}

// dial connects a websocket client; the hub has registered it when dial returns.
func (e *testEnv) dial(t testing.TB, query string, header http.Header) *websocket.Conn {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial(e.url(query), header)
	require.NoError(t, err)
	_ = resp.Body.Close()
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// dialStatus attempts a connection that is expected to fail, returning the HTTP status and
// the error code of the body.
func (e *testEnv) dialStatus(t *testing.T, query string, header http.Header) (int, string) {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial(e.url(query), header)
	if err == nil {
		_ = conn.Close()
		return http.StatusSwitchingProtocols, ""
	}
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body.Error.Code
}

func readEvent(t testing.TB, conn *websocket.Conn) record.Event {
	t.Helper()
	ev, err := tryReadEvent(conn)
	require.NoError(t, err)
	return ev
}

func tryReadEvent(conn *websocket.Conn) (record.Event, error) {
	var ev record.Event
	if err := conn.SetReadDeadline(time.Now().Add(testTimeout)); err != nil {
		return ev, err
	}
	typ, data, err := conn.ReadMessage()
	if err != nil {
		return ev, err
	}
	if typ != websocket.TextMessage {
		return ev, &websocket.CloseError{Code: websocket.CloseUnsupportedData, Text: "not a text frame"}
	}
	err = json.Unmarshal(data, &ev)
	return ev, err
}

// closeCode reads until the connection ends and returns the close code (1006 when the
// connection ended without a close frame) and how many events arrived before.
func closeCode(t testing.TB, conn *websocket.Conn) (code, events int) {
	t.Helper()
	for {
		_, err := tryReadEvent(conn)
		if err == nil {
			events++
			continue
		}
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce, "the connection should end with a close, got %v", err)
		return ce.Code, events
	}
}

// waitFor waits, up to testTimeout, for cond; for state only observable by polling, such as
// the hub noticing that a peer went away.
func waitFor(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, testTimeout, 5*time.Millisecond, msg)
}
