package aos

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeGuardian decodes requests with SplitBody and ParseStep, as the guardian does, and
// answers with decide (or the JSON-RPC error of an invalid request).
type fakeGuardian struct {
	mu      sync.Mutex
	steps   []*Step
	headers []http.Header
	decide  func(*Step) Result
}

func (g *fakeGuardian) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	msgs, _, perr := SplitBody(body)
	var resp Response
	switch {
	case perr != nil:
		resp = Response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: perr}
	default:
		s, e := ParseStep(msgs[0])
		if e != nil {
			resp = Response{JSONRPC: "2.0", ID: IDOf(msgs[0]), Error: e}
			break
		}
		g.mu.Lock()
		g.steps = append(g.steps, s)
		g.headers = append(g.headers, r.Header.Clone())
		g.mu.Unlock()
		if s.Kind == KindPing {
			resp = Response{JSONRPC: "2.0", ID: s.ID, Result: PingResult{Status: "connected", Version: "test", Timestamp: s.Ping.Timestamp}}
			break
		}
		resp = Response{JSONRPC: "2.0", ID: s.ID, Result: g.decide(s)}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func testContext() StepContext {
	return StepContext{
		Agent: Agent{ID: "a1", Name: "Test agent", Instructions: "Be helpful.", Version: "1.0",
			Provider: AgentProvider{Name: "Acme", URL: "https://acme.example"}},
		Session: Session{ID: "s1"},
		TurnID:  "t1",
		StepID:  "1",
	}
}

func TestClientSteps(t *testing.T) {
	g := &fakeGuardian{decide: func(s *Step) Result {
		if s.ToolID() == "send_email" {
			return Result{Decision: Deny, Message: "no email", ReasonCode: []string{"EXTERNAL_EMAIL"}}
		}
		return Result{Decision: Allow, Message: "ok " + string(s.Kind)}
	}}
	srv := httptest.NewServer(g)
	defer srv.Close()
	c := NewClient(srv.URL, WithAPIKey("k3y"), WithHeader("X-Vigil-Session", "hdr-session"))
	ctx := context.Background()
	sc := testContext()
	text := []Part{TextPart{Text: "hello"}}

	calls := []struct {
		kind Kind
		call func() (*Result, error)
	}{
		{KindTrigger, func() (*Result, error) {
			return c.AgentTrigger(ctx, sc, AgentTrigger{Type: TriggerAutonomous, Event: AgentTriggerEvent{Type: "cron", ID: "e1"}, Content: text})
		}},
		{KindMessage, func() (*Result, error) {
			return c.Message(ctx, sc, Message{ID: "m1", Role: RoleUser, Content: text}, []Source{SiteSource{URL: "https://x.example"}}, "")
		}},
		{KindKnowledge, func() (*Result, error) {
			return c.KnowledgeRetrieval(ctx, sc, KnowledgeRetrievalStepParams{Query: "q", Results: []KnowledgeRetrievalResult{{ID: "r", Content: "c"}}}, "why")
		}},
		{KindMemoryRetrieval, func() (*Result, error) { return c.MemoryContextRetrieval(ctx, sc, nil, "") }},
		{KindMemoryStore, func() (*Result, error) { return c.MemoryStore(ctx, sc, []string{"remember"}, "") }},
		{KindToolCall, func() (*Result, error) {
			return c.ToolCallRequest(ctx, sc, ToolCallRequest{ExecutionID: "e1", ToolID: "lookup"}, "")
		}},
		{KindToolResult, func() (*Result, error) {
			return c.ToolCallResult(ctx, sc, "e1", ToolCallResult{Outputs: []TextPart{{Text: "found"}}})
		}},
		{KindMCP, func() (*Result, error) {
			return c.MCP(ctx, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "read_file"}}, "")
		}},
		{KindA2A, func() (*Result, error) {
			return c.A2A(ctx, json.RawMessage(`{"role":"agent","parts":[{"kind":"text","text":"hi B"}],"contextId":"c9"}`), "ask B")
		}},
	}
	for i, tc := range calls {
		res, err := tc.call()
		require.NoError(t, err, tc.kind)
		require.Equal(t, Allow, res.Decision)
		require.True(t, res.Allowed())
		require.Equal(t, "ok "+string(tc.kind), res.Message)
		require.Equal(t, tc.kind, g.steps[i].Kind)
	}
	require.Equal(t, "s1", g.steps[0].SessionHint())
	require.NotEmpty(t, g.steps[0].Context.Timestamp, "the client stamps the context")
	require.Equal(t, "c9", g.steps[8].SessionHint())
	for _, h := range g.headers {
		require.Equal(t, "Bearer k3y", h.Get("Authorization"))
		require.Equal(t, "hdr-session", h.Get("X-Vigil-Session"))
		require.Equal(t, "application/json", h.Get("Content-Type"))
	}

	res, err := c.ToolCallRequest(ctx, sc, ToolCallRequest{ExecutionID: "e2", ToolID: "send_email",
		Inputs: []ToolArgumentValue{{Name: "to", Value: "x@evil.example"}}}, "")
	require.NoError(t, err)
	require.Equal(t, Deny, res.Decision)
	require.Equal(t, []string{"EXTERNAL_EMAIL"}, res.ReasonCode)

	ping, err := c.Ping(ctx)
	require.NoError(t, err)
	require.Equal(t, "connected", ping.Status)
	_, ok := parseTimestamp(ping.Timestamp)
	require.True(t, ok)
}

func TestClientModify(t *testing.T) {
	g := &fakeGuardian{}
	g.decide = func(s *Step) Result {
		p := *s.ToolCall
		p.ToolCallRequest.Inputs = []ToolArgumentValue{{Name: "to", Value: "[redacted]"}}
		mr, err := NewModifiedRequest(s, mustMarshal(t, p))
		require.NoError(t, err)
		return Result{Decision: Modify, Message: "redacted", ModifiedRequest: mr}
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	res, err := NewClient(srv.URL).ToolCallRequest(context.Background(), testContext(),
		ToolCallRequest{ExecutionID: "e1", ToolID: "send_email", Inputs: []ToolArgumentValue{{Name: "to", Value: "dana@example.com"}}}, "")
	require.NoError(t, err)
	require.Equal(t, Modify, res.Decision)
	raw, err := res.ModifiedParams()
	require.NoError(t, err)
	var p ToolCallRequestParams
	require.NoError(t, json.Unmarshal(raw, &p))
	require.Equal(t, "[redacted]", p.ToolCallRequest.Inputs[0].Value)

	_, err = (&Result{Decision: Allow}).ModifiedParams()
	require.Error(t, err)
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("JSON-RPC error", func(t *testing.T) {
		srv := httptest.NewServer(&fakeGuardian{})
		defer srv.Close()
		_, err := NewClient(srv.URL).Call(ctx, "steps/nope", map[string]any{})
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, CodeMethodNotFound, e.Code)

		// An invalid step comes back as -32602 with the path of the field.
		_, err = NewClient(srv.URL).Message(ctx, testContext(), Message{ID: "m", Role: "robot", Content: []Part{TextPart{Text: "x"}}}, nil, "")
		require.ErrorAs(t, err, &e)
		require.Equal(t, CodeInvalidParams, e.Code)
		require.Equal(t, "params.message.role", e.Data.(map[string]any)["field"])
	})
	tests := []struct {
		name    string
		status  int
		body    string
		wantErr string
	}{
		{"not JSON", http.StatusBadGateway, "<html>bad gateway</html>", "HTTP 502"},
		{"error status with a JSON body", http.StatusServiceUnavailable, `{"jsonrpc":"2.0","id":null,"error":{"code":-32002,"message":"guardian unavailable"}}`, "guardian unavailable"},
		{"non-200 without error", http.StatusTeapot, `{"jsonrpc":"2.0","id":1,"result":{"decision":"allow","message":""}}`, "HTTP 418"},
		{"id mismatch", http.StatusOK, `{"jsonrpc":"2.0","id":99,"result":{"decision":"allow","message":""}}`, "does not match"},
		{"no result", http.StatusOK, `{"jsonrpc":"2.0","id":1}`, "neither result nor error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			_, err := NewClient(srv.URL).Call(ctx, MethodPing, nil)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	t.Run("context cancelled while held", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := NewClient(srv.URL).Ping(cctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("custom HTTP client", func(t *testing.T) {
		used := false
		hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			used = true
			return http.DefaultTransport.RoundTrip(r)
		})}
		srv := httptest.NewServer(&fakeGuardian{})
		defer srv.Close()
		_, err := NewClient(srv.URL, WithHTTPClient(hc)).Ping(ctx)
		require.NoError(t, err)
		require.True(t, used)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestClientConcurrentIDs(t *testing.T) {
	srv := httptest.NewServer(&fakeGuardian{decide: func(*Step) Result { return Result{Decision: Allow, Message: "ok"} }})
	defer srv.Close()
	c := NewClient(srv.URL)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.MemoryStore(context.Background(), testContext(), []string{"m"}, "")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// CallBatch matches answers to requests by id, whatever their order, and tells each
// element's error, a missing answer and a batch refused as a whole apart.
func TestClientCallBatch(t *testing.T) {
	cases := []struct {
		name   string
		answer func(ids []string) string
		check  func(t *testing.T, out []BatchAnswer, err error)
	}{
		{"reordered, one error, one missing", func(ids []string) string {
			return `[{"jsonrpc":"2.0","id":` + ids[2] + `,"error":{"code":-32602,"message":"bad"}},` +
				`{"jsonrpc":"2.0","id":` + ids[0] + `,"result":{"decision":"deny","reasoning":"r"}},` +
				`{"jsonrpc":"2.0","id":999,"result":{"decision":"allow"}}]`
		}, func(t *testing.T, out []BatchAnswer, err error) {
			require.NoError(t, err)
			require.Len(t, out, 3)
			require.NoError(t, out[0].Err)
			require.Equal(t, Deny, out[0].Result.Decision)
			require.ErrorContains(t, out[1].Err, "no answer")
			var ae *Error
			require.ErrorAs(t, out[2].Err, &ae)
			require.Equal(t, -32602, ae.Code)
		}},
		{"refused as a whole", func([]string) string {
			return `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"too many"}}`
		}, func(t *testing.T, out []BatchAnswer, err error) {
			var ae *Error
			require.ErrorAs(t, err, &ae)
			require.Equal(t, -32600, ae.Code)
		}},
		{"not JSON-RPC", func([]string) string { return `<html>` }, func(t *testing.T, out []BatchAnswer, err error) {
			require.ErrorContains(t, err, "not a JSON-RPC response")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var reqs []struct {
					ID json.RawMessage `json:"id"`
				}
				require.NoError(t, json.NewDecoder(r.Body).Decode(&reqs))
				ids := make([]string, len(reqs))
				for i, q := range reqs {
					ids[i] = string(q.ID)
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(c.answer(ids)))
			}))
			defer srv.Close()
			cl := NewClient(srv.URL)
			out, err := cl.CallBatch(context.Background(), MethodMCP, []any{map[string]any{}, map[string]any{}, map[string]any{}})
			c.check(t, out, err)
		})
	}
}
