package metrics_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/live"
	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/guardian/observe/metrics"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// scrape fetches the handler's metrics and parses them with Prometheus' own parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value finds the sample of family name whose labels are exactly labels.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "no family %s", name)
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(got) == fmt.Sprint(labels) {
			return m
		}
	}
	require.Failf(t, "no sample", "%s%v", name, labels)
	return nil
}

func holdEvent(t *testing.T, typ, status string, wait time.Duration) record.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := record.Hold{ID: "h_1", SessionID: "s", Status: status, CreatedAt: t0, Request: json.RawMessage(`{"x":1}`)}
	if status != record.HoldPending {
		h.DecidedAt = t0.Add(wait)
	}
	b, err := json.Marshal(h)
	require.NoError(t, err)
	return record.Event{Type: typ, SessionID: "s", At: t0, Payload: b}
}

func TestScrape(t *testing.T) {
	m := metrics.New(metrics.Options{Version: "1.2.3"})
	m.Watch(metrics.Sources{
		RuleStats: func() map[string]rules.RuleStats {
			return map[string]rules.RuleStats{"no-rm": {Evaluations: 10, Matches: 3, Errors: 1, TotalMicros: 2500}}
		},
		PendingHolds: func() int { return 2 },
		Ingest: func() record.IngestStats {
			return record.IngestStats{PendingSteps: 7, PendingBytes: 700, JournalBytes: 4096}
		},
		Live: func() live.Counters { return live.Counters{Clients: 3, Published: 40, Dropped: 1} },
		Consumers: func() []observe.ConsumerStats {
			return []observe.ConsumerStats{{Name: "webhooks", Queued: 1, Handled: 5, Dropped: 9}}
		},
	})
	var fan observe.Inline = m
	for _, rec := range []record.StepRecord{
		{Method: "steps/toolCallRequest", Kind: "toolCall", Decision: "deny", LatencyMicros: 80},
		{Method: "steps/toolCallRequest", Kind: "toolCall", Decision: "deny", LatencyMicros: 300},
		{Method: "steps/message", Kind: "message", Decision: "allow", LatencyMicros: 40},
		// Held: its latency is mostly an operator's, kept out of the decision histogram.
		{Method: "steps/toolCallRequest", Kind: "toolCall", Decision: "allow", LatencyMicros: 90e6, Held: true},
	} {
		fan.Step(&rec)
	}
	fan.Event(holdEvent(t, record.EventHoldCreated, record.HoldPending, 0))
	fan.Event(holdEvent(t, record.EventHoldResolved, record.HoldApproved, 90*time.Second))
	fan.Event(holdEvent(t, record.EventHoldResolved, record.HoldTimedOut, 5*time.Minute))
	fan.Event(record.Event{Type: "audit", Payload: json.RawMessage(`{}`)})
	m.UpstreamError("billing", "connect")
	m.UpstreamError("billing", "connect")

	fams := scrape(t, m.Handler())
	counter := func(name string, labels map[string]string) float64 {
		return value(t, fams, name, labels).GetCounter().GetValue()
	}
	gauge := func(name string, labels map[string]string) float64 {
		return value(t, fams, name, labels).GetGauge().GetValue()
	}
	require.Equal(t, 2.0, counter("vigil_steps_total", map[string]string{"method": "steps/toolCallRequest", "kind": "toolCall", "decision": "deny"}))
	require.Equal(t, 1.0, counter("vigil_steps_total", map[string]string{"method": "steps/toolCallRequest", "kind": "toolCall", "decision": "allow"}))
	require.Equal(t, 1.0, counter("vigil_held_steps_total", map[string]string{}))

	h := value(t, fams, "vigil_decision_duration_seconds", map[string]string{}).GetHistogram()
	require.EqualValues(t, 3, h.GetSampleCount())
	require.InDelta(t, 420e-6, h.GetSampleSum(), 1e-9)
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 100e-6 {
			require.EqualValues(t, 2, b.GetCumulativeCount(), "40µs and 80µs are under 100µs")
		}
	}

	require.Equal(t, 1.0, counter("vigil_holds_created_total", map[string]string{}))
	require.Equal(t, 1.0, counter("vigil_holds_resolved_total", map[string]string{"outcome": "approved"}))
	require.Equal(t, 1.0, counter("vigil_holds_resolved_total", map[string]string{"outcome": "timedOut"}))
	require.Equal(t, 0.0, counter("vigil_holds_resolved_total", map[string]string{"outcome": "interrupted"}), "every outcome is exported from the start")
	rv := value(t, fams, "vigil_hold_review_duration_seconds", map[string]string{"outcome": "approved"}).GetHistogram()
	require.EqualValues(t, 1, rv.GetSampleCount())
	require.Equal(t, 90.0, rv.GetSampleSum())
	require.Equal(t, 2.0, gauge("vigil_holds_pending", map[string]string{}))

	rule := map[string]string{"rule": "no-rm"}
	require.Equal(t, 10.0, counter("vigil_rule_evaluations_total", rule))
	require.Equal(t, 3.0, counter("vigil_rule_matches_total", rule))
	require.Equal(t, 1.0, counter("vigil_rule_errors_total", rule))
	require.Equal(t, 0.0025, counter("vigil_rule_evaluation_seconds_total", rule))
	require.Equal(t, 1.0, gauge("vigil_rules_loaded", map[string]string{}))

	require.Equal(t, 7.0, gauge("vigil_storage_ingest_pending_steps", map[string]string{}))
	require.Equal(t, 700.0, gauge("vigil_storage_ingest_pending_bytes", map[string]string{}))
	require.Equal(t, 4096.0, gauge("vigil_storage_journal_bytes", map[string]string{}))
	require.Equal(t, 3.0, gauge("vigil_live_clients", map[string]string{}))
	require.Equal(t, 1.0, counter("vigil_live_events_dropped_total", map[string]string{}))
	require.Equal(t, 9.0, counter("vigil_observe_dropped_total", map[string]string{"consumer": "webhooks"}))
	require.Equal(t, 2.0, counter("vigil_gateway_upstream_errors_total", map[string]string{"gateway": "billing", "reason": "connect"}))
	require.Equal(t, 1.0, gauge("vigil_build_info", map[string]string{"version": "1.2.3"}))
	require.Contains(t, fams, "go_goroutines")
	require.Contains(t, fams, "process_cpu_seconds_total")
}

// TestStepSeriesBounded: a front end sending ever new methods cannot grow the metric
// without bound; past the limit the steps are counted under "other".
func TestStepSeriesBounded(t *testing.T) {
	m := metrics.New(metrics.Options{})
	const n = 2000
	for i := range n {
		m.Step(&record.StepRecord{Method: fmt.Sprintf("m%d", i), Kind: "k", Decision: "allow"})
	}
	fams := scrape(t, m.Handler())
	steps := fams["vigil_steps_total"].GetMetric()
	require.LessOrEqual(t, len(steps), 513)
	total := 0.0
	for _, s := range steps {
		total += s.GetCounter().GetValue()
	}
	require.Equal(t, float64(n), total, "no step goes uncounted")
	require.Positive(t, value(t, fams, "vigil_steps_total", map[string]string{"method": "other", "kind": "other", "decision": "other"}).GetCounter().GetValue())
}

func TestUpstreamSeriesBounded(t *testing.T) {
	m := metrics.New(metrics.Options{})
	var ue observe.UpstreamErrors = m
	for i := range 1000 {
		ue.UpstreamError(fmt.Sprintf("g%d", i), "timeout")
	}
	fams := scrape(t, m.Handler())
	require.LessOrEqual(t, len(fams["vigil_gateway_upstream_errors_total"].GetMetric()), 257)
}

func BenchmarkStep(b *testing.B) {
	m := metrics.New(metrics.Options{})
	rec := &record.StepRecord{Method: "steps/toolCallRequest", Kind: "toolCall", Decision: "allow", LatencyMicros: 120}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Step(rec)
		}
	})
}

// A scraper that asks for OpenMetrics gets it; one that does not gets the text format.
func TestOpenMetricsWhenAsked(t *testing.T) {
	m := metrics.New(metrics.Options{Version: "1.2.3"})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		accept, contentType string
		eof                 bool
	}{
		{accept: "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5", contentType: "application/openmetrics-text", eof: true},
		{accept: "", contentType: "text/plain"},
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), tc.contentType), resp.Header.Get("Content-Type"))
		require.Equal(t, tc.eof, strings.HasSuffix(string(body), "# EOF\n"))
		require.Contains(t, string(body), "vigil_build_info")
	}
}
