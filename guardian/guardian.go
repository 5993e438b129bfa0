// Package guardian is Vigil's HTTP surface and decision pipeline: the AOS endpoint, the
// console API and the embedded UI.
package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/storage"
)

// Config holds the guardian's settings; main fills it from flags and environment.
type Config struct {
	// Version is reported by ping and /api/info.
	Version string
	// MaxBodyBytes limits one POST /aos body (default 10 MiB).
	MaxBodyBytes int64
	// MaxBatch limits the number of requests in one JSON-RPC batch (default 1000).
	MaxBatch int
	// HistorySize is how many recent steps of a session rules can see (default 200).
	HistorySize int
	// SessionCache is how many sessions' histories stay in memory (default 2000).
	SessionCache int
	// PublicURL is the base URL printed and reported by /api/info, e.g. http://127.0.0.1:7878.
	PublicURL string
	// DBPath and RulesFile are reported by /api/info.
	DBPath    string
	RulesFile string
	// AllowedHosts, when set, are the only Host header names served (ports ignored).
	AllowedHosts []string
	// MaxPageBytes bounds one list answer of the console API (default apijson.MaxPageBytes).
	MaxPageBytes int
	// AllowedOrigins are the origins, besides the server's own, whose pages may post to /aos
	// (e.g. the desktop webview's). Any other Origin header is refused.
	AllowedOrigins []string
}

func (c *Config) withDefaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 10 << 20
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.HistorySize <= 0 {
		c.HistorySize = 200
	}
	if c.SessionCache <= 0 {
		c.SessionCache = 2000
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.MaxPageBytes <= 0 {
		c.MaxPageBytes = apijson.MaxPageBytes
	}
	origins := make([]string, len(c.AllowedOrigins))
	for i, o := range c.AllowedOrigins {
		origins[i] = strings.TrimRight(o, "/")
	}
	c.AllowedOrigins = origins
}

// Publisher receives the guardian's stored steps for the live stream (other events reach
// it from their own services). It must not block.
type Publisher interface {
	// PublishStep publishes a stored step's "step" event (its payload the record).
	PublishStep(rec *storage.StepRecord)
}

// Options are the guardian's collaborators. Store is required; the rest have defaults.
type Options struct {
	Store  Store
	Policy Policy
	// Holds parks held steps and knows session controls; nil means hold decisions deny.
	Holds     HoldService
	Publisher Publisher
	Logger    *slog.Logger
	// Now is the clock; tests pass a fixed one.
	Now func() time.Time
	// UI is the console's static files (the embedded frontend/dist); nil serves a short page.
	UI fs.FS
	// Mount adds further routes (rules, holds, live) to the mux.
	Mount []func(mux *http.ServeMux)
	// CheckAgent, when set, refuses a step whose context.agent.id the request's credentials
	// may not speak as (auth.CheckAgent); its *aos.Error is answered as is.
	CheckAgent func(ctx context.Context, agentID string) error
	// KeyOf, when set, returns the API key a request authenticated with: its id and the
	// agent id it is scoped to, ok false without a key (auth.KeyOf). Steps record the key,
	// and a session belongs to the key that opened it.
	KeyOf func(ctx context.Context) (id, agentID string, ok bool)
}

// Guardian decides steps and serves the HTTP surface.
type Guardian struct {
	cfg        Config
	store      Store
	policy     Policy
	holds      HoldService
	pub        Publisher
	log        *slog.Logger
	now        func() time.Time
	sessions   *sessionCache
	handler    http.Handler
	checkAgent func(ctx context.Context, agentID string) error
	keyOf      func(ctx context.Context) (id, agentID string, ok bool)
}

// New builds a guardian.
func New(cfg Config, opts Options) (*Guardian, error) {
	if opts.Store == nil {
		return nil, errors.New("guardian: a store is required")
	}
	cfg.withDefaults()
	g := &Guardian{
		cfg:        cfg,
		store:      opts.Store,
		policy:     opts.Policy,
		holds:      opts.Holds,
		pub:        opts.Publisher,
		log:        opts.Logger,
		now:        opts.Now,
		checkAgent: opts.CheckAgent,
		keyOf:      opts.KeyOf,
	}
	if g.policy == nil {
		g.policy = AllowAll{}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.sessions = newSessionCache(cfg.SessionCache, cfg.HistorySize, opts.Store)
	g.handler = g.routes(opts.UI, opts.Mount)
	return g, nil
}

// Handler is the whole HTTP surface: /aos, /api and the console UI.
func (g *Guardian) Handler() http.Handler { return g.handler }

// Policy returns the guardian's policy.
func (g *Guardian) Policy() Policy { return g.policy }

// RequestMeta is what the transport knows about a step beyond its body.
type RequestMeta struct {
	// SessionHeader is the X-Vigil-Session header, used for steps that carry no session.
	SessionHeader string
	// RemoteAddr attributes context-free steps (MCP, A2A) when nothing else names a session.
	RemoteAddr string
	// KeyID is the id of the API key the request authenticated with, KeyAgent the agent id
	// that key is scoped to; both empty without a key (or an unscoped one).
	KeyID, KeyAgent string
	// ReceivedAt is when the request arrived.
	ReceivedAt time.Time
}

// Outcome is the decided and stored result of one step.
type Outcome struct {
	// Response is the JSON-RPC response to send (also stored); nil for a notification.
	Response json.RawMessage
	Record   storage.StepRecord
}

// SessionFor names the session a step belongs to. Steps with a StepContext use its session
// id; A2A and MCP steps use their context id when present, then the X-Vigil-Session header,
// then "<kind>@<client address>" so one client's protocol traffic stays together;
// "<kind>:<key id>@<client address>" for a request with an API key, since a session belongs
// to one key.
func SessionFor(step *aos.Step, meta RequestMeta) string {
	id, _ := sessionOf(step, meta)
	return id
}

// sessionOf is SessionFor, and where the step named its session: the JSON path of the
// member, "header" for X-Vigil-Session, "" for the fallback.
func sessionOf(step *aos.Step, meta RequestMeta) (id, from string) {
	if id := step.SessionHint(); id != "" {
		return id, step.SessionField()
	}
	if meta.SessionHeader != "" {
		return meta.SessionHeader, "header"
	}
	host := meta.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" {
		host = "local"
	}
	if meta.KeyID != "" {
		return string(step.Kind) + ":" + meta.KeyID + "@" + host, ""
	}
	return string(step.Kind) + "@" + host, ""
}

// Decide runs the decision pipeline for one validated step: policy, hold, store, publish.
// It returns the response to send. The step is stored even when ctx is cancelled meanwhile.
func (g *Guardian) Decide(ctx context.Context, step *aos.Step, meta RequestMeta) (Outcome, error) {
	start := meta.ReceivedAt
	if start.IsZero() {
		start = g.now()
	}
	if step.Kind == aos.KindPing {
		return g.ping(step)
	}
	sessionID, from := sessionOf(step, meta)
	hist := g.sessions.get(ctx, sessionID)
	defer g.sessions.release(hist)
	agentID := ""
	if step.Context != nil {
		agentID = step.Context.Agent.ID
	}
	if refused := hist.admit(agentID, meta.KeyID, meta.KeyAgent); refused != "" {
		return Outcome{}, ownerError(sessionID, from, refused)
	}

	control := ""
	if g.holds != nil {
		control = g.holds.Control(sessionID)
	}
	var v Verdict
	if control == "blocked" {
		v = Verdict{Decision: string(aos.Deny), RuleID: "session-blocked", ReasonCodes: []string{"SESSION_BLOCKED"},
			Message: "This session was blocked by an operator."}
	} else {
		snap := hist.snapshot()
		v = g.policy.Decide(ctx, step, snap, start)
		snap.release()
		// A paused session holds every step for review, except what the rules deny anyway:
		// approving a paused step must not let through what a deny rule stops.
		if control == "paused" && v.Decision != string(aos.Deny) {
			v.Decision = DecisionHold
			v.RuleID = "session-paused"
			v.ReasonCodes = append(v.ReasonCodes, "SESSION_PAUSED")
			v.Message = "This session is paused by an operator; the step waits for review."
			v.HoldTimeout, v.HoldOnTimeout = 0, ""
		}
	}

	held, holdID := false, ""
	if v.Decision == DecisionHold {
		v, holdID = g.resolveHold(ctx, step, sessionID, v)
		held = holdID != ""
	}

	v = g.buildModification(step, v)
	rec := g.record(step, sessionID, v, start, held)
	rec.KeyID = meta.KeyID
	resp, err := g.response(step, v)
	if err != nil {
		return Outcome{}, err
	}
	rec.Response = resp
	if resp == nil {
		rec.Response = json.RawMessage("null")
	}
	rec.LatencyMicros = g.now().Sub(start).Microseconds()

	// The agent may have gone away while the step was held; the step is still recorded.
	if err := g.store.SaveStep(context.WithoutCancel(ctx), &rec); err != nil {
		return Outcome{}, fmt.Errorf("store step: %w", err)
	}
	hist.add(rec)
	if holdID != "" {
		if err := g.holds.AttachStep(context.WithoutCancel(ctx), holdID, rec.Seq); err != nil {
			g.log.Warn("link hold to step", "hold", holdID, "seq", rec.Seq, "err", err)
		}
	}
	if g.pub != nil {
		g.pub.PublishStep(&rec)
	}
	if step.IsNotification() {
		return Outcome{Record: rec}, nil
	}
	return Outcome{Response: resp, Record: rec}, nil
}

func (g *Guardian) ping(step *aos.Step) (Outcome, error) {
	if step.IsNotification() {
		return Outcome{}, nil
	}
	res := aos.PingResult{Status: "connected", Version: g.cfg.Version, Timestamp: g.now().UTC().Format(time.RFC3339Nano)}
	b, err := json.Marshal(aos.Response{JSONRPC: "2.0", ID: step.ID, Result: res})
	if err != nil {
		return Outcome{}, fmt.Errorf("encode ping: %w", err)
	}
	return Outcome{Response: b}, nil
}

// resolveHold waits for an operator (or the hold's timeout) and turns the outcome into a
// final verdict. Without a hold service a hold fails closed.
func (g *Guardian) resolveHold(ctx context.Context, step *aos.Step, sessionID string, v Verdict) (Verdict, string) {
	if g.holds == nil {
		v.Decision = string(aos.Deny)
		v.Message = "Held for review, but no reviewer queue is configured; denied."
		return v, ""
	}
	done := LongWait(ctx)
	// The step's joined text would be a second copy of its content for as long as it
	// waits; it is joined again when the step is stored.
	step.ForgetText()
	out, err := g.holds.Hold(ctx, HoldRequest{Step: step, SessionID: sessionID, Verdict: v})
	done()
	if err != nil {
		g.log.Error("hold failed", "session", sessionID, "method", step.Method, "err", err)
		v.Decision = string(aos.Deny)
		v.Message = "The step could not be queued for review; denied."
		return v, ""
	}
	if out.ReasonCode != "" {
		// First: the reason for this answer, ahead of the codes of the rules that held it.
		v.ReasonCodes = append([]string{out.ReasonCode}, v.ReasonCodes...)
	}
	v.Decision = out.Decision
	if out.Message != "" {
		v.Message = out.Message
	}
	if out.Reasoning != "" {
		v.Reasoning = out.Reasoning
	}
	if out.RuleID != "" {
		v.RuleID = out.RuleID
	}
	v.ModifiedParams = out.Params
	return v, out.HoldID
}

func (g *Guardian) record(step *aos.Step, sessionID string, v Verdict, at time.Time, held bool) storage.StepRecord {
	rec := storage.StepRecord{
		SessionID:    sessionID,
		Method:       step.Method,
		Kind:         string(step.Kind),
		Tool:         step.ToolID(),
		Decision:     v.Decision,
		ReceivedAt:   at.UTC(),
		Request:      step.Raw,
		MatchedRules: v.Matches,
		Text:         step.Text(),
		Held:         held,
		// The request passed the AOS parser and the response is built here.
		TrustedJSON: true,
	}
	if rec.MatchedRules == nil {
		rec.MatchedRules = []storage.RuleMatch{}
	}
	if c := step.Context; c != nil {
		rec.TurnID = c.TurnID
		rec.StepID = c.StepID
		rec.AgentID = c.Agent.ID
		rec.AgentName = c.Agent.Name
		if c.User != nil {
			rec.UserID = c.User.ID
		}
	} else if step.A2A != nil && step.A2A.From != "" {
		// A native A2A message has no StepContext but names its sender; without it the
		// console could only call the session's agent unknown.
		rec.AgentName = step.A2A.From
	}
	return rec
}

// response builds the JSON-RPC answer for a decided step; nil for a notification.
func (g *Guardian) response(step *aos.Step, v Verdict) (json.RawMessage, error) {
	if step.IsNotification() {
		return nil, nil
	}
	res := aos.Result{
		Decision:   aos.Decision(v.Decision),
		Reasoning:  v.Reasoning,
		ReasonCode: v.ReasonCodes,
		Message:    v.Message,
	}
	if v.RuleID != "" {
		res.Data = map[string]any{"ruleId": v.RuleID}
	}
	if v.Decision == string(aos.Modify) {
		res.ModifiedRequest = v.modifiedRequest
	}
	if res.Message == "" {
		res.Message = defaultMessage(res.Decision)
	}
	if b, ok := appendResult(nil, step.ID, res); ok {
		return b, nil
	}
	b, err := json.Marshal(aos.Response{JSONRPC: "2.0", ID: step.ID, Result: res})
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return b, nil
}

// appendResult appends the response carrying res, byte for byte as encoding/json writes
// it, for the usual answer: an id json.Marshal would copy unchanged, no modified request, at
// most a ruleId in data. It reports false for anything else, which json.Marshal encodes.
// Encoding every answer by reflection cost a microsecond and a dozen allocations.
func appendResult(b []byte, id json.RawMessage, res aos.Result) ([]byte, bool) {
	if res.ModifiedRequest != nil || len(res.Data) > 1 || !plainID(id) {
		return nil, false
	}
	ruleID, hasRule := res.Data["ruleId"].(string)
	if len(res.Data) == 1 && !hasRule {
		return nil, false
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	if id == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, id...)
	}
	b = append(b, `,"result":{"decision":`...)
	b = storage.AppendJSONString(b, string(res.Decision))
	if res.Reasoning != "" {
		b = append(b, `,"reasoning":`...)
		b = storage.AppendJSONString(b, res.Reasoning)
	}
	if len(res.ReasonCode) > 0 {
		b = append(b, `,"reasonCode":[`...)
		for i, c := range res.ReasonCode {
			if i > 0 {
				b = append(b, ',')
			}
			b = storage.AppendJSONString(b, c)
		}
		b = append(b, ']')
	}
	b = append(b, `,"message":`...)
	b = storage.AppendJSONString(b, res.Message)
	if hasRule {
		b = append(b, `,"data":{"ruleId":`...)
		b = storage.AppendJSONString(b, ruleID)
		b = append(b, '}')
	}
	return append(b, "}}"...), true
}

// plainID reports whether a request id is bytes encoding/json would copy as they are: a
// number, or a string without escapes, HTML characters or non-ASCII.
func plainID(id json.RawMessage) bool {
	for _, c := range id {
		if c <= ' ' || c >= utf8.RuneSelf || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// buildModification turns a modify verdict's params into the whole modified request. A
// modify without new params changes nothing and becomes allow; one whose result the
// guardian itself would refuse fails closed.
func (g *Guardian) buildModification(step *aos.Step, v Verdict) Verdict {
	if v.Decision != string(aos.Modify) {
		return v
	}
	if v.ModifiedParams == nil {
		v.Decision = string(aos.Allow)
		return v
	}
	mr, err := aos.NewModifiedRequest(step, v.ModifiedParams)
	if err != nil {
		g.log.Error("modified request is invalid; denying", "method", step.Method, "rule", v.RuleID, "err", err)
		v.Decision = string(aos.Deny)
		v.Message = "The step had to be modified, but the modification was not a valid request; denied."
		return v
	}
	v.modifiedRequest = mr
	return v
}

func defaultMessage(d aos.Decision) string {
	switch d {
	case aos.Deny:
		return "Denied by policy."
	case aos.Modify:
		return "Allowed with modifications."
	default:
		return "Allowed."
	}
}

// clientAddr is the request's remote host, for attribution of context-free steps.
func clientAddr(r *http.Request) string {
	return strings.TrimSpace(r.RemoteAddr)
}
