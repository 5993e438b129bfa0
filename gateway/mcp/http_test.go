package mcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
)

func TestHTTPToolCalls(t *testing.T) {
	up := startEverythingHTTP(t)
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := s.connect(ctx, nil)

	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	// get-env is denied outright: the model never sees it. A held or modified tool, or one a
	// rule denies only for some arguments, stays.
	require.NotContains(t, names, "get-env")
	require.Contains(t, names, "echo")
	require.Contains(t, names, "get-sum")

	cases := []struct {
		name    string
		tool    string
		args    map[string]any
		isError bool
		want    string
	}{
		{"allowed", "echo", map[string]any{"message": "hello"}, false, "Echo: hello"},
		{"a hidden tool called anyway is denied", "get-env", map[string]any{}, true, "Denied by Vigil: The environment is private."},
		{"arguments redacted", "echo", map[string]any{"message": "key secret-abc1 here"}, false, "Echo: key [REDACTED] here"},
		{"result redacted", "echo", map[string]any{"message": "tok-12345"}, false, "Echo: [REDACTED]"},
		{"result withheld", "echo", map[string]any{"message": "classified"}, true, "Denied by Vigil: That result is classified."},
		{"tool annotations in the rules", "echo", map[string]any{"message": "annotated"}, true, "Denied by Vigil: read-only tool seen with its annotations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: c.args})
			require.NoError(t, err)
			require.Equal(t, c.isError, res.IsError)
			require.Equal(t, c.want, text(t, res))
		})
	}

	steps, err := s.db.Steps(ctx, record.StepQuery{SessionID: "mcp-everything-" + cs.ID(), Limit: 100})
	require.NoError(t, err)
	require.NotEmpty(t, steps)
	for _, st := range steps {
		require.Equal(t, "protocols/MCP", st.Method)
		require.Equal(t, "test-client", st.AgentID)
	}
	// Every judged message is a step: six calls, and the results of the four that reached
	// the server.
	require.Equal(t, 10, len(steps))
}

func TestHTTPHeldCall(t *testing.T) {
	up := startEverythingHTTP(t)
	for _, c := range []struct {
		action, want string
		isError      bool
	}{
		{"approve", "The sum of 2 and 3 is 5.", false},
		{"deny", "Denied by Vigil:", true},
	} {
		t.Run(c.action, func(t *testing.T) {
			s := newStack(t, testRules, up, Config{ProgressEvery: 10 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var progress atomic.Int64
			cs := s.connect(ctx, &sdk.ClientOptions{ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) {
				progress.Add(1)
			}})
			_, err := cs.ListTools(ctx, nil)
			require.NoError(t, err)
			type answer struct {
				res *sdk.CallToolResult
				err error
			}
			got := make(chan answer, 1)
			go func() {
				p := &sdk.CallToolParams{Name: "get-sum", Arguments: map[string]any{"a": 2, "b": 3}}
				p.SetProgressToken("p1")
				res, err := cs.CallTool(ctx, p)
				got <- answer{res, err}
			}()
			h := s.waitHold(ctx)
			// The client hears that the call is waiting before anyone decides.
			for progress.Load() == 0 {
				select {
				case <-ctx.Done():
					t.Fatal("no progress notification while held")
				case <-time.After(5 * time.Millisecond):
				}
			}
			s.decideHold(h.ID, c.action)
			a := <-got
			require.NoError(t, a.err)
			require.Equal(t, c.isError, a.res.IsError)
			require.Contains(t, text(t, a.res), c.want)
		})
	}
}

func TestHTTPDisconnectDuringHoldAbandonsIt(t *testing.T) {
	up := startEverythingHTTP(t)
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := s.connect(ctx, nil)
	callCtx, leave := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &sdk.CallToolParams{Name: "get-sum", Arguments: map[string]any{"a": 1, "b": 1}})
		done <- err
	}()
	h := s.waitHold(ctx)
	leave()
	require.Error(t, <-done)
	_ = cs.Close()
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

func TestHTTPSamplingAndElicitation(t *testing.T) {
	up := startEverythingHTTP(t)
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sampled, elicited atomic.Int64
	cs := s.connect(ctx, &sdk.ClientOptions{
		//lint:ignore SA1019 servers still send sampling requests in the deprecation window; the proxy must judge them
		CreateMessageHandler: func(_ context.Context, r *sdk.CreateMessageRequest) (*sdk.CreateMessageResult, error) {
			sampled.Add(1)
			//lint:ignore SA1019 servers still send sampling requests in the deprecation window
			return &sdk.CreateMessageResult{Model: "test", Role: "assistant", Content: &sdk.TextContent{Text: "sampled answer"}}, nil
		},
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			elicited.Add(1)
			return &sdk.ElicitResult{Action: "decline"}, nil
		},
	})
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "hello"}})
	require.NoError(t, err)
	require.Contains(t, text(t, res), "sampled answer")
	require.EqualValues(t, 1, sampled.Load())

	// A refused sampling request never reaches the client; the server gets Vigil's error.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "forbidden"}})
	if err == nil {
		require.True(t, res.IsError, text(t, res))
		require.Contains(t, text(t, res), "Denied by Vigil")
	} else {
		require.Contains(t, err.Error(), "Denied by Vigil")
	}
	require.EqualValues(t, 1, sampled.Load())

	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "trigger-elicitation-request", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.EqualValues(t, 1, elicited.Load())

	steps, err := s.db.Steps(ctx, record.StepQuery{SessionID: "mcp-everything-" + cs.ID(), Limit: 100})
	require.NoError(t, err)
	var methods []string
	for _, st := range steps {
		if m := mcpMethod(t, st); m != "" && m != "tools/call" {
			methods = append(methods, m+":"+st.Decision)
		}
	}
	require.Equal(t, []string{"sampling/createMessage:allow", "sampling/createMessage:deny", "elicitation/create:allow"}, methods)
}

// A silent GET stream's headers reach the client at once: clients wait for them before
// they go on (the Go SDK's Connect waited 15 s for them).
func TestHTTPGetStreamHeadersSentAtOnce(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	s := newStack(t, "", up.URL+"/mcp", Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/mcp/everything", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", "s1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
}

func TestHTTPShowDenied(t *testing.T) {
	up := startEverythingHTTP(t)
	s := newStack(t, testRules, up, Config{ShowDenied: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tools, err := s.connect(ctx, nil).ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	require.Contains(t, names, "get-env")
}
