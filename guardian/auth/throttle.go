package auth

import (
	"strings"
	"sync"
	"time"
)

// Sign-in throttling counts failures three ways, and an attempt waits for the longest wait
// any of them imposes:
//
//   - per account name and client address: a few wrong passwords are free, then each further
//     failure doubles the wait, up to 5 minutes. This is the one a mistyping operator meets.
//   - per account name, from any address: more failures are free, then the waits double up to
//     one minute. Spreading guesses over many addresses thus buys nothing: an account is
//     guessed at most about once a minute however many addresses take part. The wait is
//     short and a correct password entered after it signs in, so failures elsewhere delay the
//     account's operators by at most a minute rather than locking them out.
//   - per client address, for any names: many free failures, then doubling to 5 minutes, so
//     one address cannot try a few passwords on every name.
//
// Waits are answered before the password is checked, so a guess made during a wait learns
// nothing. A success forgets the failures of its name (both kinds) but not the address's.
type backoff struct {
	free int           // failures allowed before any wait
	base time.Duration // wait after the first failure beyond free
	max  time.Duration
}

var (
	pairBackoff    = backoff{free: freeLoginFailures, base: time.Second, max: 5 * time.Minute}
	accountBackoff = backoff{free: 10, base: time.Second, max: time.Minute}
	addressBackoff = backoff{free: 20, base: time.Second, max: 5 * time.Minute}
)

const (
	// freeLoginFailures is how many wrong passwords one address may send one account freely.
	freeLoginFailures = 3
	// A record idle this long (and not making anyone wait) is forgotten.
	loginForgetAfter = 15 * time.Minute
)

type loginFailures struct {
	n     int
	until time.Time // no attempt before this
	last  time.Time
}

// loginThrottle tracks failed sign-ins per key (a name, an address, or both), in bounded
// memory.
type loginThrottle struct {
	policy  backoff
	max     int
	mu      sync.Mutex
	entries map[string]*loginFailures
}

func newLoginThrottle(policy backoff, maxEntries int) *loginThrottle {
	return &loginThrottle{policy: policy, max: maxEntries, entries: make(map[string]*loginFailures)}
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
	p := t.policy
	if f.n <= p.free {
		return 0
	}
	d := p.max
	if shift := f.n - p.free - 1; shift < 20 {
		d = min(p.base<<shift, p.max)
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
		if n > t.policy.free+20 {
			// Everyone is locked out right now: make room anyway.
			for k := range t.entries {
				delete(t.entries, k)
				break
			}
		}
	}
}

// signInThrottle is the three sign-in throttles together.
type signInThrottle struct {
	pair, account, address *loginThrottle
}

func newSignInThrottle(maxEntries int) signInThrottle {
	return signInThrottle{
		pair:    newLoginThrottle(pairBackoff, maxEntries),
		account: newLoginThrottle(accountBackoff, maxEntries),
		address: newLoginThrottle(addressBackoff, maxEntries),
	}
}

// throttleKeys are name's and addr's keys in the three throttles. Names are compared
// without case, as accounts are.
func throttleKeys(name, addr string) (pair, account, address string) {
	name = strings.ToLower(name)
	return name + "\x00" + addr, name, addr
}

// wait is how long a sign-in as name from addr must wait (0: check it).
func (s signInThrottle) wait(name, addr string, now time.Time) time.Duration {
	pk, ak, dk := throttleKeys(name, addr)
	return max(s.pair.wait(pk, now), s.account.wait(ak, now), s.address.wait(dk, now))
}

// fail records a failed sign-in and returns the wait it imposes on the next one.
func (s signInThrottle) fail(name, addr string, now time.Time) time.Duration {
	pk, ak, dk := throttleKeys(name, addr)
	return max(s.pair.fail(pk, now), s.account.fail(ak, now), s.address.fail(dk, now))
}

// succeed forgets name's failures. The address's stay: signing in to one's own account must
// not clear a record of guessing at others.
func (s signInThrottle) succeed(name, addr string) {
	pk, ak, _ := throttleKeys(name, addr)
	s.pair.reset(pk)
	s.account.reset(ak)
}
