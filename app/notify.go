package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/vigil-guardian/vigil/record"
)

// Notification is a native desktop notification.
type Notification struct {
	ID    string
	Title string
	Body  string
}

// errNotificationsUnavailable tells the watcher to stop: the desktop has no notification
// service (no session bus, no daemon), so every further attempt would fail too.
var errNotificationsUnavailable = errors.New("desktop notifications are unavailable")

const (
	// holdFeedSize bounds the held steps waiting for a notification. Holds wait for a
	// person, so more than a screenful at once is a flood, and the newest matter most.
	holdFeedSize  = 64
	notifyBodyMax = 240 // runes; notification popups show a few lines at most
)

// heldStep is the part of a hold.created payload (record.Hold) a notification shows.
type heldStep struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionId"`
	Method    string `json:"method"`
	Tool      string `json:"tool"`
	RuleID    string `json:"ruleId"`
	Message   string `json:"message"`
}

// HoldFeed carries new held steps from the guardian's event bus to the window's
// notification watcher. The window runs in the guardian's own process, so it takes the
// events in process: the live websocket would need an operator's sign-in once team mode
// has accounts, and the shell has none.
//
// HoldFeed is a bus subscriber (guardian/bus.Subscriber). Publish runs on the bus's
// delivery goroutine, or on the publisher's, so it never blocks: when the watcher falls
// behind (a notification daemon that hangs), the oldest waiting hold is dropped and
// counted, and the watcher logs the count.
type HoldFeed struct {
	ch      chan heldStep
	dropped atomic.Int64
}

// NewHoldFeed returns an empty feed; subscribe it to the guardian's bus and pass it as
// Options.Holds.
func NewHoldFeed() *HoldFeed {
	return &HoldFeed{ch: make(chan heldStep, holdFeedSize)}
}

// Publish queues the held step of a hold.created event and ignores every other event.
// The payload is decoded here rather than queued, so a full queue holds a few short
// strings, not the held requests (which may be megabytes each).
func (f *HoldFeed) Publish(ev record.Event) {
	if ev.Type != record.EventHoldCreated {
		return
	}
	var h heldStep
	if err := json.Unmarshal(ev.Payload, &h); err != nil {
		return // not a hold this shell can describe; the console still lists it
	}
	if h.SessionID == "" {
		h.SessionID = ev.SessionID
	}
	for {
		select {
		case f.ch <- h:
			return
		default:
		}
		// Full: make room by dropping the oldest. Another publisher or the watcher may
		// take the freed slot first; then try again.
		select {
		case <-f.ch:
			f.dropped.Add(1)
		default:
		}
	}
}

// PublishStep ignores stored steps: only holds raise notifications.
func (f *HoldFeed) PublishStep(*record.StepRecord) {}

// Watch raises a notification through notify for every held step the feed carries, until
// ctx is done or notify reports that the desktop has no notification service; then it
// logs "hold notifications off" once and returns. Run calls it for the window.
func (f *HoldFeed) Watch(ctx context.Context, notify func(context.Context, Notification) error, logger *slog.Logger) {
	logger = logger.With("component", "hold-notifications")
	// The first failure is a warning, so a desktop whose notification daemon refuses
	// every popup says so once at the default level; repeats would only add noise.
	failed := false
	for {
		var h heldStep
		select {
		case <-ctx.Done():
			return
		case h = <-f.ch:
		}
		if n := f.dropped.Swap(0); n > 0 {
			logger.Warn("hold notifications dropped", "count", n)
		}
		err := notify(ctx, holdNotification(h))
		switch {
		case errors.Is(err, errNotificationsUnavailable):
			logger.Warn("hold notifications off", "err", err)
			return
		case err != nil:
			level := slog.LevelWarn
			if failed {
				level = slog.LevelDebug
			}
			failed = true
			logger.Log(ctx, level, "hold notification not shown", "hold", h.ID, "err", err)
		}
	}
}

// holdNotification words a held step for a notification popup.
func holdNotification(h heldStep) Notification {
	what := h.Tool
	if what == "" {
		what = h.Method
	}
	var b strings.Builder
	if what != "" {
		b.WriteString(what)
	} else {
		b.WriteString("A step")
	}
	if h.SessionID != "" {
		fmt.Fprintf(&b, " in session %s", h.SessionID)
	}
	b.WriteString(" waits for review")
	if h.RuleID != "" {
		fmt.Fprintf(&b, " (rule %s)", h.RuleID)
	}
	if h.Message != "" {
		b.WriteString(": ")
		b.WriteString(h.Message)
	}
	return Notification{
		ID:    "vigil-hold-" + h.ID,
		Title: "Vigil: step held",
		Body:  truncateRunes(b.String(), notifyBodyMax),
	}
}

func truncateRunes(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}
