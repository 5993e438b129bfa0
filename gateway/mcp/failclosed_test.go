package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
)

// Nothing the gateway cannot read or judge reaches the other side, and nothing a client
// cancelled or left behind is approved later.

// deepCall is a call of tool whose arguments nest n arrays deep: Go's encoding/json refuses
// more than 10000 levels, JavaScript's JSON.parse (the TypeScript SDK's servers) does not.
func deepCall(id int, tool string, n int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"x":%s%s}}}`,
		id, tool, strings.Repeat("[", n), strings.Repeat("]", n))
}

const bom = "\ufeff"

// unreadable are client messages Vigil cannot judge as they are, and the JSON-RPC error
// code each gets in place of being relayed.
var unreadable = []struct {
	name, msg string
	code      int
}{
	{"a batch with an escaped slash", `[{"jsonrpc":"2.0","id":4,"method":"tools\/call","params":{"name":"get-env","arguments":{}}}]`, codeInvalidRequest},
	{"a batch with a unicode escape", `[{"jsonrpc":"2.0","id":4,"method":"tools\u002fcall","params":{"name":"get-env","arguments":{}}}]`, codeInvalidRequest},
	{"a batch with a task method", `[{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":"t"}}]`, codeInvalidRequest},
	{"a batch with a member Vigil cannot read", `[{"jsonrpc":"2.0","id":4,"method":7}]`, codeInvalidRequest},
	// Any batch: its answer (an array) would have to be split, judged and joined again on
	// every transport, and over stdio it was dropped, the requests left in flight.
	{"a batch of pings", `[{"jsonrpc":"2.0","id":6,"method":"ping"},{"jsonrpc":"2.0","id":7,"method":"tools/list"}]`, codeInvalidRequest},
	{"a batch nested too deep", "[" + deepCall(4, "get-env", 10001) + "]", codeParseError},
	{"a call nested too deep", deepCall(4, "get-env", 10001), codeParseError},
	{"a byte order mark", bom + `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"get-env","arguments":{}}}`, codeParseError},
}

// errorCode reads the code of a JSON-RPC error answer with a null id.
func errorCode(t *testing.T, b string) int {
	t.Helper()
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(b), &m), b)
	require.Equal(t, "null", string(m.ID), b)
	return m.Error.Code
}

// A client message Vigil cannot read is answered with JSON-RPC's parse or invalid-request
// error and never relayed: the server might read it (deeper nesting, a byte order mark,
// an escaped method in a batch) and run a call no rule saw. Before, each reached the server
// as it was, and get-env ran.
func TestUnreadableClientMessageNeverRelayed(t *testing.T) {
	var mu sync.Mutex
	var reached []string
	up := answering(t, func(w http.ResponseWriter, r *http.Request, _ string) {
		mu.Lock()
		reached = append(reached, r.Method)
		mu.Unlock()
		w.Header().Set("Content-Type", mediaJSON)
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"PATH=/usr/bin"}]}}`)
	})
	s := newStack(t, testRules, up, Config{})
	r := relayed(t, NewSession(SessionConfig{Judge: InProcess(s.g, func() guardian.RequestMeta { return guardian.RequestMeta{} })}))
	for _, c := range unreadable {
		t.Run(c.name, func(t *testing.T) {
			st, body := post(t, s.url+"/mcp/everything", "s1", c.msg)
			require.Equal(t, http.StatusBadRequest, st, body)
			require.Equal(t, c.code, errorCode(t, body))

			_, err := io.WriteString(r.client, c.msg+"\n")
			require.NoError(t, err)
			require.Equal(t, c.code, errorCode(t, next(t, r.toClient)))
		})
	}
	mu.Lock()
	require.Empty(t, reached, "the server got none of them over HTTP")
	mu.Unlock()
	// Over stdio, lines reach the server in order: the first it gets is this one.
	ping := `{"jsonrpc":"2.0","id":99,"method":"ping"}`
	_, err := io.WriteString(r.client, ping+"\n")
	require.NoError(t, err)
	require.Equal(t, ping, next(t, r.toServer))
}

// A server message Vigil cannot read never reaches the client: the client might read it
// as the answer to its call, unjudged. Before, each passed as it was.
func TestUnreadableServerMessageDropped(t *testing.T) {
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	sess := NewSession(SessionConfig{Judge: Remote(aos.NewClient(s.url + "/aos"))})
	r := relayed(t, sess)
	_, err := io.WriteString(r.client, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x"}}}`+"\n")
	require.NoError(t, err)
	require.Contains(t, next(t, r.toServer), "tools/call")
	result := `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Echo: tok-12345"}],"pad":%s}}`
	for _, line := range []string{
		fmt.Sprintf(result, strings.Repeat("[", 10001)+strings.Repeat("]", 10001)),
		bom + fmt.Sprintf(result, "0"),
		"[" + fmt.Sprintf(result, "0") + "]",
		fmt.Sprintf(result, "0"),
	} {
		_, err := io.WriteString(r.server, line+"\n")
		require.NoError(t, err)
	}
	// The first line the client gets is the last, judged (redacted).
	got := next(t, r.toClient)
	require.Contains(t, got, "Echo: [REDACTED]")
	require.Zero(t, sess.inFlight())
}

// Requests in flight are known by their ids' values, as the server echoes them: a call
// whose id the client spells 6.0 (or "\u0037") has its answer, 6 (or "7"), judged, and
// ends its time in flight. Before, the answer passed unjudged (tok-12345 reached the
// client) and the request stayed in flight for good.
func TestAnswerMatchedByIDValue(t *testing.T) {
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct{ sent, echoed string }{
		{`6.0`, `6`}, {`6e0`, `6`}, {`-0`, `0`}, {`"\u0037"`, `"7"`}, {`7`, `7.00`},
	} {
		t.Run(c.sent, func(t *testing.T) {
			sess := NewSession(SessionConfig{Judge: Remote(aos.NewClient(s.url + "/aos"))})
			a := sess.FromClient(ctx, []byte(`{"jsonrpc":"2.0","id":`+c.sent+`,"method":"tools/call","params":{"name":"echo","arguments":{"message":"tok-12345"}}}`), nil)
			require.NotNil(t, a.Forward)
			a = sess.FromServer(ctx, []byte(`{"jsonrpc":"2.0","id":`+c.echoed+`,"result":{"content":[{"type":"text","text":"Echo: tok-12345"}]}}`))
			require.Contains(t, string(a.Forward), "Echo: [REDACTED]")
			require.Zero(t, sess.inFlight())
		})
	}
	// Answered requests end their time in flight, whatever the spelling: past the bound of
	// 1024, calls are still taken.
	sess := NewSession(SessionConfig{Judge: Remote(aos.NewClient(s.url + "/aos"))})
	for i := range 1031 {
		a := sess.FromClient(ctx, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d.0,"method":"ping"}`, i), nil)
		require.NotNil(t, a.Forward, string(a.Reply))
		sess.FromServer(ctx, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"result":{}}`, i))
	}
	require.Zero(t, sess.inFlight())
	a := sess.FromClient(ctx, []byte(`{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}`), nil)
	require.NotNil(t, a.Forward, string(a.Reply))
}

// An answer to no request in flight (an id never sent, a request answered already) is
// dropped: the gateway relays no answer it has not judged.
func TestAnswerToNoRequestInFlightDropped(t *testing.T) {
	sess := NewSession(SessionConfig{Judge: InProcess(fixedDecider{}, func() guardian.RequestMeta { return guardian.RequestMeta{} })})
	ctx := context.Background()
	require.Nil(t, sess.FromServer(ctx, []byte(`{"jsonrpc":"2.0","id":41,"result":{"content":[]}}`)).Forward)
	require.NotNil(t, sess.FromClient(ctx, []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), nil).Forward)
	require.NotNil(t, sess.FromServer(ctx, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)).Forward)
	require.Nil(t, sess.FromServer(ctx, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)).Forward, "answered already")
}

// rawClient speaks Streamable HTTP to the gateway message by message, as an SDK would.
type rawClient struct {
	t        *testing.T
	url, sid string
	version  string
}

// send posts one message and returns the HTTP status and the messages of the answer (a
// JSON body or every event of the stream), with the events' ids.
func (c *rawClient) send(ctx context.Context, body string) (int, []string, []string) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", mediaJSON)
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.sid != "" {
		req.Header.Set(sessionHeader, c.sid)
		req.Header.Set("Mcp-Protocol-Version", c.version)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	if sid := resp.Header.Get(sessionHeader); sid != "" {
		c.sid = sid
	}
	if mediaType(resp.Header) != mediaSSE {
		b, err := io.ReadAll(resp.Body)
		require.NoError(c.t, err)
		if len(b) == 0 {
			return resp.StatusCode, nil, nil
		}
		return resp.StatusCode, []string{string(b)}, nil
	}
	var msgs, ids []string
	br := bufio.NewReader(resp.Body)
	for {
		ev, err := readEvent(br, 1<<20)
		if len(ev.data) > 0 {
			msgs = append(msgs, string(ev.data))
			for l := range strings.SplitSeq(string(ev.raw), "\n") {
				if id, ok := strings.CutPrefix(l, "id: "); ok {
					ids = append(ids, strings.TrimSpace(id))
				}
			}
		}
		if err != nil {
			return resp.StatusCode, msgs, ids
		}
	}
}

// connect initializes an MCP session at protocol version and returns the initialize
// answer and its event id.
func (c *rawClient) connect(ctx context.Context, version string) (answer, eventID string) {
	c.t.Helper()
	c.version = version
	st, msgs, ids := c.send(ctx, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+version+
		`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	require.Equal(c.t, http.StatusOK, st, msgs)
	require.Len(c.t, msgs, 1)
	require.NotEmpty(c.t, c.sid)
	st, _, _ = c.send(ctx, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	require.Equal(c.t, http.StatusAccepted, st)
	if len(ids) > 0 {
		eventID = ids[len(ids)-1]
	}
	return msgs[0], eventID
}

// A resumed stream (GET with Last-Event-ID) replays the server's stored events: answers
// already relayed, judged, are not relayed again (the server's raw result would reach the
// client unredacted); what else it replays passes. Before, the replayed echo result carried
// tok-12345.
func TestHTTPResumedStreamReplaysNoUnjudgedAnswer(t *testing.T) {
	up := startEverythingHTTP(t)
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &rawClient{t: t, url: s.url + "/mcp/everything"}
	_, from := c.connect(ctx, "2025-06-18")
	require.NotEmpty(t, from, "server-everything stores its events")
	_, msgs, _ := c.send(ctx, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"tok-12345"}}}`)
	require.Len(t, msgs, 1)
	require.Contains(t, msgs[0], "Echo: [REDACTED]")
	// A notification after the result: the end of what the replay is asserted on.
	_, msgs, _ = c.send(ctx, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"trigger-long-running-operation",
		"arguments":{"duration":0.01,"steps":1},"_meta":{"progressToken":"end"}}}`)
	require.NotEmpty(t, msgs)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", mediaSSE)
	req.Header.Set(sessionHeader, c.sid)
	req.Header.Set("Mcp-Protocol-Version", c.version)
	req.Header.Set("Last-Event-ID", from)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	for {
		ev, err := readEvent(br, 1<<20)
		require.NoError(t, err)
		require.NotContains(t, string(ev.data), "tok-12345")
		require.NotContains(t, string(ev.data), `"result"`, "an answer relayed twice")
		if strings.Contains(string(ev.data), `"progressToken":"end"`) {
			return
		}
	}
}

// waitStatus waits for hold id to reach status.
func (s *stack) waitStatus(ctx context.Context, id string, status string) {
	s.t.Helper()
	for {
		got, err := s.holds.Get(ctx, id)
		require.NoError(s.t, err)
		if got.Status == status {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("hold %s, not %s", got.Status, status)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A held call the client cancels (notifications/cancelled: the TypeScript SDK's timeout)
// is abandoned: approving it later does nothing, and the call never reaches the server.
// Before, the hold stayed pending and an approval ran the call unseen.
func TestHTTPCancelledHoldAbandoned(t *testing.T) {
	up := startEverythingHTTP(t)
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &rawClient{t: t, url: s.url + "/mcp/everything"}
	c.connect(ctx, "2025-06-18")
	answered := make(chan []string, 1)
	go func() {
		_, msgs, _ := c.send(ctx, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":2,"b":3}}}`)
		answered <- msgs
	}()
	h := s.waitHold(ctx)
	st, _, _ := c.send(ctx, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"timed out"}}`)
	require.Equal(t, http.StatusAccepted, st)
	s.waitStatus(ctx, h.ID, holds.StatusAbandoned)
	resp, err := http.Post(s.url+"/api/holds/"+h.ID+"/approve", "application/json", strings.NewReader(`{"operator":"dana"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.NotEqual(t, http.StatusOK, resp.StatusCode)
	msgs := next(t, answered)
	require.Len(t, msgs, 1)
	require.NotContains(t, msgs[0], "The sum")
	require.Contains(t, msgs[0], "Denied by Vigil: "+errCancelled)
	require.Zero(t, s.holdsPending(ctx))
}

func (s *stack) holdsPending(ctx context.Context) int {
	hs, err := s.holds.List(ctx, holds.StatusPending, 10)
	require.NoError(s.t, err)
	return len(hs)
}

// Tasks (protocol 2025-11-25) are not offered through Vigil: tasks/result would hand the
// client the tool's result unjudged. The client does not see the server's tasks capability,
// and a task-augmented call or a tasks method is refused. Before, server-everything's
// tasks capability reached the client and a task-augmented call got a task handle.
func TestHTTPTasksNotOffered(t *testing.T) {
	up := startEverythingHTTP(t)
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &rawClient{t: t, url: s.url + "/mcp/everything"}
	init, _ := c.connect(ctx, "2025-11-25")
	var m struct {
		Result struct {
			Capabilities map[string]json.RawMessage `json:"capabilities"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(init), &m), init)
	require.Contains(t, m.Result.Capabilities, "tools", init)
	require.NotContains(t, m.Result.Capabilities, "tasks", init)
	for _, q := range []struct {
		msg  string
		code int
	}{
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"simulate-research-query","arguments":{"topic":"tok-12345"},"task":{"ttl":60000}}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"x"}}`, codeMethodNotFound},
		{`{"jsonrpc":"2.0","id":4,"method":"tasks/list"}`, codeMethodNotFound},
	} {
		_, msgs, _ := c.send(ctx, q.msg)
		require.Len(t, msgs, 1)
		var a struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(msgs[0]), &a), msgs[0])
		require.Equal(t, q.code, a.Error.Code, msgs[0])
		require.Contains(t, a.Error.Message, errNoTasks)
	}
}

const holdRules = `
rules:
  - id: review-results
    when: kind == "mcp" && mcp.method == "" && text contains "holdme"
    action: hold
    hold: {timeout: 1m, onTimeout: deny}
  - id: review-sampling
    when: mcp.method == "sampling/createMessage" && text contains "holdme"
    action: hold
    hold: {timeout: 1m, onTimeout: deny}
`

// Over stdio, a held result or server request is abandoned as soon as the client closes
// its input, as a held call is: the relay ends with the server rather than wait for a
// reviewer, and nothing is written to the departed client. Before, the hold stayed pending
// and the relay (and the wrapper) ran until someone decided.
func TestStdioClientLeavesDuringHeldServerMessage(t *testing.T) {
	for _, c := range []struct{ name, server string }{
		{"a result", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Echo: holdme"}]}}`},
		{"a sampling request", `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"holdme"}}],"maxTokens":1}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStack(t, holdRules, "http://127.0.0.1:1/mcp", Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			sess := NewSession(SessionConfig{ID: "mcp-leave-" + strings.ReplaceAll(c.name, " ", "-"), Upstream: "raw",
				Judge: Remote(aos.NewClient(s.url + "/aos"))})
			clientIn, clientW := io.Pipe()
			clientR, clientOut := io.Pipe()
			serverInR, serverIn := io.Pipe()
			serverOutR, serverOut := io.Pipe()
			toClient := make(chan string, 16)
			go func() {
				sc := bufio.NewScanner(clientR)
				for sc.Scan() {
					toClient <- sc.Text()
				}
				close(toClient)
			}()
			toServer := make(chan string, 16)
			go func() {
				sc := bufio.NewScanner(serverInR)
				for sc.Scan() {
					toServer <- sc.Text()
				}
				_ = serverOut.Close() // the server exits once its input ends
			}()
			done := make(chan error, 1)
			go func() {
				done <- Relay(context.Background(), sess, Pipes{ClientIn: clientIn, ClientOut: clientOut, ServerIn: serverIn, ServerOut: serverOutR}, 0)
				_ = clientOut.Close()
			}()
			_, err := io.WriteString(clientW, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"holdme"}}}`+"\n")
			require.NoError(t, err)
			require.Contains(t, next(t, toServer), "tools/call")
			_, err = io.WriteString(serverOut, c.server+"\n")
			require.NoError(t, err)
			h := s.waitHold(ctx)
			require.NoError(t, clientW.Close())
			s.waitStatus(ctx, h.ID, holds.StatusAbandoned)
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-ctx.Done():
				t.Fatal("the relay waited for the hold of a client that left")
			}
			for l := range toClient {
				require.NotContains(t, l, "holdme")
			}
		})
	}
}

// A server that answers a notification or a response with 200 and a JSON body ({} or
// nothing) instead of 202: the client gets the status, as clients read only that, and no
// body Vigil did not judge. Before, it got 502 and the TypeScript SDK could not connect.
func TestHTTPAnswerToNotificationPassesItsStatus(t *testing.T) {
	for _, body := range []string{"", "{}", `{"jsonrpc":"2.0","id":99,"result":{"leak":"tok-12345"}}`} {
		t.Run(body, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				w.Header().Set("Content-Type", mediaJSON)
				w.Header().Set(sessionHeader, "fake-1")
				if strings.Contains(string(b), `"initialize"`) {
					_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}}`)
					return
				}
				_, _ = io.WriteString(w, body)
			}))
			defer up.Close()
			s := newStack(t, testRules, up.URL, Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := &rawClient{t: t, url: s.url + "/mcp/everything", version: "2025-06-18"}
			st, msgs, _ := c.send(ctx, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
			require.Equal(t, http.StatusOK, st, msgs)
			st, msgs, _ = c.send(ctx, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			require.Equal(t, http.StatusOK, st, msgs)
			require.Empty(t, msgs, "no body Vigil did not judge")
		})
	}
}
