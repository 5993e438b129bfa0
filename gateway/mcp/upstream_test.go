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
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// classifiedResult is a tool result the test rules withhold (withhold-results).
func classifiedResult(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"Echo: classified"}],"isError":false}}`
}

// answering is an upstream that answers every request as answer says, whatever it is: a
// server that labels or sizes its answers as the tests need.
func answering(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, id string)) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		answer(w, r, string(m.ID))
	}))
	t.Cleanup(up.Close)
	return up.URL + "/mcp"
}

// callEcho posts a tools/call of echo with id 7 to the gateway as a client would, in the
// MCP session sid; with progress it asks for progress, so the gateway answers as an event
// stream from the start.
func callEcho(t *testing.T, ctx context.Context, s *stack, sid string, progress bool) *http.Response {
	t.Helper()
	meta := ""
	if progress {
		meta = `,"_meta":{"progressToken":"p7"}`
	}
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}` + meta + `}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/mcp/everything", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(sessionHeader, sid)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// answerTo reads the JSON-RPC answer to id 7 from a gateway's answer: the body, or the
// event that carries it in an event stream.
func answerTo(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	ct := resp.Header.Get("Content-Type")
	var data []byte
	if strings.HasPrefix(strings.ToLower(ct), "text/event-stream") {
		br := bufio.NewReader(resp.Body)
		for {
			ev, err := readEvent(br, 1<<20)
			var m message
			if json.Unmarshal(ev.data, &m) == nil && string(m.ID) == "7" {
				data = ev.data
				break
			}
			require.NoError(t, err, "the stream ended without an answer to id 7")
		}
	} else {
		var err error
		data, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
	}
	var out map[string]any
	require.NoError(t, json.Unmarshal(data, &out), string(data))
	require.EqualValues(t, 7, out["id"], string(data))
	return out
}

// resultStep returns the decision of the stored step of the call's result, "" when none.
func resultStep(t *testing.T, s *stack, session string) string {
	t.Helper()
	steps, err := s.db.Steps(context.Background(), record.StepQuery{SessionID: session, Limit: 10})
	require.NoError(t, err)
	for _, st := range steps {
		if mcpMethod(t, st) == "" {
			return st.Decision
		}
	}
	return ""
}

// mcpMethod is the method of the MCP message a stored step carries, "" for a response.
func mcpMethod(t *testing.T, st record.StepRecord) string {
	t.Helper()
	var req struct {
		Params struct {
			Message struct {
				Method string `json:"method"`
			} `json:"message"`
		} `json:"params"`
	}
	require.NoError(t, json.Unmarshal(st.Request, &req))
	return req.Params.Message.Method
}

// An answer is read by its media type as clients read it (case-insensitive, parameters and
// spaces allowed, any 2xx status), so a result is judged however its server labels it.
func TestHTTPAnswerMediaTypesAreJudged(t *testing.T) {
	cases := []struct {
		name, ct string
		status   int
		sse      bool
	}{
		{"json", "application/json", 200, false},
		{"json in capitals", "Application/JSON", 200, false},
		{"json upper case", "APPLICATION/JSON", 200, false},
		{"json with charset", "application/json; charset=utf-8", 200, false},
		{"json with spaces", "application/json ;  Charset=UTF-8", 200, false},
		{"json with a sloppy parameter", "application/json;", 200, false},
		{"json with an empty parameter", "application/json; charset=", 200, false},
		{"json 201", "application/json", 201, false},
		{"event stream in capitals", "Text/Event-Stream", 200, true},
		{"event stream with charset", "TEXT/EVENT-STREAM; charset=utf-8", 200, true},
		{"event stream 203", "text/event-stream", 203, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := answering(t, func(w http.ResponseWriter, _ *http.Request, id string) {
				w.Header().Set("Content-Type", c.ct)
				w.WriteHeader(c.status)
				if c.sse {
					fmt.Fprintf(w, "event: message\ndata: %s\n\n", classifiedResult(id))
				} else {
					_, _ = io.WriteString(w, classifiedResult(id))
				}
			})
			s := newStack(t, testRules, up, Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, progress := range []bool{false, true} {
				sid := fmt.Sprintf("s-%v", progress)
				out := answerTo(t, callEcho(t, ctx, s, sid, progress))
				res, _ := out["result"].(map[string]any)
				require.NotNil(t, res, out)
				require.Equal(t, true, res["isError"], out)
				require.Contains(t, fmt.Sprint(res["content"]), "Denied by Vigil: That result is classified.")
				require.Equal(t, "deny", resultStep(t, s, "mcp-everything-"+sid))
			}
		})
	}
}

// An answer to a request that Vigil cannot read (a media type neither JSON nor an event
// stream, none, or two) never reaches the client: it gets a JSON-RPC error for its
// request, without the upstream's headers, and no result is stored.
func TestHTTPUnreadableAnswerFailsClosed(t *testing.T) {
	cases := []struct {
		name string
		ct   []string
	}{
		{"text", []string{"text/plain"}},
		{"json-rpc", []string{"application/json-rpc"}},
		{"json inside a parameter", []string{"text/plain; a=application/json"}},
		{"two types in one", []string{"application/json, text/event-stream"}},
		{"joined after a parameter", []string{"application/json; a=b, text/html"}},
		{"two headers", []string{"application/json", "text/event-stream"}},
		{"none", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := answering(t, func(w http.ResponseWriter, _ *http.Request, id string) {
				w.Header()["Content-Type"] = c.ct
				w.Header().Set("Server", "upstream/1.0")
				_, _ = io.WriteString(w, classifiedResult(id))
			})
			s := newStack(t, testRules, up, Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, progress := range []bool{false, true} {
				sid := fmt.Sprintf("s-%v", progress)
				resp := callEcho(t, ctx, s, sid, progress)
				if progress {
					// The event stream began before the server answered.
					require.Equal(t, http.StatusOK, resp.StatusCode)
				} else {
					require.Equal(t, http.StatusBadGateway, resp.StatusCode)
					require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
					require.Empty(t, resp.Header.Get("Server"))
				}
				out := answerTo(t, resp)
				e, _ := out["error"].(map[string]any)
				require.NotNil(t, e, out)
				require.EqualValues(t, -32000, e["code"])
				require.NotContains(t, fmt.Sprint(out), "classified")
				require.Empty(t, resultStep(t, s, "mcp-everything-"+sid))
			}
		})
	}
	// The answer to a notification carries nothing a client reads: it passes as it came.
	up := answering(t, func(w http.ResponseWriter, _ *http.Request, _ string) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusAccepted)
	})
	s := newStack(t, testRules, up, Config{})
	resp, err := http.Post(s.url+"/mcp/everything", "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Equal(t, "text/plain", resp.Header.Get("Content-Type"))
}

// The QA report's case, with the Go SDK's client and server: a server whose answers say
// Application/JSON or Text/Event-Stream has its results judged like any other.
func TestHTTPMediaTypeCaseWithSDK(t *testing.T) {
	for _, c := range []struct {
		name, from, to string
		json           bool
	}{
		{"json", "application/json", "Application/JSON", true},
		{"event stream", "text/event-stream", "Text/Event-Stream", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := sdk.NewServer(&sdk.Implementation{Name: "odd-types", Version: "1"}, nil)
			srv.AddTool(&sdk.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "Echo: classified"}}}, nil
				})
			h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{JSONResponse: c.json})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(relabel{ResponseWriter: w, from: c.from, to: c.to}, r)
			}))
			t.Cleanup(up.Close)
			s := newStack(t, testRules, up.URL+"/mcp", Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cs := s.connect(ctx, nil)
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{}})
			require.NoError(t, err)
			require.True(t, res.IsError, text(t, res))
			require.Equal(t, "Denied by Vigil: That result is classified.", text(t, res))
			require.Equal(t, "deny", resultStep(t, s, "mcp-everything-"+cs.ID()))
		})
	}
}

// relabel rewrites the Content-Type a handler sets.
type relabel struct {
	http.ResponseWriter
	from, to string
}

func (r relabel) WriteHeader(code int) {
	if r.Header().Get("Content-Type") == r.from {
		r.Header().Set("Content-Type", r.to)
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r relabel) Write(b []byte) (int, error) {
	if r.Header().Get("Content-Type") == r.from {
		r.Header().Set("Content-Type", r.to)
	}
	return r.ResponseWriter.Write(b)
}

func (r relabel) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// A message from the server over the bound is never relayed; the client gets a JSON-RPC
// error for its request, as when the server is unreachable, with Vigil's headers.
func TestHTTPAnswerOverBoundFailsClosed(t *testing.T) {
	const bound = 4 << 10
	big := `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 2*bound) + `"}]}}`
	for _, c := range []struct {
		name     string
		sse      bool
		progress bool
	}{
		{"json", false, false},
		{"json into a progress stream", false, true},
		{"event", true, false},
		{"event into a progress stream", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := answering(t, func(w http.ResponseWriter, _ *http.Request, id string) {
				w.Header().Set("Server", "upstream/1.0")
				if c.sse {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprintf(w, "event: message\ndata: "+big+"\n\n", id)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, big, id)
			})
			s := newStack(t, testRules, up, Config{MaxMessageBytes: bound})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp := callEcho(t, ctx, s, "s1", c.progress)
			if !c.sse && !c.progress {
				require.Equal(t, http.StatusBadGateway, resp.StatusCode)
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				require.Empty(t, resp.Header.Get("Server"))
			}
			out := answerTo(t, resp)
			e, _ := out["error"].(map[string]any)
			require.NotNil(t, e, out)
			require.EqualValues(t, -32000, e["code"])
			require.Contains(t, e["message"], "too large")
			require.Empty(t, resultStep(t, s, "mcp-everything-s1"))
		})
	}
}

// The server's event stream for its own requests is read whatever the case of its media
// type, so its sampling requests are judged; one Vigil cannot read is not relayed.
func TestHTTPGetStreamMediaTypes(t *testing.T) {
	sampling := `{"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"forbidden"}}],"maxTokens":10}}`
	for _, c := range []struct {
		name, ct string
		judged   bool
	}{
		{"event stream in capitals", "Text/Event-Stream", true},
		{"event stream with charset", "text/event-stream;charset=UTF-8", true},
		{"text", "text/plain", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			refused := make(chan string, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					// Vigil's answer to the refused request.
					b, _ := io.ReadAll(r.Body)
					refused <- string(b)
					w.WriteHeader(http.StatusAccepted)
					return
				}
				w.Header().Set("Content-Type", c.ct)
				fmt.Fprintf(w, "event: message\ndata: %s\n\n", sampling)
			}))
			t.Cleanup(up.Close)
			s := newStack(t, testRules, up.URL+"/mcp", Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/mcp/everything", nil)
			require.NoError(t, err)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set(sessionHeader, "g1")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NotContains(t, string(b), "forbidden")
			if !c.judged {
				require.Equal(t, http.StatusBadGateway, resp.StatusCode)
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				require.Contains(t, string(b), `"code":-32000`)
				return
			}
			require.Equal(t, http.StatusOK, resp.StatusCode)
			select {
			case got := <-refused:
				require.Contains(t, got, `"id":"srv-1"`)
				require.Contains(t, got, "Denied by Vigil")
			case <-ctx.Done():
				t.Fatal("the server's request was not refused")
			}
		})
	}
}

// A JSON answer that is an array is read as the TypeScript SDK reads it, message by
// message: a result in it is judged like one that came alone.
func TestHTTPArrayAnswerJudgedPerMessage(t *testing.T) {
	up := answering(t, func(w http.ResponseWriter, _ *http.Request, id string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `[`+classifiedResult(id)+`,{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}]`)
	})
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, progress := range []bool{false, true} {
		sid := fmt.Sprintf("s-%v", progress)
		resp := callEcho(t, ctx, s, sid, progress)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NotContains(t, string(b), "Echo: classified")
		require.Contains(t, string(b), "Denied by Vigil: That result is classified.")
		require.Contains(t, string(b), "notifications/message")
		require.Equal(t, "deny", resultStep(t, s, "mcp-everything-"+sid))
	}
}
