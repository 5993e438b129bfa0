//go:build unix

package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time the process has used, all threads.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStepCPU is the CPU a stored step costs in all: 32 callers save 200,000 steps
// like the load benchmark's over 2,000 or 20,000 sessions, then the journal is copied into SQLite
// (Flush) and the search index catches up in batches sized as the indexer sizes them. Wall
// time per op says little here (the writer batches); the metrics are the process's CPU per
// step for storing and for indexing, what the guardian pays under load.
func BenchmarkStepCPU(b *testing.B) {
	for _, sessions := range []int{100, 2000, 20000} {
		b.Run(fmt.Sprint("sessions=", sessions), func(b *testing.B) { benchStepCPU(b, sessions) })
	}
}

func benchStepCPU(b *testing.B, sessions int) {
	db := openTest(b)
	ctx := context.Background()
	const steps, callers = 200000, 32
	for range b.N {
		var next atomic.Int64
		start := processCPU(b)
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for i := next.Add(1); i <= steps; i = next.Add(1) {
					st := benchStep(i)
					// As the load benchmark's steps: its session ids, text and, on every
					// other step, a monitor rule's match.
					st.SessionID = fmt.Sprint("load-1795502017916541810-", i%int64(sessions), "-", i/100000)
					st.Text = "query=outstanding invoices for customer 8812 in October\nto=dana@corp.example\namount=" + fmt.Sprint(i%2000)
					if i%2 == 0 {
						st.MatchedRules = nil
					} else {
						st.MatchedRules = []record.RuleMatch{{RuleID: "misc-06", Action: "allow", Mode: "monitor", ReasonCode: "misc-06"}}
					}
					st.TrustedJSON = true // as the guardian saves steps it decoded
					if err := db.SaveStep(ctx, st); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		stored := processCPU(b)
		// In batches sized as the indexer sizes them.
		for limit := indexBatchMin; ; {
			n, busy, err := db.indexBatch(ctx, limit)
			if err != nil {
				b.Fatal(err)
			}
			if n < limit {
				break
			}
			limit = nextIndexBatch(limit, busy)
		}
		indexed := processCPU(b)
		b.ReportMetric(float64((stored-start).Nanoseconds())/1e3/steps, "store-µs/step")
		b.ReportMetric(float64((indexed-stored).Nanoseconds())/1e3/steps, "index-µs/step")
	}
}
