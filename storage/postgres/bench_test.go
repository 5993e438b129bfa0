package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-guardian/vigil/record"
)

// benchRequest is a tool call of about 1.5 KB, as in the SQLite benchmark.
var benchRequest = json.RawMessage(`{"jsonrpc":"2.0","id":"req-1","method":"steps/toolCallRequest",` +
	`"params":{"toolCallRequest":{"toolId":"send_email","executionId":"e-1","inputs":{"to":"bob@corp.example",` +
	`"subject":"Quarterly numbers","body":"` + strings.Repeat("lorem ipsum dolor sit amet ", 45) + `"}},` +
	`"context":{"from":{"role":"agent"},"agent":{"id":"agent-1","name":"Mail bot","version":"1.0"},` +
	`"session":{"id":"s-1"},"turnId":"t-1","stepId":"st-1"}}}`)

func benchStep(i int64) *record.StepRecord {
	return &record.StepRecord{
		SessionID: fmt.Sprint("s", i%64), TurnID: "t-1", StepID: fmt.Sprint("st-", i),
		Method: "steps/toolCallRequest", Kind: "toolCall", AgentID: "agent-1", AgentName: "Mail bot",
		Tool: "send_email", Decision: "allow", ReceivedAt: time.Now(), Request: benchRequest,
		Response:      json.RawMessage(`{"jsonrpc":"2.0","id":"req-1","result":{"decision":"allow"}}`),
		MatchedRules:  []record.RuleMatch{{RuleID: "r1", Action: "allow", Mode: "enforce"}},
		LatencyMicros: 120, Text: "send_email to=bob@corp.example subject=Quarterly numbers",
	}
}

// BenchmarkSaveStepParallel measures stored steps per second with 32 concurrent writers
// (on 2 cores: a burst of agents), spread over 64 sessions, as the SQLite benchmark of the
// same name. Each writer waits for its step to be committed.
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

// BenchmarkSaveStep is one caller saving as fast as it can: a commit per step.
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

func reportSteps(b *testing.B, db *DB) {
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	if batches := db.batches.Load(); batches > 0 {
		b.ReportMetric(float64(db.batchedSteps.Load())/float64(batches), "steps/commit")
	}
}
