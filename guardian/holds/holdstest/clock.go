// Package holdstest provides a controllable clock for tests of code that holds steps.
package holdstest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/vigil-guardian/vigil/guardian/holds"
)

// Clock is a holds.Clock whose time moves only when Advance is called. Timers fire inside
// Advance, in deadline order, so a test decides exactly when a hold times out.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	// changed is closed (and replaced) whenever a timer is added, waking WaitTimers.
	changed chan struct{}
}

// NewClock returns a clock that reads start until advanced.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock has been advanced by d or more.
func (c *Clock) NewTimer(d time.Duration) holds.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{clock: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	return t
}

// Advance moves the clock forward by d and fires every timer that is then due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	slices.SortStableFunc(c.timers, func(a, b *timer) int { return a.at.Compare(b.at) })
	n := 0
	for _, t := range c.timers {
		if t.at.After(c.now) {
			break
		}
		t.ch <- c.now // buffered and fired once: never blocks
		n++
	}
	c.timers = slices.Delete(c.timers, 0, n)
}

// Timers reports how many timers are waiting to fire.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitTimers blocks until at least n timers are waiting, or ctx ends.
func (c *Clock) WaitTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		have, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type timer struct {
	clock *Clock
	at    time.Time
	ch    chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

// Stop removes the timer if it has not fired yet.
func (t *timer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	return true
}
