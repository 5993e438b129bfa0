package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"path"
	"strings"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
)

// SessionCookie is the name of the console's session cookie.
const SessionCookie = "vigil_session"

// CSRFHeader carries the session's CSRF token on every state-changing console request.
const CSRFHeader = "X-CSRF-Token"

// apiError is a console API error: {"error":{"code":…,"message":…}} with an HTTP status.
type apiError struct {
	status  int
	code    string
	message string
	// retryAfter, when set, becomes a Retry-After header (seconds).
	retryAfter string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

var (
	errUnauthenticated = &apiError{http.StatusUnauthorized, "unauthenticated", "sign in to use the console", ""}
	errNoAccountsHere  = &apiError{http.StatusUnauthorized, "unauthenticated",
		"no operator accounts exist and this server is reachable from other machines; create one with: vigil users add NAME --role admin", ""}
	errCSRF = &apiError{http.StatusForbidden, "csrf_failed",
		"missing or wrong " + CSRFHeader + " header (read the token from GET /api/auth/me)", ""}
	errCrossOrigin = &apiError{http.StatusForbidden, "forbidden", "cross-origin request refused", ""}
	errProxied     = &apiError{http.StatusForbidden, "forbidden",
		"the console without operator accounts is served only to this machine; create an account (vigil users add NAME --role admin) to use it through a proxy", ""}
	errHostNotLocal = &apiError{http.StatusForbidden, "forbidden",
		"the console without operator accounts answers only requests addressed to localhost or a loopback address", ""}
	errInternal = &apiError{http.StatusInternalServerError, "internal", "internal error", ""}
)

func writeAPIError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter != "" {
		w.Header().Set("Retry-After", e.retryAfter)
	}
	apijson.Error(w, e.status, e.code, e.message)
}

// healthCheck reports a request for the guardian's health check (guardian.HealthPath) as
// it is written, unescaped. Load balancers and orchestrators call it without credentials,
// so ConsoleMiddleware lets a GET or HEAD of exactly this path through: it answers only
// whether the process can serve. A spelling the mux would route there too
// (/api/%68ealth) is checked as any console request.
func healthCheck(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.URL.Path == guardian.HealthPath && r.URL.EscapedPath() == guardian.HealthPath
}

// Wrap applies AgentMiddleware to /aos (and its dry run /aos/preview) and ConsoleMiddleware to everything else: the one
// call needed around the guardian's whole handler. Behind a trusted proxy it first sets the
// request's RemoteAddr to the client the proxy names.
func (a *Auth) Wrap(next http.Handler) http.Handler {
	agent, console := a.AgentMiddleware(next), a.ConsoleMiddleware(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = a.realClient(r)
		if r.URL.Path == "/aos" || r.URL.Path == "/aos/preview" {
			agent.ServeHTTP(w, r)
			return
		}
		console.ServeHTTP(w, r)
	})
}

// ConsoleMiddleware guards the console API (/api/…; the static UI, /aos, /api/auth/… and
// the health check pass through). Once operator accounts exist every request needs a signed-in session
// whose role suffices for the route (see RequiredRole), and every state-changing request
// must carry the session's CSRF token in X-CSRF-Token. With no accounts the console is open
// to clients on this machine when the server listens on loopback (or anywhere with
// Config.Insecure). The signed-in operator is available to handlers through OperatorFrom.
func (a *Auth) ConsoleMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The path is read two ways, and the stricter reading decides: decoded (as the mux
		// matches a literal segment: /api/%6beys is /api/keys) and escaped (as the mux splits
		// segments: in /api/sessions/a%2F..%2F..%2F../steps the id is one segment, which the
		// decoded path cleans away, leaving /steps).
		decoded, escaped := cleanPath(r.URL.Path), cleanPath(r.URL.EscapedPath())
		api := func(p string) bool { return strings.HasPrefix(p, "/api/") }
		signIn := func(p string) bool { return strings.HasPrefix(p, "/api/auth/") }
		if !api(decoded) && !api(escaped) || signIn(decoded) && signIn(escaped) || healthCheck(r) {
			next.ServeHTTP(w, r)
			return
		}
		hasEscapes := r.URL.RawPath != ""
		role := RequiredRole(r.Method, decoded, hasEscapes)
		if other := RequiredRole(r.Method, escaped, hasEscapes); roleRank(other) > roleRank(role) {
			role = other
		}
		pr, aerr := a.authorize(r, role)
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey, pr)))
	})
}

// AuthorizeRequest checks a request the way ConsoleMiddleware does for a read (a signed-in
// session of any role, or the open zero-config console); use it as live.Options.Authorize
// for the websocket, which browsers open with the session cookie.
func (a *Auth) AuthorizeRequest(r *http.Request) error {
	if _, aerr := a.authorize(r, RoleViewer); aerr != nil {
		return aerr
	}
	return nil
}

// cleanPath is a path as routing decisions read it. The mux redirects a path that is not
// clean, but it judges cleanliness on the escaped path, where an encoded slash is not one:
// ConsoleMiddleware therefore reads both forms.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// RequiredRole is the least role a console request needs: reads need viewer (keys and
// accounts: admin); deciding holds and pausing, resuming or blocking sessions needs
// reviewer, and so does commenting on a session or step; dry runs of rules (validate, test, backtest) change nothing and need viewer;
// every other change needs admin. escaped reports a path with escaped characters, which
// only ever gets the strictest role for a change.
func RequiredRole(method, p string, escaped bool) string {
	under := func(prefix string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		if under("/api/keys") || under("/api/users") {
			return RoleAdmin
		}
		return RoleViewer
	}
	if escaped {
		return RoleAdmin
	}
	seg := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(seg) == 4 && seg[0] == "api" && seg[1] == "holds" &&
		(seg[3] == "approve" || seg[3] == "deny" || seg[3] == "modify"):
		return RoleReviewer
	case len(seg) == 4 && seg[0] == "api" && seg[1] == "sessions" &&
		(seg[3] == "pause" || seg[3] == "resume" || seg[3] == "block" || seg[3] == "comments"):
		return RoleReviewer
	case len(seg) == 3 && seg[0] == "api" && seg[1] == "rules" &&
		(seg[2] == "validate" || seg[2] == "test" || seg[2] == "backtest"):
		return RoleViewer
	}
	return RoleAdmin
}

func mutating(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// authorize decides a console request needing role: the signed-in principal, or the open
// principal of the zero-config console.
func (a *Auth) authorize(r *http.Request, role string) (principal, *apiError) {
	p, aerr := a.identify(r)
	if aerr != nil {
		return principal{}, aerr
	}
	if p.open {
		if mutating(r.Method) && !a.sameOrigin(r) {
			return principal{}, errCrossOrigin
		}
		return p, nil
	}
	if roleRank(p.role) < roleRank(role) {
		return principal{}, &apiError{http.StatusForbidden, "forbidden",
			"this needs the " + role + " role; " + p.name + " is a " + p.role, ""}
	}
	if mutating(r.Method) {
		got := r.Header.Get(CSRFHeader)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(p.csrf)) != 1 {
			return principal{}, errCSRF
		}
	}
	return p, nil
}

// identify returns the request's signed-in principal, or the open principal when no
// accounts exist and the zero-config console may answer this request.
func (a *Auth) identify(r *http.Request) (principal, *apiError) {
	ctx := r.Context()
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		h := hashKey(c.Value)
		s, err := a.store.AuthSession(ctx, h[:])
		switch {
		case err == nil && a.now().Before(s.ExpiresAt):
			return principal{name: s.UserName, role: s.Role, csrf: s.CSRFToken, tokenHash: h[:]}, nil
		case err != nil && !errors.Is(err, record.ErrNotFound):
			a.log.Error("auth: read session", "err", err)
			return principal{}, errInternal
		}
	}
	has, err := a.store.HasUsers(ctx)
	if err != nil {
		a.log.Error("auth: count users", "err", err)
		return principal{}, errInternal
	}
	if has {
		return principal{}, errUnauthenticated
	}
	if !a.cfg.Loopback && !a.cfg.Insecure {
		return principal{}, errNoAccountsHere
	}
	if a.localOnly() {
		if forwarded(r) {
			return principal{}, errProxied
		}
		if !loopbackHost(r.Host) {
			// A page on another site can make a browser send requests here under its own
			// host name resolved to 127.0.0.1 (DNS rebinding); such requests carry that name.
			return principal{}, errHostNotLocal
		}
	}
	return principal{open: true, role: RoleAdmin}, nil
}

// localOnly is the zero-config console's condition: loopback listener, no --insecure.
func (a *Auth) localOnly() bool { return a.cfg.Loopback && !a.cfg.Insecure }

// forwarded reports whether a proxy relayed the request: then its real client may be
// anywhere, even though the connection comes from this machine.
func forwarded(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip"} {
		if r.Header.Get(h) != "" {
			return true
		}
	}
	return false
}

// loopbackHost reports whether a Host header names this machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin accepts a request without an Origin header (not a browser, or a same-origin
// navigation), one from the server's own origin, or one from Config.AllowedOrigins. It keeps
// other sites' pages from changing anything through the open console.
func (a *Auth) sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	o = strings.TrimRight(o, "/")
	if a.origins[o] {
		return true
	}
	_, rest, ok := strings.Cut(o, "://")
	return ok && strings.EqualFold(rest, r.Host)
}
