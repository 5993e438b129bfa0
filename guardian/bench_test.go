package guardian_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// BenchmarkAOSEndpoint measures the whole /aos path (decode, validate, decide, store
// through the journal, encode) through the handler, without a network in between.
func BenchmarkAOSEndpoint(b *testing.B) { benchAOS(b, nil) }

// BenchmarkAOSEndpoint100Rules is the same with the load benchmark's 100 rules.
func BenchmarkAOSEndpoint100Rules(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "bench", "rules100.yaml"))
	require.NoError(b, err)
	f, err := rules.ParseFile("rules100.yaml", data)
	require.NoError(b, err)
	engine := rules.NewEngine(rules.Options{})
	require.NoError(b, engine.Load(f.Rules))
	benchAOS(b, &guardian.RulesPolicy{Engine: engine})
}

func benchAOS(b *testing.B, policy guardian.Policy) {
	body, err := os.ReadFile(filepath.Join("aos", "testdata", "toolCallRequest.json"))
	require.NoError(b, err)
	db, err := storage.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), storage.Options{})
	require.NoError(b, err)
	defer db.Close()
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Policy: policy})
	require.NoError(b, err)
	h := g.Handler()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() {
		// Ingestion into SQLite is part of a step's cost even though the answer does not
		// wait for it.
		require.NoError(b, db.Flush(context.Background()))
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	}()
	b.RunParallel(func(pb *testing.PB) {
		sess := fmt.Sprintf("bench-%d", n.Add(1))
		req := strings.Replace(string(body), `"sess-7f3a9c"`, `"`+sess+`"`, 1)
		// One header map for every request (the handler only reads it): an agent's headers
		// are not the guardian's cost.
		header := http.Header{"Content-Type": {"application/json"}}
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, "/aos", strings.NewReader(req))
			r.Header = header
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
}

// BenchmarkAOSEndpointRealistic runs the realistic rule set of the load benchmark
// (bench/rules-realistic.yaml) and, for comparison, no rules, in sessions of 20 and 300
// steps.
func BenchmarkAOSEndpointRealistic(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "bench", "rules-realistic.yaml"))
	require.NoError(b, err)
	f, err := rules.ParseFile("rules-realistic.yaml", data)
	require.NoError(b, err)
	for _, steps := range []int{20, 300} {
		for _, set := range []struct {
			name  string
			rules []rules.Rule
		}{{"none", nil}, {"realistic", f.Rules}} {
			b.Run(fmt.Sprintf("steps=%d/%s", steps, set.name), func(b *testing.B) {
				engine := rules.NewEngine(rules.Options{})
				require.NoError(b, engine.Load(set.rules))
				benchAOSSessions(b, &guardian.RulesPolicy{Engine: engine}, steps)
			})
		}
	}
}

// benchAOSSessions is benchAOS with each goroutine starting a new session every steps
// steps, and the tool cycling as the load generator's does.
func benchAOSSessions(b *testing.B, policy guardian.Policy, steps int) {
	body, err := os.ReadFile(filepath.Join("aos", "testdata", "toolCallRequest.json"))
	require.NoError(b, err)
	db, err := storage.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), storage.Options{})
	require.NoError(b, err)
	defer db.Close()
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Policy: policy})
	require.NoError(b, err)
	h := g.Handler()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() {
		require.NoError(b, db.Flush(context.Background()))
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	}()
	tools := []string{"search_web", "read_file", "send_email", "transfer_funds"}
	b.RunParallel(func(pb *testing.PB) {
		agent := n.Add(1)
		header := http.Header{"Content-Type": {"application/json"}}
		var reqs []string
		for _, t := range tools {
			reqs = append(reqs, strings.Replace(string(body), `"toolId": "refund_payment"`, `"toolId": "`+t+`"`, 1))
		}
		for i := 0; pb.Next(); i++ {
			sess := fmt.Sprintf("bench-%d-%d", agent, i/steps)
			req := strings.Replace(reqs[i%len(reqs)], `"sess-7f3a9c"`, `"`+sess+`"`, 1)
			r := httptest.NewRequest(http.MethodPost, "/aos", strings.NewReader(req))
			r.Header = header
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
}
