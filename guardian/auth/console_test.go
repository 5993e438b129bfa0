package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/live"
)

// routeCase is one request per route class, with the least role it needs.
type routeCase struct {
	method, path string
	need         string
}

var routeCases = []routeCase{
	{"GET", "/api/sessions", RoleViewer},
	{"GET", "/api/steps/7", RoleViewer},
	{"GET", "/api/compare", RoleViewer},
	{"POST", "/api/holds/h1/approve", RoleReviewer},
	{"POST", "/api/holds/h1/deny", RoleReviewer},
	{"POST", "/api/holds/h1/modify", RoleReviewer},
	{"POST", "/api/sessions/s1/pause", RoleReviewer},
	{"POST", "/api/sessions/s1/comments", RoleReviewer},
	{"GET", "/api/sessions/s1/comments", RoleViewer},
	{"POST", "/api/sessions/s1/resume", RoleReviewer},
	{"POST", "/api/sessions/s1/block", RoleReviewer},
	{"POST", "/api/rules/validate", RoleViewer},
	{"POST", "/api/rules/test", RoleViewer},
	{"POST", "/api/rules/backtest", RoleViewer},
	{"POST", "/api/rules", RoleAdmin},
	{"PUT", "/api/rules/r1", RoleAdmin},
	{"DELETE", "/api/rules/r1", RoleAdmin},
	{"POST", "/api/rules/r1/enable", RoleAdmin},
	{"POST", "/api/rules/import", RoleAdmin},
	{"GET", "/api/keys", RoleAdmin},
	{"POST", "/api/keys", RoleAdmin},
	{"POST", "/api/keys/key_x/revoke", RoleAdmin},
	{"GET", "/api/users", RoleAdmin},
	{"POST", "/api/users", RoleAdmin},
	{"DELETE", "/api/users/nobody", RoleAdmin},
}

func TestRoleChecksOnEveryRouteClass(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	for _, name := range []string{"vera", "rita", "adam"} {
		e.addUser(t, name, map[string]string{"vera": RoleViewer, "rita": RoleReviewer, "adam": RoleAdmin}[name])
	}
	srv := e.server(t)
	users := []struct{ name, role string }{{"vera", RoleViewer}, {"rita", RoleReviewer}, {"adam", RoleAdmin}}
	clients := map[string]*client{}
	for _, u := range users {
		c := newClient(t, srv)
		require.Equal(t, http.StatusOK, c.login(u.name, u.name+"-password").status)
		clients[u.name] = c
	}
	for _, rc := range routeCases {
		for _, u := range users {
			t.Run(u.role+" "+rc.method+" "+rc.path, func(t *testing.T) {
				// Bodies the admin routes reject, so no state changes between cases.
				var body any
				if mutating(rc.method) {
					body = map[string]any{"unknownField": true}
				}
				r := clients[u.name].do(rc.method, rc.path, body)
				if roleRank(u.role) < roleRank(rc.need) {
					require.Equal(t, http.StatusForbidden, r.status, string(r.body))
					require.Equal(t, "forbidden", r.errorCode(t))
					return
				}
				require.NotEqual(t, http.StatusForbidden, r.status, string(r.body))
				require.NotEqual(t, http.StatusUnauthorized, r.status, string(r.body))
				if strings.HasPrefix(rc.path, "/api/keys") || strings.HasPrefix(rc.path, "/api/users") {
					return // the real handlers answered (400/404 for the junk bodies, 200 for lists)
				}
				require.Equal(t, http.StatusOK, r.status)
				var got echo
				require.NoError(t, json.Unmarshal(r.body, &got))
				require.Equal(t, u.name, got.Operator, "the handler sees the signed-in operator")
				require.True(t, got.SignedIn)
			})
		}
	}
}

func TestConsoleNeedsSessionOnceAccountsExist(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "adam", RoleAdmin)
	srv := e.server(t)
	c := newClient(t, srv)
	for _, rc := range routeCases {
		r := c.do(rc.method, rc.path, nil)
		require.Equal(t, http.StatusUnauthorized, r.status, rc.path)
		require.Equal(t, "unauthenticated", r.errorCode(t))
	}
	// A made-up session cookie is no session.
	r := c.do("GET", "/api/sessions", nil, "Cookie", SessionCookie+"=forged")
	require.Equal(t, http.StatusUnauthorized, r.status)

	// The UI, /aos (no keys yet) and the sign-in routes stay reachable.
	r = c.do("GET", "/", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, string(r.body), "<title>Vigil</title>")
	status, _, _, _ := rpc(t, srv, "", "a")
	require.Equal(t, http.StatusOK, status)
	r = c.do("GET", "/api/auth/me", nil)
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Equal(t, "unauthenticated", r.errorCode(t))
}

func TestCSRF(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "adam", RoleAdmin)
	srv := e.server(t)
	c := newClient(t, srv)
	require.Equal(t, http.StatusOK, c.login("adam", "adam-password").status)
	token := c.csrf
	require.NotEmpty(t, token)

	tests := []struct {
		name   string
		token  string
		status int
	}{
		{"missing", "", http.StatusForbidden},
		{"wrong", token[:len(token)-1] + "x", http.StatusForbidden},
		{"another session's", "", http.StatusForbidden},
		{"right", token, http.StatusOK},
	}
	other := newClient(t, srv)
	require.Equal(t, http.StatusOK, other.login("adam", "adam-password").status)
	tests[2].token = other.csrf

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.csrf = "" // set by hand below
			r := c.do("POST", "/api/holds/h1/approve", map[string]string{}, CSRFHeader, tt.token)
			require.Equal(t, tt.status, r.status, string(r.body))
			if tt.status == http.StatusForbidden {
				require.Equal(t, "csrf_failed", r.errorCode(t))
			}
		})
	}
	// Reads need no token.
	c.csrf = ""
	require.Equal(t, http.StatusOK, c.do("GET", "/api/sessions", nil).status)
	// The admin API checks it too.
	r := c.do("POST", "/api/keys", map[string]string{"agentId": "x"})
	require.Equal(t, http.StatusForbidden, r.status)
	require.Equal(t, "csrf_failed", r.errorCode(t))
}

func TestZeroConfigLoopbackAllowsAll(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	srv := e.server(t)
	c := newClient(t, srv)
	for _, rc := range routeCases {
		if strings.HasPrefix(rc.path, "/api/keys") || strings.HasPrefix(rc.path, "/api/users") {
			continue
		}
		r := c.do(rc.method, rc.path, map[string]string{"operator": "typed"})
		require.Equal(t, http.StatusOK, r.status, rc.path)
		var got echo
		require.NoError(t, json.Unmarshal(r.body, &got))
		require.False(t, got.SignedIn, "nobody is signed in: the body names the operator")
	}
	r := c.do("GET", "/api/keys", nil)
	require.Equal(t, http.StatusOK, r.status)
	r = c.do("GET", "/api/auth/me", nil)
	require.Equal(t, http.StatusOK, r.status)
	var me Me
	require.NoError(t, json.Unmarshal(r.body, &me))
	require.Equal(t, Me{Role: RoleAdmin, AuthRequired: false}, me)
	status, _, _, _ := rpc(t, srv, "", "a")
	require.Equal(t, http.StatusOK, status)
}

func TestZeroConfigGuards(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		method string
		header []string
		status int
	}{
		{"non-loopback without accounts", Config{}, "GET", nil, http.StatusUnauthorized},
		{"non-loopback insecure", Config{Insecure: true}, "GET", nil, http.StatusOK},
		{"insecure ignores the host", Config{Insecure: true}, "GET", []string{"Host", "vigil.example"}, http.StatusOK},
		{"localhost host", Config{Loopback: true}, "GET", []string{"Host", "localhost:7878"}, http.StatusOK},
		{"ipv6 loopback host", Config{Loopback: true}, "GET", []string{"Host", "[::1]:7878"}, http.StatusOK},
		{"rebinding host", Config{Loopback: true}, "GET", []string{"Host", "attacker.example:7878"}, http.StatusForbidden},
		{"through a proxy", Config{Loopback: true}, "GET", []string{"X-Forwarded-For", "198.51.100.7"}, http.StatusForbidden},
		{"through a proxy (Forwarded)", Config{Loopback: true}, "GET", []string{"Forwarded", "for=198.51.100.7"}, http.StatusForbidden},
		{"cross-origin change", Config{Loopback: true}, "POST", []string{"Origin", "https://attacker.example"}, http.StatusForbidden},
		{"cross-origin change, insecure", Config{Insecure: true}, "POST", []string{"Origin", "https://attacker.example"}, http.StatusForbidden},
		{"cross-origin read", Config{Loopback: true}, "GET", []string{"Origin", "https://attacker.example"}, http.StatusOK},
		{"allowed origin", Config{Loopback: true, AllowedOrigins: []string{"wails://wails"}}, "POST", []string{"Origin", "wails://wails"}, http.StatusOK},
		{"no origin (curl)", Config{Loopback: true}, "POST", nil, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.cfg)
			srv := e.server(t)
			c := newClient(t, srv)
			path := "/api/sessions"
			if tt.method == "POST" {
				path = "/api/holds/h1/approve"
			}
			r := c.do(tt.method, path, nil, tt.header...)
			require.Equal(t, tt.status, r.status, string(r.body))
		})
	}

	t.Run("same origin change", func(t *testing.T) {
		e := newEnv(t, Config{Loopback: true})
		srv := e.server(t)
		r := newClient(t, srv).do("POST", "/api/rules", map[string]string{}, "Origin", srv.URL)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
	})
}

func TestRequiredRole(t *testing.T) {
	for _, rc := range routeCases {
		require.Equal(t, rc.need, RequiredRole(rc.method, rc.path, false), rc.method+" "+rc.path)
	}
	tests := []struct {
		method, path string
		escaped      bool
		want         string
	}{
		{"POST", "/api/holds/h1/approve", true, RoleAdmin},
		{"POST", "/api/holds/h1/approve/extra", false, RoleAdmin},
		{"POST", "/api/holds/approve", false, RoleAdmin},
		{"PATCH", "/api/holds/h1/approve", false, RoleReviewer},
		{"GET", "/api/keys/key_1", false, RoleAdmin},
		{"GET", "/api/keysmith", false, RoleViewer},
		{"HEAD", "/api/stats", false, RoleViewer},
		{"POST", "/api/anything-new", false, RoleAdmin},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, RequiredRole(tt.method, tt.path, tt.escaped), tt.method+" "+tt.path)
	}
	// Decisions are made on the clean path.
	require.Equal(t, "/api/rules", cleanPath("/api/holds/../rules"))
	require.Equal(t, "/api/rules/", cleanPath("/api/./rules/"))
}

func TestUncleanPathsCannotSkipChecks(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "rita", RoleReviewer)
	srv := e.server(t)
	c := newClient(t, srv)
	require.Equal(t, http.StatusOK, c.login("rita", "rita-password").status)
	for _, p := range []string{"/api/holds/h1/../../rules", "/api/auth/../rules", "/api/holds/x%2F..%2F..%2Frules/approve"} {
		req, err := http.NewRequest("POST", srv.URL+p, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set(CSRFHeader, c.csrf)
		for _, ck := range c.http.Jar.Cookies(nil) {
			req.AddCookie(ck)
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, p)
	}
}

// An id the mux takes as one segment ("a%2F..%2F..") is not cleaned away before the checks:
// with it, /api/sessions/ID/steps once read as /steps, not under /api/, and passed
// unchecked, with no sign-in, no role and no CSRF token.
func TestEncodedDotSegmentsCannotSkipChecks(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "vera", RoleViewer)
	srv := e.server(t)
	const id = "/api/sessions/a%2F..%2F..%2F..%2F.."
	send := func(method, p string, c *client) int {
		req, err := http.NewRequest(method, srv.URL+p, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if c != nil {
			req.Header.Set(CSRFHeader, c.csrf)
			for _, ck := range c.http.Jar.Cookies(nil) {
				req.AddCookie(ck)
			}
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct{ method, path string }{
		{"GET", id + "/comments"},
		{"POST", id + "/block"},
		{"POST", id + "/comments"},
		{"POST", "/api/holds/x%2F..%2F..%2F..%2F../approve"},
		{"PUT", "/api/rules/%2E%2E%2F%2E%2E%2F%2E%2E"},
	} {
		require.Equal(t, http.StatusUnauthorized, send(tt.method, tt.path, nil), "no sign-in: %s %s", tt.method, tt.path)
	}
	viewer := newClient(t, srv)
	require.Equal(t, http.StatusOK, viewer.login("vera", "vera-password").status)
	require.Equal(t, http.StatusOK, send("GET", id+"/comments", viewer), "a viewer reads")
	for _, p := range []string{id + "/resume", id + "/comments", "/api/holds/x%2F..%2F..%2F..%2F../approve"} {
		require.Equal(t, http.StatusForbidden, send("POST", p, viewer), "a viewer does not change: %s", p)
	}
}

// liveServer serves a running live hub with opts (its Source e's store) at /api/live, next
// to the sign-in routes, and returns the hub, the server and the websocket URL.
func (e *env) liveServer(t *testing.T, opts live.Options) (*live.Hub, *httptest.Server, string) {
	t.Helper()
	opts.Source = e.db
	hub := live.NewHub(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		hub.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	mux := http.NewServeMux()
	mux.Handle("GET /api/live", hub)
	e.a.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return hub, srv, "ws" + strings.TrimPrefix(srv.URL, "http") + "/api/live"
}

func TestWebsocketNeedsSession(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "vera", RoleViewer)
	// The hub alone (not behind ConsoleMiddleware): AuthorizeRequest is the only guard.
	_, srv, wsURL := e.liveServer(t, live.Options{Authorize: e.a.AuthorizeRequest})

	conn, resp, err := websocket.DefaultDialer.Dial(wsURL, nil)
	require.Error(t, err)
	require.Nil(t, conn)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp.Body.Close()

	conn, resp, err = websocket.DefaultDialer.Dial(wsURL, http.Header{"Cookie": {SessionCookie + "=forged"}})
	require.Error(t, err)
	require.Nil(t, conn)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp.Body.Close()

	c := newClient(t, srv)
	require.Equal(t, http.StatusOK, c.login("vera", "vera-password").status)
	cookie := c.http.Jar.(*cookieJar).get(SessionCookie)
	require.NotNil(t, cookie)
	conn, resp, err = websocket.DefaultDialer.Dial(wsURL, http.Header{"Cookie": {SessionCookie + "=" + cookie.Value}})
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.NoError(t, conn.Close())

	// An expired session no longer opens the stream.
	e.clock.Advance(13 * time.Hour)
	_, resp, err = websocket.DefaultDialer.Dial(wsURL, http.Header{"Cookie": {SessionCookie + "=" + cookie.Value}})
	require.Error(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp.Body.Close()
}

func TestWebsocketBehindConsoleMiddleware(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "vera", RoleViewer)
	srv := e.server(t)
	req, err := http.NewRequest("GET", srv.URL+"/api/live", nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestZeroConfigWebsocket(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	r := httptest.NewRequest("GET", "http://127.0.0.1:7878/api/live", nil)
	require.NoError(t, e.a.AuthorizeRequest(r))
	r = httptest.NewRequest("GET", "http://rebound.example:7878/api/live", nil)
	require.Error(t, e.a.AuthorizeRequest(r))
}

// A live stream ends with the sign-in that opened it: after a logout or the account's
// removal the next event closes it (1008) instead of reaching the browser.
func TestLiveStreamEndsWithItsSignIn(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "vera", RoleViewer)
	e.addUser(t, "walt", RoleViewer)
	hub, srv, wsURL := e.liveServer(t, live.Options{Authorize: e.a.AuthorizeRequest, AuthEpoch: e.a.Epoch})

	open := func(name string) (*client, *websocket.Conn) {
		c := newClient(t, srv)
		require.Equal(t, http.StatusOK, c.login(name, name+"-password").status)
		cookie := c.http.Jar.(*cookieJar).get(SessionCookie)
		conn, _, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Cookie": {SessionCookie + "=" + cookie.Value}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return c, conn
	}
	// A stats tick goes to every client, live only (stored events would be ordered against
	// the sign-ins' own audit events).
	publish := func() { hub.PublishStats(json.RawMessage(`{"steps":1}`)) }
	read := func(conn *websocket.Conn) error {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, _, err := conn.ReadMessage()
		return err
	}
	requireSignedOut := func(conn *websocket.Conn) {
		t.Helper()
		err := read(conn)
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, websocket.ClosePolicyViolation, ce.Code)
	}

	vera, veraConn := open("vera")
	_, waltConn := open("walt")
	publish()
	require.NoError(t, read(veraConn))
	require.NoError(t, read(waltConn))

	require.Equal(t, http.StatusOK, vera.do(http.MethodPost, "/api/auth/logout", nil).status)
	publish()
	requireSignedOut(veraConn)
	require.NoError(t, read(waltConn), "another operator's stream goes on")

	_, err := e.a.RemoveUser(context.Background(), "walt", "test", false)
	require.NoError(t, err)
	publish()
	requireSignedOut(waltConn)
}
