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

	"github.com/vigil-guardian/vigil/guardian/aos"
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
		writeRPC(w, http.StatusOK, errorResponse(nil, &aos.Error{
			Code:    aos.CodeInvalidRequest,
			Message: fmt.Sprintf("invalid request: a batch may hold at most %d requests, got %d", g.cfg.MaxBatch, len(msgs)),
			Data:    map[string]any{"field": "batch", "limit": g.cfg.MaxBatch}}))
		return
	}
	var keyID, keyAgent string
	if g.keyOf != nil {
		keyID, keyAgent, _ = g.keyOf(r.Context())
	}
	// Assigned once: the batch's goroutines then capture a copy rather than move it to the heap.
	meta := RequestMeta{SessionHeader: r.Header.Get("X-Vigil-Session"), RemoteAddr: clientAddr(r), ReceivedAt: received,
		KeyID: keyID, KeyAgent: keyAgent}
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
	var buf bytes.Buffer
	buf.WriteByte('[')
	n := 0
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
	if n == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeRPC(w, http.StatusOK, buf.Bytes())
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
// requires, application/json. It also checks the X-Vigil-Session header as an id (400).
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
		if reason := aos.CheckID(h); reason != "" {
			return refuseHeader(http.StatusBadRequest, aos.CodeInvalidParams, "X-Vigil-Session", reason)
		}
	}
	return nil
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
	out, err := g.Decide(ctx, step, meta)
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
	return out.Response
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
	b, err := json.Marshal(aos.Response{JSONRPC: "2.0", ID: id, Error: e})
	if err != nil {
		// Only a Data value that cannot be encoded gets here; drop it rather than fail.
		b, _ = json.Marshal(aos.Response{JSONRPC: "2.0", ID: id, Error: &aos.Error{Code: e.Code, Message: e.Message}})
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
