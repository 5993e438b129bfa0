package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is an Auth over a real database file, with the events it published.
type env struct {
	a     *Auth
	db    *sqlite.DB
	clock *clock

	mu        sync.Mutex
	published []record.Event
}

func (e *env) events() []record.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]record.Event(nil), e.published...)
}

func openDB(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// newEnv builds team mode on a fresh database. Passwords hash at bcrypt's lowest cost, so
// tests stay fast.
func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	return newEnvOn(t, openDB(t), cfg)
}

func newEnvOn(t testing.TB, db *sqlite.DB, cfg Config) *env {
	t.Helper()
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = 4
	}
	e := &env{db: db, clock: newClock()}
	a, err := New(context.Background(), cfg, Options{Store: db, Now: e.clock.Now, Publish: func(ev record.Event) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.published = append(e.published, ev)
	}})
	require.NoError(t, err)
	e.a = a
	return e
}

func (e *env) addUser(t testing.TB, name, role string) {
	t.Helper()
	_, err := e.a.AddUser(context.Background(), name, role, name+"-password", "test")
	require.NoError(t, err)
}

func (e *env) createKey(t testing.TB, agentID string, life time.Duration) (Key, string) {
	t.Helper()
	k, secret, err := e.a.CreateKey(context.Background(), KeySpec{Name: "k", AgentID: agentID, ExpiresIn: life}, "test")
	require.NoError(t, err)
	return k, secret
}

// echo is what the stand-in routes answer: who the request acted as.
type echo struct {
	Route    string `json:"route"`
	Operator string `json:"operator"`
	SignedIn bool   `json:"signedIn"`
	Agent    string `json:"agent"`
	Scoped   bool   `json:"scoped"`
	KeyID    string `json:"keyId"`
}

// consoleRoutes are stand-ins for the guardian's console API, one per route class.
var consoleRoutes = []string{
	"GET /api/sessions",
	"GET /api/steps/{seq}",
	"GET /api/compare",
	"POST /api/holds/{id}/approve",
	"POST /api/holds/{id}/deny",
	"POST /api/holds/{id}/modify",
	"POST /api/sessions/{id}/pause",
	"POST /api/sessions/{id}/resume",
	"POST /api/sessions/{id}/block",
	"POST /api/sessions/{id}/comments",
	"GET /api/sessions/{id}/comments",
	"POST /api/rules",
	"PUT /api/rules/{id}",
	"DELETE /api/rules/{id}",
	"POST /api/rules/{id}/enable",
	"POST /api/rules/validate",
	"POST /api/rules/test",
	"POST /api/rules/backtest",
	"POST /api/rules/import",
}

// server is the whole surface as main wires it: Wrap around a mux holding the guardian's
// routes (stand-ins), the /aos endpoint and Register's routes.
func (e *env) server(t testing.TB) *httptest.Server {
	t.Helper()
	return e.serverWith(t, httptest.NewServer)
}

func (e *env) serverWith(t testing.TB, start func(http.Handler) *httptest.Server) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for _, route := range consoleRoutes {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			op, ok := OperatorFrom(r)
			apijson.Write(w, http.StatusOK, echo{Route: route, Operator: op, SignedIn: ok})
		})
	}
	mux.HandleFunc("/aos", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Params struct {
				Context struct {
					Agent struct {
						ID string `json:"id"`
					} `json:"agent"`
				} `json:"context"`
			} `json:"params"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if err := CheckAgent(r.Context(), req.Params.Context.Agent.ID); err != nil {
			var rpcErr *aos.Error
			require.ErrorAs(t, err, &rpcErr)
			writeRPCError(w, http.StatusOK, rpcErr)
			return
		}
		agent, scoped := AgentScope(r.Context())
		id, _ := KeyID(r.Context())
		apijson.Write(w, http.StatusOK, echo{Route: "aos", Agent: agent, Scoped: scoped, KeyID: id})
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<!doctype html><title>Vigil</title>")
	}))
	e.a.Register(mux)
	srv := start(e.a.Wrap(mux))
	t.Cleanup(srv.Close)
	return srv
}

// client is an operator's browser: it keeps cookies and the CSRF token.
type client struct {
	t    testing.TB
	base string
	http *http.Client
	csrf string
}

func newClient(t testing.TB, srv *httptest.Server) *client {
	// srv.Client() is shared by every caller: each browser gets its own client and jar.
	hc := &http.Client{Transport: srv.Client().Transport, Jar: &cookieJar{}}
	return &client{t: t, base: srv.URL, http: hc}
}

// cookieJar is a minimal jar that, unlike net/http/cookiejar, keeps Secure cookies for
// the TLS test server's 127.0.0.1 URL the same way.
type cookieJar struct {
	mu      sync.Mutex
	cookies map[string]*http.Cookie
}

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cookies == nil {
		j.cookies = map[string]*http.Cookie{}
	}
	for _, c := range cs {
		if c.MaxAge < 0 {
			delete(j.cookies, c.Name)
			continue
		}
		j.cookies[c.Name] = c
	}
}

func (j *cookieJar) Cookies(*url.URL) []*http.Cookie {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*http.Cookie
	for _, c := range j.cookies {
		out = append(out, &http.Cookie{Name: c.Name, Value: c.Value})
	}
	return out
}

func (j *cookieJar) get(name string) *http.Cookie {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.cookies[name]
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errorCode(t testing.TB) string {
	t.Helper()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e), string(r.body))
	return e.Error.Code
}

// do sends a request; mutating requests carry the CSRF token when the client has one.
func (c *client) do(method, path string, body any, header ...string) response {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(c.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	require.NoError(c.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.csrf != "" && mutating(method) {
		req.Header.Set(CSRFHeader, c.csrf)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (c *client) login(name, password string) response {
	c.t.Helper()
	r := c.do(http.MethodPost, "/api/auth/login", map[string]string{"name": name, "password": password})
	if r.status == http.StatusOK {
		var me Me
		require.NoError(c.t, json.Unmarshal(r.body, &me))
		c.csrf = me.CSRFToken
	}
	return r
}

// rpc posts a JSON-RPC step to /aos with the given key (none when empty).
func rpc(t testing.TB, srv *httptest.Server, key, agentID string, header ...string) (int, http.Header, aos.Response, []byte) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"steps/message","params":{"context":{"agent":{"id":"` + agentID + `"}}}}`
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/aos", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out aos.Response
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, resp.Header, out, b
}
