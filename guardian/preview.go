package guardian

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// PreviewPath is the AOS dry run: what the rules would decide for one step now, with
// nothing stored, held or published. A gateway out of process (vigil mcp wrap) asks it to
// hide from a tools/list answer the tools a rule denies outright, as the in-process MCP
// gateway does with Preview. Authentication treats it exactly as /aos (auth.Wrap).
const PreviewPath = "/aos/preview"

// maxPreviewBytes bounds a preview request: it carries a tool call without arguments and
// the tool's definition, never a result, so it needs far less than a step's bound.
const maxPreviewBytes = 1 << 20

// handlePreview serves POST /aos/preview: one AOS JSON-RPC request (not a notification),
// or a batch of them answered in order (at most Config.MaxBatch), each answered with an AOS
// result whose decision may also be "hold" (a preview never waits) and whose data carries
// "preview": true, the deciding "ruleId" and every "matchedRules" entry (rule errors
// included), so a caller can tell a clean deny from a rule that failed to evaluate. The
// step must be one its sender could send to /aos: the same header checks, agent scope and
// session ownership apply.
func (g *Guardian) handlePreview(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeRPC(w, http.StatusMethodNotAllowed, errorResponse(nil, &aos.Error{
			Code: aos.CodeInvalidRequest, Message: "invalid request: the preview endpoint accepts POST only"}))
		return
	}
	if herr := g.checkAOSHeaders(r); herr != nil {
		writeRPC(w, herr.status, errorResponse(nil, herr.rpc))
		return
	}
	limit := min(g.cfg.MaxBodyBytes, maxPreviewBytes)
	body, err := readBody(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	_ = r.Body.Close()
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeRPC(w, http.StatusRequestEntityTooLarge, errorResponse(nil, &aos.Error{
				Code:    aos.CodeRequestTooLarge,
				Message: fmt.Sprintf("request too large: a preview is at most %d bytes", limit),
				Data:    map[string]any{"limitBytes": limit}}))
			return
		}
		g.log.Debug("aos preview: read body", "err", err)
		return
	}
	msgs, batch, perr := aos.SplitBody(body)
	if perr != nil {
		writeRPC(w, http.StatusOK, errorResponse(nil, perr))
		return
	}
	if !batch {
		writeRPC(w, http.StatusOK, g.previewOne(r, msgs[0]))
		return
	}
	if len(msgs) > g.cfg.MaxBatch {
		writeRPC(w, http.StatusOK, errorResponse(nil, g.batchTooLong(len(msgs))))
		return
	}
	// A batch is one question per element, answered in order: a gateway asks about every
	// tool of a tools/list answer at once, in one request against its rate limit.
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		out[i] = g.previewOne(r, m)
	}
	answer, _ := joinAnswers(out)
	writeRPC(w, http.StatusOK, answer)
}

// previewOne answers one request of a preview: the JSON-RPC response, a result or an error.
func (g *Guardian) previewOne(r *http.Request, msg json.RawMessage) json.RawMessage {
	step, perr := aos.ParseStep(msg)
	if perr != nil {
		return errorResponse(aos.IDOf(msg), perr)
	}
	if step.IsNotification() || step.Kind == aos.KindPing {
		return errorResponse(step.ID, &aos.Error{Code: aos.CodeInvalidRequest,
			Message: "invalid request: a preview needs a step with an id (not a notification, not ping)",
			Data:    map[string]any{"field": "id"}})
	}
	agentID := ""
	if step.Context != nil {
		agentID = step.Context.Agent.ID
	}
	if g.checkAgent != nil {
		if err := g.checkAgent(r.Context(), agentID); err != nil {
			return errorResponse(step.ID, rpcError(err))
		}
	}
	var keyID, keyAgent string
	if g.keyOf != nil {
		keyID, keyAgent, _ = g.keyOf(r.Context())
	}
	meta := RequestMeta{SessionHeader: r.Header.Get("X-Vigil-Session"), RemoteAddr: clientAddr(r),
		ReceivedAt: g.now(), KeyID: keyID, KeyAgent: keyAgent}
	// The rules see the session's history: a preview may not look into a session its
	// sender could not add a step to. Unlike a step it claims no owner.
	sessionID, from := sessionOf(step, meta)
	hist := g.sessions.get(r.Context(), sessionID)
	refused := hist.mayJoin(agentID, keyID, keyAgent)
	g.sessions.release(hist)
	if refused != "" {
		return errorResponse(step.ID, ownerError(sessionID, from, refused))
	}
	v := g.Preview(r.Context(), step, meta)
	matches := v.Matches
	if matches == nil {
		matches = []record.RuleMatch{}
	}
	res := aos.Result{Decision: aos.Decision(v.Decision), Reasoning: v.Reasoning, ReasonCode: v.ReasonCodes,
		Message: v.Message, Data: map[string]any{"preview": true, "matchedRules": matches}}
	if v.RuleID != "" {
		res.Data["ruleId"] = v.RuleID
	}
	if res.Message == "" {
		res.Message = defaultMessage(res.Decision)
	}
	b, err := aos.Marshal(aos.Response{JSONRPC: "2.0", ID: step.ID, Result: res})
	if err != nil {
		g.log.Error("aos preview: encode", "err", err)
		return errorResponse(step.ID, &aos.Error{Code: aos.CodeInternalError, Message: "internal error"})
	}
	return b
}
