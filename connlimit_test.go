package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startFlagged starts a guardian with the given flags on a loopback port.
func startFlagged(t *testing.T, flags ...string) *server {
	t.Helper()
	args := append([]string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "vigil.db")}, flags...)
	cfg, err := parseConfig("serve", args, io.Discard)
	require.NoError(t, err)
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Shutdown(5*time.Second)) })
	return srv
}

// keepAlive opens a connection, makes one keep-alive request on it and returns it idle.
func keepAlive(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, "GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return c
}

// closedByServer reports whether the server closes c within wait (its read ends in EOF or a
// reset rather than the deadline).
func closedByServer(t *testing.T, c net.Conn, wait time.Duration) bool {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}

// TestIdleConnectionIsClosed: a keep-alive connection left idle is closed after the idle
// timeout instead of being held for ever.
func TestIdleConnectionIsClosed(t *testing.T) {
	srv := startFlagged(t, "--idle-timeout", "200ms")
	c := keepAlive(t, srv.URL)
	require.True(t, closedByServer(t, c, 5*time.Second), "the idle connection is still open")
}

// TestSecurityHeadersOnRefusals: answers of the layers around the guardian's own handler
// carry the security headers too.
func TestSecurityHeadersOnRefusals(t *testing.T) {
	srv := startFlagged(t)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/sessions", nil)
	require.NoError(t, err)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "the zero-config console refuses proxied requests")
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), "even the authentication layer's refusals carry the headers")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
}

// TestTotalConnectionCap: beyond --max-conns a new connection is closed at once, and a
// freed slot is usable again.
func TestTotalConnectionCap(t *testing.T) {
	srv := startFlagged(t, "--max-conns", "3")
	held := []net.Conn{keepAlive(t, srv.URL), keepAlive(t, srv.URL), keepAlive(t, srv.URL)}
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	defer c.Close()
	require.True(t, closedByServer(t, c, 5*time.Second), "a fourth connection was held")
	require.NoError(t, held[0].Close())
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = io.WriteString(c, "GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
		if err != nil {
			return false
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond)
}

// TestPerClientConnectionCap: one address gets at most perIP connections; the excess is
// closed, other addresses and exempt ones are not affected, and a closed connection frees
// its slot.
func TestPerClientConnectionCap(t *testing.T) {
	for _, tt := range []struct {
		name   string
		exempt bool
		want   int
	}{
		{"capped", false, 2},
		{"exempt address", true, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tcp, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			l := newConnLimiter(tcp, 2, 100, func(netip.Addr) bool { return tt.exempt }, slog.New(slog.DiscardHandler))
			defer l.Close()
			accepted := make(chan net.Conn, 10)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c
				}
			}()
			var clients []net.Conn
			for range 4 {
				c, err := net.Dial("tcp", tcp.Addr().String())
				require.NoError(t, err)
				defer c.Close()
				clients = append(clients, c)
			}
			var server []net.Conn
			for range tt.want {
				server = append(server, <-accepted)
			}
			require.Equal(t, tt.want, l.open())
			if tt.exempt {
				return
			}
			// The two beyond the cap were closed by the listener.
			require.True(t, closedByServer(t, clients[2], 5*time.Second))
			require.True(t, closedByServer(t, clients[3], 5*time.Second))
			require.NoError(t, server[0].Close())
			_ = server[0].Close() // a second Close frees nothing more
			require.Equal(t, 1, l.open())
			c, err := net.Dial("tcp", tcp.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			<-accepted
			require.Equal(t, 2, l.open())
		})
	}
}

func TestAutoMaxConns(t *testing.T) {
	require.Equal(t, maxConnsCap, autoMaxConns(0))
	require.Equal(t, 192, autoMaxConns(256))
	require.Equal(t, 16, autoMaxConns(10))
	require.Equal(t, maxConnsCap, autoMaxConns(1<<20))
}

// TestHardeningFlags: the new flags' defaults, and their VIGIL_* variables.
func TestHardeningFlags(t *testing.T) {
	cfg, err := parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, time.Minute, cfg.ReadTimeout)
	require.Equal(t, time.Minute, cfg.WriteTimeout)
	require.Equal(t, time.Minute, cfg.IdleTimeout)
	require.Equal(t, 64, cfg.MaxConnsPerIP)
	require.Zero(t, cfg.MaxConns)
	require.Empty(t, cfg.TrustedProxies)

	t.Setenv("VIGIL_TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.7")
	t.Setenv("VIGIL_IDLE_TIMEOUT", "5s")
	cfg, err = parseConfig("serve", []string{"--max-conns-per-ip", "8"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")}, cfg.TrustedProxies)
	require.Equal(t, 5*time.Second, cfg.IdleTimeout)
	require.Equal(t, 8, cfg.MaxConnsPerIP)

	_, err = parseConfig("serve", []string{"--trusted-proxies", "proxy.example"}, io.Discard)
	require.ErrorContains(t, err, "trusted-proxies")
}
