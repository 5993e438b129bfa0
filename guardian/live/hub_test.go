package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Concurrent committers publish out of seq order; every client still sees 1..n in order.
func TestOrderingWithConcurrentPublishers(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st, ClientBuffer: 4096})
	replaying := e.dial(t, "?after=0", nil)
	live := e.dial(t, "", nil)

	const writers, each = 4, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e.hub.Publish(st.add("step", fmt.Sprintf("s%d", w), fmt.Sprintf(`{"i":%d}`, i)))
			}
		})
	}
	wg.Wait()

	for _, conn := range []*websocket.Conn{replaying, live} {
		for want := int64(1); want <= writers*each; want++ {
			ev := readEvent(t, conn)
			require.Equal(t, want, ev.Seq)
			require.Equal(t, "step", ev.Type)
		}
	}
	require.Zero(t, e.hub.Counters().Dropped)
}

// The frame is the storage.Event JSON: seq, type, sessionId, at, payload.
func TestFrameFormat(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st})
	conn := e.dial(t, "", nil)
	ev := st.add("hold.created", "s9", `{"id":"h1","status":"pending"}`)
	e.hub.Publish(ev)

	require.NoError(t, conn.SetReadDeadline(time.Now().Add(testTimeout)))
	typ, data, err := conn.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, websocket.TextMessage, typ)
	require.JSONEq(t, `{"seq":1,"type":"hold.created","sessionId":"s9",
		"at":"2025-01-02T03:04:05.001Z","payload":{"id":"h1","status":"pending"}}`, string(data))
}

// A step published as a record reaches the client as the frame of its event, encoded only
// once a client is there; one published with no client costs no encoding.
func TestPublishStep(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st})
	rec := &record.StepRecord{SessionID: "s9", Method: "steps/message", Kind: "message", Decision: "deny",
		Request: json.RawMessage(`{"id":1}`), Response: json.RawMessage(`{"result":{}}`), MatchedRules: []record.RuleMatch{}}
	payload, err := json.Marshal(rec)
	require.NoError(t, err)
	unseen := st.add("step", "s9", string(payload))
	rec.Seq, rec.ReceivedAt = unseen.Seq, unseen.At
	e.hub.PublishStep(rec)

	conn := e.dial(t, "", nil)
	rec2 := *rec
	payload2, err := json.Marshal(&rec2)
	require.NoError(t, err)
	ev := st.add("step", "s9", string(payload2))
	rec2.Seq, rec2.ReceivedAt = ev.Seq, ev.At
	payload2, err = json.Marshal(&rec2)
	require.NoError(t, err)
	ev.Payload = payload2
	e.hub.PublishStep(&rec2)

	require.NoError(t, conn.SetReadDeadline(time.Now().Add(testTimeout)))
	_, data, err := conn.ReadMessage()
	require.NoError(t, err)
	want, err := json.Marshal(ev)
	require.NoError(t, err)
	require.Equal(t, string(want), string(data))
}

// A client resuming with after=N while events keep arriving gets exactly N+1.. in order:
// live events that arrive during the replay are held and deduplicated against it.
func TestResumeAfterWhileLiveEventsArrive(t *testing.T) {
	const n, k, m = 100, 1000, 400 // resume point, stored beyond it, published live
	st := &memStore{}
	for i := range n + k {
		st.add("step", "s1", fmt.Sprintf(`{"i":%d}`, i))
	}
	replayStarted, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.setHook(func(after int64, p record.EventPage) {
		if after == n && p.Limit == replayPage {
			once.Do(func() { close(replayStarted) })
			<-release
		}
	})
	e := start(t, Options{Source: st, ClientBuffer: 1024})
	conn := e.dial(t, fmt.Sprintf("?after=%d", n), nil)

	select {
	case <-replayStarted:
	case <-time.After(testTimeout):
		t.Fatal("replay did not start")
	}
	// The replay is held before its first read: these events reach the client's buffer
	// first and are also in the store the replay is about to read.
	for i := range 100 {
		e.hub.Publish(st.add("step", "s1", fmt.Sprintf(`{"live":%d}`, i)))
	}
	close(release)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 100; i < m; i++ {
			e.hub.Publish(st.add("step", "s1", fmt.Sprintf(`{"live":%d}`, i)))
		}
	}()

	for want := int64(n + 1); want <= n+k+m; want++ {
		require.Equal(t, want, readEvent(t, conn).Seq)
	}
	<-published
	// Nothing more: a duplicate would show up as a frame here.
	e.hub.PublishStats(json.RawMessage(`{"steps":1}`))
	ev := readEvent(t, conn)
	require.Equal(t, "stats", ev.Type)
	require.Zero(t, ev.Seq)
}

func TestStartPosition(t *testing.T) {
	tests := []struct {
		name  string
		query string
		want  []int64
	}{
		{"no after starts live", "", []int64{11}},
		{"after=0 replays everything", "?after=0", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{"after=7 replays the rest", "?after=7", []int64{8, 9, 10, 11}},
		{"after at the end of the log waits for newer events", "?after=10", []int64{11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &memStore{}
			for range 10 {
				st.add("step", "s1", `{}`)
			}
			e := start(t, Options{Source: st})
			conn := e.dial(t, tt.query, nil)
			e.hub.Publish(st.add("step", "s1", `{}`))
			var got []int64
			for len(got) == 0 || got[len(got)-1] != 11 {
				got = append(got, readEvent(t, conn).Seq)
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestSessionFilter(t *testing.T) {
	st := &memStore{}
	var want []int64
	add := func(session string) record.Event {
		typ := "step"
		if session == "" {
			typ = "rule.changed"
		}
		ev := st.add(typ, session, `{}`)
		if session == "s1" {
			want = append(want, ev.Seq)
		}
		return ev
	}
	for i := range 30 {
		add([]string{"s1", "s2", ""}[i%3])
	}
	e := start(t, Options{Source: st})
	conn := e.dial(t, "?after=0&session=s1", nil)
	all := e.dial(t, "?after=0", nil)
	for i := range 30 {
		e.hub.Publish(add([]string{"s2", "", "s1"}[i%3]))
	}
	e.hub.PublishStats(json.RawMessage(`{"steps":60}`))

	var got []int64
	for {
		ev := readEvent(t, conn)
		if ev.Type == "stats" {
			require.Zero(t, ev.Seq)
			require.JSONEq(t, `{"steps":60}`, string(ev.Payload))
			break
		}
		require.Equal(t, "s1", ev.SessionID)
		got = append(got, ev.Seq)
	}
	require.Equal(t, want, got)

	for want := int64(1); want <= 60; want++ {
		require.Equal(t, want, readEvent(t, all).Seq)
	}
	require.Equal(t, "stats", readEvent(t, all).Type)
}

// A client that never reads is dropped once its buffer fills, while a client that keeps up
// receives every event; the stuck one finds its stream closed (1008, or cut off when even
// the close frame could not be written).
func TestSlowClientDroppedFastClientGetsEverything(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st, ClientBuffer: 64, WriteTimeout: time.Second})
	stuck := e.dial(t, "", nil)
	fast := e.dial(t, "", nil)
	require.Equal(t, 2, e.hub.Clients())

	type result struct {
		seq int64
		err error
	}
	got := make(chan result, 1024)
	go func() {
		for {
			ev, err := tryReadEvent(fast)
			got <- result{ev.Seq, err}
			if err != nil {
				return
			}
		}
	}()
	next := int64(1)
	expectNext := func() {
		t.Helper()
		select {
		case r := <-got:
			require.NoError(t, r.err)
			require.Equal(t, next, r.seq)
			next++
		case <-time.After(testTimeout):
			t.Fatalf("fast client stalled before seq %d", next)
		}
	}

	// Large events fill the stuck client's socket buffers quickly. The fast client is kept
	// at most window events behind, well inside its buffer.
	payload := `{"blob":"` + strings.Repeat("x", 4096) + `"}`
	const window, limit, afterDrop = 32, 20000, 200
	published, extra := 0, -1
	for published < limit && extra != 0 {
		e.hub.Publish(st.add("step", "s1", payload))
		published++
		if published > window {
			expectNext()
		}
		switch {
		case extra < 0 && e.hub.Clients() == 1:
			extra = afterDrop // keep publishing a little after the drop
		case extra > 0:
			extra--
		}
	}
	require.Zero(t, extra, "the stuck client was never dropped")
	for next <= int64(published) {
		expectNext()
	}
	require.EqualValues(t, 1, e.hub.Counters().SlowClients)

	code, n := closeCode(t, stuck)
	require.Contains(t, []int{websocket.ClosePolicyViolation, websocket.CloseAbnormalClosure}, code)
	require.Less(t, n, published)
}

// Publish never waits for clients: 10k events with a stuck client attached are all handed
// over before a deadline, and the stuck client is dropped.
func TestPublishNeverBlocksWithStuckClient(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st, ClientBuffer: 16, WriteTimeout: time.Second})
	e.dial(t, "", nil) // never reads

	payload := `{"blob":"` + strings.Repeat("x", 4096) + `"}`
	evs := make([]record.Event, 10000)
	for i := range evs {
		evs[i] = st.add("step", "s1", payload)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, ev := range evs {
			e.hub.Publish(ev)
		}
	}()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("Publish blocked behind a stuck client")
	}
	waitFor(t, func() bool { return e.hub.Clients() == 0 }, "stuck client not dropped")
	require.EqualValues(t, 1, e.hub.Counters().SlowClients)
}

// When the hub's queue overflows, the dropped events are read back from the store and
// connected clients still get every event in order.
func TestDroppedPublishesRecoveredFromStore(t *testing.T) {
	st := &memStore{}
	fillStarted, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.setHook(func(_ int64, p record.EventPage) {
		if p.Limit == fillPage {
			once.Do(func() { close(fillStarted) })
			<-release
		}
	})
	e := start(t, Options{Source: st, PublishBuffer: 8})
	conn := e.dial(t, "", nil)

	// Seq 1 is committed but its Publish is late: the hub holds 2 back, then reads the store
	// and stays in that read until release.
	st.add("step", "s1", `{}`)
	e.hub.Publish(st.add("step", "s1", `{}`))
	select {
	case <-fillStarted:
	case <-time.After(testTimeout):
		t.Fatal("the hub did not read the store to fill seq 1")
	}

	// Meanwhile the queue (8) fills and the rest is dropped, without blocking.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 198 {
			e.hub.Publish(st.add("step", "s1", `{}`))
		}
	}()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("Publish blocked while the hub was busy")
	}
	require.EqualValues(t, 190, e.hub.Counters().Dropped)
	close(release)

	for want := int64(1); want <= 200; want++ {
		require.Equal(t, want, readEvent(t, conn).Seq)
	}
	c := e.hub.Counters()
	require.Zero(t, c.Resyncs)
	require.Positive(t, c.StoreFills)
	require.Equal(t, 1, c.Clients)
}

// A dropped event the store does not have cannot be delivered: clients are closed with 1013
// so they resync rather than silently miss it.
func TestUnrecoverableDropResyncsClients(t *testing.T) {
	st := &memStore{}
	fillStarted, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.setHook(func(_ int64, p record.EventPage) {
		if p.Limit == fillPage {
			once.Do(func() { close(fillStarted) })
			<-release
		}
	})
	e := start(t, Options{Source: st, PublishBuffer: 8})
	conn := e.dial(t, "", nil)

	st.add("step", "s1", `{}`)
	e.hub.Publish(st.add("step", "s1", `{}`))
	select {
	case <-fillStarted:
	case <-time.After(testTimeout):
		t.Fatal("the hub did not read the store to fill seq 1")
	}
	for seq := int64(3); seq <= 50; seq++ { // never stored
		e.hub.Publish(record.Event{Seq: seq, Type: "step", SessionID: "s1", Payload: json.RawMessage(`{}`)})
	}
	close(release)

	for want := int64(1); want <= 10; want++ { // 1-2 from the store, 3-10 from the queue
		require.Equal(t, want, readEvent(t, conn).Seq)
	}
	code, n := closeCode(t, conn)
	require.Equal(t, websocket.CloseTryAgainLater, code)
	require.Zero(t, n)
	require.EqualValues(t, 1, e.hub.Counters().Resyncs)
}

// A store that fails while filling a hole makes clients resync; one failing during a
// replay closes that client with 1011.
func TestStoreErrors(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st})
	live := e.dial(t, "", nil) // once registered, the hub has read the store's head (0)
	st.mu.Lock()
	st.err = errors.New("disk on fire")
	st.mu.Unlock()

	replaying := e.dial(t, "?after=0", nil)
	code, _ := closeCode(t, replaying)
	require.Equal(t, websocket.CloseInternalServerErr, code)

	e.hub.Publish(record.Event{Seq: 2, Type: "step", Payload: json.RawMessage(`{}`)}) // 1 is missing
	code, _ = closeCode(t, live)
	require.Equal(t, websocket.CloseTryAgainLater, code)
}

func TestOrigin(t *testing.T) {
	st := &memStore{}
	e := start(t, Options{Source: st, AllowedOrigins: []string{"wails://wails", "http://wails.localhost"}})
	host := strings.TrimPrefix(e.srv.URL, "http://")
	tests := []struct {
		origin string
		status int
	}{
		{"", http.StatusSwitchingProtocols},
		{"http://" + host, http.StatusSwitchingProtocols},
		{"wails://wails", http.StatusSwitchingProtocols},
		{"http://wails.localhost", http.StatusSwitchingProtocols},
		{"http://evil.example", http.StatusForbidden},
		{"http://127.0.0.1:1", http.StatusForbidden},
		{"http://wails.localhost.evil.example", http.StatusForbidden},
		{"null", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.origin, func(t *testing.T) {
			header := http.Header{}
			if tt.origin != "" {
				header.Set("Origin", tt.origin)
			}
			status, code := e.dialStatus(t, "", header)
			require.Equal(t, tt.status, status)
			if status == http.StatusForbidden {
				require.Equal(t, "forbidden", code)
			}
		})
	}
	waitFor(t, func() bool { return e.hub.Clients() == 0 }, "accepted clients did not leave")
}

func TestHTTPErrors(t *testing.T) {
	e := start(t, Options{
		Source: &memStore{},
		Authorize: func(r *http.Request) error {
			if r.URL.Query().Get("token") != "ok" {
				return errors.New("bad token")
			}
			return nil
		},
	})
	tests := []struct {
		query  string
		status int
		code   string
	}{
		{"?token=ok", http.StatusSwitchingProtocols, ""},
		{"", http.StatusUnauthorized, "unauthorized"},
		{"?token=ok&after=abc", http.StatusBadRequest, "bad_request"},
		{"?token=ok&after=-1", http.StatusBadRequest, "bad_request"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			status, code := e.dialStatus(t, tt.query, nil)
			require.Equal(t, tt.status, status)
			require.Equal(t, tt.code, code)
		})
	}

	t.Run("plain GET", func(t *testing.T) {
		resp, err := http.Get(e.srv.URL + "/api/live?token=ok")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})
	t.Run("POST", func(t *testing.T) {
		resp, err := http.Post(e.srv.URL+"/api/live?token=ok", "text/plain", nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	})
}

func TestShutdownClosesClients(t *testing.T) {
	e := start(t, Options{Source: &memStore{}})
	conns := []*websocket.Conn{e.dial(t, "", nil), e.dial(t, "?after=0", nil), e.dial(t, "?session=s1", nil)}
	require.Equal(t, 3, e.hub.Clients())

	e.stop()
	for _, conn := range conns {
		code, _ := closeCode(t, conn)
		require.Equal(t, websocket.CloseGoingAway, code)
	}
	select {
	case <-e.runDone:
	case <-time.After(testTimeout):
		t.Fatal("Run did not return")
	}
	require.Zero(t, e.hub.Clients())

	status, code := e.dialStatus(t, "", nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "unavailable", code)
	e.hub.Publish(record.Event{Seq: 1, Type: "step"}) // a no-op after shutdown
}

func TestClientsCount(t *testing.T) {
	e := start(t, Options{Source: &memStore{}})
	require.Zero(t, e.hub.Clients())
	a := e.dial(t, "", nil)
	require.Equal(t, 1, e.hub.Clients())
	e.dial(t, "?session=x", nil)
	require.Equal(t, 2, e.hub.Clients())

	require.NoError(t, a.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(testTimeout)))
	code, _ := closeCode(t, a) // the server answers the close
	require.Equal(t, websocket.CloseNormalClosure, code)
	waitFor(t, func() bool { return e.hub.Clients() == 1 }, "closed client still counted")
	require.Equal(t, 1, e.hub.Counters().Clients)
}

// The server pings; a client that answers stays past PongWait, a silent one is dropped.
func TestKeepalive(t *testing.T) {
	e := start(t, Options{Source: &memStore{}, PingInterval: 100 * time.Millisecond, PongWait: time.Second})
	e.dial(t, "", nil) // never reads, so never answers pings
	alive := e.dial(t, "", nil)
	pings := make(chan struct{}, 100)
	alive.SetPingHandler(func(data string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return alive.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	readDone := make(chan error, 1)
	go func() {
		_, _, err := alive.ReadMessage()
		readDone <- err
	}()

	waitFor(t, func() bool { return e.hub.Clients() == 1 }, "silent client not dropped")
	// 20 pings take at least 2 s, twice PongWait: the answering client survived it. (PongWait
	// leaves room for a loaded machine: the answer is late, not missing.)
	for i := range 20 {
		select {
		case <-pings:
		case err := <-readDone:
			t.Fatalf("answering client dropped after %d pings: %v", i, err)
		case <-time.After(testTimeout):
			t.Fatal("no ping")
		}
	}
	require.Equal(t, 1, e.hub.Clients())
}

// Clients have nothing to say; an oversized message ends the connection.
func TestReadLimit(t *testing.T) {
	e := start(t, Options{Source: &memStore{}, MaxMessageBytes: 64})
	conn := e.dial(t, "", nil)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("small messages are ignored")))
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", 1000))))
	// The server sends 1009; the connection may also be reset before the client reads it.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(testTimeout)))
	_, _, err := conn.ReadMessage()
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		require.Equal(t, websocket.CloseMessageTooBig, ce.Code)
	} else {
		require.Error(t, err)
	}
	waitFor(t, func() bool { return e.hub.Clients() == 0 }, "client not removed")
}

func TestStoreHead(t *testing.T) {
	tests := []struct {
		name string
		seqs []int64
	}{
		{"empty", nil},
		{"one", []int64{1}},
		{"contiguous", seqRange(1, 1000)},
		{"power of two", seqRange(1, 1024)},
		{"with holes", []int64{3, 4, 9, 100, 101, 4097}},
		{"starts late", seqRange(5000, 5003)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &memStore{}
			calls := 0
			st.hook = func(int64, record.EventPage) { calls++ }
			for _, s := range tt.seqs {
				st.put(s, "step", "", `{}`)
			}
			head, err := storage.NewestSeq(context.Background(), st)
			require.NoError(t, err)
			want := int64(0)
			if len(tt.seqs) > 0 {
				want = tt.seqs[len(tt.seqs)-1]
			}
			require.Equal(t, want, head)
			require.LessOrEqual(t, calls, 64, "NewestSeq should need O(log n) reads")
		})
	}
}

func seqRange(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}
