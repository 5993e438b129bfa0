package traces_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/guardian/observe/traces"
	"github.com/vigil-guardian/vigil/record"
)

// collector keeps what an OTLP receiver got.
type collector struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
	got      chan struct{}
}

func newCollector() *collector { return &collector{got: make(chan struct{}, 100)} }

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		c.resource = rs.GetResource().GetAttributes()
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	c.mu.Unlock()
	c.got <- struct{}{}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.spans)
}

// bySeq finds a step's span.
func (c *collector) bySeq(seq int64) *tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if attrs(s)["vigil.step.seq"] == seq {
			return s
		}
	}
	return nil
}

func (c *collector) byName() map[string]*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for _, s := range c.spans {
		out[s.GetName()] = s
	}
	return out
}

// httpReceiver is an OTLP/HTTP endpoint (protobuf bodies at /v1/traces).
func httpReceiver(t *testing.T, c *collector) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "unexpected "+r.URL.Path+" "+r.Header.Get("Content-Type"), http.StatusBadRequest)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// grpcReceiver is the OTLP gRPC trace service.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	c *collector
}

func (g *grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.c.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func startGRPC(t *testing.T, c *collector) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, &grpcReceiver{c: c})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func steps() []*record.StepRecord {
	req := json.RawMessage(`{"jsonrpc":"2.0","id":4,"method":"steps/toolCallRequest","params":{"context":{"turnId":"turn-1"},
		"toolCallRequest":{"executionId":"exec-91b2","toolId":"refund_payment","inputs":[{"name":"amount","value":89.9}]}}}`)
	return []*record.StepRecord{
		{Seq: 10, SessionID: "sess-1", TurnID: "turn-1", StepID: "step-3", Method: "steps/message", Kind: "message",
			AgentID: "agent-7", AgentName: "Support", Decision: "allow", ReceivedAt: t0, LatencyMicros: 150,
			Request: json.RawMessage(`{}`), Response: json.RawMessage(`{"jsonrpc":"2.0","id":3,"result":{"decision":"allow","message":"Allowed."}}`)},
		{Seq: 11, SessionID: "sess-1", TurnID: "turn-1", StepID: "step-4", Method: "steps/toolCallRequest", Kind: "toolCall",
			Tool: "refund_payment", Decision: "deny", Held: true, ReceivedAt: t0.Add(time.Second), LatencyMicros: 30e6,
			Request: req,
			Response: json.RawMessage(`{"jsonrpc":"2.0","id":4,"result":{"decision":"deny","reasonCode":["OPERATOR_DENIED","BIG_REFUND"],
				"message":"No.","data":{"ruleId":"big-refund"}}}`),
			MatchedRules: []record.RuleMatch{{RuleID: "big-refund", Action: "hold", Mode: "enforce"},
				{RuleID: "slow", Action: "deny", Mode: "enforce", Error: "evaluation budget exceeded"}}},
		{Seq: 12, SessionID: "sess-1", TurnID: "turn-2", Method: "steps/message", Kind: "message", Decision: "allow",
			ReceivedAt: t0.Add(time.Minute), LatencyMicros: 90, Request: json.RawMessage(`{}`), Response: json.RawMessage(`null`)},
	}
}

func holdBySeq(_ context.Context, seq int64) (record.Hold, error) {
	if seq != 11 {
		return record.Hold{}, record.ErrNotFound
	}
	return record.Hold{ID: "h_1", Seq: 11, Status: record.HoldDenied, Decision: "deny", DecidedBy: "rita", RuleID: "big-refund",
		CreatedAt: t0.Add(time.Second + 100*time.Microsecond), DecidedAt: t0.Add(29 * time.Second)}, nil
}

func attrs(s *tracepb.Span) map[string]any {
	out := map[string]any{}
	for _, kv := range s.GetAttributes() {
		v := kv.GetValue()
		switch {
		case v.GetArrayValue() != nil:
			var a []string
			for _, e := range v.GetArrayValue().GetValues() {
				a = append(a, e.GetStringValue())
			}
			out[kv.GetKey()] = a
		case kv.GetValue().GetValue() == nil:
		default:
			switch x := v.GetValue().(type) {
			case *commonpb.AnyValue_StringValue:
				out[kv.GetKey()] = x.StringValue
			case *commonpb.AnyValue_IntValue:
				out[kv.GetKey()] = x.IntValue
			case *commonpb.AnyValue_BoolValue:
				out[kv.GetKey()] = x.BoolValue
			}
		}
	}
	return out
}

func export(t *testing.T, c *collector, opts traces.Options) {
	t.Helper()
	opts.HoldBySeq = holdBySeq
	opts.Version = "1.2.3"
	tr, err := traces.New(context.Background(), opts)
	require.NoError(t, err)
	// Through the fan-out, as the guardian runs it.
	f := observe.New(nil, nil, []observe.Consumer{tr.Consumer()}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	for _, rec := range steps() {
		f.PublishStep(rec)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.Stats()[0].Handled < 3 || f.Stats()[0].Queued > 0 {
		require.True(t, time.Now().Before(deadline), "steps not consumed")
		time.Sleep(time.Millisecond) // polling a counter; there is no event to wait on
	}
	cancel()
	<-done
	require.NoError(t, tr.Shutdown(context.Background()))
	select {
	case <-c.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no spans received")
	}
}

func TestSpansOverHTTP(t *testing.T) {
	c := newCollector()
	srv := httpReceiver(t, c)
	exp, err := traces.NewExporter(context.Background(), traces.ProtocolHTTP,
		[]otlptracehttp.Option{otlptracehttp.WithEndpointURL(srv.URL + "/v1/traces")}, nil)
	require.NoError(t, err)
	export(t, c, traces.Options{Exporter: exp})

	require.Equal(t, 4, c.count())
	msg, tool, hold, next := c.bySeq(10), c.bySeq(11), c.byName()["vigil.hold"], c.bySeq(12)
	require.Equal(t, "vigil steps/message", msg.GetName())
	require.Equal(t, "execute_tool refund_payment", tool.GetName())
	require.NotNil(t, msg)
	require.NotNil(t, tool)
	require.NotNil(t, hold)
	require.NotNil(t, next)

	// One trace per turn: the first two steps share one, the next turn has its own.
	require.Equal(t, msg.GetTraceId(), tool.GetTraceId())
	require.NotEqual(t, msg.GetTraceId(), next.GetTraceId())
	require.Equal(t, hex.EncodeToString(tool.GetTraceId()), traces.TraceID(steps()[1]).String(), "deterministic")
	require.Equal(t, hex.EncodeToString(tool.GetSpanId()), traces.SpanID(steps()[1]).String())
	require.Empty(t, tool.GetParentSpanId())

	// Start and end from the stored record.
	require.EqualValues(t, t0.Add(time.Second).UnixNano(), tool.GetStartTimeUnixNano())
	require.EqualValues(t, t0.Add(31*time.Second).UnixNano(), tool.GetEndTimeUnixNano())

	a := attrs(tool)
	require.Equal(t, "execute_tool", a["gen_ai.operation.name"])
	require.Equal(t, "refund_payment", a["gen_ai.tool.name"])
	require.Equal(t, "exec-91b2", a["gen_ai.tool.call.id"])
	require.Equal(t, "sess-1", a["gen_ai.conversation.id"])
	require.Equal(t, "deny", a["vigil.decision"])
	require.Equal(t, true, a["vigil.held"])
	require.Equal(t, "big-refund", a["vigil.rule.id"])
	require.Equal(t, []string{"OPERATOR_DENIED", "BIG_REFUND"}, a["vigil.reason_codes"])
	require.Equal(t, []string{"big-refund"}, a["vigil.rules.matched"])
	require.Equal(t, []string{"slow"}, a["vigil.rules.failed"])
	require.Equal(t, "turn-1", a["vigil.turn.id"])
	require.NotContains(t, a, "gen_ai.tool.call.arguments", "content is off by default")
	require.NotContains(t, a, "vigil.step.request")
	require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, tool.GetStatus().GetCode(), "a failed rule marks the span")

	// The hold's wait is a child span with its own times.
	require.Equal(t, tool.GetSpanId(), hold.GetParentSpanId())
	require.Equal(t, tool.GetTraceId(), hold.GetTraceId())
	require.EqualValues(t, t0.Add(time.Second+100*time.Microsecond).UnixNano(), hold.GetStartTimeUnixNano())
	require.EqualValues(t, t0.Add(29*time.Second).UnixNano(), hold.GetEndTimeUnixNano())
	ha := attrs(hold)
	require.Equal(t, "h_1", ha["vigil.hold.id"])
	require.Equal(t, "denied", ha["vigil.hold.status"])
	require.Equal(t, "rita", ha["vigil.hold.decided_by"])

	ma := attrs(msg)
	require.Equal(t, "agent-7", ma["gen_ai.agent.id"])
	require.Equal(t, "Support", ma["gen_ai.agent.name"])
	require.NotContains(t, ma, "gen_ai.operation.name")

	res := map[string]string{}
	for _, kv := range c.resource {
		res[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	require.Equal(t, "vigil", res["service.name"])
	require.Equal(t, "1.2.3", res["service.version"])
}

func TestContentOnRequest(t *testing.T) {
	c := newCollector()
	srv := httpReceiver(t, c)
	exp, err := traces.NewExporter(context.Background(), traces.ProtocolHTTP,
		[]otlptracehttp.Option{otlptracehttp.WithEndpointURL(srv.URL + "/v1/traces")}, nil)
	require.NoError(t, err)
	export(t, c, traces.Options{Exporter: exp, Content: true})
	a := attrs(c.byName()["execute_tool refund_payment"])
	require.JSONEq(t, `[{"name":"amount","value":89.9}]`, a["gen_ai.tool.call.arguments"].(string))
	require.Contains(t, a["vigil.step.request"], "exec-91b2")
}

func TestSpansOverGRPC(t *testing.T) {
	c := newCollector()
	addr := startGRPC(t, c)
	exp, err := traces.NewExporter(context.Background(), traces.ProtocolGRPC, nil,
		[]otlptracegrpc.Option{otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure()})
	require.NoError(t, err)
	export(t, c, traces.Options{Exporter: exp})
	require.Equal(t, 4, c.count())
}

// TestStandardEnvironment: the endpoint and headers come from OTEL_EXPORTER_OTLP_*.
func TestStandardEnvironment(t *testing.T) {
	c := newCollector()
	var header string
	srv := httpReceiver(t, c)
	wrapped := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Get("Authorization")
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer wrapped.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", wrapped.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20t0k")
	t.Setenv("OTEL_SERVICE_NAME", "vigil-eu")
	exp, err := traces.NewExporter(context.Background(), "", nil, nil)
	require.NoError(t, err)
	export(t, c, traces.Options{Exporter: exp})
	require.Equal(t, "Bearer t0k", header)
	for _, kv := range c.resource {
		if kv.GetKey() == "service.name" {
			require.Equal(t, "vigil-eu", kv.GetValue().GetStringValue())
		}
	}
}

func TestUnknownProtocol(t *testing.T) {
	_, err := traces.NewExporter(context.Background(), "http/json", nil, nil)
	require.ErrorContains(t, err, `"http/json" is not supported`)
}

// BenchmarkStep is the traces consumer's cost per step (decoding the stored request and
// answer, building the span, batching it), on its own goroutine.
func BenchmarkStep(b *testing.B) {
	tr, err := traces.New(context.Background(), traces.Options{Exporter: tracetest.NewNoopExporter()})
	require.NoError(b, err)
	defer tr.Shutdown(context.Background())
	rec := steps()[1]
	rec.Held = false
	// The request as agents send it: mostly the agent's context.
	req, err := os.ReadFile(filepath.Join("..", "..", "aos", "testdata", "toolCallRequest.json"))
	require.NoError(b, err)
	rec.Request = req
	b.ReportAllocs()
	for b.Loop() {
		tr.Step(context.Background(), rec)
	}
}

// TestToolCallIDs: the call id and arguments come from each kind's own place in the
// request: toolCallRequest.executionId, a result's executionId, an MCP message's id
// (wrapped in params.message or inline).
func TestToolCallIDs(t *testing.T) {
	for _, tc := range []struct {
		name, kind, tool, request string
		span, callID, args        string
	}{
		{name: "tool call", kind: "toolCall", tool: "lookup",
			request: `{"params":{"context":{"metadata":{"note":"\"toolCallRequest\": {}"}},"toolCallRequest":{"executionId":"e-1","toolId":"lookup","inputs":[{"name":"q","value":1}]}}}`,
			span:    "execute_tool lookup", callID: "e-1", args: `[{"name":"q","value":1}]`},
		{name: "tool result", kind: "toolResult", tool: "lookup",
			request: `{"params":{"executionId":"e-2","result":{"outputs":[]}}}`, span: "vigil steps/x", callID: "e-2"},
		{name: "mcp wrapped", kind: "mcp", tool: "read_file",
			request: `{"params":{"message":{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/a"}}}}}`,
			span:    "execute_tool read_file", callID: "17", args: `{"path":"/a"}`},
		{name: "mcp inline", kind: "mcp", tool: "write_file",
			request: `{"params":{"jsonrpc":"2.0","id":"r-18","method":"tools/call","params":{"name":"write_file","arguments":{"path":"/b"}}}}`,
			span:    "execute_tool write_file", callID: "r-18", args: `{"path":"/b"}`},
		{name: "unreadable", kind: "toolCall", tool: "t", request: `{"params":{"toolCallRequest":`, span: "execute_tool t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := tracetest.NewInMemoryExporter()
			tr, err := traces.New(context.Background(), traces.Options{Exporter: mem, Content: true})
			require.NoError(t, err)
			tr.Step(context.Background(), &record.StepRecord{Seq: 1, SessionID: "s", Method: "steps/x", Kind: tc.kind, Tool: tc.tool,
				Decision: "allow", ReceivedAt: t0, Request: json.RawMessage(tc.request), Response: json.RawMessage(`null`)})
			require.NoError(t, tr.ForceFlush(context.Background()))
			spans := mem.GetSpans()
			require.Len(t, spans, 1)
			require.Equal(t, tc.span, spans[0].Name)
			got := map[string]string{}
			for _, kv := range spans[0].Attributes {
				got[string(kv.Key)] = kv.Value.String()
			}
			require.Equal(t, tc.callID, got["gen_ai.tool.call.id"])
			if tc.args != "" {
				require.JSONEq(t, tc.args, got["gen_ai.tool.call.arguments"])
			}
		})
	}
}
