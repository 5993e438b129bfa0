package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAgentConnReadsWhatServersSend: the load generator's own HTTP client accepts an answer
// only when it is a 200 with a JSON-RPC result that has a decision, whatever framing the
// server chose, and keeps or drops the connection as the server says.
func TestAgentConnReadsWhatServersSend(t *testing.T) {
	allow := `{"jsonrpc":"2.0","id":1,"result":{"decision":"allow"}}`
	long := `{"jsonrpc":"2.0","id":1,"result":{"decision":"deny","reasoning":"` + strings.Repeat("x", 8000) + `"}}`
	cases := []struct {
		name    string
		handler http.HandlerFunc
		wantErr string
	}{
		{"length", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, allow) }, ""},
		{"chunked", func(w http.ResponseWriter, r *http.Request) {
			// Past net/http's 2 KiB buffer without a length: sent chunked.
			io.WriteString(w, long)
		}, ""},
		{"spaced JSON", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"jsonrpc": "2.0", "id": 1, "result": {"decision": "allow"}}`)
		}, ""},
		{"connection close", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, allow)
		}, ""},
		{"HTTP error", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}, "HTTP 503"},
		{"JSON-RPC error", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params"}}`)
		}, "JSON-RPC error -32602"},
		{"no decision", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"decision":""}}`)
		}, "answer without a decision"},
		{"not JSON", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>") }, "decode answer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var bodies []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, err := io.ReadAll(r.Body)
				require.NoError(t, err)
				require.Equal(t, "/aos", r.URL.Path)
				require.Equal(t, "application/json", r.Header.Get("Content-Type"))
				bodies = append(bodies, string(b))
				c.handler(w, r)
			}))
			defer srv.Close()
			conn, err := newAgentConn(srv.URL + "/aos")
			require.NoError(t, err)
			defer conn.close()
			for i := range 3 { // the same connection, or a new one after a close
				err := conn.post(fmt.Appendf(nil, `{"n":%d}`, i))
				if c.wantErr == "" {
					require.NoError(t, err)
				} else {
					require.ErrorContains(t, err, c.wantErr)
				}
			}
			require.Equal(t, []string{`{"n":0}`, `{"n":1}`, `{"n":2}`}, bodies)
		})
	}
}

// TestAgentConnRefusesBrokenFraming: a response the client cannot frame is an error, and the
// connection is dropped rather than read from again at an unknown position.
func TestAgentConnRefusesBrokenFraming(t *testing.T) {
	for _, answer := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"SSH-2.0-OpenSSH\r\n",
	} {
		t.Run(strings.Fields(answer)[0]+" "+strings.SplitN(answer, "\r\n", 3)[1], func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer l.Close()
			accepted := make(chan int, 4)
			go func() {
				for n := 1; ; n++ {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- n
					go func() {
						defer c.Close()
						rd := bufio.NewReader(c)
						req, err := http.ReadRequest(rd)
						if err != nil {
							return
						}
						_, _ = io.Copy(io.Discard, req.Body)
						_, _ = io.WriteString(c, answer)
						_, _ = io.Copy(io.Discard, rd) // hold the connection open
					}()
				}
			}()
			conn, err := newAgentConn("http://" + l.Addr().String() + "/aos")
			require.NoError(t, err)
			defer conn.close()
			require.Error(t, conn.post([]byte(`{}`)))
			require.Error(t, conn.post([]byte(`{}`)))
			require.Equal(t, 1, <-accepted)
			require.Equal(t, 2, <-accepted, "a broken answer drops its connection")
		})
	}
}

func TestNewAgentConnTakesOnlyHTTP(t *testing.T) {
	for _, u := range []string{"https://127.0.0.1:1/aos", "127.0.0.1:1/aos", "http:///aos"} {
		_, err := newAgentConn(u)
		require.Error(t, err, u)
	}
}

// TestDriveEachInterleaves: measured together, two servers get the agents in alternating
// slices, each request counted for the server it went to.
func TestDriveEachInterleaves(t *testing.T) {
	var mu sync.Mutex
	var order []int // the server each request went to, in arrival order
	server := func(id int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req map[string]any
			require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"decision":"allow"}}`)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := server(0), server(1)
	rs, err := driveEach([]string{a.URL + "/aos", b.URL + "/aos"}, []traffic{{}, {}}, 2, 20*time.Millisecond, 300*time.Millisecond, 10*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	for _, r := range rs {
		require.NotEmpty(t, r.lat)
		require.Positive(t, r.rps)
		require.Zero(t, r.errors)
	}
	mu.Lock()
	defer mu.Unlock()
	switches := 0
	for i := 1; i < len(order); i++ {
		if order[i] != order[i-1] {
			switches++
		}
	}
	// 600 ms of 10 ms slices: dozens of switches; a handful proves the alternation.
	require.GreaterOrEqual(t, switches, 4, "requests never alternated between the servers")
}
