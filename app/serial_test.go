package app

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A call that never returns does not hold up its caller, the next caller or the cleanup at
// shutdown beyond their bounds; calls that return run one at a time.
func TestSerialBoundsAHungCall(t *testing.T) {
	s := newSerial()
	hang := make(chan struct{})
	defer close(hang)
	err := s.do(context.Background(), 50*time.Millisecond, func() error { <-hang; return nil })
	require.ErrorContains(t, err, "no answer in")

	// The hung call still holds the turn: the next caller gives up at its own bound...
	ran := false
	err = s.do(context.Background(), 50*time.Millisecond, func() error { ran = true; return nil })
	require.ErrorContains(t, err, "has not returned")
	require.False(t, ran)
	// ...or when its context ends,
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.do(ctx, time.Minute, func() error { return nil }), context.Canceled)
	// and the cleanup is skipped rather than waited for.
	require.False(t, s.last(50*time.Millisecond, func() { t.Error("cleanup ran during a call") }))
}

func TestSerialRunsCallsOneAtATime(t *testing.T) {
	s := newSerial()
	var running, most atomic.Int32
	done := make(chan error, 8)
	for range 8 {
		go func() {
			done <- s.do(context.Background(), 10*time.Second, func() error {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond) // long enough for a second call to overlap
				running.Add(-1)
				return errors.New("daemon says no")
			})
		}()
	}
	for range 8 {
		require.ErrorContains(t, <-done, "daemon says no")
	}
	require.Equal(t, int32(1), most.Load())
	require.True(t, s.last(time.Second, func() {}))
}
