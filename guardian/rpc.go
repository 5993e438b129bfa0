package guardian

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	meta := RequestMeta{SessionHeader: r.Header.Get("X-Vigil-Session"), RemoteAddr: clientAddr(r), ReceivedAt: received}
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
		g.log.Error("aos: decide", "method", step.Method, "err", err)
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
