package mcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
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
	// oldest is forgotten first.
	MaxSessions int
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
	sessions map[string]*Session
	order    []string // session ids, oldest first
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
	gw := &Gateway{cfg: cfg, dec: opts.Decider, client: opts.Client, log: opts.Logger, wrap: opts.Wrap,
		keyOf: opts.KeyOf, sessions: map[string]*Session{}}
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
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errorResponse(nil, -32000, message))
}

const sessionHeader = "Mcp-Session-Id"

func (gw *Gateway) serve(w http.ResponseWriter, r *http.Request) {
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

// session returns the state of the MCP session a request names; a request without a
// session id (initialize) gets a fresh one, registered when the server names it.
func (gw *Gateway) session(r *http.Request) *Session {
	sid := r.Header.Get(sessionHeader)
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if s, ok := gw.sessions[sid]; ok && sid != "" {
		return s
	}
	s := gw.newSession(r)
	if sid != "" {
		gw.remember(sid, s)
	}
	return s
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
		Judge: InProcess(gw.dec, metaNow)}
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

// remember keeps s as the state of session sid, forgetting the oldest beyond the bound.
func (gw *Gateway) remember(sid string, s *Session) {
	if _, ok := gw.sessions[sid]; !ok {
		gw.order = append(gw.order, sid)
	}
	gw.sessions[sid] = s
	for len(gw.order) > gw.cfg.MaxSessions {
		delete(gw.sessions, gw.order[0])
		gw.order = gw.order[1:]
	}
}

func (gw *Gateway) forget(sid string) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if _, ok := gw.sessions[sid]; !ok {
		return
	}
	delete(gw.sessions, sid)
	for i, v := range gw.order {
		if v == sid {
			gw.order = append(gw.order[:i], gw.order[i+1:]...)
			break
		}
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

func (gw *Gateway) unreachable(w http.ResponseWriter, err error) {
	u, _ := url.Parse(gw.cfg.URL)
	u.User = nil
	gw.log.Warn("upstream unreachable", "err", err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = w.Write(errorResponse(nil, -32000, fmt.Sprintf("MCP server %q (%s) is unreachable", gw.cfg.Name, u)))
}

// post relays one message from the client.
func (gw *Gateway) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, gw.cfg.MaxBodyBytes))
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = w.Write(errorResponse(nil, -32600, fmt.Sprintf("the message exceeds %d bytes", gw.cfg.MaxBodyBytes)))
		return
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' && judgedBatch(t) {
		// A batch would need each member judged and the answers matched back; clients of
		// current protocol versions never send one.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(errorResponse(nil, -32600, "Vigil does not relay batches that contain tools/call, resources/read or prompts/get; send them one by one"))
		return
	}
	s := gw.session(r)
	// A call may wait for a reviewer.
	done := guardian.LongWait(r.Context())
	defer done()

	// A held call that asked for progress is answered as an event stream at once, so the
	// progress notifications reach the client while it waits.
	var sse *sseWriter
	if s.MayBlock(body, true) && strings.Contains(r.Header.Get("Accept"), "text/event-stream") && hasProgressToken(body) {
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
		w.Header().Set("Content-Type", "application/json")
		if sid := r.Header.Get(sessionHeader); sid != "" {
			w.Header().Set(sessionHeader, sid)
		}
		_, _ = w.Write(act.Reply)
		return
	}
	resp, err := gw.upstream(r.Context(), http.MethodPost, r.Header, act.Forward)
	if err != nil {
		if sse != nil {
			if m, ok := parse(body); ok && m.isRequest() {
				sse.event(errorResponse(m.ID, -32000, "the MCP server is unreachable"))
			}
			return
		}
		gw.unreachable(w, err)
		return
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get(sessionHeader); sid != "" {
		gw.mu.Lock()
		if _, known := gw.sessions[sid]; !known {
			s.SetID(vigilSession(gw.cfg.Name, sid))
			gw.remember(sid, s)
		}
		gw.mu.Unlock()
	}
	if sse != nil {
		gw.relayInto(r.Context(), sse, s, resp, r.Header)
		return
	}
	gateway.CopyHeaders(w.Header(), resp.Header)
	ct := resp.Header.Get("Content-Type")
	switch {
	case resp.StatusCode == http.StatusOK && strings.HasPrefix(ct, "text/event-stream"):
		w.WriteHeader(resp.StatusCode)
		gw.relaySSE(r.Context(), newSSEWriterStarted(w), s, resp.Body, r.Header)
	case resp.StatusCode == http.StatusOK && strings.HasPrefix(ct, "application/json"):
		b, err := io.ReadAll(io.LimitReader(resp.Body, int64(gw.cfg.MaxMessageBytes)+1))
		if err != nil || len(b) > gw.cfg.MaxMessageBytes {
			gw.log.Warn("server answer unreadable or too large", "err", err, "bytes", len(b))
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		a := s.FromServer(r.Context(), b)
		gw.replyUpstream(s, r.Header, a.Reply)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(a.Forward)
	default:
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}
}

// relayInto writes the server's answer into an event stream already started.
func (gw *Gateway) relayInto(ctx context.Context, sse *sseWriter, s *Session, resp *http.Response, in http.Header) {
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		gw.relaySSE(ctx, sse, s, resp.Body, in)
	default:
		b, err := io.ReadAll(io.LimitReader(resp.Body, int64(gw.cfg.MaxMessageBytes)+1))
		if err != nil || len(b) > gw.cfg.MaxMessageBytes || resp.StatusCode != http.StatusOK {
			gw.log.Warn("server answer unreadable", "status", resp.StatusCode, "err", err)
			return
		}
		a := s.FromServer(ctx, b)
		gw.replyUpstream(s, in, a.Reply)
		sse.event(a.Forward)
	}
}

// replyUpstream sends the server Vigil's own answer to one of its requests (a refused
// sampling or elicitation request).
func (gw *Gateway) replyUpstream(_ *Session, in http.Header, reply []byte) {
	if reply == nil {
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
// verdict changes pass byte for byte.
func (gw *Gateway) relaySSE(ctx context.Context, sse *sseWriter, s *Session, body io.Reader, in http.Header) {
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		ev, err := readEvent(br, gw.cfg.MaxMessageBytes)
		if len(ev.raw) > 0 {
			if len(ev.data) == 0 {
				sse.raw(ev.raw)
			} else {
				a := s.FromServer(ctx, ev.data)
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
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
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
		gw.unreachable(w, err)
		return
	}
	defer resp.Body.Close()
	gateway.CopyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		done := guardian.LongWait(r.Context())
		defer done()
		gw.relaySSE(r.Context(), newSSEWriterStarted(w), s, resp.Body, r.Header)
		return
	}
	_, _ = io.Copy(w, io.LimitReader(resp.Body, int64(gw.cfg.MaxMessageBytes)))
}

// delete ends a session upstream and forgets its state.
func (gw *Gateway) delete(w http.ResponseWriter, r *http.Request) {
	resp, err := gw.upstream(r.Context(), http.MethodDelete, r.Header, nil)
	if err != nil {
		gw.unreachable(w, err)
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

func judgedBatch(b []byte) bool {
	for m := range judgedClientMethods {
		if bytes.Contains(b, []byte(`"`+m+`"`)) {
			return true
		}
	}
	return false
}

func hasProgressToken(b []byte) bool { return bytes.Contains(b, []byte(`"progressToken"`)) }
