package mcp

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-guardian/vigil/gateway"
	"github.com/vigil-guardian/vigil/guardian"
)

// Config is one upstream MCP server reached over Streamable HTTP.
type Config struct {
	// Name is the upstream's name in the route /mcp/NAME and in sessions.
	Name string
	// URL is the server's MCP endpoint (e.g. http://127.0.0.1:3001/mcp).
	URL string
	// MaxBodyBytes bounds a client's message (default 10 MiB).
	MaxBodyBytes int64
	// MaxMessageBytes bounds one message from the server, JSON answer or SSE event
	// (default 64 MiB).
	MaxMessageBytes int
	// MaxSessions bounds the MCP sessions the proxy keeps state for (default 1024); the
	// least recently used is forgotten first. A session is kept only once the server
	// accepted its id.
	MaxSessions int
	// MaxReplies bounds Vigil's own answers to the server's refused requests that are on
	// their way to the server at once (default 64); past it an answer is dropped, and
	// logged.
	MaxReplies int
	// ProgressEvery is how often a held tools/call gets a progress notification (10s).
	ProgressEvery time.Duration
	// ShowDenied keeps in tools/list answers the tools a rule denies outright (by default
	// they are hidden, so the model never tries them).
	ShowDenied bool
}

// Options are the gateway's collaborators.
type Options struct {
	Decider Decider
	// Client calls the upstream; nil uses a transport without an overall timeout (SSE
	// streams last as long as the session).
	Client *http.Client
	Logger *slog.Logger
	// Wrap guards the route (team mode: auth.GatewayMiddleware); nil serves it open.
	Wrap func(http.Handler) http.Handler
	// KeyOf returns the API key the request authenticated with (auth.KeyOf).
	KeyOf func(ctx context.Context) (id, agentID string, ok bool)
}

// Gateway serves /mcp/NAME for one upstream.
type Gateway struct {
	cfg    Config
	dec    Decider
	client *http.Client
	log    *slog.Logger
	wrap   func(http.Handler) http.Handler
	keyOf  func(ctx context.Context) (id, agentID string, ok bool)

	mu       sync.Mutex
	sessions map[string]*list.Element // of *sessionEntry, by MCP session id
	lru      *list.List               // most recently used first

	// replies holds a slot per answer to the server in flight (replyUpstream); dropped
	// counts the answers dropped for want of one.
	replies chan struct{}
	dropped atomic.Int64
}

type sessionEntry struct {
	sid string
	s   *Session
}

// New builds a gateway.
func New(cfg Config, opts Options) (*Gateway, error) {
	if opts.Decider == nil {
		return nil, errors.New("mcp: a decider is required")
	}
	if _, _, err := gateway.ParseUpstream(cfg.Name + "=" + cfg.URL); err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 64 << 20
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 1024
	}
	if cfg.MaxReplies <= 0 {
		cfg.MaxReplies = 64
	}
	gw := &Gateway{cfg: cfg, dec: opts.Decider, client: opts.Client, log: opts.Logger, wrap: opts.Wrap,
		keyOf: opts.KeyOf, sessions: map[string]*list.Element{}, lru: list.New(),
		replies: make(chan struct{}, cfg.MaxReplies)}
	if gw.client == nil {
		gw.client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
	}
	if gw.log == nil {
		gw.log = slog.New(slog.DiscardHandler)
	}
	gw.log = gw.log.With("gateway", "mcp", "upstream", cfg.Name)
	return gw, nil
}

// Name is the upstream's name.
func (gw *Gateway) Name() string { return gw.cfg.Name }

// Register adds the gateway's route to mux.
func (gw *Gateway) Register(mux *http.ServeMux) {
	wrap := gw.wrap
	if wrap == nil {
		wrap = func(h http.Handler) http.Handler { return h }
	}
	mux.Handle("/mcp/"+gw.cfg.Name, wrap(http.HandlerFunc(gw.serve)))
}

// Refuse writes a refusal of the auth middleware as a JSON-RPC error.
func Refuse(w http.ResponseWriter, status int, message string, _ time.Duration) {
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(status)
	_, _ = w.Write(errorResponse(nil, -32000, message))
}

const sessionHeader = "Mcp-Session-Id"

func (gw *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	w = gateway.TimedWriter(w, r)
	switch r.Method {
	case http.MethodPost:
		gw.post(w, r)
	case http.MethodGet:
		gw.get(w, r)
	case http.MethodDelete:
		gw.delete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// session returns the state of the MCP session a request names. A session id the gateway
// does not know (none: initialize) gets fresh state, kept only once the server accepts the
// session (accepted): a client that makes ids up must not push out the state of the
// sessions the server runs (the tool definitions rules read, the requests in flight).
func (gw *Gateway) session(r *http.Request) *Session {
	sid := r.Header.Get(sessionHeader)
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if e, ok := gw.sessions[sid]; ok && sid != "" {
		gw.lru.MoveToFront(e)
		return e.Value.(*sessionEntry).s
	}
	return gw.newSession(r)
}

func (gw *Gateway) newSession(r *http.Request) *Session {
	keyID, keyAgent := "", ""
	if gw.keyOf != nil {
		keyID, keyAgent, _ = gw.keyOf(r.Context())
	}
	meta := guardian.RequestMeta{RemoteAddr: r.RemoteAddr, KeyID: keyID, KeyAgent: keyAgent,
		Protocol: guardian.ProtocolMCP, Upstream: gw.cfg.Name}
	id := ""
	if sid := r.Header.Get(sessionHeader); sid != "" {
		id = vigilSession(gw.cfg.Name, sid)
	}
	metaNow := func() guardian.RequestMeta {
		m := meta
		m.ReceivedAt = time.Now()
		return m
	}
	cfg := SessionConfig{ID: id, Upstream: gw.cfg.Name, ProgressEvery: gw.cfg.ProgressEvery,
		Judge: InProcess(gw.dec, metaNow), Logger: gw.log}
	if p, ok := gw.dec.(Previewer); ok && !gw.cfg.ShowDenied {
		cfg.Hides = HidesInProcess(p, metaNow)
	}
	return NewSession(cfg)
}

func vigilSession(upstream, sid string) string {
	id := "mcp-" + upstream + "-" + sid
	if len(id) > 200 {
		id = id[:200]
	}
	return id
}

// accepted keeps s as the state of the session the server's answer resp names (without a
// session id of its own, the one the request named, reqSID), when the server accepted the
// request (2xx): its state is then worth keeping. Beyond MaxSessions the least recently
// used session is forgotten.
func (gw *Gateway) accepted(s *Session, reqSID string, resp *http.Response) {
	if !success(resp.StatusCode) {
		return
	}
	sid := resp.Header.Get(sessionHeader)
	if sid == "" {
		sid = reqSID
	}
	if sid == "" {
		return // a server without sessions: nothing outlives the request
	}
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if e, ok := gw.sessions[sid]; ok {
		gw.lru.MoveToFront(e)
		return
	}
	s.SetID(vigilSession(gw.cfg.Name, sid))
	gw.sessions[sid] = gw.lru.PushFront(&sessionEntry{sid: sid, s: s})
	for gw.lru.Len() > gw.cfg.MaxSessions {
		old := gw.lru.Back()
		gw.lru.Remove(old)
		delete(gw.sessions, old.Value.(*sessionEntry).sid)
	}
}

func (gw *Gateway) forget(sid string) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if e, ok := gw.sessions[sid]; ok {
		gw.lru.Remove(e)
		delete(gw.sessions, sid)
	}
}

// upstream sends a request to the server with the client's headers.
func (gw *Gateway) upstream(ctx context.Context, method string, in http.Header, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, gw.cfg.URL, rd)
	if err != nil {
		return nil, err
	}
	gateway.CopyHeaders(req.Header, in)
	return gw.client.Do(req)
}

// codeUpstream is the JSON-RPC error code of a request whose answer Vigil cannot give:
// the server is unreachable, or its answer cannot be judged.
const codeUpstream = -32000

func (gw *Gateway) unreachable(w http.ResponseWriter, id json.RawMessage, err error) {
	u, _ := url.Parse(gw.cfg.URL)
	u.User = nil
	gw.log.Warn("upstream unreachable", "err", err)
	gw.fault(w, id, fmt.Sprintf("MCP server %q (%s) is unreachable", gw.cfg.Name, u))
}

// fault answers the request id (null when there is none, or a batch) with a JSON-RPC error
// in place of what the server answered: the answer is Vigil's, so none of the server's
// headers go with it.
func (gw *Gateway) fault(w http.ResponseWriter, id json.RawMessage, msg string) {
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(http.StatusBadGateway)
	_, _ = w.Write(errorResponse(id, codeUpstream, msg))
}

// Media types of MCP over HTTP.
const (
	mediaJSON = "application/json"
	mediaSSE  = "text/event-stream"
)

// mediaType is the media type of h's Content-Type as MCP clients read it: lower case, its
// parameters dropped (a malformed parameter too, as the TypeScript SDK and browsers
// allow). It is "" when there is none or it is ambiguous (two Content-Type headers, or
// values joined with a comma), which no client reads as either MCP type. Comparing the raw
// header instead once let "Application/JSON" answers, which clients accept, pass unjudged.
func mediaType(h http.Header) string {
	vs := h.Values("Content-Type")
	if len(vs) != 1 {
		return ""
	}
	mt, _, err := mime.ParseMediaType(vs[0])
	if err != nil && (!errors.Is(err, mime.ErrInvalidMediaParameter) || strings.Contains(vs[0], ",")) {
		return ""
	}
	return mt
}

// accepts reports whether an Accept header lists the media type mt.
func accepts(h http.Header, mt string) bool {
	for _, v := range h.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			if t, _, err := mime.ParseMediaType(part); (err == nil || errors.Is(err, mime.ErrInvalidMediaParameter)) && t == mt {
				return true
			}
		}
	}
	return false
}

func success(status int) bool { return status >= 200 && status < 300 }

// awaitedID is the id of the request in a client's message, whose answer the client reads
// from the HTTP answer; nil when it holds none (notifications and responses are answered
// 202, without a body). A batch never gets here: the session refuses every one.
func awaitedID(body []byte) json.RawMessage {
	if m, ok := parse(body); ok && m.isRequest() {
		return m.ID
	}
	return nil
}

// post relays one message from the client.
func (gw *Gateway) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, gw.cfg.MaxBodyBytes))
	if err != nil {
		w.Header().Set("Content-Type", mediaJSON)
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = w.Write(errorResponse(nil, -32600, fmt.Sprintf("the message exceeds %d bytes", gw.cfg.MaxBodyBytes)))
		return
	}
	s := gw.session(r)
	// A call may wait for a reviewer.
	done := guardian.LongWait(r.Context())
	defer done()

	// A held call that asked for progress is answered as an event stream at once, so the
	// progress notifications reach the client while it waits.
	var sse *sseWriter
	if s.MayBlock(body, true) && accepts(r.Header, mediaSSE) && hasProgressToken(body) {
		sse = newSSEWriter(w)
	}
	notify := func([]byte) {}
	if sse != nil {
		notify = func(b []byte) { sse.event(b) }
	}
	act := s.FromClient(r.Context(), body, notify)
	if act.Forward == nil {
		if sse != nil {
			sse.event(act.Reply)
			return
		}
		w.Header().Set("Content-Type", mediaJSON)
		if sid := r.Header.Get(sessionHeader); sid != "" {
			w.Header().Set(sessionHeader, sid)
		}
		if act.Invalid {
			// A message Vigil cannot read (or a batch it does not relay), as servers answer one.
			w.WriteHeader(http.StatusBadRequest)
		}
		_, _ = w.Write(act.Reply)
		return
	}
	// id is the request the client awaits: Vigil's own errors name it (null for none).
	id := awaitedID(act.Forward)
	awaited := id != nil
	// settled ends the request's time in flight when this exchange is its last chance of an
	// answer: the server could not be reached, refused it with an HTTP error, or answered
	// in anything but an event stream (which a client may resume later, the answer still
	// to come). Each caller settles before the client reads anything, so a client cannot
	// have sent the id again (in breach of the protocol) by then. Without it, every such
	// request stayed in flight for good, and MaxPending of them refused every call.
	settled := func() {
		if awaited {
			s.forget(id)
		}
	}
	resp, err := gw.upstream(r.Context(), http.MethodPost, r.Header, act.Forward)
	if err != nil {
		settled()
		if sse != nil {
			gw.log.Warn("upstream unreachable", "err", err)
			sse.event(errorResponse(id, codeUpstream, "the MCP server is unreachable"))
			return
		}
		gw.unreachable(w, id, err)
		return
	}
	defer resp.Body.Close()
	gw.accepted(s, r.Header.Get(sessionHeader), resp)
	if sse != nil {
		gw.relayInto(r.Context(), sse, s, resp, r.Header, id, settled)
		return
	}
	// An answer reaches the client only as Vigil read it: media types are compared as
	// clients compare them, any 2xx status counts (it does for them), and the answer to a
	// request that Vigil cannot read fails closed.
	mt := mediaType(resp.Header)
	switch {
	case !success(resp.StatusCode), !awaited && mt != mediaSSE && mt != mediaJSON:
		// An HTTP error, which clients report as one, or the answer to a notification or a
		// response, of which they read only the status.
		settled()
		gateway.CopyHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	case mt == mediaSSE:
		gateway.CopyHeaders(w.Header(), resp.Header)
		// The client reads the stream as Vigil does, whatever the server's spelling.
		w.Header().Set("Content-Type", mediaSSE)
		w.WriteHeader(resp.StatusCode)
		gw.relaySSE(r.Context(), newSSEWriterStarted(w), s, resp.Body, r.Header, id, settled)
	case mt == mediaJSON && !awaited:
		// The answer to a notification or a response, of which clients read only the status
		// (some servers send 200 with {} or nothing instead of 202): the status passes,
		// without the body, which Vigil does not judge.
		settled()
		gateway.CopyHeaders(w.Header(), resp.Header)
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
	case mt == mediaJSON:
		b, msg := gw.readAnswer(resp)
		if msg != "" {
			settled()
			gw.fault(w, id, msg)
			return
		}
		// Judged first: the answer in it must find its request in flight.
		out := gw.judgeJSON(r.Context(), s, r.Header, b)
		settled()
		if out == nil {
			// Nothing Vigil could relay (an answer it cannot read, or to no request in flight).
			gw.fault(w, id, errUnjudgedAnswer)
			return
		}
		gateway.CopyHeaders(w.Header(), resp.Header)
		w.Header().Set("Content-Type", mediaJSON)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	default:
		gw.log.Warn("server answer of a type Vigil cannot read; failing closed",
			"status", resp.StatusCode, "contentType", resp.Header.Values("Content-Type"))
		settled()
		gw.fault(w, id, errNotMCPType)
	}
}

// judgeJSON judges a JSON answer and returns what the client gets (nil: nothing). An array
// is judged message by message, since the TypeScript SDK reads each response in one as
// if it came alone.
func (gw *Gateway) judgeJSON(ctx context.Context, s *Session, in http.Header, b []byte) []byte {
	var batch []json.RawMessage
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '[' || json.Unmarshal(t, &batch) != nil {
		a := s.FromServer(ctx, b)
		gw.replyUpstream(s, in, a.Reply)
		return a.Forward
	}
	out := make([]json.RawMessage, 0, len(batch))
	changed := false
	for _, m := range batch {
		a := s.FromServer(ctx, m)
		gw.replyUpstream(s, in, a.Reply)
		changed = changed || a.Changed || a.Forward == nil
		if a.Forward != nil {
			out = append(out, a.Forward)
		}
	}
	if !changed {
		return b
	}
	nb, err := json.Marshal(out)
	if err != nil {
		// Only a verdict's own message could be invalid JSON: nothing unjudged goes out.
		gw.log.Warn("encode a judged batch", "err", err)
		return nil
	}
	return nb
}

// errUnjudgedAnswer is the client's error for a JSON answer that Vigil dropped (see
// Session.admitServer).
const errUnjudgedAnswer = "the MCP server's answer is not one Vigil can read as the answer to this request; Vigil cannot judge it"

// errNotMCPType is the client's error for an answer in a media type Vigil cannot judge.
const errNotMCPType = "the MCP server's answer is neither JSON nor an event stream; Vigil cannot judge it"

// readAnswer reads a JSON answer within the bound; msg, when not "", is the client's error
// in its place (the details go to the log).
func (gw *Gateway) readAnswer(resp *http.Response) (b []byte, msg string) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(gw.cfg.MaxMessageBytes)+1))
	switch {
	case err != nil:
		gw.log.Warn("server answer unreadable", "err", err)
		return nil, "the MCP server's answer could not be read"
	case len(b) > gw.cfg.MaxMessageBytes:
		gw.log.Warn("server answer too large", "limit", gw.cfg.MaxMessageBytes)
		return nil, gw.tooLarge()
	}
	return b, ""
}

func (gw *Gateway) tooLarge() string {
	return fmt.Sprintf("the MCP server's answer is too large for Vigil to judge (over %d bytes)", gw.cfg.MaxMessageBytes)
}

// relayInto writes the server's answer to the request id into an event stream already
// started (its status is sent): whatever cannot be judged becomes an error event for id.
// settled ends the request's time in flight (see post).
func (gw *Gateway) relayInto(ctx context.Context, sse *sseWriter, s *Session, resp *http.Response, in http.Header, id json.RawMessage, settled func()) {
	mt := mediaType(resp.Header)
	switch {
	case !success(resp.StatusCode):
		gw.log.Warn("server answered with an error", "status", resp.StatusCode)
		settled()
		sse.event(errorResponse(id, codeUpstream, fmt.Sprintf("the MCP server answered HTTP %d", resp.StatusCode)))
	case mt == mediaSSE:
		gw.relaySSE(ctx, sse, s, resp.Body, in, id, settled)
	case mt == mediaJSON:
		b, msg := gw.readAnswer(resp)
		if msg != "" {
			settled()
			sse.event(errorResponse(id, codeUpstream, msg))
			return
		}
		out := gw.judgeJSON(ctx, s, in, b)
		settled()
		if out == nil {
			out = errorResponse(id, codeUpstream, errUnjudgedAnswer)
		}
		sse.event(out)
	default:
		gw.log.Warn("server answer of a type Vigil cannot read; failing closed",
			"status", resp.StatusCode, "contentType", resp.Header.Values("Content-Type"))
		settled()
		sse.event(errorResponse(id, codeUpstream, errNotMCPType))
	}
}

// replyUpstream sends the server Vigil's own answer to one of its requests (a refused
// sampling or elicitation request). Each answer is a request to the server of up to a
// minute, on its own goroutine so the stream goes on meanwhile; a server that streams
// requests faster than it takes the answers would otherwise have the gateway hold a
// goroutine and a connection per request. At most MaxReplies are in flight at once; past
// them the answer is dropped and logged: the server's request stays unanswered (it was
// refused: nothing reached the client) until the server's own timeout.
func (gw *Gateway) replyUpstream(_ *Session, in http.Header, reply []byte) {
	if reply == nil {
		return
	}
	select {
	case gw.replies <- struct{}{}:
	default:
		// Logged once in a while, not once each: the server decides how many there are.
		if n := gw.dropped.Add(1); n&(n-1) == 0 {
			gw.log.Warn("too many answers to the MCP server's requests in flight; dropping them",
				"limit", cap(gw.replies), "dropped", n)
		}
		return
	}
	h := http.Header{}
	for _, k := range []string{sessionHeader, "Mcp-Protocol-Version", "Authorization"} {
		if v := in.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	go func() {
		defer func() { <-gw.replies }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := gw.upstream(ctx, http.MethodPost, h, reply)
		if err != nil {
			gw.log.Warn("answer the server's request", "err", err)
			return
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}()
}

// relaySSE relays an event stream from the server, judging each message. Events that no
// verdict changes pass byte for byte. id is the request the stream answers (nil for the GET
// stream): an event over the bound ends the stream, and the request, when still without
// its answer, gets an error for it rather than wait for one that cannot come (settled then
// ends its time in flight; nil for the GET stream). A client that stops reading ends the
// relay at its first write past the write deadline, and with it the server's stream.
func (gw *Gateway) relaySSE(ctx context.Context, sse *sseWriter, s *Session, body io.Reader, in http.Header, id json.RawMessage, settled func()) {
	br := bufio.NewReaderSize(body, 64<<10)
	answered := id == nil
	for {
		if err := sse.failed(); err != nil {
			gw.log.Debug("the client stopped reading the event stream", "err", err)
			return
		}
		ev, err := readEvent(br, gw.cfg.MaxMessageBytes)
		if len(ev.raw) > 0 {
			if len(ev.data) == 0 {
				sse.raw(ev.raw)
			} else {
				a := s.FromServer(ctx, ev.data)
				if !answered && a.Answers != nil && idKey(a.Answers) == idKey(id) {
					answered = true
				}
				gw.replyUpstream(s, in, a.Reply)
				switch {
				case a.Forward == nil:
				case !a.Changed:
					sse.raw(ev.raw)
				default:
					sse.raw(ev.with(a.Forward))
				}
			}
		}
		if err != nil {
			switch {
			case errors.Is(err, errEventTooLarge):
				gw.log.Warn("server event too large", "limit", gw.cfg.MaxMessageBytes)
				if !answered {
					settled()
					sse.event(errorResponse(id, codeUpstream, gw.tooLarge()))
				}
			case !errors.Is(err, io.EOF) && ctx.Err() == nil:
				gw.log.Debug("event stream ended", "err", err)
			}
			return
		}
	}
}

// get relays the server's event stream for server-initiated messages.
func (gw *Gateway) get(w http.ResponseWriter, r *http.Request) {
	s := gw.session(r)
	resp, err := gw.upstream(r.Context(), http.MethodGet, r.Header, nil)
	if err != nil {
		gw.unreachable(w, nil, err)
		return
	}
	defer resp.Body.Close()
	gw.accepted(s, r.Header.Get(sessionHeader), resp)
	if success(resp.StatusCode) {
		// The stream carries the server's own requests (sampling, elicitation), judged on
		// the way. Clients read a 2xx answer as an event stream (the TypeScript SDK whatever
		// its type), so one Vigil cannot read as such is not relayed.
		if mediaType(resp.Header) != mediaSSE {
			gw.log.Warn("server event stream of a type Vigil cannot read; failing closed",
				"status", resp.StatusCode, "contentType", resp.Header.Values("Content-Type"))
			gw.fault(w, nil, "the MCP server's answer is not an event stream; Vigil cannot judge it")
			return
		}
		gateway.CopyHeaders(w.Header(), resp.Header)
		w.Header().Set("Content-Type", mediaSSE)
		w.WriteHeader(resp.StatusCode)
		done := guardian.LongWait(r.Context())
		defer done()
		gw.relaySSE(r.Context(), newSSEWriterStarted(w), s, resp.Body, r.Header, nil, nil)
		return
	}
	gateway.CopyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, int64(gw.cfg.MaxMessageBytes)))
}

// delete ends a session upstream and forgets its state.
func (gw *Gateway) delete(w http.ResponseWriter, r *http.Request) {
	resp, err := gw.upstream(r.Context(), http.MethodDelete, r.Header, nil)
	if err != nil {
		gw.unreachable(w, nil, err)
		return
	}
	defer resp.Body.Close()
	if sid := r.Header.Get(sessionHeader); sid != "" && resp.StatusCode < 300 {
		gw.forget(sid)
	}
	gateway.CopyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
}

func hasProgressToken(b []byte) bool { return bytes.Contains(b, []byte(`"progressToken"`)) }
