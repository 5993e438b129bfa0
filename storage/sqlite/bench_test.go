package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// benchRequest is a tool call of about 1.5 KB, the size of a typical agent step.
var benchRequest = json.RawMessage(`{"jsonrpc":"2.0","id":"req-1","method":"steps/toolCallRequest",` +
	`"params":{"toolCallRequest":{"toolId":"send_email","executionId":"e-1","inputs":{"to":"bob@corp.example",` +
	`"subject":"Quarterly numbers","body":"` + strings.Repeat("lorem ipsum dolor sit amet ", 45) + `"}},` +
	`"context":{"from":{"role":"agent"},"agent":{"id":"agent-1","name":"Mail bot","version":"1.0"},` +
	`"session":{"id":"s-1"},"turnId":"t-1","stepId":"st-1"}}}`)

func benchStep(i int64) *record.StepRecord {
	return &record.StepRecord{
		SessionID:     fmt.Sprint("s", i%64),
		TurnID:        "t-1",
		StepID:        fmt.Sprint("st-", i),
		Method:        "steps/toolCallRequest",
		Kind:          "toolCall",
		AgentID:       "agent-1",
		AgentName:     "Mail bot",
		Tool:          "send_email",
		Decision:      "allow",
		ReceivedAt:    time.Now(),
		Request:       benchRequest,
		Response:      json.RawMessage(`{"jsonrpc":"2.0","id":"req-1","result":{"decision":"allow"}}`),
		MatchedRules:  []record.RuleMatch{{RuleID: "r1", Action: "allow", Mode: "enforce"}},
		LatencyMicros: 120,
	}
}

func reportSteps(b *testing.B, db *DB) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	if ws := db.WriterStats(); ws.Batches > 0 {
		b.ReportMetric(float64(ws.Ops)/float64(ws.Batches), "steps/commit")
	}
}

// BenchmarkSaveStepParallel measures stored steps per second with 32 concurrent writers
// (on 2 cores: the guardian's situation under a burst of agents). The steps are spread over
// 64 sessions, so nearly every step lands on its own page of the per-session index: the
// costly case.
func BenchmarkSaveStepParallel(b *testing.B) {
	db := openTest(b)
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	b.SetBytes(int64(len(benchRequest)))
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := db.SaveStep(ctx, benchStep(n.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportSteps(b, db)
}

// BenchmarkSaveStep is one caller saving as fast as it can: ns/op is what storage costs
// per step when the journal and SQLite ingestion run flat out.
func BenchmarkSaveStep(b *testing.B) {
	db := openTest(b)
	b.SetBytes(int64(len(benchRequest)))
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if err := db.SaveStep(ctx, benchStep(int64(i))); err != nil {
			b.Fatal(err)
		}
	}
	reportSteps(b, db)
}

// BenchmarkHoldBySeq finds the hold of a step among 10,000 decided holds: the lookup the
// inspector makes when an operator opens a held step.
func BenchmarkHoldBySeq(b *testing.B) {
	db := openTest(b)
	ctx := context.Background()
	const n = 10_000
	for i := range n {
		h := newTestHold(fmt.Sprintf("h%05d", i), "s1", time.Duration(i)*time.Millisecond)
		if _, err := db.CreateHold(ctx, h, nil); err != nil {
			b.Fatal(err)
		}
		if err := db.SetHoldSeq(ctx, h.ID, int64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		i++
		if _, err := db.HoldBySeq(ctx, int64(i%n+1)); err != nil {
			b.Fatal(err)
		}
	}
}
