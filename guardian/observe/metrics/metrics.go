// Package metrics exposes the guardian's Prometheus metrics: what flows through the
// decision pipeline (counted as it is published, see observe.Inline) and what its parts
// report at scrape time (rules, holds, storage, live hub, fan-out queues).
//
// Labels have bounded values: methods, kinds, decisions and hold outcomes come from fixed
// sets (anything else reads "other"); rule ids are the loaded rules; gateway names and
// webhook targets come from the configuration. No session, agent or step id is a label.
package metrics

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vigil-guardian/vigil/guardian/live"
	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Options configure the metrics.
type Options struct {
	// Version is reported by vigil_build_info.
	Version string
}

// Sources are the guardian's parts read at scrape time; any may be nil. They are given
// after New (Watch), since the parts are built after the event stream they publish to.
type Sources struct {
	// RuleStats returns the loaded rules' counters by rule id (rules.Engine.Stats).
	RuleStats func() map[string]rules.RuleStats
	// PendingHolds returns the number of holds waiting for an operator.
	PendingHolds func() int
	// Ingest returns the storage's ingestion backlog (storage.Backend.IngestStats).
	Ingest func() record.IngestStats
	// Live returns the live hub's counters.
	Live func() live.Counters
	// Consumers returns the fan-out's queued consumers' counters.
	Consumers func() []observe.ConsumerStats
}

// Metrics is the registry and the collectors fed by the published events. It implements
// observe.Inline and observe.UpstreamErrors.
type Metrics struct {
	reg *prometheus.Registry

	steps          *prometheus.CounterVec
	decisionTime   prometheus.Histogram
	heldSteps      prometheus.Counter
	holdsCreated   prometheus.Counter
	holdsResolved  *prometheus.CounterVec
	reviewTime     *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec

	// stepCounters caches the steps counter of each label set: resolving labels costs more
	// than counting. series bounds how many the cache (and the metric) may hold.
	stepCounters sync.Map // stepKey → prometheus.Counter
	series       atomic.Int64
	// sources are read at scrape time (nil before Watch).
	sources atomic.Pointer[Sources]
	// upstreamSeries bounds the gateway error series the same way.
	upstreamMu     sync.Mutex
	upstreamSeries map[[2]string]prometheus.Counter
}

type stepKey struct{ method, kind, decision string }

// maxStepSeries bounds vigil_steps_total's label sets. The method and kind sets are fixed
// by the AOS parser, so this only guards against a front end that sends something new.
const maxStepSeries = 512

// maxUpstreamSeries bounds vigil_gateway_upstream_errors_total's label sets.
const maxUpstreamSeries = 256

// Bucket bounds. Decisions take microseconds to milliseconds (a slow rule up to its
// budget); reviews take seconds to the hold timeout.
var (
	decisionBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
	reviewBuckets   = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600}
)

// New builds the metrics and registers the guardian's and the Go runtime's collectors.
func New(opts Options) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_steps_total",
			Help: "Steps decided and stored, by AOS method, kind and final decision (allow, deny, modify).",
		}, []string{"method", "kind", "decision"}),
		decisionTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "vigil_decision_duration_seconds",
			Help:    "Time from a step's arrival to its decision (its latencyMicros), for steps that did not wait for an operator (their wait is in vigil_hold_review_duration_seconds).",
			Buckets: decisionBuckets,
		}),
		heldSteps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_held_steps_total",
			Help: "Steps that waited for an operator before their decision.",
		}),
		holdsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_holds_created_total",
			Help: "Holds created (steps parked for review).",
		}),
		holdsResolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_holds_resolved_total",
			Help: "Holds ended, by outcome: approved, denied, modified, timedOut, abandoned (the agent went away), interrupted (the guardian stopped).",
		}, []string{"outcome"}),
		reviewTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vigil_hold_review_duration_seconds",
			Help:    "Time a hold waited, from its creation to its end, by outcome.",
			Buckets: reviewBuckets,
		}, []string{"outcome"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_gateway_upstream_errors_total",
			Help: "Failed requests of a gateway to its upstream, by gateway name and reason.",
		}, []string{"gateway", "reason"}),
		upstreamSeries: map[[2]string]prometheus.Counter{},
	}
	for _, o := range holdOutcomes {
		m.holdsResolved.WithLabelValues(o)
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "vigil_build_info",
		Help:        "Always 1; the version label names the running build.",
		ConstLabels: prometheus.Labels{"version": opts.Version},
	})
	buildInfo.Set(1)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
		m.steps, m.decisionTime, m.heldSteps, m.holdsCreated, m.holdsResolved, m.reviewTime, m.upstreamErrors,
		&scrapeCollector{m: m},
	)
	return m
}

// Watch sets the parts read at scrape time.
func (m *Metrics) Watch(src Sources) { m.sources.Store(&src) }

// Registry is where other parts register their own collectors (webhooks, traces).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text (or OpenMetrics) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		// A failing collector costs its own series, not the whole scrape.
		ErrorHandling: promhttp.ContinueOnError,
		// Scrapes are cheap but each one reads rule stats and takes the journal lock:
		// a few at once is plenty.
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
		// Without it promhttp answers every Accept with the classic text format.
		EnableOpenMetrics: true,
	})
}

// Step implements observe.Inline: it counts a stored step.
func (m *Metrics) Step(rec *record.StepRecord) {
	m.stepCounter(stepKey{rec.Method, rec.Kind, rec.Decision}).Inc()
	if rec.Held {
		m.heldSteps.Inc()
		return
	}
	m.decisionTime.Observe(float64(rec.LatencyMicros) / 1e6)
}

func (m *Metrics) stepCounter(k stepKey) prometheus.Counter {
	if c, ok := m.stepCounters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	if m.series.Add(1) > maxStepSeries {
		m.series.Add(-1)
		k = stepKey{"other", "other", "other"}
		if c, ok := m.stepCounters.Load(k); ok {
			return c.(prometheus.Counter)
		}
	}
	c, loaded := m.stepCounters.LoadOrStore(k, m.steps.WithLabelValues(k.method, k.kind, k.decision))
	if loaded {
		m.series.Add(-1)
	}
	return c.(prometheus.Counter)
}

// holdOutcomes are the final hold statuses, the values of the outcome label.
var holdOutcomes = []string{
	record.HoldApproved, record.HoldDenied, record.HoldModified,
	record.HoldTimedOut, record.HoldAbandoned, record.HoldInterrupted,
}

// holdTimes are the fields of a hold event the metrics need.
type holdTimes struct {
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
	DecidedAt time.Time `json:"decidedAt"`
}

// Event implements observe.Inline: it counts holds created and resolved.
func (m *Metrics) Event(ev record.Event) {
	switch ev.Type {
	case record.EventHoldCreated:
		m.holdsCreated.Inc()
	case record.EventHoldResolved:
		var h holdTimes
		if err := json.Unmarshal(ev.Payload, &h); err != nil {
			return
		}
		outcome := "other"
		for _, o := range holdOutcomes {
			if h.Status == o {
				outcome = o
			}
		}
		m.holdsResolved.WithLabelValues(outcome).Inc()
		if !h.CreatedAt.IsZero() && !h.DecidedAt.IsZero() {
			m.reviewTime.WithLabelValues(outcome).Observe(max(0, h.DecidedAt.Sub(h.CreatedAt).Seconds()))
		}
	}
}

// UpstreamError implements observe.UpstreamErrors.
func (m *Metrics) UpstreamError(gateway, reason string) {
	k := [2]string{gateway, reason}
	m.upstreamMu.Lock()
	c, ok := m.upstreamSeries[k]
	if !ok {
		if len(m.upstreamSeries) >= maxUpstreamSeries {
			k = [2]string{"other", "other"}
		}
		c = m.upstreamErrors.WithLabelValues(k[0], k[1])
		if len(m.upstreamSeries) < maxUpstreamSeries {
			m.upstreamSeries[k] = c
		}
	}
	m.upstreamMu.Unlock()
	c.Inc()
}

// scrapeCollector reads the guardian's parts when scraped.
type scrapeCollector struct{ m *Metrics }

var (
	ruleEvaluations = prometheus.NewDesc("vigil_rule_evaluations_total",
		"Steps each loaded rule was evaluated on (since the guardian started).", []string{"rule"}, nil)
	ruleMatches = prometheus.NewDesc("vigil_rule_matches_total",
		"Steps each loaded rule matched.", []string{"rule"}, nil)
	ruleErrors = prometheus.NewDesc("vigil_rule_errors_total",
		"Run-time errors of each loaded rule (budget overruns included); the rule's on-error decision applied.", []string{"rule"}, nil)
	ruleSeconds = prometheus.NewDesc("vigil_rule_evaluation_seconds_total",
		"Time spent evaluating each loaded rule, estimated from a sample: one evaluation in 64 is timed and counts 64 times.", []string{"rule"}, nil)
	rulesLoaded = prometheus.NewDesc("vigil_rules_loaded",
		"Rules loaded in the engine.", nil, nil)
	holdsPending = prometheus.NewDesc("vigil_holds_pending",
		"Holds waiting for an operator now.", nil, nil)
	ingestPending = prometheus.NewDesc("vigil_storage_ingest_pending_steps",
		"Steps durable in the step journal but not yet stored in SQLite (the ingestion lag).", nil, nil)
	ingestPendingBytes = prometheus.NewDesc("vigil_storage_ingest_pending_bytes",
		"Encoded size of the journaled steps waiting for ingestion.", nil, nil)
	journalBytes = prometheus.NewDesc("vigil_storage_journal_bytes",
		"Size of the step journal files.", nil, nil)
	liveClients = prometheus.NewDesc("vigil_live_clients",
		"Console clients connected to the live stream.", nil, nil)
	livePublished = prometheus.NewDesc("vigil_live_events_published_total",
		"Events accepted by the live hub.", nil, nil)
	liveDropped = prometheus.NewDesc("vigil_live_events_dropped_total",
		"Events the live hub's queue refused (read back from storage for connected clients).", nil, nil)
	liveSlow = prometheus.NewDesc("vigil_live_slow_clients_total",
		"Live clients disconnected because they could not keep up.", nil, nil)
	consumerQueued = prometheus.NewDesc("vigil_observe_queue_length",
		"Events waiting for a consumer of the event stream (traces, webhooks).", []string{"consumer"}, nil)
	consumerHandled = prometheus.NewDesc("vigil_observe_events_total",
		"Events handed to a consumer of the event stream.", []string{"consumer"}, nil)
	consumerDropped = prometheus.NewDesc("vigil_observe_dropped_total",
		"Events a consumer of the event stream missed because its queue was full.", []string{"consumer"}, nil)
)

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ruleEvaluations, ruleMatches, ruleErrors, ruleSeconds, rulesLoaded,
		holdsPending, ingestPending, ingestPendingBytes, journalBytes, liveClients, livePublished, liveDropped,
		liveSlow, consumerQueued, consumerHandled, consumerDropped} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	o := c.m.sources.Load()
	if o == nil {
		return
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if o.RuleStats != nil {
		stats := o.RuleStats()
		gauge(rulesLoaded, float64(len(stats)))
		for id, s := range stats {
			counter(ruleEvaluations, float64(s.Evaluations), id)
			counter(ruleMatches, float64(s.Matches), id)
			counter(ruleErrors, float64(s.Errors), id)
			counter(ruleSeconds, float64(s.TotalMicros)/1e6, id)
		}
	}
	if o.PendingHolds != nil {
		gauge(holdsPending, float64(o.PendingHolds()))
	}
	if o.Ingest != nil {
		st := o.Ingest()
		gauge(ingestPending, float64(st.PendingSteps))
		gauge(ingestPendingBytes, float64(st.PendingBytes))
		gauge(journalBytes, float64(st.JournalBytes))
	}
	if o.Live != nil {
		lc := o.Live()
		gauge(liveClients, float64(lc.Clients))
		counter(livePublished, float64(lc.Published))
		counter(liveDropped, float64(lc.Dropped))
		counter(liveSlow, float64(lc.SlowClients))
	}
	if o.Consumers != nil {
		for _, s := range o.Consumers() {
			gauge(consumerQueued, float64(s.Queued), s.Name)
			counter(consumerHandled, float64(s.Handled), s.Name)
			counter(consumerDropped, float64(s.Dropped), s.Name)
		}
	}
}
