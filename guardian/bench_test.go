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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/ruleenv"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
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
	db, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
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
				benchAOSSessions(b, &guardian.RulesPolicy{Engine: engine}, steps, 0)
			})
		}
	}
}

// BenchmarkAOSEndpointSessions spreads the steps round-robin over many sessions, which
// all stay active: their histories stay in the session cache as long as they fit.
func BenchmarkAOSEndpointSessions(b *testing.B) {
	for _, n := range []int{100, 20000, 100000} {
		b.Run(fmt.Sprint("sessions=", n), func(b *testing.B) {
			benchAOSSessions(b, nil, 0, n)
		})
	}
}

// benchAOSSessions is benchAOS with each goroutine starting a new session every steps
// steps (or, with sessions, all goroutines sending round-robin to that many sessions), and
// the tool cycling as the load generator's does.
func benchAOSSessions(b *testing.B, policy guardian.Policy, steps, sessions int) {
	body, err := os.ReadFile(filepath.Join("aos", "testdata", "toolCallRequest.json"))
	require.NoError(b, err)
	db, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
	require.NoError(b, err)
	defer db.Close()
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Policy: policy})
	require.NoError(b, err)
	h := g.Handler()
	var n atomic.Int64
	// Every session exists before the clock starts: the benchmark is of active sessions.
	for i := range sessions {
		req := strings.Replace(string(body), `"sess-7f3a9c"`, fmt.Sprintf(`"bench-%d"`, i), 1)
		r := httptest.NewRequest(http.MethodPost, "/aos", strings.NewReader(req))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(b, http.StatusOK, w.Code, w.Body.String())
	}
	require.NoError(b, db.Flush(context.Background()))
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() {
		require.NoError(b, db.Flush(context.Background()))
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	}()
	tools := []string{"search_web", "read_file", "send_email", "transfer_funds"}
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		agent := n.Add(1)
		header := http.Header{"Content-Type": {"application/json"}}
		var reqs []string
		for _, t := range tools {
			reqs = append(reqs, strings.Replace(string(body), `"toolId": "refund_payment"`, `"toolId": "`+t+`"`, 1))
		}
		for i := 0; pb.Next(); i++ {
			var sess string
			if sessions > 0 {
				sess = fmt.Sprintf("bench-%d", next.Add(1)%int64(sessions))
			} else {
				sess = fmt.Sprintf("bench-%d-%d", agent, i/steps)
			}
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

// BenchmarkAOSEndpointOneAgent is one agent's steps one after another (no parallelism), as
// the load benchmark's one-agent p50 sees them: ns/op is the wall time of a step's answer
// in process, cpu-ns/op adds the SQLite ingestion on the other core. Realistic rules
// against none, in sessions of 20 and 300 steps; cold=true first evicts the caches (64 MiB
// written with the timer stopped) before each step, as a busy machine does between one
// agent's requests: the rules' evaluation then costs two to three times its warm time.
//
//	go test -run '^$' -bench AOSEndpointOneAgent -benchtime 5000x ./guardian/
func BenchmarkAOSEndpointOneAgent(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "bench", "rules-realistic.yaml"))
	require.NoError(b, err)
	f, err := rules.ParseFile("rules-realistic.yaml", data)
	require.NoError(b, err)
	for _, c := range []struct {
		steps int
		cold  bool
	}{{20, false}, {300, false}, {300, true}} {
		for _, set := range []struct {
			name  string
			rules []rules.Rule
		}{{"none", nil}, {"realistic", f.Rules}} {
			b.Run(fmt.Sprintf("steps=%d/cold=%v/%s", c.steps, c.cold, set.name), func(b *testing.B) {
				engine := rules.NewEngine(rules.Options{})
				require.NoError(b, engine.Load(set.rules))
				benchAOSSerial(b, &guardian.RulesPolicy{Engine: engine}, c.steps, c.cold)
			})
		}
	}
}

func benchAOSSerial(b *testing.B, policy guardian.Policy, steps int, cold bool) {
	body, err := os.ReadFile(filepath.Join("aos", "testdata", "toolCallRequest.json"))
	require.NoError(b, err)
	db, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
	require.NoError(b, err)
	defer db.Close()
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Policy: policy})
	require.NoError(b, err)
	h := g.Handler()
	header := http.Header{"Content-Type": {"application/json"}}
	var reqs []string
	for _, t := range []string{"search_web", "read_file", "send_email", "transfer_funds"} {
		reqs = append(reqs, strings.Replace(string(body), `"toolId": "refund_payment"`, `"toolId": "`+t+`"`, 1))
	}
	var evict []byte
	if cold {
		evict = make([]byte, 64<<20)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() {
		require.NoError(b, db.Flush(context.Background()))
		if !cold { // the eviction's own CPU time would count
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		}
	}()
	for i := 0; i < b.N; i++ {
		if cold {
			b.StopTimer()
			for k := 0; k < len(evict); k += 64 {
				evict[k]++
			}
			b.StartTimer()
		}
		req := strings.Replace(reqs[i%len(reqs)], `"sess-7f3a9c"`, fmt.Sprintf(`"serial-%d"`, i/steps), 1)
		r := httptest.NewRequest(http.MethodPost, "/aos", strings.NewReader(req))
		r.Header = header
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkDecideEvicted is the rules' decision on one step (its Env built as the guardian
// builds it, with the session's counts, 300 earlier steps) after 8 MiB written: a decision
// whose code and data the rest of the machine pushed out of the caches, as between two steps
// of one agent. decide-ns/op is the decision alone, read from the clock around it (stopping
// the benchmark's timer would read the runtime's memory statistics, warming the allocator's
// data again). Run under cachegrind with two fixed counts, the difference gives the
// instructions and cache lines one decision reads (docs/performance.md):
//
//	go test -c -o /tmp/guardian.test ./guardian/ && cd guardian && valgrind --tool=cachegrind \
//	  --I1=32768,8,64 --D1=49152,12,64 --LL=1048576,16,64 /tmp/guardian.test -test.run '^$' \
//	  -test.bench 'DecideEvicted/realistic' -test.benchtime 400x
func BenchmarkDecideEvicted(b *testing.B) {
	body, err := os.ReadFile(filepath.Join("aos", "testdata", "toolCallRequest.json"))
	require.NoError(b, err)
	data, err := os.ReadFile(filepath.Join("..", "bench", "rules-realistic.yaml"))
	require.NoError(b, err)
	f, err := rules.ParseFile("rules-realistic.yaml", data)
	require.NoError(b, err)
	tools := []string{"search_web", "read_file", "send_email", "transfer_funds"}
	var steps []*aos.Step
	for _, t := range tools {
		s, perr := aos.ParseStep([]byte(strings.Replace(string(body), `"toolId": "refund_payment"`, `"toolId": "`+t+`"`, 1)))
		require.Nil(b, perr)
		steps = append(steps, s)
	}
	at := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	hist := make([]rules.HistoryStep, 300)
	for k := range hist {
		hist[k] = ruleenv.HistoryStep(steps[k%len(steps)], "allow", int64(k+1), at.Add(time.Duration(k)*100*time.Millisecond))
	}
	counts := rules.CountSteps(hist)
	now := at.Add(time.Duration(len(hist)) * 100 * time.Millisecond)
	for _, set := range []struct {
		name  string
		rules []rules.Rule
	}{{"none", nil}, {"realistic", f.Rules}} {
		b.Run(set.name, func(b *testing.B) {
			engine := rules.NewEngine(rules.Options{})
			require.NoError(b, engine.Load(set.rules))
			evict := make([]byte, 8<<20)
			var decide time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := 0; k < len(evict); k += 64 {
					evict[k]++
				}
				step := steps[i%len(steps)]
				t0 := time.Now()
				prog := engine.Program()
				env := ruleenv.BuildFor(prog, step, ruleenv.History{SessionID: "s", StepCount: len(hist), Steps: hist, Counts: counts}, now)
				v := guardian.FromRulesVerdict(step, prog.Evaluate(env), nil)
				decide += time.Since(t0)
				if v.Decision == "" {
					b.Fatal("no decision")
				}
			}
			b.ReportMetric(float64(decide.Nanoseconds())/float64(b.N), "decide-ns/op")
		})
	}
}
