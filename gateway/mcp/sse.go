package mcp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// sseWriter writes server-sent events to the client, one whole event at a time.
type sseWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
	// err is the first write error (a client gone, or one that stopped reading past the
	// write deadline); later writes are dropped, and a relay stops at it.
	err error
}

// newSSEWriter starts an event stream answer.
func newSSEWriter(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return newSSEWriterStarted(w)
}

// newSSEWriterStarted writes into an answer whose status is written, and sends the headers
// at once: a client waits for them before it goes on (a GET stream may stay silent).
func newSSEWriterStarted(w http.ResponseWriter) *sseWriter {
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
	return s
}

func (s *sseWriter) event(data []byte) {
	if data == nil {
		return
	}
	b := make([]byte, 0, len(data)+24)
	b = append(b, "event: message\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	s.raw(b)
}

func (s *sseWriter) raw(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if _, err := s.w.Write(b); err != nil {
		s.err = err
		return
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
}

// failed is the first write error, nil while the client reads.
func (s *sseWriter) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// sseEvent is one event as received: its bytes up to and including the blank line that
// ends it, and its data (data lines joined with newlines).
type sseEvent struct {
	raw  []byte
	data []byte
}

// with returns the event with its data replaced (the other fields kept).
func (e sseEvent) with(data []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(bytes.TrimRight(e.raw, "\r\n"), []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if bytes.HasPrefix(line, []byte("data:")) || len(line) == 0 {
			continue
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	for _, l := range bytes.Split(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(l)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}

var errEventTooLarge = errors.New("server-sent event too large")

// readEvent reads one event, at most max bytes.
func readEvent(br *bufio.Reader, max int) (sseEvent, error) {
	var ev sseEvent
	var data [][]byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: keep reading it whole, within the bound.
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(full) > max {
					return sseEvent{}, fmt.Errorf("%w (over %d bytes)", errEventTooLarge, max)
				}
				line, err = br.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		} else {
			line = append([]byte(nil), line...)
		}
		if len(ev.raw)+len(line) > max {
			return sseEvent{}, fmt.Errorf("%w (over %d bytes)", errEventTooLarge, max)
		}
		ev.raw = append(ev.raw, line...)
		trimmed := bytes.TrimRight(line, "\r\n")
		if len(trimmed) == 0 && len(line) > 0 {
			ev.data = bytes.Join(data, []byte("\n"))
			return ev, err
		}
		if v, ok := bytes.CutPrefix(trimmed, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(v, []byte(" ")))
		}
		if err != nil {
			ev.data = bytes.Join(data, []byte("\n"))
			return ev, err
		}
	}
}
