package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/guardian/live"
	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/guardian/observe/metrics"
	"github.com/vigil-guardian/vigil/guardian/observe/traces"
	"github.com/vigil-guardian/vigil/guardian/observe/webhooks"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// observability is the tool chain fed by the guardian's committed events: metrics, traces
// and webhooks behind one fan-out (observe.Fanout) in front of the live hub.
type observability struct {
	fan     *observe.Fanout
	metrics *metrics.Metrics
	hooks   *webhooks.Dispatcher
	tracer  *traces.Tracer
	// metricsSrv serves --metrics-addr at metricsURL; nil without it.
	metricsSrv *http.Server
	metricsURL string
	log        *slog.Logger
	cancel     context.CancelFunc
	done       chan struct{}
}

// otelTraces decides from the standard OpenTelemetry variables whether traces are
// exported, and over which protocol: on when an OTLP endpoint is set or
// OTEL_TRACES_EXPORTER is otlp, off when OTEL_TRACES_EXPORTER is none or OTEL_SDK_DISABLED
// is true (the -otel-traces flag turns them on regardless).
func otelTraces(lookup func(string) (string, bool)) (on bool, protocol string) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false, protocol
	}
	switch exp := get("OTEL_TRACES_EXPORTER"); {
	case exp == "none":
		return false, protocol
	case exp == "otlp":
		return true, protocol
	}
	return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", protocol
}

// startObservability builds the metrics, the trace exporter and the webhooks, and starts
// the fan-out's consumers and the --metrics-addr listener. publicURL is the console's
// address for deep links.
func startObservability(ctx context.Context, cfg Config, log *slog.Logger, hub observe.Publisher, db storage.Backend, publicURL string) (*observability, error) {
	o := &observability{log: log, done: make(chan struct{})}
	o.metrics = metrics.New(metrics.Options{Version: version})
	var consumers []observe.Consumer
	if cfg.Traces {
		exp, err := traces.NewExporter(ctx, cfg.TracesProtocol, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("traces: %w", err)
		}
		o.tracer, err = traces.New(ctx, traces.Options{
			Exporter: exp, Version: version, Content: cfg.TracesContent, HoldBySeq: db.HoldBySeq, Logger: log,
		})
		if err != nil {
			return nil, err
		}
		consumers = append(consumers, o.tracer.Consumer())
		log.Info("exporting traces over OTLP", "protocol", cmpOr(cfg.TracesProtocol, traces.ProtocolHTTP), "content", cfg.TracesContent)
	}
	o.hooks = webhooks.New(webhooks.Options{
		Targets: cfg.Webhooks, Secret: []byte(cfg.WebhookSecret), PublicURL: publicURL, Logger: log, Version: version,
	})
	if len(cfg.Webhooks) > 0 {
		consumers = append(consumers, o.hooks.Consumer())
		if err := o.metrics.Registry().Register(o.hooks); err != nil {
			return nil, fmt.Errorf("webhook metrics: %w", err)
		}
		if cfg.WebhookSecret == "" {
			log.Warn("webhook deliveries are not signed (set -webhook-secret)")
		}
	}
	o.fan = observe.New(hub, []observe.Inline{o.metrics}, consumers, log)

	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			o.shutdownTracer()
			return nil, fmt.Errorf("listen on -metrics-addr %s: %w", cfg.MetricsAddr, err)
		}
		if !auth.IsLoopback(cfg.MetricsAddr) {
			log.Warn("metrics are served without authentication on a non-loopback address", "addr", ln.Addr().String())
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", o.metrics.Handler())
		var h http.Handler = mux
		if auth.IsLoopback(cfg.MetricsAddr) {
			h = loopbackHostOnly(mux)
		}
		o.metricsSrv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() {
			if err := o.metricsSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		o.metricsURL = "http://" + ln.Addr().String() + "/metrics"
		log.Info("metrics listening", "url", o.metricsURL)
	}

	runCtx, cancel := context.WithCancel(ctx)
	o.cancel = cancel
	go func() {
		defer close(o.done)
		hooksDone := make(chan struct{})
		go func() { defer close(hooksDone); o.hooks.Run(runCtx) }()
		o.fan.Run(runCtx)
		<-hooksDone
	}()
	return o, nil
}

// watch gives the metrics the parts they read at scrape time.
func (o *observability) watch(engine *rules.Engine, hm *holds.Manager, hub *live.Hub, db storage.Backend) {
	o.metrics.Watch(metrics.Sources{
		RuleStats:    engine.Stats,
		PendingHolds: hm.Pending,
		Ingest:       db.IngestStats,
		Live:         hub.Counters,
		Consumers:    o.fan.Stats,
	})
}

// mount adds GET /metrics (allowed to whoever may read the console API) and
// GET /api/webhooks to the guardian's routes.
func (o *observability) mount(authorize func(*http.Request) error) func(*http.ServeMux) {
	h := o.metrics.Handler()
	return func(mux *http.ServeMux) {
		mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := authorize(r); err != nil {
				apijson.Error(w, http.StatusUnauthorized, "unauthenticated",
					"metrics need a signed-in console session; scrapers use -metrics-addr")
				return
			}
			h.ServeHTTP(w, r)
		}))
		o.hooks.Register(mux)
	}
}

// Close stops the consumers, exports the spans built so far and closes the metrics
// listener. Webhook deliveries still queued are given up.
func (o *observability) Close() {
	o.cancel()
	<-o.done
	o.shutdownTracer()
	if o.metricsSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = o.metricsSrv.Shutdown(ctx)
	}
}

func (o *observability) shutdownTracer() {
	if o.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.tracer.Shutdown(ctx); err != nil {
		o.log.Warn("export the last spans", "err", err)
	}
}

// loopbackHostOnly refuses requests to a loopback listener whose Host is not a loopback
// name: a web page could otherwise read it through DNS rebinding, as allowedHosts guards
// the console against.
func loopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if ip := net.ParseIP(host); !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "host "+r.Host+" is not served here", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
