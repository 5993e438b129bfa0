package aap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/gateway"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// Stream modes.
const (
	modeDelta   = "delta"
	modeMessage = "message"
	modeNone    = "none"
)

// turnRequest is a parsed POST /sessions/:id/turns body.
type turnRequest struct {
	obj      *object
	mode     string
	msgs     []message
	agent    *agentConfig
	tools    []string
	hasTools bool
}

func parseTurn(body []byte) (*turnRequest, error) {
	o, err := parseObject(body, "")
	if err != nil {
		return nil, err
	}
	tr := &turnRequest{obj: o, mode: modeNone}
	if o.has("stream") {
		s, err := o.str("", "stream", false)
		if err != nil {
			return nil, err
		}
		switch s {
		case modeDelta, modeMessage, modeNone:
			tr.mode = s
		default:
			return nil, fmt.Errorf(`stream: must be "delta", "message" or "none", got %q`, s)
		}
	}
	if !o.has("messages") {
		return nil, errors.New("messages: required")
	}
	elems, err := o.array("", "messages")
	if err != nil {
		return nil, err
	}
	if len(elems) == 0 {
		return nil, errEmptyMessages
	}
	users := 0
	for i, e := range elems {
		m, err := parseMessage(e, fmt.Sprintf("messages[%d]", i), "user", "tool", "tool_permission")
		if err != nil {
			return nil, err
		}
		if m.role == "user" {
			users++
		}
		tr.msgs = append(tr.msgs, m)
	}
	if users > 0 && len(elems) != 1 {
		return nil, errors.New("messages: a turn carries a single user message, or tool results and tool permissions")
	}
	if o.has("agent") && !isNull(o.raw("agent")) {
		if tr.agent, err = parseAgentConfig(o.raw("agent"), "agent", false); err != nil {
			return nil, err
		}
		o.set("agent", tr.agent.obj.bytes())
	}
	if o.has("tools") && !isNull(o.raw("tools")) {
		elems, err := o.array("", "tools")
		if err != nil {
			return nil, err
		}
		if tr.tools, err = parseToolSpecs("tools", elems); err != nil {
			return nil, err
		}
		tr.hasTools = true
	}
	return tr, nil
}

// turn is one client turn in progress: it may span several upstream turns when the
// gateway answers tool permissions itself.
type turn struct {
	g    *Gateway
	s    *session
	r    *http.Request
	w    http.ResponseWriter
	rc   *http.ResponseController
	mode string
	st   stepper
	meta requestMetaT

	// started: the SSE answer's headers are sent; sentStart: its turn_start is.
	started, sentStart bool
	// msgs are the agent's messages of a none-mode answer, gathered over the rounds, and
	// msgsBytes their size: the client gets them all at once when the turn ends, so up to
	// MaxRounds upstream answers would pile up here; together they are bounded like one.
	msgs      []json.RawMessage
	msgsBytes int64
}

// round is what one upstream turn left to do.
type round struct {
	stop string
	// owed are the permissions and denials the upstream waits for, by tool call id.
	owed    []json.RawMessage
	owedIDs []string
	// owedBytes is what owed holds, at most limit (MaxUpstreamBytes): the upstream decides
	// how many tool calls a round makes, and what is owed for them is held until the next
	// upstream turn, between client turns in the session.
	owedBytes, limit int64
	// clientCalls counts tool calls passed to the client, which answers them.
	clientCalls int
}

func (rd *round) owe(id string, msg json.RawMessage) error {
	n := int64(len(id) + len(msg))
	if rd.owedBytes+n > rd.limit {
		return fmt.Errorf("the answers owed for the upstream's tool calls exceed %d bytes", rd.limit)
	}
	rd.owed = append(rd.owed, msg)
	rd.owedIDs = append(rd.owedIDs, id)
	rd.owedBytes += n
	return nil
}

// ran drops what is owed for a call the upstream ran without waiting for permission.
func (rd *round) ran(id string) {
	for i, x := range rd.owedIDs {
		if x == id {
			rd.owedBytes -= int64(len(x) + len(rd.owed[i]))
			rd.owed = append(rd.owed[:i], rd.owed[i+1:]...)
			rd.owedIDs = append(rd.owedIDs[:i], rd.owedIDs[i+1:]...)
			return
		}
	}
}

func permission(id string, granted bool, reason string) json.RawMessage {
	m := map[string]any{"role": "tool_permission", "toolCallId": id, "granted": granted}
	if !granted {
		m["reason"] = reason
	}
	return mustJSON(m)
}

// denial tells the agent a client tool call was denied, in the words the AAP SDK uses for
// a refused permission.
func denial(id, reason string) json.RawMessage {
	return mustJSON(map[string]any{"role": "tool", "toolCallId": id, "content": "Tool use denied: " + reason})
}

func (g *Gateway) handleTurn(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	body, ok := g.readBody(w, r)
	if !ok {
		return
	}
	tr, err := parseTurn(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if g.foreign(w, r, id) {
		return
	}
	s, err := g.lookup(w, r, id)
	if err != nil {
		g.unreachable(w, err)
		return
	}
	if s == nil {
		return
	}
	if err := s.acquire(r.Context()); err != nil {
		return
	}
	defer s.release()
	options, err := g.mergeOptions(s.agent, s.options, tr.agent, "agent")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.applyAgent(tr.agent, options)
	s.applyClientTools(tr.tools, tr.hasTools)
	now := g.opts.Now()
	// The server's read and write deadlines bound a whole request; a turn lasts as long as
	// the agent works and an operator reviews. Each write gets the write timeout instead.
	w = gateway.TimedWriter(w, r)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	t := &turn{g: g, s: s, r: r, w: w, rc: rc, mode: tr.mode, meta: g.requestMeta(r),
		st: stepper{sessionID: s.vigilID, upstream: g.opts.Name, agent: g.aosAgent(s.agent, s.options),
			turnID: "turn-" + strconv.FormatInt(now.UnixNano(), 36)}}
	t.run(tr)
}

func (t *turn) now() string { return t.g.opts.Now().UTC().Format(time.RFC3339Nano) }

// decide runs the pipeline for a step. While it waits (a hold), a streaming answer gets
// keep-alive comments; a client that goes away ends ctx, which abandons the hold.
func (t *turn) decide(step *aos.Step, err error) (verdict, error) {
	return t.decideMeta(step, err, t.meta)
}

// record decides a step whose verdict cannot be applied any more (text already streamed):
// it is judged and recorded only.
func (t *turn) record(step *aos.Step, err error) (verdict, error) {
	meta := t.meta
	no := false
	meta.Enforceable = &no
	return t.decideMeta(step, err, meta)
}

func (t *turn) decideMeta(step *aos.Step, err error, meta requestMetaT) (verdict, error) {
	if err != nil {
		return verdict{}, err
	}
	if t.mode == modeNone {
		v, _, err := t.g.opts.Decider.DecideStep(t.r.Context(), step, meta)
		return v, err
	}
	type result struct {
		v   verdict
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, _, err := t.g.opts.Decider.DecideStep(t.r.Context(), step, meta)
		ch <- result{v, err}
	}()
	tick := time.NewTicker(t.g.opts.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case res := <-ch:
			return res.v, res.err
		case <-tick.C:
			t.keepAlive()
		}
	}
}

func (t *turn) begin() {
	if t.started {
		return
	}
	h := t.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	t.w.WriteHeader(http.StatusOK)
	t.started = true
}

func (t *turn) event(name string, data []byte) {
	t.begin()
	var b bytes.Buffer
	b.Grow(len(name) + len(data) + 16)
	b.WriteString("event: ")
	b.WriteString(name)
	b.WriteString("\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	_, _ = t.w.Write(b.Bytes())
	_ = t.rc.Flush()
}

func (t *turn) keepAlive() {
	if t.mode == modeNone {
		return
	}
	t.begin()
	_, _ = t.w.Write([]byte(": keep-alive\n\n"))
	_ = t.rc.Flush()
}

func (t *turn) turnStart() {
	if !t.sentStart {
		t.event("turn_start", []byte("{}"))
		t.sentStart = true
	}
}

// finish ends the client's turn with a stop reason.
func (t *turn) finish(stop string) {
	if t.mode == modeNone {
		msgs := t.msgs
		if msgs == nil {
			msgs = []json.RawMessage{}
		}
		t.w.Header().Set("Content-Type", "application/json")
		t.w.WriteHeader(http.StatusOK)
		_, _ = t.w.Write(mustJSON(struct {
			StopReason string            `json:"stopReason"`
			Messages   []json.RawMessage `json:"messages"`
		}{stop, msgs}))
		return
	}
	t.turnStart()
	t.event("turn_stop", mustJSON(map[string]string{"stopReason": stop}))
}

// refuse answers the turn itself: the guardian's message as the assistant's, stop reason
// refusal. The upstream never sees the user's message.
func (t *turn) refuse(msg string) {
	switch t.mode {
	case modeNone:
		// The guardian's message, not the upstream's: it is not charged to keep's bound.
		t.msgs = append(t.msgs, mustJSON(map[string]any{"role": "assistant",
			"content": []map[string]string{{"type": "text", "text": msg}}}))
	case modeDelta:
		t.turnStart()
		t.event("text_delta", mustJSON(map[string]string{"delta": msg}))
	default:
		t.turnStart()
		t.event("text", mustJSON(map[string]string{"text": msg}))
	}
	t.finish("refusal")
}

// fail ends a turn Vigil could not decide: fail closed, nothing more goes either way.
func (t *turn) fail(err error) {
	if t.r.Context().Err() != nil {
		return
	}
	status, msg := http.StatusInternalServerError, "Vigil could not decide a step of this turn"
	var refused *aos.Error
	if errors.As(err, &refused) {
		// The session belongs to another agent key.
		status, msg = http.StatusForbidden, refused.Message
		t.g.log.Warn("aap turn refused", "session", t.s.vigilID, "err", err)
	} else {
		t.g.log.Error("aap turn", "session", t.s.vigilID, "err", err)
	}
	if !t.started && t.mode != modeNone || t.mode == modeNone && t.msgs == nil {
		writeError(t.w, status, msg)
		return
	}
	t.finish("error")
}

func (t *turn) run(tr *turnRequest) {
	s := t.s
	out := make([]json.RawMessage, 0, len(s.pending)+len(tr.msgs))
	out = append(out, s.pending...)
	// Vigil answers every server tool's permission itself (the upstream is told that no tool
	// is trusted), so a client's own permission never decides: one for a call Vigil
	// answered is dropped, and any other goes up as a refusal (unjudgedPermission). A
	// client's tool result for a call Vigil answered is dropped too.
	answered := make(map[string]bool, len(s.answered)+len(s.pending))
	for id := range s.answered {
		answered[id] = true
	}
	for _, p := range s.pending {
		answered[callID(p)] = true
	}
	for i, m := range tr.msgs {
		switch m.role {
		case "user":
			v, err := t.decide(t.st.messageStep(t.now(), aos.RoleUser, "m"+strconv.Itoa(i), m.content.texts()))
			if err != nil {
				t.fail(err)
				return
			}
			switch v.Decision {
			case deny:
				t.refuse(verdictMessage(v))
				return
			case modify:
				texts, err := modifiedTexts(v.ModifiedParams)
				if err != nil {
					t.fail(err)
					return
				}
				m = m.withContent(m.content.withTexts(texts))
			}
		case "tool":
			if answered[m.toolCallID] {
				// Vigil answered this call itself (a denial, or a permission): the client's
				// own result for it would be a second answer, and what a denial withheld.
				t.g.log.Info("aap: dropped a client's tool result for a call Vigil answered",
					"session", s.vigilID, "toolCallId", m.toolCallID)
				continue
			}
			v, err := t.decide(t.st.toolResultStep(t.now(), m.toolCallID, m.content))
			if err != nil {
				t.fail(err)
				return
			}
			switch v.Decision {
			case deny:
				m = m.withContent(content{isString: true, str: verdictMessage(v)})
			case modify:
				texts, err := modifiedOutputs(v.ModifiedParams)
				if err != nil {
					t.fail(err)
					return
				}
				m = m.withContent(m.content.withTexts(texts))
			}
		case "tool_permission":
			if answered[m.toolCallID] {
				// Vigil answered it already, from the verdict.
				continue
			}
			m = t.unjudgedPermission(m)
		}
		out = append(out, m.obj.bytes())
	}

	first := tr.obj
	first.set("messages", mustJSON(out))
	if s.retrust {
		agent := &object{vals: map[string]json.RawMessage{}}
		if first.has("agent") {
			agent, _ = parseObject(first.raw("agent"), "agent")
		}
		if !agent.has("tools") {
			s.mu.Lock()
			refs := make([]map[string]string, 0, len(s.serverTools))
			for name := range s.serverTools {
				refs = append(refs, map[string]string{"name": name})
			}
			s.mu.Unlock()
			agent.set("tools", mustJSON(refs))
		}
		first.set("agent", agent.bytes())
	}
	body := first.bytes()
	path := "/sessions/" + url.PathEscape(s.id) + "/turns"
	var (
		// taken: the upstream took the turn's first request, with what was pending.
		taken bool
		// sent are the calls Vigil answered in the turn's continuations (the upstream may
		// have them even when a continuation failed), owed a round's answers the upstream
		// waits for and never got: together, what the next turn knows as answered.
		sent []string
		owed *round
	)
	defer func() {
		if !taken {
			return // the upstream took nothing: what was pending still is
		}
		s.pending = nil
		s.answered = make(map[string]bool, len(sent))
		for _, id := range sent {
			s.answered[id] = true
		}
		if owed != nil {
			s.pending = owed.owed
			for _, id := range owed.owedIDs {
				s.answered[id] = true
			}
		}
	}()
	for n := 0; n < t.g.opts.MaxRounds; n++ {
		resp, err := t.g.upstreamRequest(t.r.Context(), t.r, http.MethodPost, path, "", body)
		if err != nil {
			if t.r.Context().Err() != nil {
				return
			}
			if n == 0 && !t.started {
				t.g.unreachable(t.w, err)
				return
			}
			t.g.log.Warn("upstream failed in a continued turn", "session", s.vigilID, "err", err)
			t.finish("error")
			return
		}
		if resp.StatusCode != http.StatusOK {
			if n == 0 && !t.started {
				t.g.passThrough(t.w, resp)
				return
			}
			b, _ := t.g.readUpstream(resp)
			t.g.log.Warn("upstream refused a continued turn", "session", s.vigilID, "status", resp.StatusCode, "body", truncate(b, 200))
			t.finish("error")
			return
		}
		if n == 0 {
			// The upstream took what the gateway owed it.
			taken, s.retrust = true, false
		}
		rd := round{limit: t.g.opts.MaxUpstreamBytes}
		if t.mode == modeNone {
			err = t.roundJSON(resp, &rd)
		} else {
			err = t.roundSSE(resp, &rd)
		}
		if err != nil {
			if t.r.Context().Err() != nil {
				// The client went away (abandoning a hold, say) before the round's answers
				// could go up. The upstream waits for them: they go up first on the
				// client's next turn, so a call a hold denied stays denied.
				owed = &rd
				return
			}
			var fe *failError
			if errors.As(err, &fe) {
				t.fail(fe.err)
				return
			}
			t.g.log.Warn("upstream turn broke off", "session", s.vigilID, "err", err)
			t.finish("error")
			return
		}
		if rd.stop == "tool_use" && len(rd.owed) > 0 {
			if rd.clientCalls == 0 {
				if t.r.Context().Err() != nil {
					// The client went away while the round was decided: its answers wait
					// for the client's next turn, as above.
					owed = &rd
					return
				}
				// Only Vigil had to answer: the turn goes on, and the client sees one turn.
				cont := &object{vals: map[string]json.RawMessage{}}
				if tr.obj.has("stream") {
					cont.setString("stream", t.mode)
				}
				cont.set("messages", mustJSON(rd.owed))
				body = cont.bytes()
				sent = append(sent, rd.owedIDs...)
				continue
			}
			owed = &rd
		}
		t.finish(rd.stop)
		return
	}
	t.g.log.Warn("turn stopped: too many tool rounds answered by the gateway", "session", s.vigilID, "max", t.g.opts.MaxRounds)
	t.finish("error")
}

// unjudgedReason is the refusal a client's permission becomes when Vigil has no answer of
// its own for the call.
const unjudgedReason = "Vigil has not allowed this tool call: a server tool runs only with Vigil's permission, " +
	"and Vigil has no verdict of its own for this call (its turn was cut short, or Vigil no longer knows the session). " +
	"Ask for the call again to have it decided."

// unjudgedPermission is what goes up for a client's tool_permission for a call Vigil has
// no answer for: the turn that made the call ended before Vigil could decide it, or Vigil
// no longer knows the session (evicted from its cache, or restarted). Only Vigil's
// permission may run a server tool, so a grant goes up as a refusal (the agent sees "Tool
// use denied: …" and may ask again, which is decided); a refusal goes up as it is. The
// permission still goes up rather than failing the turn: the upstream waits for an answer.
func (t *turn) unjudgedPermission(m message) message {
	var granted bool
	if json.Unmarshal(m.obj.raw("granted"), &granted) != nil || !granted {
		return m
	}
	t.g.log.Warn("a client's grant of a tool call Vigil has no verdict for goes up as a refusal",
		"session", t.s.vigilID, "toolCallId", m.toolCallID)
	o := cloneObject(m.obj)
	o.set("granted", json.RawMessage("false"))
	o.setString("reason", unjudgedReason)
	m.obj = o
	return m
}

// callID is the toolCallId of an answer the gateway owes the upstream.
func callID(answer json.RawMessage) string {
	var m struct {
		ToolCallID string `json:"toolCallId"`
	}
	_ = json.Unmarshal(answer, &m)
	return m.ToolCallID
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// failError is a failure to decide (storage): the turn fails closed.
type failError struct{ err error }

func (e *failError) Error() string { return e.err.Error() }

// toolCall decides a tool call the agent made; it returns the input to show the client
// (nil: the call is withheld).
func (t *turn) toolCall(tc toolCall, rd *round) (json.RawMessage, error) {
	v, err := t.decide(t.st.toolCallStep(t.now(), tc))
	if err != nil {
		return nil, &failError{err}
	}
	t.s.mu.Lock()
	_, server := t.s.serverTools[tc.Name]
	t.s.mu.Unlock()
	if server {
		switch v.Decision {
		case allow:
			return tc.Input, rd.owe(tc.ID, permission(tc.ID, true, ""))
		case modify:
			// A permission grants or refuses; it cannot change the input the server uses.
			return nil, rd.owe(tc.ID, permission(tc.ID, false, "Vigil would change this call's input, which it cannot do for a server tool. "+verdictMessage(v)))
		default:
			return nil, rd.owe(tc.ID, permission(tc.ID, false, verdictMessage(v)))
		}
	}
	switch v.Decision {
	case allow:
		rd.clientCalls++
		return tc.Input, nil
	case modify:
		in, err := modifiedInput(v.ModifiedParams)
		if err != nil {
			return nil, &failError{err}
		}
		rd.clientCalls++
		return in, nil
	default:
		return nil, rd.owe(tc.ID, denial(tc.ID, verdictMessage(v)))
	}
}

// toolResult decides a server tool's result; it returns the content to pass on.
func (t *turn) toolResult(id string, c content) (content, error) {
	v, err := t.decide(t.st.toolResultStep(t.now(), id, c))
	if err != nil {
		return c, &failError{err}
	}
	switch v.Decision {
	case deny:
		return content{isString: true, str: verdictMessage(v)}, nil
	case modify:
		texts, err := modifiedOutputs(v.ModifiedParams)
		if err != nil {
			return c, &failError{err}
		}
		return c.withTexts(texts), nil
	}
	return c, nil
}

// agentText decides an assistant message's texts; withheld reports a deny (the texts are
// then the guardian's message).
func (t *turn) agentText(texts []string) (out []string, changed, withheld bool, err error) {
	return t.agentTextMeta(texts, true)
}

func (t *turn) agentTextMeta(texts []string, enforce bool) (out []string, changed, withheld bool, err error) {
	step, serr := t.st.messageStep(t.now(), aos.RoleAgent, "a"+strconv.Itoa(t.st.next+1), texts)
	var v verdict
	if enforce {
		v, err = t.decide(step, serr)
	} else {
		v, err = t.record(step, serr)
	}
	if err != nil {
		return nil, false, false, &failError{err}
	}
	switch v.Decision {
	case deny:
		return []string{verdictMessage(v)}, true, true, nil
	case modify:
		ts, err := modifiedTexts(v.ModifiedParams)
		if err != nil {
			return nil, false, false, &failError{err}
		}
		return ts, true, false, nil
	}
	return texts, false, false, nil
}

// roundJSON reads a none-mode answer and decides every message in it.
func (t *turn) roundJSON(resp *http.Response, rd *round) error {
	b, err := t.g.readUpstream(resp)
	if err != nil {
		return err
	}
	o, err := parseObject(b, "")
	if err != nil {
		return fmt.Errorf("upstream turn answer: %w", err)
	}
	if rd.stop, err = o.str("", "stopReason", true); err != nil {
		return fmt.Errorf("upstream turn answer: %w", err)
	}
	elems, err := o.array("", "messages")
	if err != nil {
		return fmt.Errorf("upstream turn answer: %w", err)
	}
	for i, e := range elems {
		// A message that cannot fit is not decided: its step would record as shown a
		// message the client never gets.
		if err := t.room(len(e)); err != nil {
			return err
		}
		m, err := parseMessage(e, fmt.Sprintf("messages[%d]", i), "assistant", "tool")
		if err != nil {
			return fmt.Errorf("upstream turn answer: %w", err)
		}
		if m.role == "tool" {
			c, err := t.toolResult(m.toolCallID, m.content)
			if err != nil {
				return err
			}
			rd.ran(m.toolCallID)
			if err := t.keep(m.withContent(c).obj.bytes()); err != nil {
				return err
			}
			continue
		}
		c := m.content
		if texts := c.texts(); len(texts) > 0 {
			out, changed, withheld, err := t.agentText(texts)
			if err != nil {
				return err
			}
			switch {
			case withheld:
				c = c.replaced(out[0])
			case changed:
				c = c.withTexts(out)
			}
		}
		if !c.isString {
			kept := c.blocks[:0:0]
			for j, bl := range c.blocks {
				if bl.typ != "tool_use" {
					kept = append(kept, bl)
					continue
				}
				tc, err := parseToolCall(bl.obj, fmt.Sprintf("messages[%d].content[%d]", i, j))
				if err != nil {
					return fmt.Errorf("upstream turn answer: %w", err)
				}
				in, err := t.toolCall(tc, rd)
				if err != nil {
					return err
				}
				if in == nil {
					continue
				}
				nb := cloneObject(bl.obj)
				nb.set("input", in)
				kept = append(kept, block{obj: nb, typ: bl.typ})
			}
			if len(kept) == 0 {
				continue
			}
			c = content{blocks: kept}
		}
		if err := t.keep(m.withContent(c).obj.bytes()); err != nil {
			return err
		}
	}
	return nil
}

// room fails when n more bytes would take the none-mode messages of the turn past
// MaxUpstreamBytes.
func (t *turn) room(n int) error {
	if t.msgsBytes+int64(n) > t.g.opts.MaxUpstreamBytes {
		return fmt.Errorf("the turn's messages exceed %d bytes", t.g.opts.MaxUpstreamBytes)
	}
	return nil
}

// keep adds a decided message to the none-mode answer. It is checked again as it will be
// sent: re-encoding (a redaction, escaped characters) can make it longer than it came.
func (t *turn) keep(m json.RawMessage) error {
	if err := t.room(len(m)); err != nil {
		return err
	}
	t.msgs = append(t.msgs, m)
	t.msgsBytes += int64(len(m))
	return nil
}

// sseEvent is one event of an upstream stream.
type sseEvent struct {
	name string
	data []byte
}

// textBuffer is an assistant message arriving as text deltas.
type textBuffer struct {
	active    bool
	buffering bool
	text      strings.Builder
	held      heldDeltas // the deltas' data, replayed as they came when the text passes unchanged
}

// heldDeltas are the data of the text deltas held back for a decision, each behind its
// length in one buffer. The buffer's length is what the upstream makes the gateway hold,
// so it is what the bound is charged: an empty delta adds nothing to the text, but costs
// its data and a length here, not a slice header and an allocation the bound cannot see.
type heldDeltas struct{ buf []byte }

// cost is what holding d adds to the buffer's length.
func (h *heldDeltas) cost(d []byte) int {
	var n [binary.MaxVarintLen64]byte
	return binary.PutUvarint(n[:], uint64(len(d))) + len(d)
}

func (h *heldDeltas) add(d []byte) {
	h.buf = binary.AppendUvarint(h.buf, uint64(len(d)))
	h.buf = append(h.buf, d...)
}

// each calls f with every delta's data, in the order they came.
func (h *heldDeltas) each(f func(d []byte)) {
	for b := h.buf; len(b) > 0; {
		n, k := binary.Uvarint(b)
		d := b[k : k+int(n)]
		b = b[k+int(n):]
		f(d)
	}
}

// roundSSE relays one upstream stream, deciding each message and tool call as it ends.
func (t *turn) roundSSE(resp *http.Response, rd *round) error {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), int(max(t.g.opts.MaxUpstreamBytes, 64<<10)))
	var tb textBuffer
	var ev sseEvent
	var data bytes.Buffer
	hasData, sawStop := false, false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) > 0 {
			switch {
			case line[0] == ':':
			case bytes.HasPrefix(line, []byte("event:")):
				ev.name = string(bytes.TrimSpace(line[6:]))
			case bytes.HasPrefix(line, []byte("data:")):
				d := line[5:]
				if len(d) > 0 && d[0] == ' ' {
					d = d[1:]
				}
				if hasData {
					data.WriteByte('\n')
				}
				data.Write(d)
				hasData = true
				if int64(data.Len()) > t.g.opts.MaxUpstreamBytes {
					return fmt.Errorf("upstream event exceeds %d bytes", t.g.opts.MaxUpstreamBytes)
				}
			}
			continue
		}
		if ev.name == "" && !hasData {
			continue
		}
		ev.data = append([]byte(nil), data.Bytes()...)
		if ev.name == "" {
			ev.name = "message"
		}
		stop, err := t.relay(ev, &tb, rd)
		if err != nil {
			return err
		}
		if stop {
			sawStop = true
		}
		ev, hasData = sseEvent{}, false
		data.Reset()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read upstream stream: %w", err)
	}
	if err := t.flushText(&tb); err != nil {
		return err
	}
	if !sawStop {
		return errors.New("upstream stream ended without turn_stop")
	}
	return nil
}

// relay applies one upstream event; stop reports the turn_stop.
func (t *turn) relay(ev sseEvent, tb *textBuffer, rd *round) (stop bool, err error) {
	if ev.name != "text_delta" {
		if err := t.flushText(tb); err != nil {
			return false, err
		}
	}
	switch ev.name {
	case "turn_start":
		t.turnStart()
	case "turn_stop":
		var d struct {
			StopReason string `json:"stopReason"`
		}
		if json.Unmarshal(ev.data, &d) != nil || d.StopReason == "" {
			return false, fmt.Errorf("upstream turn_stop without a stopReason: %s", truncate(ev.data, 200))
		}
		rd.stop = d.StopReason
		return true, nil
	case "text_delta":
		var d struct {
			Delta string `json:"delta"`
		}
		if err := json.Unmarshal(ev.data, &d); err != nil {
			return false, fmt.Errorf("upstream text_delta: %w", err)
		}
		if !tb.active {
			tb.active = true
			tb.buffering = t.g.opts.MayWithhold == nil || t.g.opts.MayWithhold()
		}
		return false, t.textDelta(ev, d.Delta, tb)
	case "text":
		o, err := parseObject(ev.data, "text")
		if err != nil {
			return false, fmt.Errorf("upstream text event: %w", err)
		}
		text, err := o.strPresent("text", "text")
		if err != nil {
			return false, fmt.Errorf("upstream text event: %w", err)
		}
		out, changed, _, err := t.agentText([]string{text})
		if err != nil {
			return false, err
		}
		if changed {
			o.setString("text", strings.Join(out, ""))
			ev.data = o.bytes()
		}
		t.event(ev.name, ev.data)
	case "tool_call":
		o, err := parseObject(ev.data, "tool_call")
		if err != nil {
			return false, fmt.Errorf("upstream tool_call: %w", err)
		}
		tc, err := parseToolCall(o, "tool_call")
		if err != nil {
			return false, fmt.Errorf("upstream tool_call: %w", err)
		}
		in, err := t.toolCall(tc, rd)
		if err != nil || in == nil {
			return false, err
		}
		if !bytes.Equal(in, tc.Input) {
			o.set("input", in)
			ev.data = o.bytes()
		}
		t.event(ev.name, ev.data)
	case "tool_result":
		o, err := parseObject(ev.data, "tool_result")
		if err != nil {
			return false, fmt.Errorf("upstream tool_result: %w", err)
		}
		id, err := o.str("tool_result", "toolCallId", true)
		if err != nil {
			return false, fmt.Errorf("upstream tool_result: %w", err)
		}
		c, err := parseContent("tool_result.content", o.raw("content"))
		if err != nil {
			return false, fmt.Errorf("upstream tool_result: %w", err)
		}
		// The tool ran without waiting for permission (the upstream trusted it after all):
		// its call was judged, and its result is.
		rd.ran(id)
		out, err := t.toolResult(id, c)
		if err != nil {
			return false, err
		}
		o.set("content", out.marshal())
		t.event(ev.name, o.bytes())
	default:
		t.event(ev.name, ev.data)
	}
	return false, nil
}

// textDelta takes one text delta of an assistant message: held back with the rest of it
// for a decision when buffering, else shown at once.
func (t *turn) textDelta(ev sseEvent, delta string, tb *textBuffer) error {
	limit := t.g.opts.MaxUpstreamBytes
	if tb.buffering {
		// Both the joined text and the deltas as they came are held, and either may outgrow
		// the other (empty deltas add to the deltas only; an invalid byte decodes to three
		// of text).
		if int64(tb.text.Len()+len(delta)) > limit || int64(len(tb.held.buf)+tb.held.cost(ev.data)) > limit {
			// Nothing of it was shown; it cannot be decided whole, so it is not shown at all.
			return fmt.Errorf("assistant message exceeds %d bytes while buffered for a decision", limit)
		}
		tb.text.WriteString(delta)
		tb.held.add(ev.data)
		return nil
	}
	// Not buffered, the text is still kept whole to be recorded when the message ends, so it
	// is bounded as if buffered: past the bound the turn fails the same way, once what the
	// client was shown is recorded, so the record holds exactly what the client saw.
	if int64(tb.text.Len()+len(delta)) > limit {
		if err := t.flushText(tb); err != nil {
			return err
		}
		return fmt.Errorf("assistant message exceeds %d bytes while kept for its record", limit)
	}
	tb.text.WriteString(delta)
	t.event(ev.name, ev.data)
	return nil
}

// flushText decides the assistant message the text deltas so far make up. Buffered, it is
// sent now: as it came, redacted (one delta), or replaced by the guardian's message.
// Streamed, it was sent already and is only recorded.
func (t *turn) flushText(tb *textBuffer) error {
	if !tb.active {
		return nil
	}
	text := tb.text.String()
	buffering, held := tb.buffering, tb.held
	*tb = textBuffer{}
	out, changed, _, err := t.agentTextMeta([]string{text}, buffering)
	if err != nil {
		return err
	}
	if !buffering {
		return nil
	}
	if !changed {
		held.each(func(d []byte) { t.event("text_delta", d) })
		return nil
	}
	t.event("text_delta", mustJSON(map[string]string{"delta": strings.Join(out, "")}))
	return nil
}
