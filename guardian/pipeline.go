package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
	"unicode/utf8"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// The decision pipeline knows no wire format: a front end (the AOS endpoint, a gateway)
// builds an aos.Step, calls DecideStep and applies the returned Verdict in its own
// protocol. It stays in package guardian for now because it shares the Guardian's session
// cache, policy and hold service; DESIGN.md's guardian/pipeline is where it moves once
// those have their own packages.

// Protocols a step can arrive through (RequestMeta.Protocol).
const (
	ProtocolAOS      = "aos"
	ProtocolAAP      = "aap"
	ProtocolAgentAPI = "agentapi"
	ProtocolMCP      = "mcp"
	ProtocolHook     = "hook"
)

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
	// Protocol is the front end the step came through: ProtocolAOS when empty.
	Protocol string
	// Upstream is a gateway's upstream name (--agentapi NAME=URL); empty for AOS.
	Upstream string
	// Enforceable, when false, says the front end cannot apply the verdict (a server-side
	// tool the protocol gives no way to stop): the step is judged and recorded only. nil
	// means true.
	Enforceable *bool
}

// StepMeta is what a front end knows about a step beyond the step itself.
type StepMeta = RequestMeta

// gateway reports whether the step came through a gateway rather than /aos.
func (m *RequestMeta) gateway() bool { return m.Protocol != "" && m.Protocol != ProtocolAOS }

// enforceable reports whether the front end applies the verdict.
func (m *RequestMeta) enforceable() bool { return m.Enforceable == nil || *m.Enforceable }

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

// errPing is DecideStep's answer to a ping: a ping is answered by the AOS endpoint and is
// not a step.
var errPing = errors.New("guardian: ping is not a step")

// DecideStep runs the whole pipeline for one parsed step: session cache, controls, rules,
// hold (blocking until decided; when ctx ends, because the client went away, the hold is
// abandoned), store, publish. It returns the final verdict (never a hold) and the stored
// record. The record's Response is the verdict as an AOS result (what the console shows for
// every step); the AOS endpoint sends those bytes, a gateway applies the verdict in its own
// protocol. The step is stored even when ctx is cancelled meanwhile.
//
// Errors: an *aos.Error when the step may not join its session (another key or agent owns
// it), which the caller answers in its protocol as a refusal; anything else is a storage
// failure, answered as the protocol's internal error (fail closed).
func (g *Guardian) DecideStep(ctx context.Context, step *aos.Step, meta RequestMeta) (Verdict, record.StepRecord, error) {
	start := meta.ReceivedAt
	if start.IsZero() {
		start = g.now()
	}
	if step.Kind == aos.KindPing {
		return Verdict{}, record.StepRecord{}, errPing
	}
	sessionID, from := sessionOf(step, meta)
	hist := g.sessions.get(ctx, sessionID)
	defer g.sessions.release(hist)
	agentID := ""
	if step.Context != nil {
		agentID = step.Context.Agent.ID
	}
	if refused := hist.admit(agentID, meta.KeyID, meta.KeyAgent); refused != "" {
		return Verdict{}, record.StepRecord{}, ownerError(sessionID, from, refused)
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

	var storedSeq int64 // set when another process stored the held step already
	if v.Decision == DecisionHold {
		if !meta.enforceable() {
			// Nobody can stop the step: a person waiting on it would decide nothing.
			v.Decision = string(aos.Deny)
			v.Message = "Held for review, but this step cannot be stopped through its protocol; recorded as denied."
		} else {
			v, v.HoldID, storedSeq = g.resolveHold(ctx, step, sessionID, meta.KeyID, v)
			v.Held = v.HoldID != ""
		}
	}

	v = g.buildModification(step, v)
	rec := g.record(step, sessionID, v, start, v.Held)
	rec.KeyID = meta.KeyID
	resp, err := g.response(step, v, &meta)
	if err != nil {
		return Verdict{}, record.StepRecord{}, err
	}
	rec.Response = resp
	if resp == nil {
		rec.Response = json.RawMessage("null")
	}
	rec.LatencyMicros = g.now().Sub(start).Microseconds()

	if storedSeq != 0 {
		// Stored already, by the replica that ended the hold while this one had lost the
		// database: the record there is the step's; it is not stored or published twice.
		rec.Seq = storedSeq
		hist.add(rec)
		return v, rec, nil
	}
	// The agent may have gone away while the step was held; the step is still recorded.
	if err := g.store.SaveStep(context.WithoutCancel(ctx), &rec); err != nil {
		return Verdict{}, record.StepRecord{}, fmt.Errorf("store step: %w", err)
	}
	hist.add(rec)
	if v.HoldID != "" {
		if err := g.holds.AttachStep(context.WithoutCancel(ctx), v.HoldID, rec.Seq); err != nil {
			g.log.Warn("link hold to step", "hold", v.HoldID, "seq", rec.Seq, "err", err)
		}
	}
	if g.pub != nil {
		g.pub.PublishStep(&rec)
	}
	return v, rec, nil
}

// resolveHold waits for an operator (or the hold's timeout) and turns the outcome into a
// final verdict. Without a hold service a hold fails closed.
func (g *Guardian) resolveHold(ctx context.Context, step *aos.Step, sessionID, keyID string, v Verdict) (_ Verdict, holdID string, storedSeq int64) {
	if g.holds == nil {
		v.Decision = string(aos.Deny)
		v.Message = "Held for review, but no reviewer queue is configured; denied."
		return v, "", 0
	}
	done := LongWait(ctx)
	// The step's joined text would be a second copy of its content for as long as it
	// waits; it is joined again when the step is stored.
	step.ForgetText()
	out, err := g.holds.Hold(ctx, HoldRequest{Step: step, SessionID: sessionID, KeyID: keyID, Verdict: v})
	done()
	if err != nil {
		g.log.Error("hold failed", "session", sessionID, "method", step.Method, "err", err)
		v.Decision = string(aos.Deny)
		v.Message = "The step could not be queued for review; denied."
		return v, "", 0
	}
	if out.RuleID != "" && out.RuleID != v.RuleID {
		// A remembered approval decided instead of the rule that held: it becomes the
		// deciding rule, so its code leads the answer's codes and the reasoning says so,
		// keeping what the rules alone decided after it.
		v.ReasonCodes = leadWith(v.ReasonCodes, reasonCodeOf(v.Matches, out.RuleID))
		if out.Reasoning == "" {
			v.Reasoning = "rule " + out.RuleID + " decided " + out.Decision +
				" in place of a hold (a remembered approval); the rules: " + v.Reasoning
		}
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
	return v, out.HoldID, out.StoredSeq
}

// reasonCodeOf is the reason code of rule ruleID's match among matches; "" when it did not
// match or has none.
func reasonCodeOf(matches []record.RuleMatch, ruleID string) string {
	for _, m := range matches {
		if m.RuleID == ruleID {
			return m.ReasonCode
		}
	}
	return ""
}

// leadWith returns codes with code first (moved there when present, added when not); codes
// unchanged when code is "". The verdict's slice is the engine's: a new one is built.
func leadWith(codes []string, code string) []string {
	if code == "" {
		return codes
	}
	out := make([]string, 0, len(codes)+1)
	out = append(out, code)
	for _, c := range codes {
		if c != code {
			out = append(out, c)
		}
	}
	return out
}

func (g *Guardian) record(step *aos.Step, sessionID string, v Verdict, at time.Time, held bool) record.StepRecord {
	rec := record.StepRecord{
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
		rec.MatchedRules = []record.RuleMatch{}
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
	} else if step.MCP != nil {
		// An MCP gateway names the client (its clientInfo) in the AOS params' _meta.
		if ci, ok := step.MCP.Meta["clientInfo"].(map[string]any); ok {
			rec.AgentID, _ = ci["name"].(string)
			rec.AgentName = rec.AgentID
			if v, _ := ci["version"].(string); v != "" && rec.AgentName != "" {
				rec.AgentName += " " + v
			}
		}
	}
	if step.MCP != nil {
		// The session shows who talks to whom: the client and server as they introduced
		// themselves at initialize.
		rec.Client = peerOf(step.MCP.Meta["clientInfo"])
		rec.Server = peerOf(step.MCP.Meta["serverInfo"])
	}
	return rec
}

// maxPeerField bounds a peer's name and version as stored: they are whatever the client and
// server chose to send, and are kept with every step and session.
const maxPeerField = 200

// peerOf reads an MCP Implementation ({"name","version",…}); nil without a name.
func peerOf(v any) *record.Peer {
	m, _ := v.(map[string]any)
	name, _ := m["name"].(string)
	if name == "" {
		return nil
	}
	version, _ := m["version"].(string)
	return &record.Peer{Name: truncateUTF8(name, maxPeerField), Version: truncateUTF8(version, maxPeerField)}
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
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
		v.ModifiedParams = nil
		return v
	}
	v.ModifiedRequest = mr
	return v
}

// MayAct reports whether the guardian could decide anything but allow for a step like this
// one, whatever its content (its text is not looked at): the session is paused or blocked,
// or the policy has a rule that could deny, hold or modify it. A gateway streams a reply as
// it arrives when this is false, and buffers it for a verdict when it is true.
func (g *Guardian) MayAct(step *aos.Step, meta RequestMeta) bool {
	if g.holds != nil {
		if c := g.holds.Control(SessionFor(step, meta)); c == "paused" || c == "blocked" {
			return true
		}
	}
	switch p := g.policy.(type) {
	case AllowAll:
		return false
	case interface{ MayAct(*aos.Step) bool }:
		return p.MayAct(step)
	}
	return true // a policy that cannot tell might act
}

// Preview is what the rules decide for step in its session now, before any hold: nothing
// is stored, held or published. A gateway uses it to hide from a tool list the tools a rule
// would deny anyway (the MCP gateway's tools/list), so the model never tries them.
func (g *Guardian) Preview(ctx context.Context, step *aos.Step, meta RequestMeta) Verdict {
	if g.holds != nil && g.holds.Control(SessionFor(step, meta)) == "blocked" {
		return Verdict{Decision: string(aos.Deny), RuleID: "session-blocked"}
	}
	hist := g.sessions.get(ctx, SessionFor(step, meta))
	defer g.sessions.release(hist)
	snap := hist.snapshot()
	defer snap.release()
	return g.policy.Decide(ctx, step, snap, g.now())
}
