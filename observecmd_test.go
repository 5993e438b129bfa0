package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/vigil-guardian/vigil/guardian/observe/metrics"
	"github.com/vigil-guardian/vigil/guardian/observe/webhooks"
)

func TestOtelTracesFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		on       bool
		protocol string
	}{
		{name: "nothing set", on: false},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "exporter none wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: false},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, on: false},
		{name: "protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true, protocol: "grpc"},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, protocol: "http/protobuf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, protocol := otelTraces(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			require.Equal(t, tc.on, on)
			require.Equal(t, tc.protocol, protocol)
		})
	}
}

func TestObservabilityFlags(t *testing.T) {
	t.Setenv("VIGIL_WEBHOOK", "https://a.example/x https://b.example/y#format=slack")
	cfg, err := parseConfig("serve", []string{"--webhook", "https://c.example/z#events=all", "--webhook-secret", "k", "--otel-content"}, io.Discard)
	require.NoError(t, err)
	require.Len(t, cfg.Webhooks, 3, "the environment's targets and the flags' add up")
	require.Equal(t, "slack", cfg.Webhooks[1].Format)
	require.Equal(t, webhooks.AllEvents, cfg.Webhooks[2].Events)
	require.Equal(t, "k", cfg.WebhookSecret)
	require.True(t, cfg.TracesContent)

	os.Unsetenv("VIGIL_WEBHOOK")
	_, err = parseConfig("serve", []string{"--webhook", "https://c.example/z#events=everything"}, io.Discard)
	require.ErrorContains(t, err, `unknown event "everything"`)
}

// TestObservabilityEndToEnd runs the whole server with a rule that denies, a webhook
// receiver and an OTLP receiver: a denied step reaches all three and the metrics.
func TestObservabilityEndToEnd(t *testing.T) {
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(`rules:
  - id: no-transfers
    when: tool == "transfer_funds"
    action: deny
    reasonCode: NO_TRANSFERS
`), 0o600))

	hooks := make(chan *http.Request, 10)
	hookBodies := make(chan []byte, 10)
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hooks <- r
		hookBodies <- b
	}))
	defer hookSrv.Close()

	spans := make(chan *coltracepb.ExportTraceServiceRequest, 10)
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		spans <- &req
	}))
	defer otlp.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)

	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "vigil.db"),
		"--rules", rulesFile, "--webhook", hookSrv.URL + "/hook#events=deny", "--webhook-secret", "s3cret",
		"--metrics-addr", "127.0.0.1:0", "--public-url", "https://vigil.example"}, io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.Traces)
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			_ = srv.Shutdown(5 * time.Second)
		}
	}()

	// The console's loopback host: --public-url adds its host to the allowed ones.
	out := postStep(t, srv.URL, toolStep)
	require.Equal(t, "deny", out["result"].(map[string]any)["decision"])

	req := <-hooks
	body := <-hookBodies
	require.Equal(t, "step.denied", req.Header.Get(webhooks.HeaderEvent))
	require.Equal(t, webhooks.Sign([]byte("s3cret"), req.Header.Get(webhooks.HeaderTimestamp), body), req.Header.Get(webhooks.HeaderSignature))
	var p webhooks.Payload
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, fmt.Sprintf("https://vigil.example/#/session/cli-session?step=%d", p.Step.Seq), p.URL)
	require.Equal(t, "no-transfers", p.Step.RuleID)

	// The console's /metrics answers the open loopback console; the scrape listener anyone.
	for _, u := range []string{srv.URL + "/metrics", srv.obs.metricsURL} {
		resp, err := http.Get(u)
		require.NoError(t, err)
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, u)
		var denied float64
		for _, m := range fams["vigil_steps_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "decision" && l.GetValue() == "deny" {
					denied += m.GetCounter().GetValue()
				}
			}
		}
		require.Equal(t, 1.0, denied, u)
		require.Contains(t, fams, "vigil_rule_matches_total")
		require.Contains(t, fams, "vigil_webhook_deliveries_total")
	}

	// The webhook status API.
	resp, err := http.Get(srv.URL + "/api/webhooks")
	require.NoError(t, err)
	var st struct{ Targets []webhooks.TargetStatus }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	require.Len(t, st.Targets, 1)
	require.Equal(t, "127.0.0.1", st.Targets[0].Name)

	// Shutdown exports the spans built so far.
	require.NoError(t, srv.Shutdown(5*time.Second))
	stopped = true
	select {
	case got := <-spans:
		s := got.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0]
		require.Equal(t, "execute_tool transfer_funds", s.GetName())
	case <-time.After(10 * time.Second):
		t.Fatal("no spans exported")
	}
}

// TestMetricsNeedAConsoleSession: in team mode /metrics on the main listener is refused
// without a signed-in session.
func TestMetricsNeedAConsoleSession(t *testing.T) {
	o := &observability{}
	o.metrics = metrics.New(metrics.Options{})
	o.hooks = webhooks.New(webhooks.Options{})
	mux := http.NewServeMux()
	o.mount(func(*http.Request) error { return http.ErrNoCookie })(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.True(t, strings.Contains(w.Body.String(), "metrics-addr"))
}

func TestMetricsListenerRefusesOtherHosts(t *testing.T) {
	h := loopbackHostOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	for host, want := range map[string]int{
		"127.0.0.1:9464": http.StatusOK, "localhost:9464": http.StatusOK, "[::1]:9464": http.StatusOK,
		"evil.example:9464": http.StatusMisdirectedRequest, "10.0.0.1": http.StatusMisdirectedRequest,
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(t, want, w.Code, host)
	}
}
