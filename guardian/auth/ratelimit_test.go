package auth

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
)

func TestLimiterBucket(t *testing.T) {
	l := newLimiter(2, 3, 100) // 2 per second, bursts of 3
	now := time.Unix(1000, 0)
	k := bucketKey{kind: 'k', id: "a"}
	for i := 0; i < 3; i++ {
		ok, _ := l.allow(k, now)
		require.True(t, ok, "burst request %d", i)
	}
	ok, wait := l.allow(k, now)
	require.False(t, ok)
	require.Equal(t, 500*time.Millisecond, wait)

	// Another key has its own bucket.
	ok, _ = l.allow(bucketKey{kind: 'k', id: "b"}, now)
	require.True(t, ok)

	ok, _ = l.allow(k, now.Add(499*time.Millisecond))
	require.False(t, ok)
	ok, _ = l.allow(k, now.Add(500*time.Millisecond))
	require.True(t, ok)
	// Refill stops at the burst.
	later := now.Add(time.Hour)
	for i := 0; i < 3; i++ {
		ok, _ := l.allow(k, later)
		require.True(t, ok)
	}
	ok, _ = l.allow(k, later)
	require.False(t, ok)
}

func TestLimiterMemoryIsBounded(t *testing.T) {
	l := newLimiter(1, 1, 50)
	now := time.Unix(1000, 0)
	for i := 0; i < 5000; i++ {
		l.allow(bucketKey{kind: 'a', id: fmt.Sprint(i)}, now)
		require.LessOrEqual(t, l.size(), 50)
	}
	// Buckets that refilled are dropped at the next sweep; an active one is kept.
	active := bucketKey{kind: 'a', id: "active"}
	later := now.Add(2 * time.Minute)
	l.allow(active, later)
	require.Equal(t, 1, l.size())
	ok, _ := l.allow(active, later)
	require.False(t, ok, "the active bucket kept its state")
}

func TestAgentRateLimit(t *testing.T) {
	e := newEnv(t, Config{Loopback: true, AgentRate: 1, AgentBurst: 2})
	srv := e.server(t)
	_, keyA := e.createKey(t, "a", 0)
	_, keyB := e.createKey(t, "b", 0)

	for i := 0; i < 2; i++ {
		status, _, _, body := rpc(t, srv, keyA, "a")
		require.Equal(t, http.StatusOK, status, string(body))
	}
	status, hdr, resp, body := rpc(t, srv, keyA, "a")
	require.Equal(t, http.StatusTooManyRequests, status)
	require.NotNil(t, resp.Error, string(body))
	require.Equal(t, aos.CodeRateLimited, resp.Error.Code)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.Equal(t, "rate limited: more than 1 requests per second for this agent key; retry in 1000 ms", resp.Error.Message)
	var data struct {
		RetryAfterMs int64 `json:"retryAfterMs"`
	}
	raw, err := json.Marshal(resp.Error.Data)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &data))
	require.EqualValues(t, 1000, data.RetryAfterMs)

	// Each key has its own budget.
	status, _, _, _ = rpc(t, srv, keyB, "b")
	require.Equal(t, http.StatusOK, status)

	// The bucket refills with time.
	e.clock.Advance(time.Second)
	status, _, _, _ = rpc(t, srv, keyA, "a")
	require.Equal(t, http.StatusOK, status)
}

func TestAgentRateLimitPerAddressWithoutKeys(t *testing.T) {
	e := newEnv(t, Config{Loopback: true, AgentRate: 10, AgentBurst: 1})
	srv := e.server(t)
	status, _, _, _ := rpc(t, srv, "", "a")
	require.Equal(t, http.StatusOK, status)
	status, hdr, resp, _ := rpc(t, srv, "", "b")
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, aos.CodeRateLimited, resp.Error.Code)
	require.Equal(t, "1", hdr.Get("Retry-After"), "whole seconds, rounded up")
	require.Contains(t, resp.Error.Message, "for this client address (requests without an agent key)")
	raw, err := json.Marshal(resp.Error.Data)
	require.NoError(t, err)
	require.JSONEq(t, `{"retryAfterMs":100}`, string(raw))
}

func TestNoRateLimitByDefault(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	require.Nil(t, e.a.agents)
	srv := e.server(t)
	for i := 0; i < 50; i++ {
		status, _, _, _ := rpc(t, srv, "", "a")
		require.Equal(t, http.StatusOK, status)
	}
}

// The 429 message names what the rate counted: the key, or the address of keyless requests.
func TestRateLimitedMessage(t *testing.T) {
	for _, tc := range []struct {
		key  bucketKey
		rate float64
		wait time.Duration
		want string
		ms   int64
	}{
		{key: bucketKey{kind: 'k', id: "k1"}, rate: 50, wait: 20 * time.Millisecond,
			want: "rate limited: more than 50 requests per second for this agent key; retry in 20 ms", ms: 20},
		{key: bucketKey{kind: 'a', id: "10.0.0.1"}, rate: 0.5, wait: 1500*time.Millisecond + 1,
			want: "rate limited: more than 0.5 requests per second for this client address (requests without an agent key); retry in 1501 ms", ms: 1501},
		{key: bucketKey{kind: 'k', id: "k1"}, rate: 10, wait: time.Nanosecond,
			want: "rate limited: more than 10 requests per second for this agent key; retry in 1 ms", ms: 1},
	} {
		msg, ms := rateLimitedMessage(tc.key, tc.rate, tc.wait)
		require.Equal(t, tc.want, msg)
		require.Equal(t, tc.ms, ms)
	}
}
