package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// What a client or a server can make the gateway hold is bounded: answers to the server in
// flight, sessions, requests in flight and verdicts awaited, tool definitions, and a stream
// to a client that stopped reading.

// fixedDecider decides every step alike (allow when decision is "").
type fixedDecider struct{ decision string }

func (d fixedDecider) DecideStep(context.Context, *aos.Step, guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error) {
	if d.decision == "" {
		return guardian.Verdict{Decision: "allow"}, record.StepRecord{}, nil
	}
	return guardian.Verdict{Decision: d.decision, Message: "no"}, record.StepRecord{}, nil
}

// front serves gw as vigil serve does (guardian.WithLongWaits), with the server's
// writeTimeout (0: none).
func front(t *testing.T, gw *Gateway, writeTimeout time.Duration) string {
	t.Helper()
	mux := http.NewServeMux()
	gw.Register(mux)
	srv := httptest.NewUnstartedServer(guardian.WithLongWaits(mux, writeTimeout))
	srv.Config.WriteTimeout = writeTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp/up"
}

// post sends one client message in session sid ("" for none) and returns the status and
// body of the answer.
func post(t *testing.T, url, sid, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set(sessionHeader, sid)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func (gw *Gateway) sessionIDs() []string {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	var ids []string
	for sid := range gw.sessions {
		ids = append(ids, sid)
	}
	sort.Strings(ids)
	return ids
}

func (gw *Gateway) known(sid string) *Session {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if e, ok := gw.sessions[sid]; ok {
		return e.Value.(*sessionEntry).s
	}
	return nil
}

func (s *Session) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fromClient)
}

// A server that streams requests Vigil refuses faster than it takes the answers: the
// answers in flight to it are bounded (one goroutine and one connection each, for up to a
// minute), the rest dropped and counted. Unbounded, 5000 refused sampling requests on one
// GET stream held 5000 goroutines and requests to the server.
func TestHTTPAnswersToServerBounded(t *testing.T) {
	const requests, limit = 5000, 16
	var replies atomic.Int64
	arrived := make(chan struct{})
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", mediaSSE)
			for i := range requests {
				fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"sampling/createMessage\",\"params\":{\"messages\":[],\"maxTokens\":1}}\n\n", i)
			}
			// Through to the client: every request before it has been judged.
			io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"end\"}}\n\n")
			w.(http.Flusher).Flush()
			<-release
			return
		}
		if replies.Add(1) == limit {
			close(arrived)
		}
		<-release // the server takes its time over Vigil's refusals
	}))
	gw, err := New(Config{Name: "up", URL: up.URL, MaxReplies: limit}, Options{Decider: fixedDecider{"deny"}})
	require.NoError(t, err)
	url := front(t, gw, 0)

	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set(sessionHeader, "s1")
	req.Header.Set("Accept", mediaSSE)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var got []string
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "data:") {
			got = append(got, l)
			if strings.Contains(l, `"end"`) {
				break
			}
		}
	}
	require.Len(t, got, 1, "a refused request reached the client")
	next(t, arrived)
	require.Equal(t, int64(requests-limit), gw.dropped.Load())
	close(release)
	up.Close() // waits for the server's handlers: every answer that was sent has arrived
	require.Equal(t, int64(limit), replies.Load())
}

// Sessions are kept once the server accepted their id, and the least recently used goes
// first: ids a client makes up (which the server refuses) push out nothing. Before, 1024
// made-up ids pushed out every session the server runs.
func TestHTTPSessionsKeptOnceAccepted(t *testing.T) {
	var issued atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := r.Header.Get(sessionHeader)
		switch {
		case sid == "":
			w.Header().Set(sessionHeader, fmt.Sprintf("s%d", issued.Add(1)))
			w.Header().Set("Content-Type", mediaJSON)
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"serverInfo":{"name":"s"}}}`)
		case strings.HasPrefix(sid, "s"):
			w.WriteHeader(http.StatusAccepted)
		default:
			http.Error(w, "unknown session", http.StatusNotFound)
		}
	}))
	t.Cleanup(up.Close)
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"c"}}}`
	const note = `{"jsonrpc":"2.0","method":"notifications/initialized"}`

	t.Run("made-up ids", func(t *testing.T) {
		gw, err := New(Config{Name: "up", URL: up.URL, MaxSessions: 8}, Options{Decider: fixedDecider{}})
		require.NoError(t, err)
		url := front(t, gw, 0)
		st, _ := post(t, url, "", initialize)
		require.Equal(t, http.StatusOK, st)
		ids := gw.sessionIDs()
		require.Len(t, ids, 1)
		for i := range 1024 {
			st, _ := post(t, url, fmt.Sprintf("junk-%d", i), note)
			require.Equal(t, http.StatusNotFound, st)
		}
		require.Equal(t, ids, gw.sessionIDs())
	})

	t.Run("least recently used goes first", func(t *testing.T) {
		issued.Store(0)
		gw, err := New(Config{Name: "up", URL: up.URL, MaxSessions: 2}, Options{Decider: fixedDecider{}})
		require.NoError(t, err)
		url := front(t, gw, 0)
		post(t, url, "", initialize) // s1
		post(t, url, "", initialize) // s2
		st, _ := post(t, url, "s1", note)
		require.Equal(t, http.StatusAccepted, st)
		post(t, url, "", initialize) // s3: s2 was used least recently
		require.Equal(t, []string{"s1", "s3"}, gw.sessionIDs())
		require.Equal(t, "mcp-up-s1", gw.known("s1").id())
	})
}

// A request whose answer cannot come (the server unreachable, or refusing it with an HTTP
// error) is no longer in flight: before, each stayed for good, and after MaxPending
// (1024) of them every call of the session was refused.
func TestHTTPFailedRequestsLeaveNothingInFlight(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		id, _ := m.ID.(float64)
		switch {
		case m.Method == "initialize":
			w.Header().Set(sessionHeader, "s1")
			w.Header().Set("Content-Type", mediaJSON)
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{}}`)
		case m.Method == "ping" && int(id)%100 == 1:
			// Gone without an answer: the gateway's request fails.
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		case m.Method == "ping":
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			w.Header().Set("Content-Type", mediaJSON)
			io.WriteString(w, `{"jsonrpc":"2.0","id":"call","result":{"content":[]}}`)
		}
	}))
	t.Cleanup(up.Close)
	gw, err := New(Config{Name: "up", URL: up.URL}, Options{Decider: fixedDecider{}})
	require.NoError(t, err)
	url := front(t, gw, 0)
	post(t, url, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`)
	s := gw.known("s1")
	require.NotNil(t, s)

	for i := 1; i <= 1030; i++ {
		st, body := post(t, url, "s1", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i))
		if i%100 == 1 { // ids 1, 101, … end with a dropped connection, the rest with a 503
			require.Equal(t, http.StatusBadGateway, st, body)
			require.Contains(t, body, `"code":-32000`)
		} else {
			require.Equal(t, http.StatusServiceUnavailable, st)
		}
	}
	require.Zero(t, s.inFlight())
	st, body := post(t, url, "s1", `{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	require.Equal(t, http.StatusOK, st)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":"call","result":{"content":[]}}`, body)
	require.Zero(t, s.inFlight())
}

// next receives from ch, failing the test when nothing comes within 10 s.
func next[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing came in 10 s")
		panic("unreachable")
	}
}

// relay is a stdio relay of a session: the client's and the server's ends as a test
// drives them.
type relay struct {
	client *io.PipeWriter // what the client writes
	server *io.PipeWriter // what the server writes
	// toClient and toServer are the lines the relay writes to each.
	toClient, toServer chan string
}

func relayed(t *testing.T, s *Session) *relay {
	t.Helper()
	cr, cw := io.Pipe()
	outR, outW := io.Pipe()
	sinR, sinW := io.Pipe()
	soutR, soutW := io.Pipe()
	r := &relay{client: cw, server: soutW, toClient: make(chan string, 4096), toServer: make(chan string, 4096)}
	lines := func(rd io.Reader, to chan<- string) {
		sc := bufio.NewScanner(rd)
		for sc.Scan() {
			to <- sc.Text()
		}
	}
	go lines(outR, r.toClient)
	go lines(sinR, r.toServer)
	done := make(chan error, 1)
	go func() {
		done <- Relay(context.Background(), s, Pipes{ClientIn: cr, ClientOut: outW, ServerIn: sinW, ServerOut: soutR}, 0)
		outW.Close()
	}()
	t.Cleanup(func() {
		cw.Close()
		soutW.Close()
		<-done
	})
	return r
}

// blockingJudge holds every verdict until release is closed, counting the verdicts awaited
// at once and the most ever; entered gets one value per verdict asked.
type blockingJudge struct {
	release chan struct{}
	once    sync.Once
	entered chan struct{}
	now     atomic.Int64
	most    atomic.Int64
}

// free lets every verdict through.
func (b *blockingJudge) free() { b.once.Do(func() { close(b.release) }) }

func newBlockingJudge() *blockingJudge {
	return &blockingJudge{release: make(chan struct{}), entered: make(chan struct{}, 4096)}
}

func (b *blockingJudge) judge(ctx context.Context, _ []byte) (Outcome, error) {
	n := b.now.Add(1)
	defer b.now.Add(-1)
	for {
		m := b.most.Load()
		if n <= m || b.most.CompareAndSwap(m, n) {
			break
		}
	}
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return Outcome{Decision: "allow"}, nil
}

// Over stdio, the verdicts awaited at once (each on a goroutine of its own) are bounded by
// the requests in flight, MaxPending, whatever the client sends: an id already in flight is
// refused as MCP requires (ids are never reused within a session), and a request past the
// bound is refused. Before, 2000 calls under one id had 2000 verdicts awaited at once with
// MaxPending 8.
func TestStdioVerdictsAwaitedBounded(t *testing.T) {
	const lines, limit = 2000, 8
	call := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"x","arguments":{}}}`, id)
	}
	for _, c := range []struct {
		name     string
		id       func(i int) int
		awaited  int
		refusals string
	}{
		{"one id", func(int) int { return 1 }, 1, `"code":-32600,"message":"` + errReusedID + `"`},
		{"ids of their own", func(i int) int { return i }, limit, "Denied by Vigil: " + errTooMany.Error()},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := newBlockingJudge()
			s := NewSession(SessionConfig{MaxPending: limit, Judge: j.judge})
			r := relayed(t, s)
			t.Cleanup(j.free) // before the relay's: a failed test must not leave it waiting
			go func() {
				for i := range lines {
					fmt.Fprintln(r.client, call(c.id(i)))
				}
			}()
			for range lines - c.awaited {
				require.Contains(t, next(t, r.toClient), c.refusals)
			}
			for range c.awaited {
				next(t, j.entered)
			}
			require.Equal(t, int64(c.awaited), j.now.Load())
			j.free()
			for range c.awaited {
				require.Contains(t, next(t, r.toServer), "tools/call")
			}
			require.Equal(t, int64(c.awaited), j.most.Load())
		})
	}
}

// The server's requests Vigil judges (sampling, elicitation) are bounded alike: past
// MaxPending awaiting a verdict, one is refused to the server, never passed unjudged.
func TestStdioServerRequestsAwaitedBounded(t *testing.T) {
	const requests, limit = 500, 8
	j := newBlockingJudge()
	s := NewSession(SessionConfig{MaxPending: limit, Judge: j.judge})
	r := relayed(t, s)
	t.Cleanup(j.free)
	go func() {
		for i := range requests {
			fmt.Fprintf(r.server, `{"jsonrpc":"2.0","id":%d,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}`+"\n", i)
		}
	}()
	for range requests - limit {
		require.Contains(t, next(t, r.toServer), "Denied by Vigil: "+errTooMany.Error())
	}
	for range limit {
		next(t, j.entered)
	}
	require.Equal(t, int64(limit), j.now.Load())
	j.free()
	for range limit {
		require.Contains(t, next(t, r.toClient), "sampling/createMessage")
	}
	require.Equal(t, int64(limit), j.most.Load())
}

// While the server's answer to a call is judged, a second answer to it is withheld: passed
// on, it would reach the client first, unjudged.
func TestSecondAnswerWithheldWhileTheFirstIsJudged(t *testing.T) {
	judging := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int64
	s := NewSession(SessionConfig{Judge: func(ctx context.Context, _ []byte) (Outcome, error) {
		if calls.Add(1) == 2 { // the result
			close(judging)
			<-release
			return Outcome{Decision: "deny", Message: "classified"}, nil
		}
		return Outcome{Decision: "allow"}, nil
	}})
	ctx := context.Background()
	a := s.FromClient(ctx, []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}`), nil)
	require.NotNil(t, a.Forward)
	result := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"secret"}]}}`)
	first := make(chan Action, 1)
	go func() { first <- s.FromServer(ctx, result) }()
	next(t, judging)
	second := s.FromServer(ctx, result)
	require.Nil(t, second.Forward)
	close(release)
	require.Contains(t, string(next(t, first).Forward), "Denied by Vigil: classified")
	require.Zero(t, s.inFlight())
}

func (s *Session) toolNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// A new tools/list replaces the tools the session keeps for the rules, the pages of one
// list (asked for with a cursor) add up, and what is kept is bounded: a list over the
// bound reaches the client as an error, the list before kept. Before, every list was
// merged into the last (50 lists of one 1 MiB tool: 50 tools, 50 MiB kept); here sizes
// are in KiB.
func TestToolsListReplacedAndBounded(t *testing.T) {
	const bound = 3 << 10
	s := NewSession(SessionConfig{MaxToolBytes: bound, Judge: func(context.Context, []byte) (Outcome, error) {
		return Outcome{Decision: "allow"}, nil
	}})
	ctx := context.Background()
	id := 0
	list := func(cursor string, names ...string) Action {
		t.Helper()
		id++
		params := "{}"
		if cursor != "" {
			params = fmt.Sprintf(`{"cursor":%q}`, cursor)
		}
		a := s.FromClient(ctx, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":%s}`, id, params), nil)
		require.NotNil(t, a.Forward)
		var tools []string
		for _, n := range names {
			tools = append(tools, fmt.Sprintf(`{"name":%q,"description":%q,"inputSchema":{"type":"object"}}`, n, strings.Repeat("d", 1<<10)))
		}
		return s.FromServer(ctx, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"result":{"tools":[%s]}}`, id, strings.Join(tools, ",")))
	}
	for i := range 50 {
		a := list("", fmt.Sprintf("t%d", i))
		require.False(t, a.Changed)
	}
	require.Equal(t, []string{"t49"}, s.toolNames())
	require.Less(t, s.toolBytes, 2<<10)

	list("", "a")
	list("page-2", "b")
	require.Equal(t, []string{"a", "b"}, s.toolNames())

	a := list("", "x", "y", "z")
	require.True(t, a.Changed)
	require.Contains(t, string(a.Forward), `"code":-32000`)
	require.Contains(t, string(a.Forward), fmt.Sprintf("exceed %d bytes", bound))
	require.Equal(t, []string{"a", "b"}, s.toolNames(), "the list before stays")

	a = list("page-3", "c", "d")
	require.True(t, a.Changed)
	require.LessOrEqual(t, s.toolBytes, bound)
	require.Zero(t, s.inFlight())
}

// A request the client cancelled is no longer in flight: the server need not answer it.
func TestCancelledRequestLeavesNothingInFlight(t *testing.T) {
	s := NewSession(SessionConfig{MaxPending: 2, Judge: func(context.Context, []byte) (Outcome, error) {
		return Outcome{Decision: "allow"}, nil
	}})
	ctx := context.Background()
	for i := range 10 {
		call := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{}}}`, i)
		a := s.FromClient(ctx, call, nil)
		require.NotNil(t, a.Forward, "call %d: %s", i, a.Reply)
		cancel := fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"gone"}}`, i)
		require.Equal(t, cancel, s.FromClient(ctx, cancel, nil).Forward)
	}
	require.Zero(t, s.inFlight())
}

// A client that stops reading an event stream ends it at its first write past the
// server's write timeout, which the stream lifted (guardian.LongWait) but each write gets
// afresh: the handler and the server's stream are let go. Before, both were held for good.
func TestHTTPStalledReaderLetGo(t *testing.T) {
	var written atomic.Int64
	upDone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upDone)
		w.Header().Set("Content-Type", mediaSSE)
		ev := `data: {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + strings.Repeat("x", 60000) + "\"}}\n\n"
		for range 2000 { // 120 MB, far more than the connections buffer
			if _, err := io.WriteString(w, ev); err != nil {
				return
			}
			written.Add(1)
		}
	}))
	t.Cleanup(up.Close)
	gw, err := New(Config{Name: "up", URL: up.URL}, Options{Decider: fixedDecider{}})
	require.NoError(t, err)
	handlerDone := make(chan struct{})
	var once sync.Once
	mux := http.NewServeMux()
	gw.Register(mux)
	srv := httptest.NewUnstartedServer(guardian.WithLongWaits(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		once.Do(func() { close(handlerDone) })
	}), 250*time.Millisecond))
	srv.Config.WriteTimeout = 250 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	// A client that never reads past the request: its receive buffer fills.
	_, err = io.WriteString(conn, "GET /mcp/up HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nMcp-Session-Id: s1\r\n\r\n")
	require.NoError(t, err)
	select {
	case <-handlerDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler is still writing to a client that stopped reading")
	}
	next(t, upDone)
	require.Less(t, written.Load(), int64(2000))
}

// The answer to a request is still judged when it comes on a resumed stream: only an
// exchange that cannot bring it any more ends a request's time in flight.
func TestHTTPStreamEndedWithoutAnswerStaysInFlight(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(sessionHeader, "s1")
		w.Header().Set("Content-Type", mediaSSE)
		io.WriteString(w, "id: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n")
	}))
	t.Cleanup(up.Close)
	gw, err := New(Config{Name: "up", URL: up.URL}, Options{Decider: fixedDecider{}})
	require.NoError(t, err)
	url := front(t, gw, 0)
	st, _ := post(t, url, "s1", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, 1, gw.known("s1").inFlight())
	_, body := post(t, url, "s1", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	var m struct {
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	require.Equal(t, codeInvalidRequest, m.Error.Code)
}
