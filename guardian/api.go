package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

func (g *Guardian) routes(ui fs.FS, mount []func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/aos", g.handleAOS)
	mux.HandleFunc(PreviewPath, g.handlePreview)
	mux.HandleFunc("GET /api/info", g.handleInfo)
	mux.Handle("GET "+HealthPath, g.healthHandler())
	mux.HandleFunc("GET /api/sessions", g.handleSessions)
	mux.HandleFunc("GET /api/sessions/{id}", g.handleSession)
	mux.HandleFunc("GET /api/sessions/{id}/steps", g.handleSessionSteps)
	mux.HandleFunc("GET /api/search", g.handleSearch)
	mux.HandleFunc("GET /api/steps/{seq}", g.handleStep)
	mux.HandleFunc("GET /api/stats", g.handleStats)
	for _, m := range mount {
		m(mux)
	}
	mux.HandleFunc(apiCatchAll, func(w http.ResponseWriter, r *http.Request) {
		if serveSlashSegments(mux, w, r) {
			return
		}
		apijson.Error(w, http.StatusNotFound, "not_found", "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	// The gateways' prefixes: a name no --aap, --agentapi or --mcp configured, or a path
	// that is not one of the protocol's endpoints, is a 404 the client can read, not the
	// console's page.
	for _, prefix := range []string{"/aap/", "/agentapi/", "/mcp/"} {
		mux.HandleFunc(prefix, func(w http.ResponseWriter, r *http.Request) {
			apijson.Error(w, http.StatusNotFound, "not_found",
				"no such gateway endpoint: "+r.Method+" "+r.URL.Path+" (is the upstream's name configured?)")
		})
	}
	mux.Handle("/", readOnly(uiHandler(ui)))
	return SecurityHeaders(g.hostCheck(mux))
}

// apiCatchAll is the pattern of the API's answer to a path no route matches.
const apiCatchAll = "/api/"

// slashStandIn is a path segment no route has as a literal, which matches a single
// wildcard as any segment but one does.
const slashStandIn = "%00"

// serveSlashSegments serves r, which no route of mux matched, when that is only because a
// segment of its path is one encoded slash: GET /api/sessions/%2F, the session whose id is
// "/". ServeMux unescapes a segment before matching it, and takes a lone "/" for the path's
// trailing slash, which no wildcard matches, so the request falls through to the catch-all
// (ids such as "a//b" or "/foo" are not alone in their segment and match). r's route is
// found again with a stand-in for those segments, and the route's wildcards are given the
// segments themselves, unescaped. It reports whether it served r.
func serveSlashSegments(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) bool {
	segs := strings.Split(r.URL.EscapedPath(), "/")
	stood := make([]string, len(segs))
	found := false
	for i, s := range segs {
		stood[i] = s
		if strings.EqualFold(s, "%2F") {
			stood[i], found = slashStandIn, true
		}
	}
	if !found {
		return false
	}
	raw := strings.Join(stood, "/")
	path, err := url.PathUnescape(raw)
	if err != nil {
		return false
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = path, raw
	h, pattern := mux.Handler(r2)
	// "": no route for this method; the catch-all: none for this path, slash or no slash.
	if pattern == "" || pattern == apiCatchAll {
		return false
	}
	// The pattern's path ("GET /api/sessions/{id}/steps") has a segment for each of r's.
	for i, p := range strings.Split(pattern[strings.IndexByte(pattern, '/'):], "/") {
		if !strings.HasPrefix(p, "{") || p == "{$}" || i >= len(segs) {
			continue
		}
		name, v := strings.Trim(p, "{}"), segs[i]
		if n, rest := strings.CutSuffix(name, "..."); rest {
			name, v = n, strings.Join(segs[i:], "/")
		}
		if u, err := url.PathUnescape(v); err == nil {
			v = u
		}
		r.SetPathValue(name, v)
	}
	r.Pattern = pattern
	h.ServeHTTP(w, r)
	return true
}

// hostCheck refuses requests whose Host header is not one of Config.AllowedHosts. A guardian
// on loopback is otherwise reachable from any web page through DNS rebinding: a hostile
// name that resolves to 127.0.0.1 would be "same origin" with the console.
func (g *Guardian) hostCheck(next http.Handler) http.Handler {
	if len(g.cfg.AllowedHosts) == 0 {
		return next
	}
	allowed := make(map[string]bool, len(g.cfg.AllowedHosts))
	for _, h := range g.cfg.AllowedHosts {
		allowed[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.ToLower(strings.Trim(host, "[]"))
		if !allowed[host] {
			apijson.Error(w, http.StatusMisdirectedRequest, "host_not_allowed",
				"host "+r.Host+" is not served here; use the address the guardian printed at start")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// consoleCSP is the console page's policy. Scripts come only from the console's own files
// (the build emits no inline script); styles also allow inline ones, because Svelte writes
// style attributes for computed sizes and CodeMirror injects its theme as a <style> element
// (inline styles cannot run code; scripts stay strict). frame-ancestors keeps every other
// page from framing the console and tricking an operator into clicking (clickjacking).
const consoleCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self'; connect-src 'self'%s; object-src 'none'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// apiCSP is the policy of everything that is not the console page: data, never rendered.
const apiCSP = "default-src 'none'; frame-ancestors 'none'"

// hstsMaxAge is a year: browsers that once reached the guardian over TLS keep doing so.
const hstsMaxAge = "max-age=31536000"

// SecurityHeaders sets headers every response should carry: Handler applies it, and a
// server that wraps Handler in more middleware (authentication) applies it outermost too, so
// that their refusals carry the headers as well.
func SecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if _, set := h["X-Content-Type-Options"]; set {
			// An outer SecurityHeaders set them already (see above): once is enough.
			next.ServeHTTP(w, r)
			return
		}
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The older header for browsers without frame-ancestors.
		h.Set("X-Frame-Options", "DENY")
		if p := r.URL.Path; p == "/aos" || p == PreviewPath || strings.HasPrefix(p, "/api/") || p == "/metrics" {
			h.Set("Content-Security-Policy", apiCSP)
		} else {
			h.Set("Content-Security-Policy", fmt.Sprintf(consoleCSP, liveSources(r.Host)))
		}
		if r.TLS != nil {
			h.Set("Strict-Transport-Security", hstsMaxAge)
		}
		next.ServeHTTP(w, r)
	})
}

// liveSources names the live websocket's own address in connect-src. CSP Level 3 lets
// 'self' cover ws: and wss: on the page's host, but older WebKit (the desktop webview on
// some systems) does not; a Host the policy could not quote safely adds nothing.
func liveSources(host string) string {
	if host == "" || len(host) > 255 {
		return ""
	}
	for _, c := range host {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".-:[]", c)) {
			return ""
		}
	}
	return " ws://" + host + " wss://" + host
}

// Info is GET /api/info.
type Info struct {
	Version     string `json:"version"`
	AOSEndpoint string `json:"aosEndpoint"`
	DB          string `json:"db"`
	RulesFile   string `json:"rulesFile,omitempty"`
}

func (g *Guardian) handleInfo(w http.ResponseWriter, r *http.Request) {
	base := g.cfg.PublicURL
	if base == "" {
		base = "http://" + r.Host
	}
	apijson.Write(w, http.StatusOK, Info{
		Version:     g.cfg.Version,
		AOSEndpoint: strings.TrimRight(base, "/") + "/aos",
		DB:          g.cfg.DBPath,
		RulesFile:   g.cfg.RulesFile,
	})
}

// HealthPath is the health check of load balancers and orchestrators (GET or HEAD). It
// needs no credentials (team mode's middleware, guardian/auth, lets it through) and so
// tells nothing but whether this process can serve: no version, address or database name,
// which GET /api/info gives signed-in operators.
const HealthPath = "/api/health"

// Health is the answer of GET /api/health: status "ok" (200), or "unavailable" (503) with
// a short reason.
type Health struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// The reasons of an unavailable answer: short, and naming nothing of the deployment.
const (
	healthNoAnswer = "the database did not answer"
	healthReadOnly = "the database is read-only"
)

const (
	// healthTimeout bounds one check of the database: a check that hangs (a stalled
	// connection) answers 503 within it, before a balancer's own check times out.
	healthTimeout = 2 * time.Second
	// healthTTL is how long a check's result answers the checks that follow: the route
	// is open to anyone, so however often it is asked it costs at most one small read
	// per TTL, and balancers checking every few seconds still see a change within one.
	healthTTL = time.Second
	// healthProbeSession is the session the check reads: a primary-key lookup that every
	// backend answers without waiting for steps being written (a session id is never
	// empty, so it finds nothing, which is an answer as good as a row).
	healthProbeSession = ""
)

// healthCheck answers HealthPath. This process can serve when its database answers a read
// within healthTimeout and takes writes: every step is stored before it is answered, so a
// replica that cannot reach its database, or reaches one that refuses writes (a standby
// it was pointed or failed over to, a read-only file), can only refuse steps, and a
// balancer should send them to another. Writability is asked of the backend
// (CheckWritable), which tells it from the database's state without writing. The checks
// are serialised, so concurrent requests share one check.
type healthCheck struct {
	g      *Guardian
	mu     sync.Mutex
	at     time.Time // of the last check; zero before the first
	reason string    // its answer: "" when ok, else the reason of the 503
}

func (g *Guardian) healthHandler() http.Handler { return &healthCheck{g: g} }

func (h *healthCheck) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A balancer must see each check's own answer, never a cached one.
	w.Header().Set("Cache-Control", "no-store")
	if reason := h.check(); reason != "" {
		apijson.Write(w, http.StatusServiceUnavailable, Health{Status: "unavailable", Reason: reason})
		return
	}
	apijson.Write(w, http.StatusOK, Health{Status: "ok"})
}

// check asks the database unless a check within healthTTL answers for it, and returns the
// reason it cannot serve ("" when it can).
func (h *healthCheck) check() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.g.now()
	if !h.at.IsZero() && now.Sub(h.at) >= 0 && now.Sub(h.at) < healthTTL {
		return h.reason
	}
	// Not the request's context: the result answers the other checks too. One bound for
	// both calls.
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	_, err := h.g.store.Session(ctx, healthProbeSession)
	if errors.Is(err, record.ErrNotFound) {
		err = nil
	}
	if err == nil {
		err = h.g.store.CheckWritable(ctx)
	}
	reason := ""
	switch {
	case errors.Is(err, storage.ErrReadOnly):
		reason = healthReadOnly
	case err != nil:
		reason = healthNoAnswer
	}
	// Logged when the answer changes, not at every check of every balancer (the zero
	// state is "ok": a healthy start logs nothing).
	switch {
	case reason != "" && reason != h.reason:
		h.g.log.Error("health check: "+reason+"; answering 503", "err", err)
	case reason == "" && h.reason != "":
		h.g.log.Info("health check: the database answers and takes writes again")
	}
	h.at, h.reason = h.g.now(), reason
	return reason
}

func (g *Guardian) handleSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := limitParam(w, q.Get("limit"), 50)
	if !ok {
		return
	}
	for _, name := range []string{"q", "before"} {
		if len(q.Get(name)) > holds.MaxFilterBytes {
			apijson.Error(w, http.StatusBadRequest, "invalid_argument",
				name+": at most "+strconv.Itoa(holds.MaxFilterBytes)+" bytes")
			return
		}
	}
	page, err := g.store.Sessions(r.Context(), record.SessionQuery{Before: q.Get("before"), Limit: limit, Search: q.Get("q")})
	if err != nil {
		g.storeError(w, err)
		return
	}
	fit, full, err := apijson.Fit(page.Sessions, g.cfg.MaxPageBytes)
	if err != nil {
		g.storeError(w, err)
		return
	}
	next := page.Next
	if !full {
		next = record.SessionCursor(page.Sessions[len(fit)-1])
	}
	apijson.Write(w, http.StatusOK, struct {
		Sessions []json.RawMessage `json:"sessions"`
		Next     string            `json:"next,omitempty"`
	}{fit, next})
}

func (g *Guardian) handleSession(w http.ResponseWriter, r *http.Request) {
	s, err := g.store.Session(r.Context(), r.PathValue("id"))
	if err != nil {
		g.storeError(w, err)
		return
	}
	apijson.Write(w, http.StatusOK, s)
}

type stepsPage struct {
	Steps []json.RawMessage `json:"steps"`
	Next  *int64            `json:"next"`
}

func (g *Guardian) handleSessionSteps(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := limitParam(w, q.Get("limit"), 200)
	if !ok {
		return
	}
	after, ok := intParam(w, q.Get("after"), "after", 0, 0, 1<<62)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if _, err := g.store.Session(r.Context(), id); err != nil {
		g.storeError(w, err)
		return
	}
	page, err := g.sessionSteps(r.Context(), id, int64(after), limit)
	if err != nil {
		g.storeError(w, err)
		return
	}
	apijson.Write(w, http.StatusOK, page)
}

// sessionSteps is the answer for a session's steps after the seq after: up to limit steps,
// in seq order, as many as fit in MaxPageBytes (the first always goes, as apijson.Fit
// does). Next is the seq of the last step sent when the answer stopped at limit or at the
// byte bound, and nil when the session had no more steps. Each read is bounded by the bytes
// left (StepQuery.MaxBytes), so an answer of big steps does not load limit rows to send the
// one that fits (steps of 5 MB: 60 rows, 300 MB, for one step sent).
func (g *Guardian) sessionSteps(ctx context.Context, id string, after int64, limit int) (stepsPage, error) {
	page := stepsPage{Steps: []json.RawMessage{}}
	total := 0 // bytes of the answer's steps with separators
	for len(page.Steps) < limit {
		steps, err := g.store.Steps(ctx, record.StepQuery{SessionID: id, After: after,
			Limit: limit - len(page.Steps), MaxBytes: max(1, g.cfg.MaxPageBytes-total)})
		if err != nil {
			return stepsPage{}, err
		}
		if len(steps) == 0 {
			return page, nil // no more steps
		}
		for i := range steps {
			seq := steps[i].Seq
			b, err := json.Marshal(&steps[i])
			if err != nil {
				return stepsPage{}, fmt.Errorf("encode step %d: %w", seq, err)
			}
			steps[i] = record.StepRecord{} // encoded: the collector may have the row now
			if len(page.Steps) > 0 && total+len(b)+1 > g.cfg.MaxPageBytes {
				page.Next = &after // the next answer starts with this step
				return page, nil
			}
			page.Steps = append(page.Steps, b)
			total += len(b) + 1
			after = seq
		}
	}
	page.Next = &after
	return page, nil
}

func (g *Guardian) handleStep(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq <= 0 {
		apijson.Error(w, http.StatusBadRequest, "invalid_argument", "seq: must be a positive integer")
		return
	}
	rec, err := g.store.Step(r.Context(), seq)
	if err != nil {
		g.storeError(w, err)
		return
	}
	apijson.Write(w, http.StatusOK, rec)
}

func (g *Guardian) handleStats(w http.ResponseWriter, r *http.Request) {
	st, err := g.Stats(r.Context())
	if err != nil {
		g.storeError(w, err)
		return
	}
	apijson.Write(w, http.StatusOK, st)
}

// Stats is the traffic summary of GET /api/stats (pending holds included, from the store).
func (g *Guardian) Stats(ctx context.Context) (record.Stats, error) {
	st, err := g.store.Stats(ctx, g.now())
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// handleSearch is GET /api/search?q=&session=&agent=&user=&tool=&decision=&rule=&from=&to=
// &before=&limit=: steps by content, newest first (see storage.SearchQuery).
func (g *Guardian) handleSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := intParam(w, q.Get("limit"), "limit", 50, 1, 200)
	if !ok {
		return
	}
	before, ok := intParam(w, q.Get("before"), "before", 0, 0, 1<<62)
	if !ok {
		return
	}
	sq := record.SearchQuery{Text: q.Get("q"), Session: q.Get("session"), Agent: q.Get("agent"),
		User: q.Get("user"), Tool: q.Get("tool"), Decision: q.Get("decision"), Rule: q.Get("rule"),
		Before: int64(before), Limit: limit}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"from", &sq.From}, {"to", &sq.To}} {
		if v := q.Get(t.name); v != "" {
			at, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				apijson.Error(w, http.StatusBadRequest, "invalid_argument", t.name+": want a time such as 2025-06-01T12:00:00Z")
				return
			}
			*t.dst = at
		}
	}
	start := time.Now()
	page, err := g.store.Search(r.Context(), sq)
	if errors.Is(err, record.ErrBadQuery) {
		apijson.Error(w, http.StatusBadRequest, "invalid_argument", strings.TrimPrefix(err.Error(), record.ErrBadQuery.Error()+": "))
		return
	}
	if err != nil {
		g.storeError(w, err)
		return
	}
	w.Header().Set("Server-Timing", fmt.Sprintf("search;dur=%.1f", float64(time.Since(start).Microseconds())/1000))
	apijson.Write(w, http.StatusOK, page)
}

func (g *Guardian) storeError(w http.ResponseWriter, err error) {
	if errors.Is(err, record.ErrNotFound) {
		apijson.Error(w, http.StatusNotFound, "not_found", err.Error())
		return
	}
	if errors.Is(err, record.ErrInvalidCursor) {
		apijson.Error(w, http.StatusBadRequest, "invalid_argument", "before: not a cursor this server issued")
		return
	}
	g.log.Error("api: store", "err", err)
	apijson.Error(w, http.StatusInternalServerError, "internal", "internal error")
}

// limitParam reads a list's limit: def when absent, at most apijson.MaxPageItems (a larger
// one is lowered, and the answer's cursor leads on), and a 400 when not a positive integer.
func limitParam(w http.ResponseWriter, raw string, def int) (int, bool) {
	if raw == "" {
		return def, true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 {
		apijson.Error(w, http.StatusBadRequest, "invalid_argument", "limit: must be a positive integer")
		return 0, false
	}
	return min(n, apijson.MaxPageItems), true
}

// intParam parses an optional integer query parameter within [lo, hi]; it writes a 400
// naming the parameter and returns false when the value is not acceptable.
func intParam(w http.ResponseWriter, raw, name string, def, lo, hi int) (int, bool) {
	if raw == "" {
		return def, true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		apijson.Error(w, http.StatusBadRequest, "invalid_argument",
			name+": must be an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi))
		return 0, false
	}
	return n, true
}

// uiHandler serves the embedded console. Unknown paths get index.html so the client-side
// router can handle them; a no_ui build (nil ui) gets a short page saying the console is not
// built in.
// readOnly answers any method but GET and HEAD with 405: the console's files are only
// read, and a POST there is a client at the wrong URL, which should not get a page back.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			apijson.Error(w, http.StatusMethodNotAllowed, "method_not_allowed",
				r.Method+" "+r.URL.Path+": the console's pages are read with GET; the AOS endpoint is POST /aos")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func uiHandler(ui fs.FS) http.Handler {
	if ui != nil {
		if _, err := fs.Stat(ui, "index.html"); err != nil {
			ui = nil
		}
	}
	if ui == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(`<!doctype html><meta charset="utf-8"><title>Vigil</title>` +
				`<body style="font-family:system-ui;margin:3rem"><h1>Vigil</h1>` +
				`<p>The guardian is running; its AOS endpoint is <code>/aos</code>.</p>` +
				`<p>The console is not built into this binary (it was built with the <code>no_ui</code> tag). ` +
				`<code>go install github.com/vigil-guardian/vigil@latest</code> or <code>make build</code> gives the whole console.</p>`))
		})
	}
	files := http.FileServerFS(ui)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/")
		if p != "" {
			if _, err := fs.Stat(ui, p); err != nil {
				r2 := r.Clone(r.Context())
				r2.URL.Path = "/"
				files.ServeHTTP(w, r2)
				return
			}
			if strings.HasPrefix(p, "assets/") {
				// Vite names assets by content hash, so they never change.
				w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			}
		}
		files.ServeHTTP(w, r)
	})
}
