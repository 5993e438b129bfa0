package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

func TestLoginMeLogout(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "rita", RoleReviewer)
	srv := e.server(t)
	c := newClient(t, srv)

	r := c.login("rita", "rita-password")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var me Me
	require.NoError(t, json.Unmarshal(r.body, &me))
	require.Equal(t, "rita", me.Name)
	require.Equal(t, RoleReviewer, me.Role)
	require.True(t, me.AuthRequired)
	require.Len(t, me.CSRFToken, 43)

	// The cookie: HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP.
	setCookie := r.header.Get("Set-Cookie")
	require.Contains(t, setCookie, SessionCookie+"=")
	require.Contains(t, setCookie, "HttpOnly")
	require.Contains(t, setCookie, "SameSite=Strict")
	require.Contains(t, setCookie, "Path=/")
	require.NotContains(t, setCookie, "Secure")
	require.Contains(t, setCookie, "Max-Age=43200")

	// The server keeps only the token's hash.
	cookie := c.http.Jar.(*cookieJar).get(SessionCookie)
	h := hashKey(cookie.Value)
	s, err := e.db.AuthSession(context.Background(), h[:])
	require.NoError(t, err)
	require.Equal(t, "rita", s.UserName)
	require.Equal(t, e.clock.Now().Add(12*time.Hour), s.ExpiresAt)

	r = c.do("GET", "/api/auth/me", nil)
	require.Equal(t, http.StatusOK, r.status)
	var again Me
	require.NoError(t, json.Unmarshal(r.body, &again))
	require.Equal(t, me, again)

	r = c.do("POST", "/api/auth/logout", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.header.Get("Set-Cookie"), "Max-Age=0")
	_, err = e.db.AuthSession(context.Background(), h[:])
	require.ErrorIs(t, err, record.ErrNotFound)

	// The old cookie is dead even if a client keeps sending it.
	r = c.do("GET", "/api/auth/me", nil, "Cookie", SessionCookie+"="+cookie.Value)
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Equal(t, "unauthenticated", r.errorCode(t))
	r = c.do("GET", "/api/sessions", nil, "Cookie", SessionCookie+"="+cookie.Value)
	require.Equal(t, http.StatusUnauthorized, r.status)

	entries, err := e.db.ListAudit(context.Background(), record.AuditQuery{Type: "auth"})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, record.AuditLogout, entries[0].Type)
	require.Equal(t, "rita", entries[0].Operator)
	require.Equal(t, record.AuditLogin, entries[1].Type)
	require.Equal(t, "rita", entries[1].Operator)
}

func TestLoginNamesCompareWithoutCase(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "Rita", RoleReviewer)
	c := newClient(t, e.server(t))
	r := c.login("rita", "Rita-password")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var me Me
	require.NoError(t, json.Unmarshal(r.body, &me))
	require.Equal(t, "Rita", me.Name, "the stored spelling")
}

func TestWrongPassword(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "rita", RoleReviewer)
	c := newClient(t, e.server(t))
	for _, tt := range []struct{ name, password string }{
		{"rita", "wrong-password"},
		{"rita", ""},
		{"nobody", "rita-password"},
	} {
		r := c.login(tt.name, tt.password)
		require.Equal(t, http.StatusUnauthorized, r.status)
		require.Equal(t, "invalid_credentials", r.errorCode(t))
		require.Empty(t, r.header.Get("Set-Cookie"))
	}
}

func TestLoginThrottle(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "rita", RoleReviewer)
	c := newClient(t, e.server(t))
	for i := 0; i < freeLoginFailures; i++ {
		require.Equal(t, http.StatusUnauthorized, c.login("rita", "guess").status)
	}
	// The next failure starts the backoff: 1 s, then 2 s…
	r := c.login("rita", "guess")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "rate_limited", r.errorCode(t))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	// Even the right password waits.
	r = c.login("rita", "rita-password")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	// Another account from the same address is not affected.
	e.addUser(t, "vera", RoleViewer)
	require.Equal(t, http.StatusOK, c.login("vera", "vera-password").status)

	e.clock.Advance(time.Second)
	r = c.login("rita", "guess")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "2", r.header.Get("Retry-After"))
	e.clock.Advance(2 * time.Second)
	require.Equal(t, http.StatusOK, c.login("RITA", "rita-password").status)
	// Success forgets the failures.
	require.Equal(t, http.StatusUnauthorized, c.login("rita", "guess").status)
}

func TestLoginThrottleMemoryIsBounded(t *testing.T) {
	th := newLoginThrottle(pairBackoff, 20)
	now := time.Unix(1000, 0)
	for i := 0; i < 500; i++ {
		th.fail(strings.Repeat("x", i%50)+"\x00"+string(rune('a'+i%26)), now)
		require.LessOrEqual(t, len(th.entries), 20)
	}
}

func TestLoginRequestChecks(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "rita", RoleReviewer)
	srv := e.server(t)
	post := func(contentType, origin, body string) int {
		req, err := http.NewRequest("POST", srv.URL+"/api/auth/login", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	good := `{"name":"rita","password":"rita-password"}`
	require.Equal(t, http.StatusUnsupportedMediaType, post("text/plain", "", good))
	require.Equal(t, http.StatusUnsupportedMediaType, post("application/x-www-form-urlencoded", "", good))
	require.Equal(t, http.StatusBadRequest, post("application/json", "", `{"name":`))
	require.Equal(t, http.StatusOK, post("application/json; charset=utf-8", srv.URL, good))
	// Behind a proxy that rewrites the Host, the browser's origin differs from the Host.
	require.Equal(t, http.StatusOK, post("application/json", "https://vigil.example", good))
}

func TestSessionCookieSecureOverTLS(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "rita", RoleReviewer)
	srv := e.serverWith(t, httptest.NewTLSServer)
	c := newClient(t, srv)
	r := c.login("rita", "rita-password")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.header.Get("Set-Cookie"), "; Secure")
	require.Equal(t, http.StatusOK, c.do("GET", "/api/sessions", nil).status)

	// Behind a TLS-terminating proxy the setting forces it.
	e2 := newEnv(t, Config{Loopback: true, SecureCookies: true})
	e2.addUser(t, "rita", RoleReviewer)
	r = newClient(t, e2.server(t)).login("rita", "rita-password")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.header.Get("Set-Cookie"), "; Secure")
}

func TestSessionExpiresAndEndsWithPasswordChangeOrRemoval(t *testing.T) {
	e := newEnv(t, Config{Loopback: true, SessionTTL: time.Hour})
	e.addUser(t, "adam", RoleAdmin)
	e.addUser(t, "rita", RoleReviewer)
	srv := e.server(t)

	c := newClient(t, srv)
	require.Equal(t, http.StatusOK, c.login("rita", "rita-password").status)
	e.clock.Advance(59 * time.Minute)
	require.Equal(t, http.StatusOK, c.do("GET", "/api/sessions", nil).status)
	e.clock.Advance(time.Minute)
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/api/sessions", nil).status)

	require.Equal(t, http.StatusOK, c.login("rita", "rita-password").status)
	require.NoError(t, e.a.SetPassword(context.Background(), "rita", "brand-new-password", "adam"))
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/api/sessions", nil).status)
	require.Equal(t, http.StatusUnauthorized, c.login("rita", "rita-password").status)
	require.Equal(t, http.StatusOK, c.login("rita", "brand-new-password").status)

	_, err := e.a.RemoveUser(context.Background(), "rita", "adam", true)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/api/sessions", nil).status)

	// Expired sessions are removed by Run's sweep.
	a := newClient(t, srv)
	require.Equal(t, http.StatusOK, a.login("adam", "adam-password").status)
	e.clock.Advance(2 * time.Hour)
	n, err := e.db.DeleteExpiredAuthSessions(context.Background(), e.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func TestLoginReplacesPreviousSession(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	e.addUser(t, "rita", RoleReviewer)
	c := newClient(t, e.server(t))
	require.Equal(t, http.StatusOK, c.login("rita", "rita-password").status)
	first := c.http.Jar.(*cookieJar).get(SessionCookie).Value
	require.Equal(t, http.StatusOK, c.login("rita", "rita-password").status)
	second := c.http.Jar.(*cookieJar).get(SessionCookie).Value
	require.NotEqual(t, first, second)
	h := hashKey(first)
	_, err := e.db.AuthSession(context.Background(), h[:])
	require.ErrorIs(t, err, record.ErrNotFound)
}
