package systest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// socketFDs counts the server's open sockets (its listener included).
func socketFDs(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n, nil
}

// TestIdleKeepAliveConnections: 500 anonymous clients each make one keep-alive request and
// then sit idle. The server holds them only until the idle timeout, then closes every one,
// and new clients are served throughout.
func TestIdleKeepAliveConnections(t *testing.T) {
	bin := vigilBin(t)
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc to count the server's sockets")
	}
	const clients = 500
	// Long enough that the first clients are still open when the 500th is answered on a
	// busy machine.
	const idle = 5 * time.Second
	p := startVigil(t, bin, filepath.Join(t.TempDir(), "vigil.db"), "--idle-timeout", idle.String())
	addr := strings.TrimPrefix(p.URL, "http://")
	base, err := socketFDs(p.Pid())
	require.NoError(t, err)

	conns := make([]net.Conn, 0, clients)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range clients {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = io.WriteString(c, "GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	held, err := socketFDs(p.Pid())
	require.NoError(t, err)
	t.Logf("server sockets: %d before, %d with %d idle keep-alive clients", base, held, clients)
	require.GreaterOrEqual(t, held-base, clients*9/10, "the clients' connections are open while in use")

	// Every idle connection is closed by the server after the idle timeout: each client
	// reads EOF well within a few timeouts.
	deadline := time.Now().Add(idle + 10*time.Second)
	closed := 0
	for _, c := range conns {
		require.NoError(t, c.SetReadDeadline(deadline))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				closed++
			}
		}
	}
	require.Eventually(t, func() bool {
		n, err := socketFDs(p.Pid())
		return err == nil && n <= base
	}, 10*time.Second, 50*time.Millisecond)
	after, err := socketFDs(p.Pid())
	require.NoError(t, err)
	t.Logf("after the %s idle timeout: the server closed %d of %d connections and holds %d sockets (%d before)",
		idle, closed, clients, after, base)
	require.Equal(t, clients, closed)

	// Still serving.
	resp, err := http.Get(p.URL + "/api/info")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
