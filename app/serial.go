package app

import (
	"context"
	"fmt"
	"time"
)

// serial runs calls one at a time (Wails keeps the notification connection in unguarded
// package state) without letting one that never returns hold up its callers or the
// window's shutdown: a caller stops waiting when its context ends or after its timeout,
// and the call goes on alone, still holding the turn, which the next caller waits for
// the same way. A notification daemon that accepts a call and never answers it then costs
// a goroutine, not a hung process.
type serial struct {
	turn chan struct{} // holds a token while a call runs
}

func newSerial() *serial { return &serial{turn: make(chan struct{}, 1)} }

// do runs fn in turn and returns its error, or an error when ctx ends or timeout passes
// first (fn then finishes on its own).
func (s *serial) do(ctx context.Context, timeout time.Duration, fn func() error) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("an earlier call has not returned in %s", timeout)
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-s.turn }()
		done <- fn()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("no answer in %s", timeout)
	}
}

// last runs fn in turn if the turn comes within timeout, and reports whether it ran: at
// shutdown, a cleanup that would wait for a call that never returns is skipped (the
// process's exit ends the connection anyway).
func (s *serial) last(timeout time.Duration, fn func()) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case s.turn <- struct{}{}:
		defer func() { <-s.turn }()
		fn()
		return true
	case <-t.C:
		return false
	}
}
