package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"
)

// agentConn is one agent's keep-alive HTTP/1.1 connection to a JSON-RPC endpoint. The load
// generator runs on the same cores as the server it measures, so every microsecond it spends
// on a request is taken from the server; Go's HTTP client spends about 38 µs of CPU per
// request here (its transport's goroutines, header maps, the body's pipes), this about a
// third of that: one write and one read per request on a connection the agent owns, the
// answer parsed only as far as its status, its length and its decision. Anything it does not
// understand is an error, never a guess.
type agentConn struct {
	addr string // host:port
	head []byte // the request line and headers up to the Content-Length value
	conn net.Conn
	rd   *bufio.Reader
	out  []byte
	body []byte
}

func newAgentConn(target string) (*agentConn, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", target, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("target %q: only http://host:port/path URLs are measured", target)
	}
	path := u.RequestURI()
	return &agentConn{
		addr: u.Host,
		head: fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: ", path, u.Host),
	}, nil
}

// close drops the connection; the next post dials again.
func (a *agentConn) close() {
	if a.conn != nil {
		_ = a.conn.Close()
		a.conn, a.rd = nil, nil
	}
}

// post sends body and checks the answer: HTTP 200 with a JSON-RPC result that has a decision.
func (a *agentConn) post(body []byte) error {
	if a.conn == nil {
		c, err := net.DialTimeout("tcp", a.addr, 10*time.Second)
		if err != nil {
			return fmt.Errorf("dial %s: %w", a.addr, err)
		}
		a.conn, a.rd = c, bufio.NewReaderSize(c, 16<<10)
	}
	// A server that stops answering must not hang the run.
	_ = a.conn.SetDeadline(time.Now().Add(30 * time.Second))
	a.out = append(append(strconv.AppendInt(append(a.out[:0], a.head...), int64(len(body)), 10), "\r\n\r\n"...), body...)
	if _, err := a.conn.Write(a.out); err != nil {
		a.close()
		return fmt.Errorf("send: %w", err)
	}
	status, keep, err := a.readAnswer()
	if err != nil {
		a.close()
		return err
	}
	if !keep {
		a.close()
	}
	if status != 200 {
		return fmt.Errorf("HTTP %d: %s", status, a.body)
	}
	return checkAnswer(a.body)
}

// readAnswer reads one response into a.body: its status, and whether the connection stays.
func (a *agentConn) readAnswer() (status int, keep bool, err error) {
	line, err := a.line()
	if err != nil {
		return 0, false, fmt.Errorf("read status: %w", err)
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	length, chunked := -1, false
	keep = true
	for {
		h, err := a.line()
		if err != nil {
			return 0, false, fmt.Errorf("read headers: %w", err)
		}
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("bad header %q", h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) {
				return 0, false, fmt.Errorf("unsupported Transfer-Encoding %q", value)
			}
			chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		}
	}
	a.body = a.body[:0]
	switch {
	case chunked:
		err = a.readChunked()
	case length >= 0:
		a.body = growTo(a.body, length)
		_, err = io.ReadFull(a.rd, a.body)
	default:
		// No length: the body runs to the end of the connection.
		var b bytes.Buffer
		_, err = b.ReadFrom(a.rd)
		a.body, keep = append(a.body, b.Bytes()...), false
	}
	if err != nil {
		return 0, false, fmt.Errorf("read body: %w", err)
	}
	return status, keep, nil
}

func (a *agentConn) readChunked() error {
	for {
		line, err := a.line()
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 32)
		if err != nil || n < 0 {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			for { // trailers, up to the empty line
				t, err := a.line()
				if err != nil {
					return err
				}
				if len(t) == 0 {
					return nil
				}
			}
		}
		start := len(a.body)
		a.body = growTo(a.body, start+int(n))
		if _, err := io.ReadFull(a.rd, a.body[start:]); err != nil {
			return err
		}
		if crlf, err := a.line(); err != nil || len(crlf) != 0 {
			return fmt.Errorf("chunk not followed by CRLF")
		}
	}
}

// line is the next line without its CRLF; it is valid until the next read.
func (a *agentConn) line() ([]byte, error) {
	l, err := a.rd.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("line too long")
		}
		return nil, err
	}
	return bytes.TrimSuffix(l[:len(l)-1], []byte("\r")), nil
}

func growTo(b []byte, n int) []byte {
	if cap(b) < n {
		return append(b[:cap(b)], make([]byte, n-cap(b))...)[:n]
	}
	return b[:n]
}

// checkAnswer accepts a JSON-RPC answer whose result has a decision. The full decode runs
// only when the quick test fails, to say why.
func checkAnswer(b []byte) error {
	if i := bytes.Index(b, []byte(`"decision":"`)); i >= 0 && len(b) > i+12 && b[i+12] != '"' &&
		!bytes.Contains(b, []byte(`"error":`)) {
		return nil
	}
	var r struct {
		Result *struct {
			Decision string `json:"decision"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	if r.Error != nil {
		return fmt.Errorf("JSON-RPC error %d: %s", r.Error.Code, r.Error.Message)
	}
	if r.Result == nil || r.Result.Decision == "" {
		return fmt.Errorf("answer without a decision: %s", b)
	}
	return nil
}
