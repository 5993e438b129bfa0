package auth

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// bucketKey names a rate-limit bucket: kind 'k' an API key id, 'a' a client address
// without a key, 'm' a client address looking up unknown keys. A struct rather than a
// joined string keeps the request path free of allocations.
type bucketKey struct {
	kind byte
	id   string
}

// bucket is a token bucket: tokens refill at the limiter's rate up to its burst.
type bucket struct {
	tokens float64
	last   int64 // unix nanoseconds of the last refill
}

// limiter is a set of token buckets with bounded memory. A bucket that has refilled to its
// burst behaves exactly like one that does not exist, so idle buckets are dropped freely.
type limiter struct {
	rate  float64 // tokens per second
	burst float64
	max   int

	mu        sync.Mutex
	buckets   map[bucketKey]*bucket
	lastSweep int64
}

func newLimiter(rate, burst float64, maxBuckets int) *limiter {
	return &limiter{rate: rate, burst: max(burst, 1), max: maxBuckets,
		buckets: make(map[bucketKey]*bucket)}
}

// sweepEvery is how often the limiter drops full buckets even when below its size bound.
const sweepEvery = int64(time.Minute)

// allow takes a token from k's bucket. When none is left it reports how long until one is.
func (l *limiter) allow(k bucketKey, now time.Time) (bool, time.Duration) {
	n := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[k]
	if !ok {
		if len(l.buckets) >= l.max || n-l.lastSweep >= sweepEvery {
			l.sweep(n)
		}
		b = &bucket{tokens: l.burst, last: n}
		l.buckets[k] = b
	} else if n > b.last {
		b.tokens = min(l.burst, b.tokens+float64(n-b.last)/1e9*l.rate)
		b.last = n
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * 1e9)
	return false, max(wait, time.Millisecond)
}

// sweep drops buckets that have refilled. If that leaves the limiter full (many clients
// active at once) it drops about a tenth more, picked by map order: those clients get a
// fresh burst, which is the price of bounded memory.
func (l *limiter) sweep(now int64) {
	l.lastSweep = now
	for k, b := range l.buckets {
		if b.tokens+float64(now-b.last)/1e9*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) < l.max {
		return
	}
	drop := max(l.max/10, 1)
	for k := range l.buckets {
		if drop == 0 {
			break
		}
		delete(l.buckets, k)
		drop--
	}
}

// size is the number of buckets held, for tests.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// rateLimitedMessage is the message of an answer to a request over the agent rate, and
// the wait in whole milliseconds (at least 1) that the answer also carries. It names what
// the rate counts for the request: its agent key (kind 'k'), or its client address when it
// sent no key, where every keyless agent behind the address shares the budget.
func rateLimitedMessage(k bucketKey, rate float64, wait time.Duration) (string, int64) {
	ms := max(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 1)
	per := "this agent key"
	if k.kind != 'k' {
		per = "this client address (requests without an agent key)"
	}
	return fmt.Sprintf("rate limited: more than %s requests per second for %s; retry in %d ms",
		strconv.FormatFloat(rate, 'f', -1, 64), per, ms), ms
}
