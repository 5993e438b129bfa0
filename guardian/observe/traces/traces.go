// Package traces exports the guardian's decisions as OpenTelemetry spans over OTLP.
//
// Spans are built from the stored step records after the fact, in their own goroutine (an
// observe.Consumer): a step's span starts when the step arrived and ends when it was decided
// (its latencyMicros); a held step's wait for an operator is a child span, from the hold's creation
// to its decision. The ids are derived from what is stored, never random: every step of one
// turn of a session shares a trace id, so a turn is one trace even across restarts, and a
// step exported twice has the same span id. Attributes follow the OpenTelemetry GenAI
// semantic conventions where they apply (gen_ai.*), with Vigil's own under vigil.*. Step
// content (requests, tool arguments, answers) is exported only when asked for.
package traces

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/record"
)

// Options configure a Tracer.
type Options struct {
	// Exporter sends the spans (NewExporter builds the OTLP one). Required.
	Exporter sdktrace.SpanExporter
	// Version is the service.version resource attribute.
	Version string
	// Content adds step content to spans: the request, tool arguments and the answer.
	Content bool
	// HoldBySeq finds the hold of a held step (storage.Backend.HoldBySeq); nil: no hold spans.
	HoldBySeq func(ctx context.Context, seq int64) (record.Hold, error)
	// BatchTimeout is the longest a span waits to be exported (default 5s).
	BatchTimeout time.Duration
	Logger       *slog.Logger
}

// Tracer turns stored steps into spans.
type Tracer struct {
	opts     Options
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	log      *slog.Logger
}

// Protocols of NewExporter.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// NewExporter builds the OTLP trace exporter for protocol (ProtocolHTTP or ProtocolGRPC).
// Endpoint, headers, TLS, compression and timeout come from the standard
// OTEL_EXPORTER_OTLP_* (and OTEL_EXPORTER_OTLP_TRACES_*) environment variables, which the
// exporters read themselves; opts are passed on after them (tests set the endpoint).
func NewExporter(ctx context.Context, protocol string, httpOpts []otlptracehttp.Option, grpcOpts []otlptracegrpc.Option) (sdktrace.SpanExporter, error) {
	switch protocol {
	case "", ProtocolHTTP:
		exp, err := otlptracehttp.New(ctx, httpOpts...)
		if err != nil {
			return nil, fmt.Errorf("OTLP/HTTP trace exporter: %w", err)
		}
		return exp, nil
	case ProtocolGRPC:
		exp, err := otlptracegrpc.New(ctx, grpcOpts...)
		if err != nil {
			return nil, fmt.Errorf("OTLP/gRPC trace exporter: %w", err)
		}
		return exp, nil
	}
	return nil, fmt.Errorf("OTLP protocol %q is not supported (want %s or %s)", protocol, ProtocolHTTP, ProtocolGRPC)
}

// New builds a tracer. Its resource is service.name "vigil" and the version, overridden by
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
func New(ctx context.Context, opts Options) (*Tracer, error) {
	if opts.Exporter == nil {
		return nil, fmt.Errorf("traces: an exporter is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = 5 * time.Second
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", "vigil"),
			attribute.String("service.version", opts.Version),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: the environment wins
	)
	if err != nil {
		return nil, fmt.Errorf("traces: resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(
		// The batcher's queue is bounded and drops when full, like the fan-out's in front.
		sdktrace.WithBatcher(opts.Exporter, sdktrace.WithBatchTimeout(opts.BatchTimeout)),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(storedIDs{}),
		// Every stored step is a span: sampling belongs to the collector, which sees whole
		// turns.
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
	)
	return &Tracer{
		opts:     opts,
		provider: provider,
		tracer:   provider.Tracer("github.com/vigil-guardian/vigil/guardian/observe/traces"),
		log:      opts.Logger.With("component", "traces"),
	}, nil
}

// Consumer is the tracer's place on the event stream: every stored step.
func (t *Tracer) Consumer() observe.Consumer {
	return observe.Consumer{Name: "traces", Steps: true, Handle: func(ctx context.Context, it observe.Item) {
		if it.Step != nil {
			t.Step(ctx, it.Step)
		}
	}}
}

// ForceFlush exports the spans built so far.
func (t *Tracer) ForceFlush(ctx context.Context) error { return t.provider.ForceFlush(ctx) }

// Shutdown exports what is left and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }

// The ids a span gets travel in its start context to storedIDs.
type idsKey struct{}

type spanIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

// storedIDs gives spans the ids their start context carries (a random one otherwise, which
// only a span started without them would get).
type storedIDs struct{}

func (storedIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if ids, ok := ctx.Value(idsKey{}).(spanIDs); ok {
		return ids.trace, ids.span
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%d", time.Now().UnixNano()))
	return trace.TraceID(h[:16]), trace.SpanID(h[16:24])
}

func (storedIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if ids, ok := ctx.Value(idsKey{}).(spanIDs); ok {
		return ids.span
	}
	_, s := storedIDs{}.NewIDs(ctx)
	return s
}

// hash16 and hash8 derive ids from stored fields; a zero id is invalid, so one is nudged.
func hash16(parts ...string) trace.TraceID {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var id trace.TraceID
	copy(id[:], h.Sum(nil))
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

func hash8(parts ...string) trace.SpanID {
	t := hash16(parts...)
	var id trace.SpanID
	copy(id[:], t[:8])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// TraceID is the trace of a step: its session's turn, or the step alone when it names no
// turn (a turn-less session could otherwise make one trace of days of traffic).
func TraceID(rec *record.StepRecord) trace.TraceID {
	if rec.TurnID != "" {
		return hash16("vigil-turn", rec.SessionID, rec.TurnID)
	}
	return hash16("vigil-step", rec.SessionID, fmt.Sprint(rec.Seq))
}

// SpanID is a step's span id.
func SpanID(rec *record.StepRecord) trace.SpanID {
	return hash8("vigil-step", rec.SessionID, fmt.Sprint(rec.Seq))
}

// maxContent bounds one content attribute; collectors refuse very large spans.
const maxContent = 16 << 10

// mcpRequest is the part of a stored protocols/MCP request a span reports: the MCP
// message's id and, for tools/call, its arguments; wrapped in params.message, or inline in
// params.
type mcpRequest struct {
	Params struct {
		Message mcpMessage `json:"message"`
		mcpMessage
	} `json:"params"`
}

type mcpMessage struct {
	ID     json.RawMessage `json:"id"`
	Params struct {
		Arguments json.RawMessage `json:"arguments"`
	} `json:"params"`
}

// answer is the part of a stored AOS response a span reports.
type answer struct {
	Result struct {
		ReasonCode []string `json:"reasonCode"`
		Message    string   `json:"message"`
		Data       struct {
			RuleID string `json:"ruleId"`
		} `json:"data"`
	} `json:"result"`
}

// Step exports the spans of one stored step.
func (t *Tracer) Step(ctx context.Context, rec *record.StepRecord) {
	start := rec.ReceivedAt
	end := start.Add(time.Duration(rec.LatencyMicros) * time.Microsecond)
	tid, sid := TraceID(rec), SpanID(rec)

	var ans answer
	_ = json.Unmarshal(rec.Response, &ans)

	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.conversation.id", rec.SessionID),
		attribute.Int64("vigil.step.seq", rec.Seq),
		attribute.String("vigil.step.method", rec.Method),
		attribute.String("vigil.step.kind", rec.Kind),
		attribute.String("vigil.decision", rec.Decision),
		attribute.Bool("vigil.held", rec.Held),
	}
	str := func(k, v string) {
		if v != "" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	str("vigil.turn.id", rec.TurnID)
	str("vigil.step.id", rec.StepID)
	str("gen_ai.agent.id", rec.AgentID)
	str("gen_ai.agent.name", rec.AgentName)
	str("user.id", rec.UserID)
	str("vigil.rule.id", ans.Result.Data.RuleID)
	str("vigil.message", ans.Result.Message)
	if len(ans.Result.ReasonCode) > 0 {
		attrs = append(attrs, attribute.StringSlice("vigil.reason_codes", ans.Result.ReasonCode))
	}
	var matched, failed []string
	var failure string
	for _, m := range rec.MatchedRules {
		if m.Error != "" {
			failed = append(failed, m.RuleID)
			if failure == "" {
				failure = "rule " + m.RuleID + ": " + m.Error
			}
			continue
		}
		matched = append(matched, m.RuleID)
	}
	if len(matched) > 0 {
		attrs = append(attrs, attribute.StringSlice("vigil.rules.matched", matched))
	}
	if len(failed) > 0 {
		attrs = append(attrs, attribute.StringSlice("vigil.rules.failed", failed))
	}

	name := "vigil " + rec.Method
	var args json.RawMessage
	callID := ""
	switch rec.Kind {
	case "toolCall":
		var tc struct {
			ExecutionID string          `json:"executionId"`
			Inputs      json.RawMessage `json:"inputs"`
		}
		if v := member(rec.Request, "toolCallRequest"); v != nil && json.Unmarshal(v, &tc) == nil {
			callID, args = tc.ExecutionID, tc.Inputs
		}
	case "toolResult":
		var id string
		if v := member(rec.Request, "executionId"); v != nil && json.Unmarshal(v, &id) == nil {
			callID = id
		}
	case "mcp":
		var req mcpRequest
		_ = json.Unmarshal(rec.Request, &req) // a partial read still names what it can
		m := req.Params.Message
		if m.ID == nil && m.Params.Arguments == nil {
			m = req.Params.mcpMessage
		}
		callID = string(trimQuotes(m.ID))
		args = m.Params.Arguments
	}
	if rec.Tool != "" && (rec.Kind == "toolCall" || rec.Kind == "mcp") {
		name = "execute_tool " + rec.Tool
		attrs = append(attrs,
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", rec.Tool),
		)
	} else if rec.Tool != "" {
		str("gen_ai.tool.name", rec.Tool)
	}
	str("gen_ai.tool.call.id", callID)
	if t.opts.Content {
		if len(args) > 0 {
			attrs = append(attrs, attribute.String("gen_ai.tool.call.arguments", clip(string(args))))
		}
		attrs = append(attrs,
			attribute.String("vigil.step.request", clip(string(rec.Request))),
			attribute.String("vigil.step.response", clip(string(rec.Response))))
	}

	sctx := context.WithValue(ctx, idsKey{}, spanIDs{trace: tid, span: sid})
	sctx, span := t.tracer.Start(sctx, name,
		trace.WithTimestamp(start), trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal),
		// A new root: the context's own span (there is none) must not become the parent.
		trace.WithNewRoot())
	if failure != "" {
		span.SetStatus(codes.Error, failure)
	}
	if rec.Held && t.opts.HoldBySeq != nil {
		t.holdSpan(sctx, rec, tid)
	}
	span.End(trace.WithTimestamp(end))
}

// holdSpan adds the wait for an operator as a child of the step's span.
func (t *Tracer) holdSpan(ctx context.Context, rec *record.StepRecord, tid trace.TraceID) {
	h, err := t.opts.HoldBySeq(context.WithoutCancel(ctx), rec.Seq)
	if err != nil {
		t.log.Debug("no hold for a held step", "seq", rec.Seq, "err", err)
		return
	}
	end := h.DecidedAt
	if end.IsZero() {
		end = rec.ReceivedAt.Add(time.Duration(rec.LatencyMicros) * time.Microsecond)
	}
	attrs := []attribute.KeyValue{
		attribute.String("vigil.hold.id", h.ID),
		attribute.String("vigil.hold.status", h.Status),
	}
	if h.Decision != "" {
		attrs = append(attrs, attribute.String("vigil.hold.decision", h.Decision))
	}
	if h.DecidedBy != "" {
		attrs = append(attrs, attribute.String("vigil.hold.decided_by", h.DecidedBy))
	}
	if h.RuleID != "" {
		attrs = append(attrs, attribute.String("vigil.rule.id", h.RuleID))
	}
	hctx := context.WithValue(ctx, idsKey{}, spanIDs{trace: tid, span: hash8("vigil-hold", h.ID)})
	_, span := t.tracer.Start(hctx, "vigil.hold", trace.WithTimestamp(h.CreatedAt), trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(end))
}

// member returns the value of the first member named key in a stored request, without
// decoding the rest: a tool call's request is mostly its agent context, and decoding all
// of it for two fields cost most of a span. In valid JSON a quoted name followed by a
// colon is always a member name; one nested in the context, named the same, would be
// found first, and the span would report the agent's own value from there.
func member(raw []byte, key string) json.RawMessage {
	quoted := `"` + key + `"`
	for off := 0; ; {
		i := bytes.Index(raw[off:], []byte(quoted))
		if i < 0 {
			return nil
		}
		rest := bytes.TrimLeft(raw[off+i+len(quoted):], " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' {
			var v json.RawMessage
			if json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&v) != nil {
				return nil
			}
			return v
		}
		off += i + len(quoted)
	}
}

// clip bounds a content attribute and keeps it valid UTF-8 (OTLP refuses other strings).
func clip(s string) string {
	if len(s) > maxContent {
		cut := maxContent
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func trimQuotes(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}
