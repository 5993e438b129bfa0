package webhooks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Headers of a delivery.
const (
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256, keyed with the secret, of
	// HeaderTimestamp's value, a ".", and the body. Only sent when a secret is set.
	HeaderSignature = "X-Vigil-Signature"
	// HeaderTimestamp is the Unix time (seconds) the attempt was sent; receivers refuse
	// old ones to stop replays.
	HeaderTimestamp = "X-Vigil-Timestamp"
	// HeaderEvent is the event type; HeaderDelivery the payload's id (the same on retries).
	HeaderEvent    = "X-Vigil-Event"
	HeaderDelivery = "X-Vigil-Delivery"
)

// Options configure a Dispatcher.
type Options struct {
	Targets []Target
	// Secret signs deliveries (HeaderSignature); empty sends them unsigned.
	Secret []byte
	// PublicURL is the console's address, for deep links (no trailing slash).
	PublicURL string
	// Queue bounds each target's waiting deliveries (default 256).
	Queue int
	// Attempts is the most tries per delivery (default 5); Backoff the wait before the
	// first retry (default 1s), doubled for each further one up to MaxBackoff (default 1m).
	// A Retry-After answer sets the wait, up to MaxBackoff.
	Attempts   int
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Timeout bounds one attempt (default 10s).
	Timeout time.Duration
	// Client sends the requests (default: a client that follows no redirects).
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
	// Version goes into the User-Agent.
	Version string
}

func (o *Options) withDefaults() {
	if o.Queue <= 0 {
		o.Queue = 256
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{
			// A redirect could carry the signed body to another host; receivers get their
			// final address configured instead.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// delivery is one body for one target.
type delivery struct {
	event, id string
	body      []byte
}

type target struct {
	Target
	q chan delivery
	// Counters since start.
	delivered, failed, dropped, retries atomic.Int64
	mu                                  sync.Mutex
	lastStatus                          int
	lastError                           string
	lastErrorAt, lastSuccessAt          time.Time
}

// Dispatcher delivers events to the targets.
type Dispatcher struct {
	opts    Options
	targets []*target
	log     *slog.Logger
	started atomic.Bool
	// redact takes secrets and personal data out of the texts a payload carries.
	redact *rules.Modification
}

// New builds a dispatcher. Targets sharing a name get "-2", "-3"… appended (the first
// suffix no other target has).
func New(opts Options) *Dispatcher {
	opts.withDefaults()
	d := &Dispatcher{opts: opts, log: opts.Logger.With("component", "webhooks")}
	var err error
	if d.redact, err = rules.NewRedaction(rules.RedactSecrets, rules.RedactPII); err != nil {
		panic(err) // the targets are the package's own names
	}
	taken := map[string]bool{}
	for _, t := range opts.Targets {
		name := t.Name
		for n := 2; taken[name]; n++ {
			name = t.Name + "-" + strconv.Itoa(n)
		}
		t.Name = name
		taken[name] = true
		d.targets = append(d.targets, &target{Target: t, q: make(chan delivery, opts.Queue)})
	}
	return d
}

// clean is a text of the step's (a rule's message may quote it through {{…}}, a note may
// too) as it may leave the guardian: with secrets and personal data redacted.
func (d *Dispatcher) clean(s string) string {
	out, _ := d.redact.RedactString(s)
	return out
}

// Consumer is the dispatcher's place on the event stream (observe.Fanout): the events
// some target subscribed to.
func (d *Dispatcher) Consumer() observe.Consumer {
	c := observe.Consumer{Name: "webhooks", Handle: d.handle}
	for _, t := range d.targets {
		for _, e := range t.Events {
			switch e {
			case EventStepDenied:
				c.Steps = true
			default:
				if !slices.Contains(c.Events, e) {
					c.Events = append(c.Events, e)
				}
			}
		}
	}
	c.StepFilter = func(rec *record.StepRecord) bool { return rec.Decision == "deny" }
	return c
}

// handle turns an event into deliveries and queues them, one per subscribed target.
func (d *Dispatcher) handle(_ context.Context, it observe.Item) {
	p := Payload{}
	switch {
	case it.Step != nil:
		if it.Step.Decision != "deny" {
			return
		}
		p.Type, p.At = EventStepDenied, it.Step.ReceivedAt
		p.ID = "evt_" + strconv.FormatInt(it.Step.Seq, 10)
		p.Step = stepInfo(it.Step)
		p.Step.Message = d.clean(p.Step.Message)
		p.URL = StepURL(d.opts.PublicURL, it.Step.SessionID, it.Step.Seq)
	case it.Event.Type == record.EventHoldCreated || it.Event.Type == record.EventHoldResolved:
		var h record.Hold
		if err := json.Unmarshal(it.Event.Payload, &h); err != nil {
			d.log.Error("unreadable hold event", "seq", it.Event.Seq, "err", err)
			return
		}
		p.Type, p.At = it.Event.Type, it.Event.At
		p.ID = "evt_" + strconv.FormatInt(it.Event.Seq, 10)
		p.Hold = holdInfo(&h)
		p.Hold.Message, p.Hold.Note = d.clean(p.Hold.Message), d.clean(p.Hold.Note)
		p.URL = HoldURL(d.opts.PublicURL, h.ID)
	default:
		return
	}
	var bodies [2][]byte // json, slack: encoded once, shared by the targets
	for _, t := range d.targets {
		if !t.wants(p.Type) {
			continue
		}
		i, v := 0, any(&p)
		if t.Format == FormatSlack {
			i, v = 1, slackMessage(&p)
		}
		if bodies[i] == nil {
			b, err := json.Marshal(v)
			if err != nil {
				d.log.Error("encode webhook", "err", err)
				return
			}
			bodies[i] = b
		}
		select {
		case t.q <- delivery{event: p.Type, id: p.ID, body: bodies[i]}:
		default:
			t.dropped.Add(1)
			t.setError(0, "queue full: delivery dropped", d.opts.Now())
		}
	}
}

// Run delivers queued events until ctx ends. Call it once.
func (d *Dispatcher) Run(ctx context.Context) {
	if !d.started.CompareAndSwap(false, true) {
		return
	}
	var wg sync.WaitGroup
	var givenUp atomic.Int64
	for _, t := range d.targets {
		wg.Go(func() {
			// A select picks at random among ready cases: ctx is checked first so that a
			// shutdown does not go on taking queued deliveries only to cancel each one.
			for ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case dl := <-t.q:
					if !d.deliver(ctx, t, dl) {
						givenUp.Add(1)
					}
				}
			}
			givenUp.Add(int64(len(t.q)))
		})
	}
	wg.Wait()
	// One line for the lot: a line per delivery would only repeat the cancellation.
	if n := givenUp.Load(); n > 0 {
		d.log.Warn("webhook deliveries given up at shutdown", "deliveries", n)
	}
}

// permanentError is an answer a retry would not change (a 4xx other than 408 and 429).
// Its text is the answer's alone: it is shown as a target's last error.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() + " (not retried)" }
func (e permanentError) Unwrap() error { return e.err }

// deliver tries a delivery until it succeeds, fails for good, or runs out of attempts. It
// reports false when ctx ended first: the caller counts those and logs them once.
func (d *Dispatcher) deliver(ctx context.Context, t *target, dl delivery) bool {
	wait := d.opts.Backoff
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			return false
		}
		status, retryAfter, err := d.attempt(ctx, t, dl)
		now := d.opts.Now()
		if err == nil {
			t.delivered.Add(1)
			t.mu.Lock()
			t.lastStatus, t.lastSuccessAt = status, now
			t.mu.Unlock()
			return true
		}
		if ctx.Err() != nil {
			// Shutting down: the attempt was cut short, not refused.
			t.failed.Add(1)
			return false
		}
		t.setError(status, err.Error(), now)
		var perm permanentError
		if errors.As(err, &perm) || attempt >= d.opts.Attempts {
			t.failed.Add(1)
			d.log.Warn("webhook delivery failed", "target", t.Name, "event", dl.event, "id", dl.id, "attempts", attempt, "err", err)
			return true
		}
		t.retries.Add(1)
		pause := wait
		if retryAfter > 0 {
			pause = retryAfter
		}
		pause = min(pause, d.opts.MaxBackoff)
		wait = min(wait*2, d.opts.MaxBackoff)
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			t.failed.Add(1)
			return false
		case <-timer.C:
		}
	}
}

// attempt posts the delivery once.
func (d *Dispatcher) attempt(ctx context.Context, t *target, dl delivery) (status int, retryAfter time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(dl.body))
	if err != nil {
		return 0, 0, permanentError{fmt.Errorf("build request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Vigil-Webhook/"+cmpOr(d.opts.Version, "dev"))
	req.Header.Set(HeaderEvent, dl.event)
	req.Header.Set(HeaderDelivery, dl.id)
	if len(d.opts.Secret) > 0 {
		ts := strconv.FormatInt(d.opts.Now().Unix(), 10)
		req.Header.Set(HeaderTimestamp, ts)
		req.Header.Set(HeaderSignature, Sign(d.opts.Secret, ts, dl.body))
	}
	resp, err := d.opts.Client.Do(req)
	if err != nil {
		// Without the URL the client's error names: its path is often the secret, and the
		// error reaches the log and the status API.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, 0, err
	}
	// Read a little of the answer so the connection can be reused; no more.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return c, 0, nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			retryAfter = time.Duration(s) * time.Second
		}
		return c, retryAfter, httpError(c)
	default:
		return c, 0, permanentError{httpError(c)}
	}
}

// httpError is an answer's status in words ("HTTP 503 Service Unavailable").
func httpError(code int) error {
	if text := http.StatusText(code); text != "" {
		return fmt.Errorf("HTTP %d %s", code, text)
	}
	return fmt.Errorf("HTTP %d", code)
}

// Sign is the HeaderSignature value of body sent at timestamp (Unix seconds, as in
// HeaderTimestamp): "sha256=" and hex(HMAC-SHA256(secret, timestamp + "." + body)).
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func (t *target) setError(status int, msg string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if status != 0 {
		t.lastStatus = status
	}
	t.lastError, t.lastErrorAt = msg, at
}

// TargetStatus is one target's state, as GET /api/webhooks reports it.
type TargetStatus struct {
	Name string `json:"name"`
	// URL is scheme and host only: the rest of a webhook URL is often its secret.
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Format string   `json:"format"`
	// Delivered and Failed count deliveries (a failure after all its attempts), Dropped
	// those refused by a full queue, Retries the attempts after a first failure.
	Delivered int64 `json:"delivered"`
	Failed    int64 `json:"failed"`
	Dropped   int64 `json:"dropped"`
	Retries   int64 `json:"retries"`
	Queued    int   `json:"queued"`
	// LastStatus is the HTTP status of the last answer (0 before any).
	LastStatus    int       `json:"lastStatus,omitempty"`
	LastError     string    `json:"lastError,omitempty"`
	LastErrorAt   time.Time `json:"lastErrorAt,omitzero"`
	LastSuccessAt time.Time `json:"lastSuccessAt,omitzero"`
}

// Status reports every target.
func (d *Dispatcher) Status() []TargetStatus {
	out := make([]TargetStatus, 0, len(d.targets))
	for _, t := range d.targets {
		t.mu.Lock()
		s := TargetStatus{
			Name: t.Name, URL: t.Redacted(), Events: t.Events, Format: t.Format,
			Delivered: t.delivered.Load(), Failed: t.failed.Load(), Dropped: t.dropped.Load(),
			Retries: t.retries.Load(), Queued: len(t.q),
			LastStatus: t.lastStatus, LastError: t.lastError, LastErrorAt: t.lastErrorAt, LastSuccessAt: t.lastSuccessAt,
		}
		t.mu.Unlock()
		out = append(out, s)
	}
	return out
}

// Register adds GET /api/webhooks (the targets' status) to the console API.
func (d *Dispatcher) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/webhooks", func(w http.ResponseWriter, _ *http.Request) {
		apijson.Write(w, http.StatusOK, map[string]any{"targets": d.Status()})
	})
}

var (
	deliveriesDesc = prometheus.NewDesc("vigil_webhook_deliveries_total",
		"Webhook deliveries by target and outcome: delivered, failed (after every attempt, or refused), dropped (queue full).",
		[]string{"target", "outcome"}, nil)
	retriesDesc = prometheus.NewDesc("vigil_webhook_retries_total",
		"Webhook delivery attempts after a failed one.", []string{"target"}, nil)
	queueDesc = prometheus.NewDesc("vigil_webhook_queue_length",
		"Webhook deliveries waiting.", []string{"target"}, nil)
	lastSuccessDesc = prometheus.NewDesc("vigil_webhook_last_success_timestamp_seconds",
		"Unix time of the target's last successful delivery (0 before any).", []string{"target"}, nil)
)

// Describe implements prometheus.Collector.
func (d *Dispatcher) Describe(ch chan<- *prometheus.Desc) {
	ch <- deliveriesDesc
	ch <- retriesDesc
	ch <- queueDesc
	ch <- lastSuccessDesc
}

// Collect implements prometheus.Collector.
func (d *Dispatcher) Collect(ch chan<- prometheus.Metric) {
	for _, s := range d.Status() {
		for outcome, n := range map[string]int64{"delivered": s.Delivered, "failed": s.Failed, "dropped": s.Dropped} {
			ch <- prometheus.MustNewConstMetric(deliveriesDesc, prometheus.CounterValue, float64(n), s.Name, outcome)
		}
		ch <- prometheus.MustNewConstMetric(retriesDesc, prometheus.CounterValue, float64(s.Retries), s.Name)
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(s.Queued), s.Name)
		last := 0.0
		if !s.LastSuccessAt.IsZero() {
			last = float64(s.LastSuccessAt.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue, last, s.Name)
	}
}
