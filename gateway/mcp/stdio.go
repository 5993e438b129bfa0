package mcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// DefaultMaxLine bounds one stdio message (64 MiB): a longer line ends the relay, since
// passing it unjudged could let a tool result through that no rule saw.
const DefaultMaxLine = 64 << 20

// ErrLineTooLong ends a relay whose peer sent a message over the bound.
var ErrLineTooLong = errors.New("mcp: message over the size bound")

// Pipes are the four ends a stdio relay connects.
type Pipes struct {
	ClientIn  io.Reader      // what the client writes (Vigil's stdin)
	ClientOut io.Writer      // what the client reads (Vigil's stdout)
	ServerIn  io.WriteCloser // the server's stdin
	ServerOut io.Reader      // the server's stdout
	// ClientDone, when not nil, is called once the client's input has ended and the
	// server's stdin is closed (a wrapper then gives the server a while to exit).
	ClientDone func()
}

// lineWriter writes whole lines, one at a time, so concurrent answers never interleave.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
	// err is the first write error; later writes are dropped.
	err error
}

func (l *lineWriter) line(b []byte) {
	if b == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	buf := make([]byte, 0, len(b)+1)
	buf = append(buf, bytes.TrimRight(b, "\r\n")...)
	buf = append(buf, '\n')
	_, l.err = l.w.Write(buf)
}

// Relay passes newline-delimited JSON-RPC between a client and a server, judging what s
// judges. A message is read, admitted and (when refused) answered in order; a verdict
// (which may wait for review) is awaited on a goroutine of its own, so the rest of the
// traffic (other responses, notifications, the server's requests) keeps flowing, and
// there are never more of those than requests s lets be in flight (MaxPending each way).
// Every message is written whole. When the client's input ends, every message still
// waiting for a verdict, either way (a call, a result, a sampling or elicitation request),
// is dropped (its hold abandoned) and the server's stdin is closed; Relay returns when the server's output ends (or ctx is done), after the
// server's messages in flight are through.
func Relay(ctx context.Context, s *Session, p Pipes, maxLine int) error {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	toClient := &lineWriter{w: p.ClientOut}
	toServer := &lineWriter{w: p.ServerIn}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	clientErr := make(chan error, 1)
	// A client that closes its input is done (MCP's stdio shutdown): its messages still
	// waiting for a verdict, a hold above all, are abandoned rather than forwarded later.
	clientCtx, clientGone := context.WithCancel(ctx)
	defer clientGone()
	go func() {
		var wg sync.WaitGroup
		err := eachLine(p.ClientIn, maxLine, func(line []byte) {
			send := func(a Action) {
				if clientCtx.Err() != nil {
					return
				}
				toClient.line(a.Reply)
				toServer.line(a.Forward)
			}
			a, judge := s.admitClient(line)
			if judge == nil {
				send(a)
				return
			}
			wg.Go(func() { send(judge(clientCtx, toClient.line)) })
		})
		clientGone()
		wg.Wait()
		// The client is gone: the server sees its stdin close, as without Vigil.
		_ = p.ServerIn.Close()
		if p.ClientDone != nil {
			p.ClientDone()
		}
		clientErr <- err
	}()

	var wg sync.WaitGroup
	serverErr := eachLine(p.ServerOut, maxLine, func(line []byte) {
		send := func(a Action) {
			toServer.line(a.Reply)
			toClient.line(a.Forward)
		}
		a, judge := s.admitServer(ctx, line)
		if judge == nil {
			send(a)
			return
		}
		// With the client's context: a result or a server's request held for review is
		// abandoned once the client is gone, rather than keep the relay (and the wrapper)
		// running until someone decides, then write to nobody.
		wg.Go(func() { send(judge(clientCtx)) })
	})
	wg.Wait()
	select {
	case err := <-clientErr:
		if err != nil {
			return err
		}
	default:
	}
	return serverErr
}

// eachLine calls fn with each line of r (without its newline; a copy fn may keep).
func eachLine(r io.Reader, maxLine int, fn func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(full) > maxLine {
					return fmt.Errorf("%w (%d bytes)", ErrLineTooLong, maxLine)
				}
				line, err = br.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		} else {
			line = append([]byte(nil), line...)
		}
		if len(line) > maxLine {
			return fmt.Errorf("%w (%d bytes)", ErrLineTooLong, maxLine)
		}
		if t := bytes.TrimRight(line, "\r\n"); len(t) > 0 {
			fn(t)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
