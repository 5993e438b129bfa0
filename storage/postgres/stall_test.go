package postgres

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
)

// stallProxy relays TCP connections to PostgreSQL and can stall them: connections stay
// open and no byte passes, as on a stalled network path or with a frozen server.
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled bool
	resumed chan struct{} // closed when a stall ends
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln, target: target, resumed: make(chan struct{})}
	close(p.resumed)
	var conns sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { p.relay(c) })
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.stall(false)
	})
	return p
}

func (p *stallProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// gate waits while the proxy is stalled.
func (p *stallProxy) gate() {
	p.mu.Lock()
	ch := p.resumed
	p.mu.Unlock()
	<-ch
}

func (p *stallProxy) relay(c net.Conn) {
	defer c.Close()
	p.gate()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	var wg sync.WaitGroup
	for _, pair := range [][2]net.Conn{{c, s}, {s, c}} {
		wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := pair[1].Read(buf)
				if n > 0 {
					p.gate()
					if _, werr := pair[0].Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			pair[0].Close()
			pair[1].Close()
		})
	}
	wg.Wait()
}

func (p *stallProxy) stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.stalled {
		return
	}
	p.stalled = on
	if on {
		p.resumed = make(chan struct{})
	} else {
		close(p.resumed)
	}
}

// A database that stops answering without closing its connections fails every call in
// bounded time (QueryTimeout), so a step gets the guardian's internal error instead of
// waiting as long as the stall, and the backend works again once the stall ends.
func TestAStalledDatabaseFailsCallsInBoundedTime(t *testing.T) {
	dsn := pgtest.Need(t, srv)
	px := newStallProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.Port()))
	ctx := context.Background()
	const timeout = 300 * time.Millisecond
	db, err := Open(ctx, strings.Replace(dsn, fmt.Sprintf(":%d/", srv.Port()), fmt.Sprintf(":%d/", px.port()), 1),
		Options{QueryTimeout: timeout})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	rec := step("s")
	require.NoError(t, db.SaveStep(ctx, rec))
	// Connections open before the stall, as in a running guardian: the calls below meet
	// the stall on them, not in connecting.
	var warm []func()
	for range 8 {
		c, err := db.pool.Acquire(ctx)
		require.NoError(t, err)
		warm = append(warm, c.Release)
	}
	for _, release := range warm {
		release()
	}

	px.stall(true)
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"save a step", func(ctx context.Context) error { return db.SaveStep(ctx, step("s")) }},
		{"read a session", func(ctx context.Context) error { _, err := db.Session(ctx, "s"); return err }},
		{"read a session's recent steps", func(ctx context.Context) error { _, err := db.RecentSteps(ctx, "s", 10); return err }},
		{"read a step", func(ctx context.Context) error { _, err := db.Step(ctx, rec.Seq); return err }},
		{"store a hold", func(ctx context.Context) error {
			h := &record.Hold{ID: "h1", SessionID: "s", Method: "steps/toolCallRequest", CreatedAt: time.Now(),
				Deadline: time.Now().Add(time.Minute), OnTimeout: "deny", Status: record.HoldPending}
			_, err := db.CreateHold(ctx, h, nil)
			return err
		}},
		{"check an agent key", func(ctx context.Context) error { _, err := db.HasAPIKeys(ctx); return err }},
		{"search", func(ctx context.Context) error { _, err := db.Search(ctx, record.SearchQuery{Text: "x"}); return err }},
	}
	var wg sync.WaitGroup
	took := make([]time.Duration, len(calls))
	errs := make([]error, len(calls))
	for i, c := range calls {
		wg.Go(func() {
			start := time.Now()
			errs[i] = c.call(ctx) // no deadline of its own, as an HTTP request's
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, c := range calls {
		t.Logf("%s: %s", c.name, took[i])
		require.ErrorIs(t, errs[i], ErrTimeout, c.name)
		require.NotErrorIs(t, errs[i], context.DeadlineExceeded, "%s: the caller cancelled nothing", c.name)
		// A step's commit may wait for the batch before it; the console's slow reads get
		// six times as long.
		require.Less(t, took[i], 12*timeout+2*time.Second, "%s took %s", c.name, took[i])
	}

	// Connecting is bounded too (ConnectTimeout), for what runs without a deadline of its
	// own, such as Open.
	start := time.Now()
	_, err = Open(ctx, strings.Replace(dsn, fmt.Sprintf(":%d/", srv.Port()), fmt.Sprintf(":%d/", px.port()), 1),
		Options{QueryTimeout: timeout, ConnectTimeout: timeout})
	require.Error(t, err)
	require.Less(t, time.Since(start), 2*timeout+2*time.Second)

	px.stall(false)
	require.Eventually(t, func() bool { return db.SaveStep(ctx, step("s")) == nil }, 10*time.Second, 10*time.Millisecond,
		"the pool replaces the connections the stall broke")
}
