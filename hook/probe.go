package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// Probe is how the hook tells a hung guardian from a held step while a step is unanswered.
// A held step keeps the AOS call open for as long as the operator takes, so a slow answer
// alone says nothing; a guardian whose health check fails will not answer the step either,
// and waiting for it would only spend the hook's timeout. Zero fields take the defaults.
type Probe struct {
	// Grace is how long a step may go unanswered before the first check: a step that is
	// not held is answered in milliseconds, so a healthy guardian is rarely asked at all.
	Grace time.Duration
	// Timeout bounds one check. Longer than the guardian's own bound on its database read
	// (2s), so a stalled database is reported as the guardian's 503 rather than as silence.
	Timeout time.Duration
	// Interval is the time from the start of one check to the start of the next (or the
	// end of the one before, when a check takes longer).
	Interval time.Duration
	// Failures is how many checks in a row must fail before the step is given up: a
	// held step must not end (and with --on-guardian-error allow, run) because the
	// guardian's database was slow for one check.
	Failures int
}

// The defaults of Probe: a hung guardian is given up within about 10s.
const (
	defaultProbeGrace    = 2 * time.Second
	defaultProbeTimeout  = 3 * time.Second
	defaultProbeInterval = 5 * time.Second
	defaultProbeFailures = 2
)

func (p Probe) withDefaults() Probe {
	if p.Grace <= 0 {
		p.Grace = defaultProbeGrace
	}
	if p.Timeout <= 0 {
		p.Timeout = defaultProbeTimeout
	}
	if p.Interval <= 0 {
		p.Interval = defaultProbeInterval
	}
	if p.Failures <= 0 {
		p.Failures = defaultProbeFailures
	}
	return p
}

// notAnsweringError is a step given up because the guardian's health check failed while
// the step was unanswered. cause completes "its health check …" ("answered HTTP 503").
type notAnsweringError struct {
	cause error
}

func (e *notAnsweringError) Error() string {
	return "the guardian is not answering: its health check " + e.cause.Error()
}

func (e *notAnsweringError) Unwrap() error { return e.cause }

// sendWatched is send, with the guardian's health checked while the answer is awaited
// (see Probe). A failed check gives the call up with a *notAnsweringError; an answer that
// arrives first, even while a check runs or as it fails, is the one returned.
func sendWatched(ctx context.Context, call *Call, cfg Config) (*aos.Result, error) {
	p := cfg.Probe.withDefaults()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type answer struct {
		res *aos.Result
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := send(ctx, call, cfg)
		answered <- answer{res, err}
	}()
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	url := strings.TrimRight(cfg.Guardian, "/") + guardian.HealthPath
	next := time.NewTimer(p.Grace)
	defer next.Stop()
	// nil while no check runs, so its case never fires.
	var checked chan error
	var began time.Time // of the check under way
	failed := 0         // checks failed in a row
	for {
		select {
		case a := <-answered:
			return a.res, a.err
		case <-next.C:
			began = time.Now()
			checked = make(chan error, 1)
			go func(out chan<- error) { out <- p.check(ctx, hc, url) }(checked)
		case err := <-checked:
			checked = nil
			// A check cut short by the hook's own deadline says nothing of the guardian:
			// the call ends with that deadline and is answered as a timeout.
			if err == nil || ctx.Err() != nil {
				failed = 0
				next.Reset(max(0, p.Interval-time.Since(began)))
				continue
			}
			if failed++; failed < p.Failures {
				next.Reset(max(0, p.Interval-time.Since(began)))
				continue
			}
			silent := &notAnsweringError{cause: err}
			cancel(silent)
			a := <-answered
			// The answer may have come just before the call was given up: it wins, whatever
			// it says, so a failed check never stands in for a decision.
			if a.err == nil || !errors.Is(a.err, context.Canceled) && !errors.Is(a.err, silent) {
				return a.res, a.err
			}
			return nil, silent
		}
	}
}

// check asks the guardian's health once. No answer within p.Timeout, no connection, or a
// 5xx (the guardian's 503, a proxy's 502 or 504) fails. Any other answer passes: something
// serves there, and a 404 (a proxy that routes only /aos) cannot tell more.
func (p Probe) check(ctx context.Context, hc *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("could not be sent: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("did not answer within %s", p.Timeout)
		}
		// The innermost error ("connection refused"): the URL is in the reason already.
		return fmt.Errorf("failed: %w", rootCause(err))
	}
	defer resp.Body.Close()
	// Read whole, so the connection can serve the next check.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode < http.StatusInternalServerError {
		return nil
	}
	// The guardian's 503 says why ("the database did not answer"); a proxy's page does not.
	var health struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(body, &health) == nil && health.Reason != "" {
		return fmt.Errorf("answered HTTP %d: %s", resp.StatusCode, health.Reason)
	}
	return fmt.Errorf("answered HTTP %d", resp.StatusCode)
}
