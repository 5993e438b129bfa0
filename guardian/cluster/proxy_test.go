package cluster_test

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// proxy relays TCP connections to a PostgreSQL server and can cut them: a network
// partition, or the server gone, for the replicas connected through it.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.relay(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.setCut(true)
	})
	return p
}

func (p *proxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *proxy) relay(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.mu.Unlock()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, pair := range [][2]net.Conn{{c, s}, {s, c}} {
		wg.Go(func() {
			_, _ = io.Copy(pair[0], pair[1])
			pair[0].Close()
			pair[1].Close()
		})
	}
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// setCut cuts every connection and refuses new ones (true), or lets them through again.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}
