package agentapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/gateway"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// turn is one /process request on its way through the gateway.
type turn struct {
	gw   *Gateway
	w    http.ResponseWriter
	rc   *http.ResponseController
	r    *http.Request
	ctx  context.Context
	req  *request
	meta guardian.RequestMeta
	st   stepper

	// streaming: the client asked for SSE; started: its headers are written.
	streaming, started bool
	werr               error
	// seq numbers the events the client gets, in order and without gaps, whatever the
	// gateway held back or added.
	seq int64
	// responseID and sessionID are the first upstream response's, kept across approval
	// rounds so the client sees one response.
	responseID string
	round      int
	// msgs are the messages under way (started, not completed); heldBytes is what they
	// cost (ids and the events held back), bounded by MaxEventBytes.
	msgs      map[string]*held
	heldBytes int
	// replace maps an output item's id to what the client gets instead (nil: nothing).
	replace map[string][]byte
	// sent maps the id of a message the client got as the upstream sent it to that message
	// (its sequence_number null, as in an output list). keptBytes is what sent, replace and
	// added keep until the final response, bounded by MaxResponseBytes as a non-streamed
	// answer is.
	sent      map[string][]byte
	keptBytes int64
	// added are messages the gateway put in the output (notices).
	added []json.RawMessage
	// approvals are Vigil's answers to mcp_approval_requests, sent upstream after the
	// response that asked.
	approvals []json.RawMessage
	mayAct    map[string]bool
	// taken are the approval requests the client's input answers, marked answered in the
	// gateway's ledger; made answerable again when the turn does not send the input up.
	taken []approvalKey
	// reasons are, by input index, the reasons the client's mcp_approval_responses give
	// with their answers (readAnswer), for judgeInput; absent for an answer without one.
	reasons map[int][]*string
	// appError: the upstream sent the runtime's application error ({"error": …}), after
	// which its stream may end without a final response.
	appError bool
}

// held is a message the gateway is watching: its events are held back when it must be
// judged before the client sees it.
type held struct {
	typ    string
	buffer bool
	events [][]byte
	// cost is what keeping it under way costs against heldBytes besides its events.
	cost int
}

// openCost is what a message under way costs beyond its id and type (its entry in
// turn.msgs), so that many small ones are bounded as well.
const openCost = 128

func (gw *Gateway) newTurn(w http.ResponseWriter, r *http.Request, req *request, received time.Time) (*turn, error) {
	t := &turn{gw: gw, w: w, rc: http.NewResponseController(w), r: r, ctx: r.Context(), req: req,
		streaming: req.stream, msgs: map[string]*held{}, replace: map[string][]byte{}, sent: map[string][]byte{},
		mayAct: map[string]bool{}}
	t.meta = guardian.RequestMeta{Protocol: guardian.ProtocolAgentAPI, Upstream: gw.cfg.Name, ReceivedAt: received,
		RemoteAddr: r.RemoteAddr}
	agentID := "agentapi:" + gw.cfg.Name
	if gw.keyOf != nil {
		if id, scope, ok := gw.keyOf(r.Context()); ok {
			t.meta.KeyID, t.meta.KeyAgent = id, scope
			if scope != "" {
				agentID = scope // the key says which agent this is
			}
		}
	}
	turnID := newID("turn_")
	session := req.sessionID
	if session == "" {
		// Without a session id the turn is a session of its own.
		session = turnID
	}
	t.st = stepper{session: "agentapi:" + gw.cfg.Name + ":" + session, agentID: agentID, agentName: gw.cfg.Name,
		user: req.userID, turnID: turnID, now: gw.now}
	if reason := aos.CheckID(t.st.session); reason != "" {
		return nil, &fieldError{"session_id", reason}
	}
	if reason := aos.CheckID(req.userID); reason != "" {
		return nil, &fieldError{"user_id", reason}
	}
	if gw.cfg.Approvals == ApprovalsVigil {
		// Vigil answers every approval request itself and the client never sees one, so a
		// client's own answer can only be one Vigil did not decide (a request its hold
		// abandoned, or one the client guessed): it is refused rather than sent up unjudged.
		for i := range req.items {
			if req.items[i].Type == typeMCPApprovalResponse {
				return nil, &fieldError{fmt.Sprintf("input[%d]", i), "an mcp_approval_response is Vigil's to send: with --agentapi-approvals vigil, " +
					"Vigil answers the upstream's approval requests itself (rules and holds decide), so a client does not answer them"}
			}
		}
		return t, nil
	}
	if err := t.admitAnswers(); err != nil {
		return nil, err
	}
	return t, nil
}

// run judges the input, calls the upstream and relays its answer.
func (t *turn) run() {
	body, rejected, ok := t.judgeInput()
	if !ok || rejected {
		if t.taken != nil {
			// The answers never went up: the client may send them again.
			t.restoreAnswers()
		}
		return
	}
	resp, ok := t.post(body)
	if !ok {
		return
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.relayStream(resp)
		return
	}
	t.relayJSON(resp)
}

// fail ends the turn with the protocol's error: an HTTP error before anything was sent, a
// failed response event after.
func (t *turn) fail(status int, code, msg string) {
	if !t.started {
		writeJSON(t.w, status, errorBody(code, msg, t.req.sessionID, t.gw.now()))
		return
	}
	r := responseObject{Object: "response", Status: statusFailed, Error: &apiError{Code: code, Message: msg},
		ID: t.responseID, CreatedAt: t.gw.now().Unix()}
	if r.ID == "" {
		r.ID = newID("response_")
	}
	if t.req.sessionID != "" {
		r.SessionID = &t.req.sessionID
	}
	t.emitNew(&r.Seq, &r)
}

// internal ends the turn after a failure: fail closed. The client is told whose fault it
// is in the product's words; the detail goes to the log.
func (t *turn) internal(err error) {
	var bad *upstreamError
	if errors.As(err, &bad) {
		t.gw.log.Warn("upstream answer refused", "session", t.st.session, "problem", bad.msg, "err", bad.err)
		t.fail(http.StatusBadGateway, codeUpstreamBad, bad.msg)
		return
	}
	var refused *aos.Error
	if errors.As(err, &refused) {
		t.gw.log.Warn("step refused", "session", t.st.session, "message", refused.Message)
		t.fail(http.StatusForbidden, codeForbidden, refused.Message)
		return
	}
	t.gw.log.Error("decide step", "session", t.st.session, "err", err)
	t.fail(http.StatusServiceUnavailable, codeGuardian, "guardian unavailable: the step could not be decided or recorded")
}

// upstreamError is an upstream answer the gateway cannot relay: one it cannot read (so
// cannot judge), or one past a limit. The turn fails closed with UPSTREAM_INVALID_RESPONSE.
type upstreamError struct {
	msg string // what the client is told
	err error  // the detail, for the log
}

func (e *upstreamError) Error() string { return "agentapi: " + e.msg + ": " + e.err.Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// unreadable is an upstream answer the gateway could not read: it cannot be judged, so it
// must not be relayed.
func (t *turn) unreadable(err error) error {
	msg := "the upstream's response could not be read"
	if t.streaming {
		msg = "the upstream sent an event Vigil cannot read"
	}
	return &upstreamError{msg: msg, err: err}
}

// sizeText is a byte limit as people write it.
func sizeText(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// start writes the SSE headers once.
func (t *turn) start(from http.Header) {
	if t.started {
		return
	}
	t.started = true
	h := t.w.Header()
	if from != nil {
		gateway.CopyHeaders(h, from)
	} else {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	}
	t.w.WriteHeader(http.StatusOK)
}

// write sends bytes to the client and flushes them: events are forwarded as they come.
func (t *turn) write(b []byte) {
	if t.werr != nil {
		return
	}
	if _, err := t.w.Write(b); err != nil {
		t.werr = err
		return
	}
	if err := t.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		t.werr = err
	}
}

// emit sends one event, numbered.
func (t *turn) emit(ev []byte, h *head) {
	if len(h.Seq) > 0 && !isNull(h.Seq) {
		ev = setSeq(ev, h, t.seq)
		t.seq++
	}
	t.write(append(append([]byte("data: "), ev...), '\n', '\n'))
}

// emitNew sends an event the gateway made, numbered through seq.
func (t *turn) emitNew(seq **int64, v any) {
	n := t.seq
	t.seq++
	*seq = &n
	b, err := json.Marshal(v)
	if err != nil {
		t.werr = err
		return
	}
	t.write(append(append([]byte("data: "), b...), '\n', '\n'))
}

// decide runs the pipeline for a step, keeping a started stream alive while a hold waits
// (and starting it if the wait is long: the client would otherwise see nothing).
func (t *turn) decide(step *aos.Step, enforceable bool) (guardian.Verdict, error) {
	meta := t.meta
	if !enforceable {
		meta.Enforceable = new(bool)
	}
	if !t.streaming {
		v, _, err := t.gw.dec.DecideStep(t.ctx, step, meta)
		return v, err
	}
	type result struct {
		v   guardian.Verdict
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, _, err := t.gw.dec.DecideStep(t.ctx, step, meta)
		done <- result{v, err}
	}()
	tick := time.NewTicker(t.gw.cfg.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case res := <-done:
			return res.v, res.err
		case <-tick.C:
			t.start(nil)
			t.write([]byte(": keep-alive\n\n"))
		}
	}
}

// judgeInput decides the client's messages before the agent sees them. It returns the body
// to send upstream; rejected when a message was denied (the client has its answer).
func (t *turn) judgeInput() (body []byte, rejected, ok bool) {
	changed := false
	input := append([]json.RawMessage(nil), t.req.input...)
	for i := range t.req.items {
		m := &t.req.items[i]
		var (
			step    *aos.Step
			err     error
			idx     = -1
			reasons []*string
		)
		switch {
		case m.Type == typeMessage && m.Role == "user":
			step, err = t.st.messageStep(m, "user")
		case m.Type == typeMCPApprovalResponse:
			// Only the reason is the client's text: the answer itself was admitted (or
			// refused) by admitAnswers, which read the reasons.
			if reasons = t.reasons[i]; reasons == nil {
				continue
			}
			step, err = t.st.answerStep(m, reasons)
		case m.Type == typeFunctionCallOutput:
			var d callData
			if d, idx, err = callOf(m); err == nil {
				step, err = t.st.outputStep(d)
			}
		default:
			continue
		}
		if err != nil {
			t.internal(err)
			return nil, false, false
		}
		v, err := t.decide(step, true)
		if err != nil {
			t.internal(err)
			return nil, false, false
		}
		if t.werr != nil {
			return nil, false, false
		}
		var nb []byte
		switch {
		case v.Decision == string(aos.Deny) && (m.Type == typeMessage || reasons != nil):
			t.reject(v)
			return nil, true, true
		case v.Decision == string(aos.Deny):
			if idx >= 0 {
				nb, err = rewriteCall(input[i], m, idx, "output", notice(v))
			}
		case v.Decision == string(aos.Modify) && reasons != nil:
			var texts []*string
			if texts, err = modifiedTexts(v.ModifiedParams); err == nil {
				changed := make([]*string, len(reasons))
				for j := range reasons {
					if reasons[j] != nil && j < len(texts) && texts[j] != nil && *texts[j] != *reasons[j] {
						changed[j] = texts[j]
					}
				}
				nb, err = withReasons(input[i], m, changed)
			}
		case v.Decision == string(aos.Modify) && m.Type == typeMessage:
			var texts []*string
			if texts, err = modifiedTexts(v.ModifiedParams); err == nil {
				nb, err = rewriteMessage(input[i], m, texts)
			}
		case v.Decision == string(aos.Modify):
			var out string
			if out, err = modifiedOutput(v.ModifiedParams); err == nil && idx >= 0 {
				nb, err = rewriteCall(input[i], m, idx, "output", out)
			}
		}
		if err != nil {
			t.internal(err)
			return nil, false, false
		}
		if nb != nil {
			input[i], changed = nb, true
		}
	}
	if !changed {
		return t.req.raw, false, true
	}
	in, err := json.Marshal(input)
	if err == nil {
		body, err = setKey(t.req.raw, "input", in)
	}
	if err != nil {
		t.internal(err)
		return nil, false, false
	}
	return body, false, true
}

// reject answers a denied input without calling the upstream: the response completes with
// status rejected and an assistant message carrying the guardian's message.
func (t *turn) reject(v guardian.Verdict) {
	now := t.gw.now().Unix()
	msgText := v.Message
	if msgText == "" {
		msgText = "Denied by policy."
	}
	msgID := newID("msg_")
	part := textContent{Object: "content", Type: "text", MsgID: msgID, Text: msgText}
	pb, _ := json.Marshal(part)
	final := messageObject{Object: "message", Status: statusCompleted, ID: msgID, Type: typeMessage, Role: "assistant",
		Content: []json.RawMessage{pb}}
	fb, _ := json.Marshal(final)
	resp := responseObject{Object: "response", Status: statusRejected, ID: newID("response_"), CreatedAt: now,
		CompletedAt: &now, Output: json.RawMessage("[" + string(fb) + "]")}
	if t.req.sessionID != "" {
		resp.SessionID = &t.req.sessionID
	}
	if !t.streaming {
		b, _ := json.Marshal(resp)
		writeJSON(t.w, http.StatusOK, b)
		return
	}
	t.start(nil)
	start := resp
	start.Status, start.CompletedAt, start.Output = statusCreated, nil, nil
	t.emitNew(&start.Seq, &start)
	start.Status = statusInProgress
	t.emitNew(&start.Seq, &start)
	t.emitMessage(final)
	t.emitNew(&resp.Seq, &resp)
}

// emitMessage sends a message the gateway made: its start, its content, its completion.
func (t *turn) emitMessage(m messageObject) {
	startMsg := m
	startMsg.Status, startMsg.Content = statusInProgress, nil
	t.emitNew(&startMsg.Seq, &startMsg)
	for i, raw := range m.Content {
		var c map[string]json.RawMessage
		if json.Unmarshal(raw, &c) != nil {
			continue
		}
		ev := raw
		for _, kv := range []struct{ k, v string }{{"object", `"content"`}, {"status", `"completed"`},
			{"index", fmt.Sprint(i)}, {"delta", "false"}} {
			ev, _ = setKey(ev, kv.k, []byte(kv.v))
		}
		id, _ := json.Marshal(m.ID)
		ev, _ = setKey(ev, "msg_id", id)
		n := t.seq
		t.seq++
		ev, _ = setKey(ev, "sequence_number", fmt.Append(nil, n))
		t.write(append(append([]byte("data: "), ev...), '\n', '\n'))
	}
	t.emitNew(&m.Seq, &m)
}

// post sends a body to the upstream's /process. A failure before an answer is a 502.
func (t *turn) post(body []byte) (*http.Response, bool) {
	req, err := http.NewRequestWithContext(t.ctx, http.MethodPost, t.gw.endpoint("/process"), bytes.NewReader(body))
	if err != nil {
		t.internal(err)
		return nil, false
	}
	gateway.CopyHeaders(req.Header, t.r.Header)
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := t.gw.client.Do(req)
	if err != nil {
		if t.ctx.Err() == nil {
			t.gw.log.Warn("upstream unreachable", "err", err)
			t.fail(http.StatusBadGateway, codeUpstream, t.gw.unreachable(err))
		}
		return nil, false
	}
	if resp.StatusCode/100 != 2 {
		// The upstream's own refusal, passed on as it is.
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, t.gw.cfg.MaxResponseBytes))
		if t.started {
			t.fail(resp.StatusCode, codeUpstream, fmt.Sprintf("upstream answered %d: %s", resp.StatusCode, bytes.TrimSpace(b)))
			return nil, false
		}
		gateway.CopyHeaders(t.w.Header(), resp.Header)
		t.w.WriteHeader(resp.StatusCode)
		_, _ = t.w.Write(b)
		return nil, false
	}
	return resp, true
}

// followUp is the request answering the upstream's approval requests for the client: the
// original request's settings with the approval responses as input.
func (t *turn) followUp(stream bool) []byte {
	top := make(map[string]json.RawMessage, len(t.req.top))
	for k, v := range t.req.top {
		top[k] = v
	}
	top["input"], _ = json.Marshal(t.approvals)
	top["stream"], _ = json.Marshal(stream)
	t.approvals = nil
	b, _ := json.Marshal(top)
	return b
}

// approvalResponse is the mcp_approval_response answering request id.
func approvalResponse(id string, approve bool, reason string) json.RawMessage {
	data := map[string]any{"approval_request_id": id, "approve": approve, "id": nil, "reason": nil}
	if reason != "" {
		data["reason"] = reason
	}
	b, _ := json.Marshal(map[string]any{"object": "message", "status": statusCreated, "id": newID("msg_"),
		"type": typeMCPApprovalResponse, "role": "user",
		"content": []any{map[string]any{"object": "content", "type": "data", "delta": false, "data": data}}})
	return b
}

// classify says how a message type is judged: which step, whether the gateway can stop it.
func (t *turn) classify(typ string) (kind string, enforceable bool) {
	switch {
	case msgType(typ) == typeMessage:
		// Whatever its role: what the upstream says reaches the client, so it is judged as
		// the agent's.
		return "message", true
	case typ == typeFunctionCall:
		return "call", true
	case typ == typeMCPApprovalRequest:
		return "approval", true
	case typ == typePluginCall || typ == typeMCPCall || typ == typeComponentCall:
		// The upstream runs these itself without asking: Vigil can only record them.
		return "call", false
	case strings.HasSuffix(typ, "_output"):
		return "output", true
	}
	return "", false
}

// buffers says whether a message of this type must be held until complete: when the
// gateway can apply a verdict on it and the guardian could decide anything but allow.
func (t *turn) buffers(typ string) bool {
	kind, enforceable := t.classify(typ)
	if kind == "" || !enforceable {
		return false
	}
	if kind == "approval" && t.gw.cfg.Approvals == ApprovalsVigil {
		return true // the client never sees it
	}
	if v, ok := t.mayAct[kind]; ok {
		return v
	}
	probe := t.st // a copy: probing does not count a step
	var step *aos.Step
	var err error
	switch kind {
	case "message":
		step, err = probe.messageStep(&message{}, "agent")
	case "call", "approval":
		step, err = probe.callStep(callData{Name: "probe"})
	case "output":
		step, err = probe.outputStep(callData{})
	}
	v := err != nil || t.gw.dec.MayAct(step, t.meta)
	t.mayAct[kind] = v
	return v
}

// judged is what the client gets for a complete output message.
type judged struct {
	// out is the message to deliver: raw unchanged, rewritten, or nil (withheld).
	out []byte
	// notice replaces a withheld message, when the client should hear why.
	notice *messageObject
}

// judge decides one complete message (an output item, or a completed message event) and
// returns what the client gets.
func (t *turn) judge(raw []byte) (judged, error) {
	// What is judged must be what the client reads: a message the gateway cannot read
	// exactly is not relayed.
	m, err := readMessage(raw)
	if err != nil {
		return judged{}, t.unreadable(err)
	}
	kind, enforceable := t.classify(m.Type)
	var (
		step *aos.Step
		d    callData
		idx  = -1
	)
	switch kind {
	case "message":
		step, err = t.st.messageStep(&m, "agent")
	case "call", "approval", "output":
		if d, idx, err = callOf(&m); err != nil {
			return judged{}, t.unreadable(err)
		}
		if kind == "output" {
			step, err = t.st.outputStep(d)
		} else {
			step, err = t.st.callStep(d)
		}
	default:
		return judged{out: raw}, nil
	}
	if err != nil {
		return judged{}, err
	}
	v, err := t.decide(step, enforceable)
	if err != nil {
		return judged{}, err
	}
	if !enforceable {
		return judged{out: raw}, nil
	}
	deny, modify := v.Decision == string(aos.Deny), v.Decision == string(aos.Modify)
	switch kind {
	case "message":
		if deny {
			out, err := withNotice(raw, m.ID, notice(v))
			return judged{out: out}, err
		}
		if modify {
			texts, err := modifiedTexts(v.ModifiedParams)
			if err != nil {
				return judged{}, err
			}
			out, err := rewriteMessage(raw, &m, texts)
			return judged{out: out}, err
		}
	case "call":
		if deny {
			// The client never gets a call it must not run; it hears why instead.
			text := "Vigil stopped a call of " + d.Name + ": " + strings.TrimPrefix(notice(v), "Withheld by Vigil: ")
			pb, _ := json.Marshal(textContent{Object: "content", Type: "text", MsgID: "", Text: text})
			n := &messageObject{Object: "message", Status: statusCompleted, ID: newID("msg_"), Type: typeMessage,
				Role: "assistant", Content: []json.RawMessage{pb}}
			return judged{notice: n}, nil
		}
		if modify && idx >= 0 {
			_, wasObject := arguments(d.Arguments)
			args, err := modifiedArguments(v.ModifiedParams, wasObject)
			if err != nil {
				return judged{}, err
			}
			out, err := rewriteCall(raw, &m, idx, "arguments", args)
			return judged{out: out}, err
		}
	case "output":
		if deny && idx >= 0 {
			out, err := rewriteCall(raw, &m, idx, "output", notice(v))
			return judged{out: out}, err
		}
		if modify && idx >= 0 {
			o, err := modifiedOutput(v.ModifiedParams)
			if err != nil {
				return judged{}, err
			}
			out, err := rewriteCall(raw, &m, idx, "output", o)
			return judged{out: out}, err
		}
	case "approval":
		id := d.ID
		if modify {
			// An approval cannot change the call's arguments: fail closed.
			deny = true
			v.Message = "Vigil would change the call's arguments, which an approval cannot do."
		}
		// Remembered before the client can see it: the client may answer it only if allowed.
		t.rememberApproval(id, !deny)
		if t.gw.cfg.Approvals == ApprovalsVigil || deny {
			reason := ""
			if deny {
				reason = v.Message
				if reason == "" {
					reason = "Denied by policy."
				}
			}
			t.approvals = append(t.approvals, approvalResponse(id, !deny, reason))
			return judged{}, nil
		}
		meta, _ := json.Marshal(map[string]any{"vigil": map[string]any{"decision": v.Decision, "message": v.Message, "ruleId": v.RuleID}})
		out, err := setKey(raw, "metadata", meta)
		return judged{out: out}, err
	}
	return judged{out: raw}, nil
}

// relayStream relays the upstream's SSE stream, holding back what must be judged first,
// then answers any approval requests upstream and relays the continuation as part of the
// same response.
func (t *turn) relayStream(resp *http.Response) {
	t.start(resp.Header)
	final, fh, ok := t.readStream(resp.Body)
	resp.Body.Close()
	if !ok {
		return
	}
	if final == nil {
		if t.appError {
			return // the runtime's application error ended the stream: the client has it
		}
		t.internal(&upstreamError{msg: "the upstream's stream ended before its final response", err: io.ErrUnexpectedEOF})
		return
	}
	output, err := t.rewriteOutput(final)
	if err != nil {
		t.internal(err)
		return
	}
	for fh.Status == statusCompleted && len(t.approvals) > 0 && t.round < t.gw.cfg.MaxRounds {
		t.round++
		next, ok := t.post(t.followUp(true))
		if !ok {
			return
		}
		final, fh, ok = t.readStream(next.Body)
		next.Body.Close()
		if !ok {
			return
		}
		if final == nil {
			t.fail(http.StatusBadGateway, codeUpstreamBad, "the upstream ended its answer to an approval without a response")
			return
		}
		more, err := t.rewriteOutput(final)
		if err != nil {
			t.internal(err)
			return
		}
		output = append(output, more...)
	}
	t.emitFinal(final, &fh, output)
}

// emitFinal sends the final response event with the output the client was given.
func (t *turn) emitFinal(final []byte, fh *head, output []json.RawMessage) {
	var err error
	if t.round > 0 && t.responseID != "" {
		id, _ := json.Marshal(t.responseID)
		final, err = setKey(final, "id", id)
	}
	if err == nil && output != nil {
		var ob []byte
		ob, err = json.Marshal(output)
		if err == nil {
			final, err = setKey(final, "output", ob)
		}
	}
	if err != nil {
		t.fail(http.StatusBadGateway, codeUpstreamBad, "the upstream's final response could not be read")
		return
	}
	t.emit(final, fh)
}

// rewriteOutput applies the turn's verdicts to a final response's output list; nil when the
// response has none. An item is what the client was given of that message; an item the
// client was not given as it stands (a message never streamed, or one that differs from
// the message judged) is judged now, as a non-streamed answer's would be.
func (t *turn) rewriteOutput(final []byte) ([]json.RawMessage, error) {
	var r outputList
	if err := decodeExact(final, &r); err != nil {
		return nil, t.unreadable(err)
	}
	out := make([]json.RawMessage, 0, len(r.Output)+len(t.added))
	for _, item := range r.Output {
		var h head
		if err := decodeExact(item, &h); err != nil {
			return nil, t.unreadable(err)
		}
		if rep, ok := t.replace[h.ID]; ok {
			if rep != nil {
				out = append(out, rep)
			}
			continue
		}
		if sent, ok := t.sent[h.ID]; ok && bytes.Equal(outputItem(item), sent) {
			out = append(out, item)
			continue
		}
		j, err := t.judge(item)
		if err != nil {
			return nil, err
		}
		switch {
		case j.out != nil:
			out = append(out, j.out)
		case j.notice != nil:
			t.emitMessage(*j.notice)
			b, _ := json.Marshal(j.notice)
			b, _ = setKey(b, "sequence_number", []byte("null"))
			out = append(out, b)
		}
	}
	out = append(out, t.added...)
	t.added = nil
	if r.Output == nil && len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// outputItem is a message event as an output list carries it: sequence_number null.
func outputItem(ev []byte) []byte {
	if b, err := setKey(ev, "sequence_number", []byte("null")); err == nil {
		return b
	}
	return ev
}

// readStream relays events until the final response event, which it returns unsent. A
// stream that ends without one returns a nil final; one that breaks off, or carries an
// event the gateway cannot read, fails the turn (ok false).
func (t *turn) readStream(body io.Reader) (final []byte, fh head, ok bool) {
	limit := t.gw.cfg.MaxEventBytes
	sc := bufio.NewScanner(body)
	// The buffer starts no larger than the limit: the scanner's bound is the larger of the two.
	sc.Buffer(make([]byte, 0, min(64<<10, limit)), limit)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if data == nil {
				continue
			}
			ev := data
			data = nil
			final, fh, done, err := t.event(ev)
			if err != nil {
				t.internal(err)
				return nil, head{}, false
			}
			if t.werr != nil {
				return nil, head{}, false
			}
			if done {
				return final, fh, true
			}
		case line[0] == ':':
			// The upstream's own comments (keep-alives) pass on.
			t.write(append(append([]byte(nil), line...), '\n', '\n'))
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if data == nil {
				data = append([]byte(nil), v...)
			} else {
				data = append(append(data, '\n'), v...)
			}
		}
	}
	if err := sc.Err(); err != nil {
		if t.ctx.Err() != nil {
			return nil, head{}, false // the client left: nobody to tell
		}
		msg := "the upstream's stream broke off"
		if errors.Is(err, bufio.ErrTooLong) {
			msg = "an upstream event exceeds " + sizeText(limit)
		}
		t.internal(&upstreamError{msg: msg, err: err})
		return nil, head{}, false
	}
	if data != nil {
		// An event is complete only at its blank line (SSE drops what is pending at the
		// end): what is left is part of an event, and nothing of it is relayed.
		t.internal(&upstreamError{msg: "the upstream's stream broke off in the middle of an event", err: io.ErrUnexpectedEOF})
		return nil, head{}, false
	}
	return nil, head{}, true
}

// event routes one upstream event. done reports the final response event, returned unsent.
// An event the gateway cannot read exactly, or cannot place, is an error: it is never
// relayed unjudged.
func (t *turn) event(ev []byte) (final []byte, h head, done bool, err error) {
	if err := decodeExact(ev, &h); err != nil {
		return nil, h, false, t.unreadable(err)
	}
	switch h.Object {
	case "response":
		switch h.Status {
		case statusCreated, statusInProgress:
			if t.round > 0 {
				return nil, h, false, nil // the client's response is already under way
			}
			if t.responseID == "" {
				t.responseID = h.ID
			}
			t.emit(ev, &h)
			return nil, h, false, nil
		}
		return ev, h, true, nil
	case "message":
		if _, err := readMessage(ev); err != nil {
			return nil, h, false, t.unreadable(err)
		}
		m := t.msgs[h.ID]
		if m == nil {
			m = &held{typ: h.Type, cost: len(h.ID) + len(h.Type) + openCost}
			// Kept until its completion, which may never come: the messages under way count
			// against what the turn holds at once, each as long as an event may be.
			t.heldBytes += m.cost
			if t.heldBytes > t.gw.cfg.MaxEventBytes {
				return nil, h, false, &upstreamError{msg: "the upstream's messages under way exceed " + sizeText(t.gw.cfg.MaxEventBytes), err: errTooLarge}
			}
			m.buffer = t.buffers(h.Type)
			t.msgs[h.ID] = m
		} else if msgType(h.Type) != msgType(m.typ) {
			// Started as one type (streamed, or held, as that type's verdicts need), it must
			// not go on as another that is judged otherwise.
			return nil, h, false, t.unreadable(fmt.Errorf("message %q changed its type from %q to %q", h.ID, m.typ, h.Type))
		}
		if h.Status != statusCompleted {
			if m.buffer {
				return nil, h, false, t.hold(m, ev)
			}
			t.emit(ev, &h)
			return nil, h, false, nil
		}
		delete(t.msgs, h.ID)
		t.heldBytes -= m.cost
		return nil, h, false, t.finish(m, ev, &h)
	case "content":
		var c content
		if err := decodeExact(ev, &c); err != nil {
			return nil, h, false, t.unreadable(err)
		}
		m := t.msgs[h.MsgID]
		if m == nil {
			// Content of no message under way: the gateway cannot tell whether its verdict
			// would allow it.
			return nil, h, false, t.unreadable(fmt.Errorf("content of message %q, which is not under way", h.MsgID))
		}
		if m.buffer {
			return nil, h, false, t.hold(m, ev)
		}
		t.emit(ev, &h)
		return nil, h, false, nil
	case "":
		if appError(ev) {
			// The runtime's application error ({"error": "No runner"}) passes on as it is.
			t.appError = true
			t.emit(ev, &h)
			return nil, h, false, nil
		}
	}
	return nil, h, false, t.unreadable(fmt.Errorf("an event of unknown object %q", h.Object))
}

// msgType is a message's type, the runtime's default when it has none.
func msgType(typ string) string {
	if typ == "" {
		return typeMessage
	}
	return typ
}

// appError reports whether b is the runtime's application error: an object without
// "object" whose "error" is set. It carries no agent output.
func appError(b []byte) bool {
	var e appErrorBody
	return decodeExact(b, &e) == nil && e.Object == nil && len(e.Error) > 0 && !isNull(e.Error)
}

var errTooLarge = errors.New("the upstream's answer exceeds a limit of the gateway")

func (t *turn) hold(m *held, ev []byte) error {
	t.heldBytes += len(ev)
	if t.heldBytes > t.gw.cfg.MaxEventBytes {
		return &upstreamError{msg: "the upstream's messages held back for a verdict exceed " + sizeText(t.gw.cfg.MaxEventBytes), err: errTooLarge}
	}
	m.events = append(m.events, ev)
	return nil
}

// remember keeps the message ev the client got as the upstream sent it, to tell the
// final response's output items the client was given from those it must judge.
func (t *turn) remember(id string, ev []byte) error { return t.put(t.sent, id, outputItem(ev)) }

// replaceWith keeps what the client gets in place of the output item id (nil: nothing).
func (t *turn) replaceWith(id string, item []byte) error { return t.put(t.replace, id, item) }

// put stores item under id in m (sent or replace), charging what it adds to what the turn
// keeps.
func (t *turn) put(m map[string][]byte, id string, item []byte) error {
	old, had := m[id]
	n := len(item) - len(old)
	if !had {
		n += len(id)
	}
	if err := t.keep(n); err != nil {
		return err
	}
	m[id] = item
	return nil
}

// keep charges n more bytes kept until the final response to the bound of
// MaxResponseBytes. Whatever the turn keeps counts: the messages sent, the judged messages
// that replace them (a redacted copy of each) and the notices added, or a rule redacting
// every message would keep a copy of each beyond the bound.
func (t *turn) keep(n int) error {
	t.keptBytes += int64(n)
	if t.keptBytes > t.gw.cfg.MaxResponseBytes {
		return &upstreamError{msg: "the upstream's streamed messages exceed " + sizeText(int(t.gw.cfg.MaxResponseBytes)), err: errTooLarge}
	}
	return nil
}

// finish judges a completed message and sends the client what the verdict allows.
func (t *turn) finish(m *held, ev []byte, h *head) error {
	for _, e := range m.events {
		t.heldBytes -= len(e)
	}
	if !m.buffer && m.typ != typeMCPApprovalRequest {
		// Streamed already (nothing could stop it, or nothing would): judged for the record.
		if err := t.remember(h.ID, ev); err != nil {
			return err
		}
		t.emit(ev, h)
		_, err := t.judge(ev)
		return err
	}
	j, err := t.judge(ev)
	if err != nil {
		return err
	}
	switch {
	case j.out == nil:
		if err := t.replaceWith(h.ID, nil); err != nil {
			return err
		}
		if j.notice != nil {
			b, _ := json.Marshal(j.notice)
			b, _ = setKey(b, "sequence_number", []byte("null"))
			if err := t.keep(len(b)); err != nil {
				return err
			}
			t.emitMessage(*j.notice)
			t.added = append(t.added, b)
		}
	case bytes.Equal(j.out, ev) && t.agree(m, ev):
		if err := t.remember(h.ID, ev); err != nil {
			return err
		}
		for _, e := range m.events {
			var eh head
			_ = json.Unmarshal(e, &eh)
			t.emit(e, &eh)
		}
		t.emit(ev, h)
	case !m.buffer:
		// Its start and content went out as they came; only its completion carries more.
		item, _ := setKey(j.out, "sequence_number", []byte("null"))
		if err := t.replaceWith(h.ID, item); err != nil {
			return err
		}
		t.emit(j.out, h)
	default:
		// Changed, or streamed otherwise than judged: the message's start, the judged
		// content whole, its completion.
		item, _ := setKey(j.out, "sequence_number", []byte("null"))
		if err := t.replaceWith(h.ID, item); err != nil {
			return err
		}
		if len(m.events) > 0 {
			var eh head
			_ = json.Unmarshal(m.events[0], &eh)
			if eh.Object == "message" {
				start, _ := setKey(m.events[0], "content", []byte("null"))
				t.emit(start, &eh)
			}
		}
		var nm message
		_ = json.Unmarshal(j.out, &nm)
		for i, c := range nm.Content {
			ce := c
			for _, kv := range []struct{ k, v string }{{"object", `"content"`}, {"status", `"completed"`},
				{"index", fmt.Sprint(i)}, {"delta", "false"}} {
				ce, _ = setKey(ce, kv.k, []byte(kv.v))
			}
			id, _ := json.Marshal(h.ID)
			ce, _ = setKey(ce, "msg_id", id)
			n := t.seq
			t.seq++
			ce, _ = setKey(ce, "sequence_number", fmt.Append(nil, n))
			t.write(append(append([]byte("data: "), ce...), '\n', '\n'))
		}
		t.emit(j.out, h)
	}
	return nil
}

// agree reports whether the events held back for m show the client what the completed
// message ev, which was judged, says; it logs when they do not (the judged message is then
// sent instead of them).
func (t *turn) agree(m *held, ev []byte) bool {
	msg, err := readMessage(ev)
	if err != nil {
		return false
	}
	parts, err := readParts(&msg)
	if err != nil {
		return false
	}
	if agrees(m.events, parts) {
		return true
	}
	t.gw.log.Warn("agentapi: the upstream streamed a message otherwise than it completed it; the client gets the completed message, which was judged",
		"message", msg.ID)
	return false
}

// relayJSON relays a non-streamed response, its output judged item by item.
func (t *turn) relayJSON(resp *http.Response) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, t.gw.cfg.MaxResponseBytes+1))
	resp.Body.Close()
	if err != nil || int64(len(b)) > t.gw.cfg.MaxResponseBytes {
		t.fail(http.StatusBadGateway, codeUpstreamBad, "the upstream's answer could not be read whole")
		return
	}
	var h head
	if err := decodeExact(b, &h); err != nil || h.Object != "response" {
		if err == nil && appError(b) {
			// The runtime's application error: passed on as it is.
			gateway.CopyHeaders(t.w.Header(), resp.Header)
			t.w.WriteHeader(resp.StatusCode)
			_, _ = t.w.Write(b)
			return
		}
		// Anything else cannot be judged, so it is not relayed.
		if err == nil {
			err = fmt.Errorf("object %q, not a response", h.Object)
		}
		t.internal(t.unreadable(err))
		return
	}
	t.responseID = h.ID
	output, ok := t.judgeOutput(b)
	if !ok {
		return
	}
	final := b
	for h.Status == statusCompleted && len(t.approvals) > 0 && t.round < t.gw.cfg.MaxRounds {
		t.round++
		next, ok := t.post(t.followUp(false))
		if !ok {
			return
		}
		nb, err := io.ReadAll(io.LimitReader(next.Body, t.gw.cfg.MaxResponseBytes+1))
		next.Body.Close()
		if err != nil || int64(len(nb)) > t.gw.cfg.MaxResponseBytes || decodeExact(nb, &h) != nil || h.Object != "response" {
			t.fail(http.StatusBadGateway, codeUpstreamBad, "the upstream's answer to an approval could not be read")
			return
		}
		more, ok := t.judgeOutput(nb)
		if !ok {
			return
		}
		output = append(output, more...)
		final = nb
	}
	if t.round > 0 {
		id, _ := json.Marshal(t.responseID)
		final, _ = setKey(final, "id", id)
	}
	if output != nil {
		ob, _ := json.Marshal(output)
		final, _ = setKey(final, "output", ob)
	}
	gateway.CopyHeaders(t.w.Header(), resp.Header)
	t.w.WriteHeader(resp.StatusCode)
	_, _ = t.w.Write(final)
}

// judgeOutput judges each item of a non-streamed response's output.
func (t *turn) judgeOutput(b []byte) ([]json.RawMessage, bool) {
	var r outputList
	if err := decodeExact(b, &r); err != nil {
		t.internal(t.unreadable(err))
		return nil, false
	}
	if r.Output == nil {
		return nil, true
	}
	out := make([]json.RawMessage, 0, len(r.Output))
	for _, item := range r.Output {
		j, err := t.judge(item)
		if err != nil {
			t.internal(err)
			return nil, false
		}
		switch {
		case j.out != nil:
			out = append(out, j.out)
		case j.notice != nil:
			nb, _ := json.Marshal(j.notice)
			out = append(out, nb)
		}
	}
	return out, true
}
