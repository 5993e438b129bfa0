package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A replica judges others only once its own heartbeats have succeeded for DeadAfter
// without a break: a failed beat, or a gap that says this process stalled, starts over.
func TestHealthStreak(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type beat struct {
		ms     int
		failed bool
		judge  bool
	}
	for _, tc := range []struct {
		name  string
		beats []beat
	}{
		{"a start waits DeadAfter", []beat{{ms: 0}, {ms: 400}, {ms: 800}, {ms: 1000, judge: true}, {ms: 1200, judge: true}}},
		{"a failed beat starts over", []beat{{ms: 0}, {ms: 500}, {ms: 1000, judge: true}, {ms: 1100, failed: true},
			{ms: 1200}, {ms: 1700}, {ms: 2200, judge: true}}},
		{"an outage longer than DeadAfter starts over", []beat{{ms: 0}, {ms: 500}, {ms: 1000, judge: true}, {ms: 1100, failed: true},
			{ms: 5000, failed: true}, {ms: 9000}, {ms: 9500}, {ms: 10000, judge: true}}},
		{"a stall of this process starts over", []beat{{ms: 0}, {ms: 500}, {ms: 1000, judge: true}, {ms: 4000},
			{ms: 4500}, {ms: 5000, judge: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := health{need: time.Second, maxGap: 600 * time.Millisecond}
			for _, b := range tc.beats {
				if b.failed {
					h.fail()
					continue
				}
				require.Equal(t, b.judge, h.ok(at(b.ms)), "beat at %dms", b.ms)
			}
		})
	}
}
