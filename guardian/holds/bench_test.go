package holds_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
)

// BenchmarkControl is the cost the pipeline pays on every step for session controls.
func BenchmarkControl(b *testing.B) {
	e := newEnv(b)
	for i := range 100 {
		require.NoError(b, e.m.SetControl(e.ctx, fmt.Sprintf("s%d", i), "pause", "op", ""))
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprint("s", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if e.m.Control(ids[i&1023]) == holds.ControlBlocked {
				b.Error("unexpected block")
			}
			i++
		}
	})
}

// BenchmarkHoldApprove is one full review cycle over SQLite: the hold is stored and
// published, an operator approves it, the agent is answered.
func BenchmarkHoldApprove(b *testing.B) {
	created := make(chan record.Event, 1)
	e := newEnv(b, func(o *holds.Options) {
		o.Publish = func(ev record.Event) {
			if ev.Type == record.EventHoldCreated {
				created <- ev
			}
		}
	})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ch := e.held(e.ctx, toolRequest(fmt.Sprint("s", i), 5000))
		id := holdID(b, (<-created).Payload)
		if _, err := e.m.Approve(e.ctx, id, holds.Decision{Operator: "op"}); err != nil {
			b.Fatal(err)
		}
		if r := <-ch; r.out.Status != holds.StatusApproved {
			b.Fatalf("status %s", r.out.Status)
		}
	}
}
