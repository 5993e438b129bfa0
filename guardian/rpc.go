package guardian

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// handleAOS serves POST /aos: one JSON-RPC request or a batch.
func (g *Guardian) handleAOS(w http.ResponseWriter, r *http.Request) {
	received := g.now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeRPC(w, http.StatusMethodNotAllowed, errorResponse(nil, &aos.Error{
			Code: aos.CodeInvalidRequest, Message: "invalid request: the AOS endpoint accepts POST only"}))
		return
	}
	if herr := g.checkAOSHeaders(r); herr != nil {
		writeRPC(w, herr.status, errorResponse(nil, herr.rpc))
		return
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes), r.ContentLength, g.cfg.MaxBodyBytes)
	// Closed, the body is not drained again when the response is written (net/http
	// discards what a handler left unread, with an allocation and a read even when
	// nothing is left).
	_ = r.Body.Close()
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeRPC(w, http.StatusRequestEntityTooLarge, errorResponse(nil, &aos.Error{
				Code:    aos.CodeRequestTooLarge,
				Message: fmt.Sprintf("request too large: the body exceeds %d bytes", g.cfg.MaxBodyBytes),
				Data:    map[string]any{"limitBytes": g.cfg.MaxBodyBytes}}))
			return
		}
		g.log.Debug("aos: read body", "err", err)
		return
	}
	msgs, batch, perr := aos.SplitBody(body)
	if perr != nil {
		writeRPC(w, http.StatusOK, errorResponse(nil, perr))
		return
	}
	if batch && len(msgs) > g.cfg.MaxBatch {
		writeRPC(w, http.StatusOK, errorResponse(nil, g.batchTooLong(len(msgs))))
		return
	}
	var keyID, keyAgent string
	if g.keyOf != nil {
		keyID, keyAgent, _ = g.keyOf(r.Context())
	}
	// Assigned once: the batch's goroutines then capture a copy rather than move it to the heap.
	meta := RequestMeta{SessionHeader: r.Header.Get("X-Vigil-Session"), RemoteAddr: clientAddr(r), ReceivedAt: received,
		KeyID: keyID, KeyAgent: keyAgent}
	// Checked by checkAOSHeaders: only a well-formed marking gets here.
	meta.Protocol, meta.Upstream, _ = parseGatewayHeader(r.Header.Get(GatewayHeader))
	if !batch {
		resp := g.handleOne(r.Context(), msgs[0], meta)
		if resp == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeRPC(w, http.StatusOK, resp)
		return
	}
	// Batch elements are independent steps: decide them concurrently (a held element must not
	// hold up the others) and answer in request order, leaving out notifications.
	out := make([]json.RawMessage, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = g.handleOne(r.Context(), m, meta)
		}()
	}
	wg.Wait()
	answer, n := joinAnswers(out)
	if n == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeRPC(w, http.StatusOK, answer)
}

// batchTooLong is the error for a batch of n requests, more than Config.MaxBatch.
func (g *Guardian) batchTooLong(n int) *aos.Error {
	return &aos.Error{Code: aos.CodeInvalidRequest,
		Message: fmt.Sprintf("invalid request: a batch may hold at most %d requests, got %d", g.cfg.MaxBatch, n),
		Data:    map[string]any{"field": "batch", "limit": g.cfg.MaxBatch}}
}

// joinAnswers is a batch's answer: the JSON array of the responses in out, in order,
// leaving out the nil ones (notifications); n counts those it holds.
func joinAnswers(out []json.RawMessage) (answer []byte, n int) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for _, o := range out {
		if o == nil {
			continue
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		buf.Write(o)
		n++
	}
	buf.WriteByte(']')
	return buf.Bytes(), n
}

// headerError is a request refused on its headers, before its body is read.
type headerError struct {
	status int
	rpc    *aos.Error
}

func refuseHeader(status, code int, header, reason string) *headerError {
	prefix := "invalid request: "
	if code == aos.CodeInvalidParams {
		prefix = "invalid params: "
	}
	return &headerError{status, &aos.Error{Code: code, Message: prefix + header + " header: " + reason,
		Data: map[string]any{"header": header, "reason": reason}}}
}

// checkAOSHeaders refuses what a web page could make a browser send: a request from a page of
// another origin (403), and a body that is not declared application/json (415). A page may
// post text/plain to any address without asking (no CORS preflight), and in no-cors mode it
// never sees the answer but the step would be stored; agents send no Origin and, as AOS
// requires, application/json. It also checks the X-Vigil-Session header as an id and the
// GatewayHeader's form (400).
func (g *Guardian) checkAOSHeaders(r *http.Request) *headerError {
	if o := r.Header.Get("Origin"); o != "" && !g.sameOrigin(o, r.Host) {
		return refuseHeader(http.StatusForbidden, aos.CodeInvalidRequest, "Origin",
			"requests from web pages of other origins are refused")
	}
	if !jsonContentType(r.Header.Get("Content-Type")) {
		return refuseHeader(http.StatusUnsupportedMediaType, aos.CodeInvalidRequest, "Content-Type",
			"must be application/json")
	}
	if h := r.Header.Get("X-Vigil-Session"); h != "" {
		if reason := aos.CheckSessionID(h); reason != "" {
			return refuseHeader(http.StatusBadRequest, aos.CodeInvalidParams, "X-Vigil-Session", reason)
		}
	}
	if _, _, reason := parseGatewayHeader(r.Header.Get(GatewayHeader)); reason != "" {
		return refuseHeader(http.StatusBadRequest, aos.CodeInvalidParams, GatewayHeader, reason)
	}
	return nil
}

// GatewayHeader marks the steps an out-of-process gateway sends to /aos: "mcp/NAME" from
// vigil mcp wrap, NAME being the wrapped server's name. The guardian records the step as
// having come through that gateway, as it does for the gateways it runs itself (the
// answer's data names the protocol and upstream, the console's "via mcp" chip). It is the
// sender's claim and carries no authority: it changes neither the step's session, agent or
// API key nor what the rules see or how the verdict is applied, and it is honoured only on
// protocols/MCP steps, which are what the gateway sends.
const GatewayHeader = "X-Vigil-Gateway"

// maxUpstreamName bounds a gateway's upstream name, as gateway.ValidName does.
const maxUpstreamName = 64

// parseGatewayHeader reads a GatewayHeader value: "" is no marking; otherwise
// "mcp/NAME" with NAME of letters, digits, '.', '_' or '-' (at most 64), the names
// vigil mcp wrap --name accepts. reason says what is wrong with any other value.
func parseGatewayHeader(h string) (protocol, upstream, reason string) {
	if h == "" {
		return "", "", ""
	}
	p, name, ok := strings.Cut(h, "/")
	if !ok || p != ProtocolMCP {
		return "", "", "want mcp/NAME"
	}
	if name == "" || len(name) > maxUpstreamName {
		return "", "", fmt.Sprintf("the name must have 1 to %d characters", maxUpstreamName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "", "", "the name may hold only letters, digits, '.', '_' and '-'"
		}
	}
	return p, name, ""
}

// sameOrigin reports whether an Origin header names the server itself (the host the request
// was addressed to) or one of Config.AllowedOrigins.
func (g *Guardian) sameOrigin(origin, host string) bool {
	origin = strings.TrimRight(origin, "/")
	if slices.Contains(g.cfg.AllowedOrigins, origin) {
		return true
	}
	scheme, rest, ok := strings.Cut(origin, "://")
	return ok && (scheme == "http" || scheme == "https") && strings.EqualFold(rest, host)
}

// jsonContentType reports whether a Content-Type header declares JSON: application/json,
// with parameters allowed, except a charset other than UTF-8 (the body is read as UTF-8).
func jsonContentType(ct string) bool {
	mt, params, _ := strings.Cut(ct, ";")
	if !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		return false
	}
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, v, _ := strings.Cut(p, "=")
		if strings.EqualFold(strings.TrimSpace(k), "charset") {
			v = strings.Trim(strings.TrimSpace(v), `"`)
			if !strings.EqualFold(v, "utf-8") && !strings.EqualFold(v, "utf8") {
				return false
			}
		}
	}
	return true
}

// handleOne validates and decides one request, returning its response (nil for a
// notification). It never panics on bad input; internal failures answer -32603.
func (g *Guardian) handleOne(ctx context.Context, msg json.RawMessage, meta RequestMeta) (resp json.RawMessage) {
	defer func() {
		if p := recover(); p != nil {
			g.log.Error("aos: panic while handling a request", "panic", p)
			resp = errorResponse(aos.IDOf(msg), &aos.Error{Code: aos.CodeInternalError, Message: "internal error"})
		}
	}()
	step, perr := aos.ParseStep(msg)
	if perr != nil {
		if perr.Code == aos.CodeParseError {
			// Not JSON: no id can be trusted, and even a notification gets the answer.
			return errorResponse(nil, perr)
		}
		id := aos.IDOf(msg)
		if aos.IsNotification(msg) && perr.Code != aos.CodeInvalidRequest {
			// JSON-RPC: no response to a notification, even an invalid one.
			g.log.Info("aos: rejected notification", "code", perr.Code, "message", perr.Message)
			return nil
		}
		return errorResponse(id, perr)
	}
	if g.checkAgent != nil {
		agentID := ""
		if step.Context != nil {
			agentID = step.Context.Agent.ID
		}
		if err := g.checkAgent(ctx, agentID); err != nil {
			g.log.Warn("aos: step refused: the API key is scoped to another agent", "agentId", agentID)
			if step.IsNotification() {
				return nil
			}
			return errorResponse(step.ID, rpcError(err))
		}
	}
	if step.Kind == aos.KindPing {
		resp, err := g.ping(step)
		if err != nil {
			g.log.Error("aos: ping", "err", err)
			return errorResponse(step.ID, rpcError(err))
		}
		return resp
	}
	if meta.Protocol != "" && step.MCP == nil {
		// The gateway marking is for the MCP messages a gateway relays: any other step
		// claiming it is refused rather than recorded as something it is not.
		if step.IsNotification() {
			return nil
		}
		const reason = "only protocols/MCP steps come through the MCP gateway"
		return errorResponse(step.ID, &aos.Error{Code: aos.CodeInvalidParams,
			Message: "invalid params: " + GatewayHeader + " header: " + reason,
			Data:    map[string]any{"header": GatewayHeader, "reason": reason, "method": step.Method}})
	}
	_, rec, err := g.DecideStep(ctx, step, meta)
	if err != nil {
		var refused *aos.Error
		if errors.As(err, &refused) {
			g.log.Warn("aos: step refused", "method", step.Method, "code", refused.Code, "message", refused.Message)
		} else {
			g.log.Error("aos: decide", "method", step.Method, "err", err)
		}
		if step.IsNotification() {
			return nil
		}
		return errorResponse(step.ID, rpcError(err))
	}
	if step.IsNotification() {
		return nil
	}
	// The stored response is the AOS answer: encoded once, by response, for both.
	return rec.Response
}

// rpcError maps a Go error to the JSON-RPC error sent to the agent. Details stay in the log.
func rpcError(err error) *aos.Error {
	var e *aos.Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &aos.Error{Code: aos.CodeUnavailable, Message: "guardian unavailable: the request was cancelled"}
	}
	return &aos.Error{Code: aos.CodeInternalError, Message: "internal error"}
}

func errorResponse(id json.RawMessage, e *aos.Error) json.RawMessage {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, err := aos.Marshal(aos.Response{JSONRPC: "2.0", ID: id, Error: e})
	if err != nil {
		// Only a Data value that cannot be encoded gets here; drop it rather than fail.
		b, _ = aos.Marshal(aos.Response{JSONRPC: "2.0", ID: id, Error: &aos.Error{Code: e.Code, Message: e.Message}})
	}
	return b
}

func writeRPC(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// readBody reads r whole, sized up front from the declared length (bounded by limit, the
// reader's own limit) rather than grown from 512 bytes as io.ReadAll does.
func readBody(r io.Reader, declared, limit int64) ([]byte, error) {
	if declared <= 0 || declared > limit {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, declared+1) // +1: EOF is seen without growing
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			rest, err := io.ReadAll(r) // longer than declared: let the limit reader decide
			return append(buf, rest...), err
		}
	}
}

// ping answers an AOS ping; nil for a notification. Pings are not steps: not stored.
func (g *Guardian) ping(step *aos.Step) (json.RawMessage, error) {
	if step.IsNotification() {
		return nil, nil
	}
	res := aos.PingResult{Status: "connected", Version: g.cfg.Version, Timestamp: g.now().UTC().Format(time.RFC3339Nano)}
	b, err := aos.Marshal(aos.Response{JSONRPC: "2.0", ID: step.ID, Result: res})
	if err != nil {
		return nil, fmt.Errorf("encode ping: %w", err)
	}
	return b, nil
}

// response builds the JSON-RPC answer for a decided step; nil for a notification. It is the
// AOS endpoint's answer and, for every step, the stored record of its verdict. A step that
// came through a gateway names its protocol and upstream in the result's data, and
// "enforced": false when the gateway could not apply the verdict.
func (g *Guardian) response(step *aos.Step, v Verdict, meta *RequestMeta) (json.RawMessage, error) {
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
	if meta.gateway() {
		if res.Data == nil {
			res.Data = make(map[string]any, 3)
		}
		res.Data["protocol"] = meta.Protocol
		if meta.Upstream != "" {
			res.Data["upstream"] = meta.Upstream
		}
		if !meta.enforceable() {
			res.Data["enforced"] = false
		}
	}
	if v.Decision == string(aos.Modify) {
		res.ModifiedRequest = v.ModifiedRequest
	}
	if res.Message == "" {
		res.Message = defaultMessage(res.Decision)
	}
	if b, ok := appendResult(nil, step.ID, res); ok {
		return b, nil
	}
	b, err := aos.Marshal(aos.Response{JSONRPC: "2.0", ID: step.ID, Result: res})
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return b, nil
}

// appendResult appends the response carrying res, byte for byte as encoding/json writes
// it, for the usual answer: an id json.Marshal would copy unchanged, no modified request, at
// most a ruleId in data. It reports false for anything else, which aos.Marshal encodes.
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
	b = record.AppendJSONString(b, string(res.Decision))
	if res.Reasoning != "" {
		b = append(b, `,"reasoning":`...)
		b = record.AppendJSONString(b, res.Reasoning)
	}
	if len(res.ReasonCode) > 0 {
		b = append(b, `,"reasonCode":[`...)
		for i, c := range res.ReasonCode {
			if i > 0 {
				b = append(b, ',')
			}
			b = record.AppendJSONString(b, c)
		}
		b = append(b, ']')
	}
	b = append(b, `,"message":`...)
	b = record.AppendJSONString(b, res.Message)
	if hasRule {
		b = append(b, `,"data":{"ruleId":`...)
		b = record.AppendJSONString(b, ruleID)
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
