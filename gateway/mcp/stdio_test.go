package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
)

// wrap is a client's view of `vigil mcp wrap`: the relay between the Go SDK's client and a
// real server process, judged over HTTP by the guardian at guardianURL.
func wrap(t testing.TB, guardianURL, onError string, argv ...string) (*sdk.ClientSession, chan error) {
	t.Helper()
	return wrapWith(t, SessionConfig{ID: "mcp-test-" + strings.ReplaceAll(t.Name(), "/", "-"), Upstream: "everything",
		Judge: Remote(aos.NewClient(guardianURL + "/aos")), OnError: onError, ProgressEvery: 10 * time.Millisecond}, argv...)
}

// wrapWith is wrap with the session configured by cfg.
func wrapWith(t testing.TB, cfg SessionConfig, argv ...string) (*sdk.ClientSession, chan error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	serverIn, err := cmd.StdinPipe()
	require.NoError(t, err)
	serverOut, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	clientR, relayW := io.Pipe() // relay → client
	relayR, clientW := io.Pipe() // client → relay
	sess := NewSession(cfg)
	done := make(chan error, 1)
	go func() {
		err := Relay(context.Background(), sess, Pipes{ClientIn: relayR, ClientOut: relayW, ServerIn: serverIn, ServerOut: serverOut}, 0)
		_ = relayW.Close()
		done <- err
	}()
	c := sdk.NewClient(&sdk.Implementation{Name: "stdio-client", Version: "0.1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.IOTransport{Reader: clientR, Writer: clientW}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs, done
}

func TestStdioToolCalls(t *testing.T) {
	bin := nodeBin(t, "mcp-server-everything")
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, _ := wrap(t, s.url, OnErrorDeny, bin, "stdio")
	_, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	cases := []struct {
		name    string
		tool    string
		args    map[string]any
		isError bool
		want    string
	}{
		{"allowed", "echo", map[string]any{"message": "hello"}, false, "Echo: hello"},
		{"denied", "get-env", map[string]any{}, true, "Denied by Vigil: The environment is private."},
		{"arguments redacted", "echo", map[string]any{"message": "key secret-abc1 here"}, false, "Echo: key [REDACTED] here"},
		{"result redacted", "echo", map[string]any{"message": "tok-12345"}, false, "Echo: [REDACTED]"},
		{"result withheld", "echo", map[string]any{"message": "classified"}, true, "Denied by Vigil: That result is classified."},
		{"annotations", "echo", map[string]any{"message": "annotated"}, true, "Denied by Vigil: read-only tool seen with its annotations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: c.args})
			require.NoError(t, err)
			require.Equal(t, c.isError, res.IsError)
			require.Equal(t, c.want, text(t, res))
		})
	}

	// A held call does not stop the rest of the session.
	got := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "get-sum", Arguments: map[string]any{"a": 2, "b": 3}})
		if err != nil {
			res = &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}
		}
		got <- res
	}()
	h := s.waitHold(ctx)
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "meanwhile"}})
	require.NoError(t, err)
	require.Equal(t, "Echo: meanwhile", text(t, res))
	s.decideHold(h.ID, "approve")
	require.Equal(t, "The sum of 2 and 3 is 5.", text(t, <-got))
}

func TestStdioGuardianUnreachable(t *testing.T) {
	bin := nodeBin(t, "mcp-server-everything")
	dead := httptest.NewServer(nil)
	dead.Close()
	for _, c := range []struct {
		policy, want string
		isError      bool
	}{
		{OnErrorDeny, "Denied by Vigil: the guardian could not be asked", true},
		{OnErrorAllow, "Echo: hi", false},
	} {
		t.Run(c.policy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, _ := wrap(t, dead.URL, c.policy, bin, "stdio")
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
			require.NoError(t, err)
			require.Equal(t, c.isError, res.IsError)
			require.Contains(t, text(t, res), c.want)
		})
	}
}

func TestStdioLargeResult(t *testing.T) {
	bin := nodeBin(t, "mcp-server-everything")
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, _ := wrap(t, s.url, OnErrorDeny, bin, "stdio")
	// 10 MB each way: under /aos's default 10 MiB body bound (--max-body-bytes) with the wrapping.
	big := strings.Repeat("0123456789", 1_000_000)
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"message": big}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(t, res)[:min(300, len(text(t, res)))])
	require.Equal(t, "Echo: "+big, text(t, res))
}

// A server that dies ends the relay, and the client sees its input end.
func TestStdioServerCrash(t *testing.T) {
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", "read l; exit 3")
	serverIn, err := cmd.StdinPipe()
	require.NoError(t, err)
	serverOut, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	clientIn, clientW := io.Pipe()
	clientR, clientOut := io.Pipe()
	sess := NewSession(SessionConfig{ID: "mcp-crash", Upstream: "crashy", Judge: Remote(aos.NewClient(s.url + "/aos"))})
	done := make(chan error, 1)
	go func() {
		done <- Relay(ctx, sess, Pipes{ClientIn: clientIn, ClientOut: clientOut, ServerIn: serverIn, ServerOut: serverOut}, 0)
		_ = clientOut.Close()
	}()
	go func() {
		_, _ = io.WriteString(clientW, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`+"\n")
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("relay did not end with the server")
	}
	b, err := io.ReadAll(clientR)
	require.NoError(t, err)
	require.Empty(t, b)
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &exit)
	require.Equal(t, 3, exit.ExitCode())
	_ = clientW.Close()
}

// Responses out of order, notifications and server requests in between all reach the
// client as the server wrote them; a line that is not JSON-RPC does not (Vigil cannot
// judge it).
func TestStdioTransparentAndOutOfOrder(t *testing.T) {
	s := newStack(t, "", "http://127.0.0.1:1/mcp", Config{})
	j := Remote(aos.NewClient(s.url + "/aos"))
	sess := NewSession(SessionConfig{ID: "mcp-raw", Upstream: "raw", Judge: j})
	clientIn, clientW := io.Pipe()
	clientR, clientOut := io.Pipe()
	serverInR, serverIn := io.Pipe()
	serverOutR, serverOut := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Relay(context.Background(), sess, Pipes{ClientIn: clientIn, ClientOut: clientOut, ServerIn: serverIn, ServerOut: serverOutR}, 0)
		_ = clientOut.Close()
	}()
	fromServer := bufio.NewReader(serverInR)
	fromRelay := bufio.NewReader(clientR)
	send := func(w io.Writer, s string) {
		_, err := io.WriteString(w, s+"\n")
		require.NoError(t, err)
	}
	recv := func(r *bufio.Reader) string {
		l, err := r.ReadString('\n')
		require.NoError(t, err)
		return strings.TrimSuffix(l, "\n")
	}
	for i := 1; i <= 2; i++ {
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t%d","arguments":{}}}`, i, i)
		go send(clientW, call)
		require.JSONEq(t, call, recv(fromServer))
	}
	out := []string{
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"two"}]}}`,
		`not json at all {`,
		`{"jsonrpc":"2.0","id":"s1","method":"roots/list"}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"one"}]}}`,
	}
	go func() {
		for _, l := range out {
			send(serverOut, l)
		}
	}()
	want := append(append([]string{}, out[:2]...), out[3:]...)
	var got []string
	for range want {
		got = append(got, recv(fromRelay))
	}
	// The judged results may overtake each other; every line arrives whole and unchanged.
	require.ElementsMatch(t, want, got)
	for _, l := range got {
		require.True(t, json.Valid([]byte(l)), l)
	}
	require.NoError(t, clientW.Close())
	require.NoError(t, serverOut.Close())
	require.NoError(t, <-done)
}

// The example rule pack in front of the real filesystem server: a write outside the
// workspace waits for a person (and does not happen when denied), a secret read from a file
// is redacted before the client sees it.
func TestStdioFilesystemWithRulePack(t *testing.T) {
	bin := nodeBin(t, "mcp-server-filesystem")
	pack, err := os.ReadFile(filepath.Join("..", "..", "examples", "rules", "mcp.yaml"))
	require.NoError(t, err)
	dir := t.TempDir()
	secret := filepath.Join(dir, "creds.txt")
	require.NoError(t, os.WriteFile(secret, []byte("AKIAIOSFODNN7EXAMPLE\n"), 0o600))
	s := newStack(t, string(pack), "http://127.0.0.1:1/mcp", Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, _ := wrap(t, s.url, OnErrorDeny, bin, dir)
	_, err = cs.ListTools(ctx, nil)
	require.NoError(t, err)

	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_text_file", Arguments: map[string]any{"path": secret}})
	require.NoError(t, err)
	require.NotContains(t, text(t, res), "AKIAIOSFODNN7EXAMPLE")
	require.Contains(t, text(t, res), "[REDACTED")

	target := filepath.Join(dir, "out.txt")
	got := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": target, "content": "x"}})
		if err != nil {
			res = &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}
		}
		got <- res
	}()
	h := s.waitHold(ctx)
	require.Equal(t, "fs-write-outside-workspace", h.RuleID)
	s.decideHold(h.ID, "deny")
	res = <-got
	require.True(t, res.IsError)
	require.Contains(t, text(t, res), "Denied by Vigil")
	require.NoFileExists(t, target)
}

// A client that closes its input while a call is held is gone: the hold is abandoned and
// the call never reaches the server.
func TestStdioClientLeavesDuringHold(t *testing.T) {
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess := NewSession(SessionConfig{ID: "mcp-leave", Upstream: "raw", Judge: Remote(aos.NewClient(s.url + "/aos"))})
	clientIn, clientW := io.Pipe()
	clientR, clientOut := io.Pipe()
	serverInR, serverIn := io.Pipe()
	serverOutR, serverOut := io.Pipe()
	go func() { _, _ = io.Copy(io.Discard, clientR) }()
	forwarded := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(serverInR)
		forwarded <- b
		_ = serverOut.Close() // the server exits once its input ends
	}()
	done := make(chan error, 1)
	go func() {
		done <- Relay(context.Background(), sess, Pipes{ClientIn: clientIn, ClientOut: clientOut, ServerIn: serverIn, ServerOut: serverOutR}, 0)
	}()
	_, err := io.WriteString(clientW, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":1,"b":2}}}`+"\n")
	require.NoError(t, err)
	h := s.waitHold(ctx)
	require.NoError(t, clientW.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the relay waited for the hold of a client that left")
	}
	require.Empty(t, <-forwarded)
	for {
		got, err := s.holds.Get(ctx, h.ID)
		require.NoError(t, err)
		if got.Status == holds.StatusAbandoned {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("hold still %s", got.Status)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Out of process, vigil mcp wrap hides the tools a rule denies outright by asking the
// guardian's dry run; tools that are held or modified stay, and so does everything when
// the dry run cannot be asked or showing denied tools is asked for.
func TestStdioHidesDeniedTools(t *testing.T) {
	bin := nodeBin(t, "mcp-server-everything")
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	dead := httptest.NewServer(nil)
	dead.Close()
	cases := []struct {
		name   string
		hides  HidesFunc
		listed bool
	}{
		{"hidden", HidesRemote(aos.NewClient(s.url + guardian.PreviewPath)), false},
		{"show denied", nil, true},
		{"guardian unreachable", HidesRemote(aos.NewClient(dead.URL + guardian.PreviewPath)), true},
		{"not a dry run", HidesRemote(aos.NewClient(s.url + "/aos")), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, _ := wrapWith(t, SessionConfig{ID: "mcp-hide-" + strings.ReplaceAll(c.name, " ", "-"), Upstream: "everything",
				Judge: Remote(aos.NewClient(s.url + "/aos")), Hides: c.hides}, bin, "stdio")
			tools, err := cs.ListTools(ctx, nil)
			require.NoError(t, err)
			names := map[string]bool{}
			for _, tl := range tools.Tools {
				names[tl.Name] = true
			}
			require.Equal(t, c.listed, names["get-env"], "get-env is denied outright")
			require.True(t, names["get-sum"], "get-sum is held, not denied")
			require.True(t, names["echo"], "echo is modified, not denied")
			// A hidden tool called anyway is still refused.
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "get-env"})
			require.NoError(t, err)
			require.True(t, res.IsError)
			require.Equal(t, "Denied by Vigil: The environment is private.", text(t, res))
		})
	}
	// The dry runs stored nothing: only the four get-env calls are steps (and the
	// "not a dry run" case's /aos answers).
	page, err := s.db.Sessions(context.Background(), record.SessionQuery{})
	require.NoError(t, err)
	for _, ss := range page.Sessions {
		if ss.ID != "mcp-hide-not-a-dry-run" {
			require.EqualValues(t, 1, ss.Steps, ss.ID)
		}
	}
}

// A tools/list answer is judged with one request to the dry run, whatever the number of
// tools: it counts once against the agent's rate limit.
func TestStdioHidesAskOncePerList(t *testing.T) {
	bin := nodeBin(t, "mcp-server-everything")
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	target, err := url.Parse(s.url)
	require.NoError(t, err)
	var previews atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == guardian.PreviewPath {
			previews.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(counting.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, _ := wrapWith(t, SessionConfig{ID: "mcp-hide-once", Upstream: "everything",
		Judge: Remote(aos.NewClient(counting.URL + "/aos")), Hides: HidesRemote(aos.NewClient(counting.URL + guardian.PreviewPath))}, bin, "stdio")
	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Greater(t, len(tools.Tools), 5, "the server lists many tools")
	for _, tl := range tools.Tools {
		require.NotEqual(t, "get-env", tl.Name, "get-env is denied outright")
	}
	require.EqualValues(t, 1, previews.Load())
}

// A judged message the guardian cannot read as MCP is the client's fault, and both
// transports say so alike: `vigil mcp wrap` (the guardian over /aos) answers as --mcp over
// HTTP (the guardian in process) does, and the server never sees the message.
func TestInvalidMessageAnsweredAlikeOverBothTransports(t *testing.T) {
	reached := make(chan string, 16)
	up := answering(t, func(w http.ResponseWriter, _ *http.Request, id string) {
		reached <- id
		w.WriteHeader(http.StatusInternalServerError)
	})
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The stdio relay, judged by the same guardian over /aos; the server is a pipe.
	sess := NewSession(SessionConfig{ID: "mcp-invalid", Upstream: "everything", Judge: Remote(aos.NewClient(s.url + "/aos"))})
	clientIn, clientW := io.Pipe()
	clientR, clientOut := io.Pipe()
	serverInR, serverIn := io.Pipe()
	serverOutR, serverOut := io.Pipe()
	go func() {
		b, _ := io.ReadAll(serverInR)
		reached <- string(b)
	}()
	done := make(chan error, 1)
	go func() {
		done <- Relay(ctx, sess, Pipes{ClientIn: clientIn, ClientOut: clientOut, ServerIn: serverIn, ServerOut: serverOutR}, 0)
	}()
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(clientR)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()

	cases := []struct{ name, msg string }{
		{"tools/call with a number for params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":5}`},
		{"tools/call with a number for its name", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":5}}`},
		{"tools/call without params", `{"jsonrpc":"2.0","id":3,"method":"tools/call"}`},
		{"tools/call with an array for arguments", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":[1]}}`},
		{"resources/read with an object for its id", `{"jsonrpc":"2.0","id":{"n":5},"method":"resources/read","params":{"uri":"x"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/mcp/everything", strings.NewReader(c.msg))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(sessionHeader, "invalid")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			overHTTP, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)

			_, err = io.WriteString(clientW, c.msg+"\n")
			require.NoError(t, err)
			var overStdio string
			select {
			case overStdio = <-lines:
			case <-ctx.Done():
				t.Fatalf("no answer over stdio (HTTP answered %s)", overHTTP)
			}

			require.JSONEq(t, string(overHTTP), overStdio)
			require.Contains(t, overStdio, "Denied by Vigil: the message is not valid MCP")
			require.NotContains(t, overStdio, "could not be asked")
			require.NotContains(t, overStdio, "jsonrpc -32602")
		})
	}
	require.NoError(t, clientW.Close())
	require.NoError(t, serverOut.Close())
	require.NoError(t, <-done)
	require.Empty(t, <-reached, "the server saw none of the messages")
	require.Empty(t, reached)
}

// What went wrong asking the guardian (an address, a transport error, a storage failure) is
// logged, not told to the client: the refusal only says that Vigil failed closed.
func TestJudgeFailureStaysInTheLog(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(b)
	}), nil))
	for _, c := range []struct {
		name string
		err  error
	}{
		{"transport", errors.New(`aos: protocols/MCP: Post "http://10.0.0.7:7878/aos": dial tcp 10.0.0.7:7878: connection refused`)},
		{"guardian", &aos.Error{Code: aos.CodeInternalError, Message: "internal error: store step: disk I/O error"}},
		{"storage", fmt.Errorf("decide: %w", errors.New("store step: database is locked"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			sess := NewSession(SessionConfig{ID: "mcp-fail", Upstream: "x", Logger: log,
				Judge: func(context.Context, []byte) (Outcome, error) { return Outcome{}, c.err }})
			a := sess.FromClient(context.Background(), []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`), nil)
			require.Nil(t, a.Forward)
			require.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":{"isError":true,
				"content":[{"type":"text","text":"Denied by Vigil: the guardian could not be asked; failing closed."}]}}`, string(a.Reply))
			mu.Lock()
			defer mu.Unlock()
			require.Contains(t, logged.String(), strings.ReplaceAll(c.err.Error(), `"`, `\"`))
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// Members are read by their exact names, the last of a repeated name winning, as
// JavaScript reads them: a server cannot hide a result from Vigil behind a member whose name
// differs only in case, which the TypeScript SDK's clients ignore.
func TestServerMessageReadAsClientsReadIt(t *testing.T) {
	s := newStack(t, testRules, "http://127.0.0.1:1/mcp", Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cases := []struct{ name, answer string }{
		{"an id in capitals", `{"jsonrpc":"2.0","id":7,"ID":99,"result":{"content":[{"type":"text","text":"Echo: classified"}]}}`},
		{"a repeated id", `{"jsonrpc":"2.0","id":99,"id":7,"result":{"content":[{"type":"text","text":"Echo: classified"}]}}`},
		{"a result in capitals", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"Echo: classified"}]},"Result":{}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sess := NewSession(SessionConfig{ID: "mcp-exact", Upstream: "everything", Judge: Remote(aos.NewClient(s.url + "/aos"))})
			a := sess.FromClient(ctx, []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}`), nil)
			require.NotNil(t, a.Forward)
			a = sess.FromServer(ctx, []byte(c.answer))
			require.True(t, a.Changed, "the result passed unjudged: %s", a.Forward)
			require.Contains(t, string(a.Forward), "Denied by Vigil: That result is classified.")
		})
	}
	// The call's tool is the one the server reads, however the client spells the others.
	sess := NewSession(SessionConfig{ID: "mcp-exact-name", Upstream: "everything", Judge: Remote(aos.NewClient(s.url + "/aos"))})
	a := sess.FromClient(ctx, []byte(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","NAME":"other","arguments":{"message":"hi"}}}`), nil)
	require.NotNil(t, a.Forward)
	a = sess.FromServer(ctx, []byte(`{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"Echo: classified"}]}}`))
	require.Contains(t, string(a.Forward), "Denied by Vigil: That result is classified.")
}
