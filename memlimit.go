package main

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// gcPercent is the collector's GOGC when the environment sets none (see main).
const gcPercent = 400

// memoryHeadroom is the least room limitHeldMemory leaves above the live heap.
const memoryHeadroom = 512 << 20

// limitHeldMemory keeps held steps from multiplying the guardian's memory. GOGC 400 suits a
// live heap of tens of MB; but held steps keep their requests live (up to --max-hold-bytes),
// and under GOGC 400 the heap would grow to five times their size before a collection. So,
// once a second while steps are held, it sets a soft memory limit
// (runtime/debug.SetMemoryLimit): memoryHeadroom above the live heap, and at least that
// above one and a half times the held bytes. Held requests are pointer-free bytes, cheap to
// collect around. The limit is always above the live heap, so the collector never runs
// back to back; with nothing held there is none, and GOGC alone decides. A GOMEMLIMIT in
// the environment is left in charge.
func limitHeldMemory(ctx context.Context, held func() int64) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return
	}
	defer debug.SetMemoryLimit(math.MaxInt64)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			debug.SetMemoryLimit(memoryLimit(int64(sample[0].Value.Uint64()), held()))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// memoryLimit is the soft limit for a live heap of live bytes while held bytes of requests
// are held.
func memoryLimit(live, held int64) int64 {
	if held <= 0 {
		return math.MaxInt64
	}
	return memoryHeadroom + max(live, held+held/2)
}
