// Package aap is Vigil's AAP v3 gateway: a reverse proxy in front of an Agent Application
// Protocol server that turns its traffic into AOS steps, has Vigil's pipeline decide each,
// and applies the verdicts in AAP's own terms (a refusal, a denied tool permission, a
// redacted message) so that an unchanged AAP client sees an AAP server.
package aap

import (
	"bytes"
	"context"
	"crypto/cipher"
	"encoding/json"
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
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// Options configure one gateway (one --aap NAME=URL).
type Options struct {
	// Name is the upstream's name: the gateway serves /aap/NAME/….
	Name string
	// Upstream is the AAP server's base URL (its /meta is Upstream + "/meta").
	Upstream string
	// Decider decides every step; required.
	Decider Decider
	// Client talks to the upstream; nil is a client without an overall timeout (turns
	// stream for as long as the agent works).
	Client *http.Client
	Logger *slog.Logger
	// KeepAlive is how often an SSE comment is sent while the client waits on a decision
	// (a hold); default 15 s.
	KeepAlive time.Duration
	// MaxBodyBytes bounds a client's request body (default 10 MiB); MaxUpstreamBytes bounds
	// one upstream answer or SSE event read whole (default 32 MiB).
	MaxBodyBytes     int64
	MaxUpstreamBytes int64
	// MaxSessions bounds the sessions whose state the gateway keeps in memory (default
	// 10000); a forgotten session is read again from the upstream on its next turn.
	MaxSessions int
	// MaxRounds bounds the upstream turns the gateway chains into one client turn by
	// answering tool permissions itself (default 32).
	MaxRounds int
	// MaxOptions and MaxOptionBytes bound a session's agent options as the gateway keeps
	// them (default 64 names, 16 KiB of names and recorded values): every step of the
	// session carries them, and AAP merges each turn's options into the session's.
	MaxOptions     int
	MaxOptionBytes int
	// MayWithhold reports whether an enforced rule could deny, hold or modify an agent's
	// message; in delta mode an assistant message is buffered only then. nil: always
	// buffer (fail closed).
	MayWithhold func() bool
	// KeyOf returns the agent key a request authenticated with (auth.KeyOf).
	KeyOf func(ctx context.Context) (id, agentID string, ok bool)
	// Now is the clock.
	Now func() time.Time
	// CursorKey seals the cursors of GET /sessions (CursorKeySize bytes): the guardian's
	// database keeps it (storage.Secrets), so that a cursor one replica gave out opens on
	// every replica sharing the database and after a restart. Nil makes a random key, good
	// for this gateway only.
	CursorKey []byte
}

// Gateway serves one AAP upstream under /aap/NAME.
type Gateway struct {
	opts     Options
	base     *url.URL
	prefix   string
	client   *http.Client
	log      *slog.Logger
	sessions *sessionCache
	meta     metaCache
	cursors  cipher.AEAD // seals the list's cursors (Options.CursorKey)
}

// ParseSpec reads a --aap value NAME=URL.
func ParseSpec(spec string) (name, upstream string, err error) {
	name, upstream, ok := strings.Cut(spec, "=")
	if !ok {
		return "", "", fmt.Errorf("want NAME=URL, got %q", spec)
	}
	if !gateway.ValidName(name) {
		return "", "", fmt.Errorf("name %q: use letters, digits, '.', '_' and '-' (at most 64)", name)
	}
	if _, err := parseBase(upstream); err != nil {
		return "", "", err
	}
	return name, upstream, nil
}

func parseBase(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream %q: want an absolute http(s) URL", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream %q: a base URL has no query or fragment", s)
	}
	return u, nil
}

// New builds a gateway.
func New(opts Options) (*Gateway, error) {
	if !gateway.ValidName(opts.Name) {
		return nil, fmt.Errorf("aap gateway: invalid name %q", opts.Name)
	}
	if opts.Decider == nil {
		return nil, errors.New("aap gateway: a decider is required")
	}
	base, err := parseBase(opts.Upstream)
	if err != nil {
		return nil, fmt.Errorf("aap gateway %s: %w", opts.Name, err)
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 10 << 20
	}
	if opts.MaxUpstreamBytes <= 0 {
		opts.MaxUpstreamBytes = 32 << 20
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 10000
	}
	if opts.MaxRounds <= 0 {
		opts.MaxRounds = 32
	}
	if opts.MaxOptions <= 0 {
		opts.MaxOptions = 64
	}
	if opts.MaxOptionBytes <= 0 {
		opts.MaxOptionBytes = 16 << 10
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cursors, err := newCursorAEAD(opts.CursorKey)
	if err != nil {
		return nil, fmt.Errorf("aap gateway %s: %w", opts.Name, err)
	}
	g := &Gateway{opts: opts, base: base, prefix: "/aap/" + opts.Name, client: opts.Client, log: opts.Logger,
		sessions: newSessionCache(opts.MaxSessions), cursors: cursors}
	if g.client == nil {
		g.client = &http.Client{}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.log = g.log.With("gateway", "aap", "upstream", opts.Name)
	return g, nil
}

// Prefix is the path the gateway serves under: /aap/NAME.
func (g *Gateway) Prefix() string { return g.prefix }

// Register adds the gateway's routes to mux, each wrapped by wrap (the agent key check)
// when it is not nil.
func (g *Gateway) Register(mux *http.ServeMux, wrap func(http.Handler) http.Handler) {
	if wrap == nil {
		wrap = func(h http.Handler) http.Handler { return h }
	}
	routes := map[string]http.HandlerFunc{
		"GET /meta":                  g.handleMeta,
		"POST /sessions":             g.handleCreate,
		"GET /sessions":              g.handleList,
		"GET /sessions/{id}":         g.handleGet,
		"DELETE /sessions/{id}":      g.handleDelete,
		"GET /sessions/{id}/history": g.handleHistory,
		"POST /sessions/{id}/turns":  g.handleTurn,
		"/":                          g.handleUnknown,
	}
	for pat, h := range routes {
		method, path, ok := strings.Cut(pat, " ")
		if !ok {
			method, path = "", pat
		}
		full := g.prefix + path
		if method != "" {
			full = method + " " + full
		}
		mux.Handle(full, wrap(h))
	}
}

func (g *Gateway) handleUnknown(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "not an AAP endpoint: "+r.Method+" "+strings.TrimPrefix(r.URL.Path, g.prefix))
}

// Refuse writes a refusal of Vigil's own (a missing agent key, a rate limit) in the AAP
// SDK's error shape; it is an auth.GatewayRefusal.
func Refuse(w http.ResponseWriter, status int, message string, _ time.Duration) {
	writeError(w, status, message)
}

// writeError answers with the AAP SDK's error shape.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(mustJSON(map[string]string{"error": msg}), '\n'))
}

// errUpstream is a failure to reach the upstream (answered 502).
type errUpstream struct{ err error }

func (e *errUpstream) Error() string { return e.err.Error() }
func (e *errUpstream) Unwrap() error { return e.err }

func (g *Gateway) unreachable(w http.ResponseWriter, err error) {
	g.log.Warn("upstream unreachable", "err", err)
	writeError(w, http.StatusBadGateway, fmt.Sprintf("the AAP upstream %q is unreachable", g.opts.Name))
}

// hopHeaders are not forwarded in either direction.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Host"}

// upstreamRequest sends one request to the upstream with the client's own headers (its
// Authorization goes up untouched unless it carried Vigil's key).
func (g *Gateway) upstreamRequest(ctx context.Context, in *http.Request, method, path, rawQuery string, body []byte) (*http.Response, error) {
	u := *g.base
	u.Path = g.base.Path + path
	u.RawPath = ""
	u.RawQuery = rawQuery
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("build upstream request: %w", err)
	}
	if in != nil {
		for k, vs := range in.Header {
			req.Header[k] = append([]string(nil), vs...)
		}
	}
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	for k := range req.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-vigil-") {
			req.Header.Del(k)
		}
	}
	// The transport asks for gzip itself and decompresses; a client's own Accept-Encoding
	// would hand the gateway compressed events it must read.
	req.Header.Del("Accept-Encoding")
	if a := req.Header.Get("Authorization"); in != nil && in.Header.Get("X-Vigil-Key") == "" && isVigilBearer(a) {
		req.Header.Del("Authorization")
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, &errUpstream{err}
	}
	return resp, nil
}

// isVigilBearer reports whether an Authorization header carries a Vigil agent key, which
// authenticates the client to Vigil and is not the upstream's business.
func isVigilBearer(h string) bool {
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.HasPrefix(strings.TrimSpace(h[7:]), "vgl_")
	}
	return false
}

// copyHeaders copies an upstream answer's headers to the client.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}

// passThrough sends an upstream answer to the client as it is.
func (g *Gateway) passThrough(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// passBody sends an upstream answer already read to the client.
func passBody(w http.ResponseWriter, resp *http.Response, body []byte) {
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// readUpstream reads a whole upstream answer, bounded.
func (g *Gateway) readUpstream(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, g.opts.MaxUpstreamBytes+1))
	if err != nil {
		return nil, &errUpstream{fmt.Errorf("read upstream answer: %w", err)}
	}
	if int64(len(b)) > g.opts.MaxUpstreamBytes {
		return nil, &errUpstream{fmt.Errorf("upstream answer exceeds %d bytes", g.opts.MaxUpstreamBytes)}
	}
	return b, nil
}

// readBody reads a client's request body; false when it was refused (already answered).
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", g.opts.MaxBodyBytes))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "could not read the request body")
		return nil, false
	}
	return b, true
}

// proxy forwards a request without a body and passes the answer through.
func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request, path string) {
	resp, err := g.upstreamRequest(r.Context(), r, r.Method, path, r.URL.RawQuery, nil)
	if err != nil {
		g.unreachable(w, err)
		return
	}
	g.passThrough(w, resp)
}

func (g *Gateway) handleHistory(w http.ResponseWriter, r *http.Request) {
	if g.foreign(w, r, r.PathValue("id")) {
		return
	}
	g.proxy(w, r, "/sessions/"+url.PathEscape(r.PathValue("id"))+"/history")
}

func (g *Gateway) handleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if g.foreign(w, r, id) {
		return
	}
	resp, err := g.upstreamRequest(r.Context(), r, http.MethodDelete, "/sessions/"+url.PathEscape(id), "", nil)
	if err != nil {
		g.unreachable(w, err)
		return
	}
	if resp.StatusCode/100 == 2 {
		g.sessions.drop(id)
	}
	g.passThrough(w, resp)
}

// agentInfo is what the gateway keeps of an agent of /meta.
type agentInfo struct {
	Name, Title, Version string
	// plainOptions are the options declared text or select; every other option's value
	// (secret, or undeclared) is never stored.
	plainOptions map[string]bool
}

type metaCache struct {
	mu      sync.Mutex
	agents  map[string]agentInfo
	fetched time.Time
}

const metaTTL = time.Minute

func (m *metaCache) store(body []byte, now time.Time) {
	var meta struct {
		Agents []struct {
			Name    string `json:"name"`
			Title   string `json:"title"`
			Version string `json:"version"`
			Options []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"options"`
		} `json:"agents"`
	}
	if json.Unmarshal(body, &meta) != nil {
		return
	}
	agents := make(map[string]agentInfo, len(meta.Agents))
	for _, a := range meta.Agents {
		ai := agentInfo{Name: a.Name, Title: a.Title, Version: a.Version, plainOptions: map[string]bool{}}
		for _, o := range a.Options {
			if o.Type == "text" || o.Type == "select" {
				ai.plainOptions[o.Name] = true
			}
		}
		agents[a.Name] = ai
	}
	m.mu.Lock()
	m.agents, m.fetched = agents, now
	m.mu.Unlock()
}

// agent returns what /meta says of an agent, reading /meta again when the copy is old.
func (g *Gateway) agent(ctx context.Context, in *http.Request, name string) agentInfo {
	now := g.opts.Now()
	g.meta.mu.Lock()
	ai, ok := g.meta.agents[name]
	fresh := now.Sub(g.meta.fetched) < metaTTL
	g.meta.mu.Unlock()
	if !ok || !fresh {
		if resp, err := g.upstreamRequest(ctx, in, http.MethodGet, "/meta", "", nil); err == nil {
			b, rerr := g.readUpstream(resp)
			if rerr == nil && resp.StatusCode == http.StatusOK {
				g.meta.store(b, now)
			}
		}
		g.meta.mu.Lock()
		ai, ok = g.meta.agents[name]
		g.meta.mu.Unlock()
	}
	if !ok {
		ai = agentInfo{Name: name, plainOptions: map[string]bool{}}
	}
	return ai
}

func (g *Gateway) handleMeta(w http.ResponseWriter, r *http.Request) {
	resp, err := g.upstreamRequest(r.Context(), r, http.MethodGet, "/meta", r.URL.RawQuery, nil)
	if err != nil {
		g.unreachable(w, err)
		return
	}
	b, err := g.readUpstream(resp)
	if err != nil {
		g.unreachable(w, err)
		return
	}
	if resp.StatusCode == http.StatusOK {
		g.meta.store(b, g.opts.Now())
	}
	passBody(w, resp, b)
}

// vigilSession is the Vigil session id of an upstream session.
func (g *Gateway) vigilSession(id string) string { return "aap:" + g.opts.Name + ":" + id }

// aosAgent is the AOS agent of an AAP session's steps.
func (g *Gateway) aosAgent(ai agentInfo, options map[string]string) aos.Agent {
	up := *g.base
	up.User = nil
	a := aos.Agent{
		ID:       ai.Name,
		Name:     ai.Name,
		Version:  ai.Version,
		Provider: aos.AgentProvider{Name: "aap:" + g.opts.Name, URL: up.String()},
		Metadata: map[string]any{"protocol": "aap", "upstream": g.opts.Name},
	}
	if ai.Title != "" {
		a.Name = ai.Title
	}
	if a.Version == "" {
		a.Version = "unknown"
	}
	if len(options) > 0 {
		a.Metadata["options"] = options
	}
	return a
}

// maskOptions hides every option value not declared text or select in /meta: secrets are
// never stored or shown, and an option /meta does not declare may be one.
func maskOptions(ai agentInfo, opts map[string]string) map[string]string {
	if len(opts) == 0 {
		return nil
	}
	out := make(map[string]string, len(opts))
	for k, v := range opts {
		if ai.plainOptions[k] {
			out[k] = v
		} else {
			out[k] = "***"
		}
	}
	return out
}

// requestMeta is the pipeline's view of the client's request.
func (g *Gateway) requestMeta(r *http.Request) guardian.RequestMeta {
	m := guardian.RequestMeta{RemoteAddr: r.RemoteAddr, ReceivedAt: g.opts.Now(),
		Protocol: guardian.ProtocolAAP, Upstream: g.opts.Name}
	if g.opts.KeyOf != nil {
		m.KeyID, m.KeyAgent, _ = g.opts.KeyOf(r.Context())
	}
	return m
}
