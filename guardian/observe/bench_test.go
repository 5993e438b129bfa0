package observe_test

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
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/guardian/observe/metrics"
	"github.com/vigil-guardian/vigil/guardian/observe/traces"
	"github.com/vigil-guardian/vigil/guardian/observe/webhooks"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// BenchmarkAOSEndpointBare is guardian.BenchmarkAOSEndpoint (the whole /aos path through
// the handler) with no publisher. BenchmarkAOSEndpointMetrics adds the fan-out as
// `vigil serve` runs it by default: metrics counted inline. BenchmarkAOSEndpointObserved
// adds traces (to an exporter that discards) and a webhook target for denials, both
// queued: their work happens on their own goroutines, so it shows in cpu-ns/op, and
// trace-drops/op is the share of steps the traces consumer missed when the benchmark
// keeps both cores busy with requests.
func BenchmarkAOSEndpointBare(b *testing.B) { benchAOS(b, nil) }

func BenchmarkAOSEndpointMetrics(b *testing.B) {
	f := observe.New(nil, []observe.Inline{metrics.New(metrics.Options{})}, nil, nil)
	benchAOS(b, f)
}

func BenchmarkAOSEndpointObserved(b *testing.B) {
	m := metrics.New(metrics.Options{})
	tr, err := traces.New(context.Background(), traces.Options{Exporter: tracetest.NewNoopExporter()})
	require.NoError(b, err)
	target, err := webhooks.ParseTarget("http://127.0.0.1:1/#events=deny")
	require.NoError(b, err)
	hooks := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target}})
	f := observe.New(nil, []observe.Inline{m}, []observe.Consumer{tr.Consumer(), hooks.Consumer()}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		require.NoError(b, tr.Shutdown(context.Background()))
		st := f.Stats()
		b.ReportMetric(float64(st[0].Dropped)/float64(b.N), "trace-drops/op")
	}()
	benchAOS(b, f)
}

func benchAOS(b *testing.B, pub guardian.Publisher) {
	body, err := os.ReadFile(filepath.Join("..", "aos", "testdata", "toolCallRequest.json"))
	require.NoError(b, err)
	db, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
	require.NoError(b, err)
	defer db.Close()
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Publisher: pub})
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
	b.RunParallel(func(pb *testing.PB) {
		sess := fmt.Sprintf("bench-%d", n.Add(1))
		req := strings.Replace(string(body), `"sess-7f3a9c"`, `"`+sess+`"`, 1)
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

// BenchmarkPublishStepServe is the fan-out's cost on a step's path as `vigil serve` runs
// it with everything on: metrics counted inline, the step offered to the traces queue and
// to the webhooks' filter (not a denial: not queued). The consumers' own work is measured
// by their packages' benchmarks (traces.BenchmarkStep, webhooks.BenchmarkHandle); here
// they do nothing, so that only the path's cost is measured.
func BenchmarkPublishStepServe(b *testing.B) {
	m := metrics.New(metrics.Options{})
	target, err := webhooks.ParseTarget("http://127.0.0.1:1/#events=deny")
	require.NoError(b, err)
	hooks := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target}}).Consumer()
	hooks.Handle = func(context.Context, observe.Item) {}
	f := observe.New(nil, []observe.Inline{m}, []observe.Consumer{
		{Name: "traces", Steps: true, Handle: func(context.Context, observe.Item) {}}, hooks,
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	rec := &record.StepRecord{Method: "steps/toolCallRequest", Kind: "toolCall", Decision: "allow", LatencyMicros: 150,
		Request: make([]byte, 4096)}
	b.ReportAllocs()
	for b.Loop() {
		f.PublishStep(rec)
	}
}
