package main

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// connLimiter is a listener that bounds the connections it holds: at most perIP from one
// client address and total in all. A connection over either bound is closed as soon as it
// is accepted, so idle or slow clients cannot take every file descriptor the guardian has.
// Addresses exempt (loopback peers on this machine, trusted reverse proxies, which carry
// many clients' connections) count toward the total only.
type connLimiter struct {
	net.Listener
	perIP, total int
	exempt       func(netip.Addr) bool
	log          *slog.Logger

	mu      sync.Mutex
	n       int
	byIP    map[netip.Addr]int
	refused int       // since the last log line
	logged  time.Time // when the last refusal was logged
}

func newConnLimiter(ln net.Listener, perIP, total int, exempt func(netip.Addr) bool, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, perIP: perIP, total: total, exempt: exempt, log: log,
		byIP: make(map[netip.Addr]int)}
}

// Accept returns the next connection within the bounds, closing the ones beyond them.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		if l.admit(ip) {
			return &limitedConn{Conn: c, l: l, ip: ip}, nil
		}
		_ = c.Close()
	}
}

func remoteIP(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

func (l *connLimiter) admit(ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	perIP := l.perIP > 0 && !(l.exempt != nil && l.exempt(ip))
	switch {
	case l.total > 0 && l.n >= l.total:
		l.refuse("total", ip)
		return false
	case perIP && l.byIP[ip] >= l.perIP:
		l.refuse("per-client", ip)
		return false
	}
	l.n++
	l.byIP[ip]++
	return true
}

// refuse logs refused connections at most once a minute, with how many there were.
func (l *connLimiter) refuse(bound string, ip netip.Addr) {
	l.refused++
	if now := time.Now(); now.Sub(l.logged) >= time.Minute {
		l.log.Warn("refusing connections over the connection limit", "bound", bound, "client", ip.String(),
			"refused", l.refused, "perClient", l.perIP, "total", l.total)
		l.logged, l.refused = now, 0
	}
}

func (l *connLimiter) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.byIP[ip] <= 1 {
		delete(l.byIP, ip)
	} else {
		l.byIP[ip]--
	}
}

// open is the number of connections held, for tests.
func (l *connLimiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// limitedConn gives its slot back when closed (by the server, or the websocket hub after
// a hijack), once however often Close is called.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	ip   netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// maxConnsCap is the automatic total bound's ceiling: beyond it memory, not descriptors,
// runs out first (a connection costs tens of KB with its buffers and goroutine).
const maxConnsCap = 10000

// autoMaxConns is the total bound when none is configured: three quarters of the open-file
// limit, leaving the rest for the database, the journal and the log, at most maxConnsCap.
func autoMaxConns(fileLimit uint64) int {
	if fileLimit == 0 || fileLimit > 4*maxConnsCap {
		return maxConnsCap
	}
	return max(int(fileLimit*3/4), 16)
}
