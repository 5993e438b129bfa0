package auth

import (
	"sync"
	"time"
)

// Sign-in throttling: a few wrong passwords are free, then each further failure for the
// same account name from the same address doubles the wait before the next attempt.
const (
	freeLoginFailures = 3
	loginBackoffBase  = time.Second
	loginBackoffMax   = 5 * time.Minute
	// A record idle this long (and not locking anyone out) is forgotten.
	loginForgetAfter = 15 * time.Minute
)

type loginFailures struct {
	n     int
	until time.Time // no attempt before this
	last  time.Time
}

// loginThrottle tracks failed sign-ins per account name and client address, in bounded
// memory.
type loginThrottle struct {
	max     int
	mu      sync.Mutex
	entries map[string]*loginFailures
}

func newLoginThrottle(maxEntries int) *loginThrottle {
	return &loginThrottle{max: maxEntries, entries: make(map[string]*loginFailures)}
}

// wait is how long key must wait before its next attempt (0: go ahead).
func (t *loginThrottle) wait(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.entries[key]
	if !ok || !now.Before(f.until) {
		return 0
	}
	return f.until.Sub(now)
}

// fail records a failed attempt and returns the wait it imposes.
func (t *loginThrottle) fail(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.entries[key]
	if !ok {
		if len(t.entries) >= t.max {
			t.sweep(now)
		}
		f = &loginFailures{}
		t.entries[key] = f
	}
	f.n++
	f.last = now
	if f.n <= freeLoginFailures {
		return 0
	}
	d := loginBackoffMax
	if shift := f.n - freeLoginFailures - 1; shift < 20 {
		d = min(loginBackoffBase<<shift, loginBackoffMax)
	}
	f.until = now.Add(d)
	return d
}

// reset forgets key's failures after a successful sign-in.
func (t *loginThrottle) reset(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.entries, key)
}

// sweep forgets idle records; when all are recent, it drops the ones with the fewest
// failures first, so an attacker filling the table mostly evicts their own records.
func (t *loginThrottle) sweep(now time.Time) {
	for k, f := range t.entries {
		if now.Sub(f.last) >= loginForgetAfter && !now.Before(f.until) {
			delete(t.entries, k)
		}
	}
	for n := 1; len(t.entries) >= t.max; n++ {
		for k, f := range t.entries {
			if f.n <= n && !now.Before(f.until) {
				delete(t.entries, k)
			}
		}
		if n > freeLoginFailures+20 {
			// Everyone is locked out right now: make room anyway.
			for k := range t.entries {
				delete(t.entries, k)
				break
			}
		}
	}
}
