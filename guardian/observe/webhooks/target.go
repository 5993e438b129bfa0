// Package webhooks tells other systems about holds and denials: each configured target
// gets an HTTP POST per event it subscribed to, as Vigil's own JSON or as a Slack message,
// signed with HMAC-SHA256 when a secret is set. Deliveries are retried with backoff from a
// bounded per-target queue; a target that cannot keep up loses events (counted), never the
// guardian's time.
package webhooks

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// Event types a target can subscribe to.
const (
	// EventHoldCreated: a step waits for an operator.
	EventHoldCreated = "hold.created"
	// EventHoldResolved: a hold ended (approved, denied, modified, timed out, abandoned,
	// interrupted).
	EventHoldResolved = "hold.resolved"
	// EventStepDenied: a step was answered deny (by a rule, an operator, a timeout, a
	// blocked session or a full review queue).
	EventStepDenied = "step.denied"
)

// Formats of a delivery's body.
const (
	FormatJSON  = "json"
	FormatSlack = "slack"
)

// AllEvents are the event types, in the order documented.
var AllEvents = []string{EventHoldCreated, EventHoldResolved, EventStepDenied}

// DefaultEvents are a target's events when it names none: what needs a person.
var DefaultEvents = []string{EventHoldCreated, EventStepDenied}

// Target is one webhook receiver.
type Target struct {
	// URL is where deliveries are posted (the configured address without its fragment).
	URL string
	// Events are the subscribed event types.
	Events []string
	// Format is FormatJSON or FormatSlack.
	Format string
	// Name identifies the target in the status API and in metric labels: the name option,
	// else the URL's host (made unique by New).
	Name string
}

// ParseTarget reads a --webhook value: an http(s) URL whose fragment carries the options,
// as a query string (the fragment is never sent, so the receiver's own query is left
// alone):
//
//	https://hooks.example/x#events=hold.created,deny&format=slack&name=ops
//
// events is a comma-separated list of hold.created, hold.resolved, step.denied ("deny"
// for short) or "all" (default hold.created,step.denied); format is json (default) or
// slack; name is 1 to 64 ASCII letters, digits, '.', '_' or '-' and defaults to the URL's
// host.
func ParseTarget(spec string) (Target, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return Target{}, fmt.Errorf("webhook: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Target{}, fmt.Errorf("webhook %q: want an absolute http(s) URL", redact(u))
	}
	if u.User != nil {
		return Target{}, fmt.Errorf("webhook %q: credentials in the URL are not supported; sign deliveries with -webhook-secret", redact(u))
	}
	opts, err := url.ParseQuery(u.Fragment)
	if err != nil {
		return Target{}, fmt.Errorf("webhook %q: options after #: %w", redact(u), err)
	}
	// The name is a metric label: a value that is not UTF-8 would make the registry refuse
	// every vigil_webhook_* family, so a host that is not (no real host name) is refused.
	if !utf8.ValidString(u.Hostname()) {
		return Target{}, fmt.Errorf("webhook %q: the host is not valid UTF-8", redact(u))
	}
	t := Target{Format: FormatJSON, Name: u.Hostname()}
	for key, vals := range opts {
		v := vals[len(vals)-1]
		switch key {
		case "events":
			for _, e := range strings.Split(v, ",") {
				switch e = strings.TrimSpace(e); e {
				case "all":
					t.Events = append(t.Events, AllEvents...)
				case "deny":
					t.Events = append(t.Events, EventStepDenied)
				case EventHoldCreated, EventHoldResolved, EventStepDenied:
					t.Events = append(t.Events, e)
				default:
					return Target{}, fmt.Errorf("webhook %q: unknown event %q (want %s, deny or all)", redact(u), e, strings.Join(AllEvents, ", "))
				}
			}
		case "format":
			if v != FormatJSON && v != FormatSlack {
				return Target{}, fmt.Errorf("webhook %q: format must be json or slack, got %q", redact(u), v)
			}
			t.Format = v
		case "name":
			if !validName(v) {
				return Target{}, fmt.Errorf("webhook %q: option name=%q: want 1 to 64 of the letters A-Z and a-z, digits, '.', '_' and '-'", redact(u), v)
			}
			t.Name = v
		default:
			return Target{}, fmt.Errorf("webhook %q: unknown option %q (want events, format or name)", redact(u), key)
		}
	}
	if len(t.Events) == 0 {
		t.Events = slices.Clone(DefaultEvents)
	}
	slices.Sort(t.Events)
	t.Events = slices.Compact(t.Events)
	u.Fragment, u.RawFragment = "", ""
	t.URL = u.String()
	return t, nil
}

// Redacted is the target's URL as shown in the console and logs: scheme and host only,
// since the path of many webhook URLs (Slack's among them) is the secret.
func (t Target) Redacted() string {
	u, err := url.Parse(t.URL)
	if err != nil {
		return "(invalid URL)"
	}
	return redact(u)
}

func redact(u *url.URL) string {
	s := u.Scheme + "://" + u.Host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		s += "/…"
	}
	return s
}

// validName reports whether v may name a target: it becomes a metric label and a word in
// the status API, so only a small, printable alphabet is taken.
func validName(v string) bool {
	if v == "" || len(v) > 64 {
		return false
	}
	for _, c := range []byte(v) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func (t Target) wants(event string) bool { return slices.Contains(t.Events, event) }
