package auth

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proxied is a Config behind a reverse proxy on this machine, so that tests can speak from
// many client addresses through X-Forwarded-For.
func proxied() Config {
	return Config{Loopback: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
}

func from(addr string) []string { return []string{"X-Forwarded-For", addr} }

func (c *client) loginFrom(addr, name, password string) response {
	c.t.Helper()
	return c.do(http.MethodPost, "/api/auth/login", map[string]string{"name": name, "password": password}, from(addr)...)
}

// TestLoginThrottlePerAccountAcrossAddresses: guesses at one account spread over many
// addresses are throttled together, yet the right password signs in once the account's
// current wait has passed.
func TestLoginThrottlePerAccountAcrossAddresses(t *testing.T) {
	e := newEnv(t, proxied())
	e.addUser(t, "rita", RoleReviewer)
	c := newClient(t, e.server(t))
	checked := 0
	var last response
	for i := range 40 {
		last = c.loginFrom(fmt.Sprintf("198.51.100.%d", i+1), "rita", fmt.Sprintf("guess-%d", i))
		switch last.status {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("attempt %d: status %d", i, last.status)
		}
	}
	require.Equal(t, accountBackoff.free, checked, "only the free failures are answered as checked")
	require.Equal(t, "1", last.header.Get("Retry-After"))
	// During the wait even the right password is refused: a wait is no oracle.
	require.Equal(t, http.StatusTooManyRequests, c.loginFrom("192.0.2.1", "rita", "rita-password").status)
	e.clock.Advance(time.Second)
	require.Equal(t, http.StatusOK, c.loginFrom("192.0.2.1", "rita", "rita-password").status)
}

// TestLoginThrottleAccountWaitGrowsAndCaps: with each wait honoured, guesses at one account
// from fresh addresses meet doubling waits up to a minute.
func TestLoginThrottleAccountWaitGrowsAndCaps(t *testing.T) {
	e := newEnv(t, proxied())
	e.addUser(t, "rita", RoleReviewer)
	c := newClient(t, e.server(t))
	var waits []string
	for i := range accountBackoff.free + 9 {
		r := c.loginFrom(fmt.Sprintf("198.51.100.%d", i+1), "rita", "guess")
		if r.status == http.StatusTooManyRequests {
			waits = append(waits, r.header.Get("Retry-After"))
			s, err := strconv.Atoi(r.header.Get("Retry-After"))
			require.NoError(t, err)
			e.clock.Advance(time.Duration(s) * time.Second)
		}
	}
	require.Equal(t, []string{"1", "2", "4", "8", "16", "32", "60", "60", "60"}, waits)
	// The legitimate operator, after the wait: in.
	require.Equal(t, http.StatusOK, c.loginFrom("192.0.2.1", "rita", "rita-password").status)
	// And success forgot the account's failures.
	require.Equal(t, http.StatusUnauthorized, c.loginFrom("198.51.100.200", "rita", "guess").status)
}

// TestLoginThrottleOtherClientBehindSameProxy: one client's failures behind a proxy do not
// keep another client behind the same proxy from signing in.
func TestLoginThrottleOtherClientBehindSameProxy(t *testing.T) {
	e := newEnv(t, proxied())
	e.addUser(t, "rita", RoleReviewer)
	c := newClient(t, e.server(t))
	for range freeLoginFailures {
		require.Equal(t, http.StatusUnauthorized, c.loginFrom("203.0.113.5", "rita", "guess").status)
	}
	require.Equal(t, http.StatusTooManyRequests, c.loginFrom("203.0.113.5", "rita", "guess").status)
	require.Equal(t, http.StatusTooManyRequests, c.loginFrom("203.0.113.5", "rita", "rita-password").status)
	require.Equal(t, http.StatusOK, c.loginFrom("203.0.113.6", "rita", "rita-password").status)
}

// TestLoginThrottlePerAddress: one address trying a password on many names is throttled,
// and only that address.
func TestLoginThrottlePerAddress(t *testing.T) {
	e := newEnv(t, proxied())
	e.addUser(t, "rita", RoleReviewer)
	c := newClient(t, e.server(t))
	checked := 0
	for i := range 30 {
		r := c.loginFrom("203.0.113.9", fmt.Sprintf("user%d", i), "Summer2026!")
		if r.status == http.StatusUnauthorized {
			checked++
		} else {
			require.Equal(t, http.StatusTooManyRequests, r.status)
		}
	}
	require.Equal(t, addressBackoff.free, checked)
	require.Equal(t, http.StatusTooManyRequests, c.loginFrom("203.0.113.9", "rita", "rita-password").status)
	require.Equal(t, http.StatusOK, c.loginFrom("203.0.113.10", "rita", "rita-password").status)
}

// TestForwardedForOnlyFromTrustedProxies: X-Forwarded-For is the client only when the peer
// is a configured proxy; the walk skips trusted hops and stops at malformed entries.
func TestForwardedForOnlyFromTrustedProxies(t *testing.T) {
	a := &Auth{cfg: Config{TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}}}
	for _, tt := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer: header ignored", "192.0.2.1:5000", []string{"203.0.113.7"}, "192.0.2.1:5000"},
		{"trusted peer without header", "10.1.2.3:5000", nil, "10.1.2.3:5000"},
		{"trusted peer", "10.1.2.3:5000", []string{"203.0.113.7"}, "203.0.113.7:0"},
		{"spoofed left part is skipped", "10.1.2.3:5000", []string{"1.1.1.1, 203.0.113.7"}, "203.0.113.7:0"},
		{"chain of trusted proxies", "10.1.2.3:5000", []string{"203.0.113.7, 10.9.9.9", "10.8.8.8"}, "203.0.113.7:0"},
		{"all trusted: the leftmost", "10.1.2.3:5000", []string{"10.7.7.7, 10.9.9.9"}, "10.7.7.7:0"},
		{"malformed rightmost: the proxy", "10.1.2.3:5000", []string{"203.0.113.7, nonsense"}, "10.1.2.3:5000"},
		{"malformed further left stops the walk", "10.1.2.3:5000", []string{"x, 203.0.113.7, 10.9.9.9"}, "203.0.113.7:0"},
		{"port on the entry", "10.1.2.3:5000", []string{"203.0.113.7:4444"}, "203.0.113.7:0"},
		{"ipv6", "[2001:db8::1]:5000", []string{"2001:db8:ffff::2, 2001:db8::9"}, "[2001:db8:ffff::2]:0"},
		{"ipv6 client", "[2001:db8::1]:5000", []string{"2a00::1"}, "[2a00::1]:0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.peer
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			require.Equal(t, tt.want, a.realClient(r).RemoteAddr)
		})
	}
}

func TestParseTrustedProxies(t *testing.T) {
	got, err := ParseTrustedProxies(" 10.0.0.0/8, 192.0.2.7 ,::1,,2001:db8::/32")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("2001:db8::/32")}, got)
	_, err = ParseTrustedProxies("10.0.0.0/8,proxy.example")
	require.ErrorIs(t, err, ErrInvalid)
}

// TestZeroConfigStillRefusesTrustedProxies: trusting a proxy's addresses does not open the
// zero-config console to the clients behind it.
func TestZeroConfigStillRefusesTrustedProxies(t *testing.T) {
	e := newEnv(t, proxied())
	c := newClient(t, e.server(t))
	r := c.do(http.MethodGet, "/api/sessions", nil, from("203.0.113.7")...)
	require.Equal(t, http.StatusForbidden, r.status)
}

// TestFailedSignInLogsNoPasswords: a name that is no account (often a password typed into
// the wrong field) is logged only as a short hash; a real account's name is logged.
func TestFailedSignInLogsNoPasswords(t *testing.T) {
	var buf bytes.Buffer
	db := openDB(t)
	a, err := New(context.Background(), Config{Loopback: true, BcryptCost: 4},
		Options{Store: db, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	require.NoError(t, err)
	_, err = a.AddUser(context.Background(), "rita", RoleReviewer, "rita-password", "test")
	require.NoError(t, err)
	mux := http.NewServeMux()
	a.Register(mux)
	srv := httptest.NewServer(a.Wrap(mux))
	t.Cleanup(srv.Close)
	c := newClient(t, srv)

	require.Equal(t, http.StatusUnauthorized, c.login("correct-horse-battery", "x").status)
	require.Equal(t, http.StatusUnauthorized, c.login("rita", "wrong-password").status)
	log := buf.String()
	require.NotContains(t, log, "correct-horse-battery")
	require.Contains(t, log, "name="+logName("correct-horse-battery", false))
	require.Regexp(t, `name=unknown:[0-9a-f]{8} `, log)
	require.Contains(t, log, "name=rita ")
	require.NotContains(t, log, "wrong-password")
}
