package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
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

type notifier interface {
	Notify(ctx context.Context, n Notification) error
}

// Reconnect pacing and message bounds of the live-stream watcher.
const (
	watchMinBackoff = 500 * time.Millisecond
	watchMaxBackoff = 30 * time.Second
	watchReadLimit  = 64 << 20 // a step event carries the whole request and response
	notifyBodyMax   = 240      // runes; notification popups show a few lines at most
)

// liveEvent is the part of a /api/live frame the watcher reads.
type liveEvent struct {
	Seq       int64           `json:"seq"`
	Type      string          `json:"type"`
	SessionID string          `json:"sessionId"`
	Payload   json.RawMessage `json:"payload"`
}

// liveHold is the part of a hold object a notification shows.
type liveHold struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionId"`
	Method    string `json:"method"`
	Tool      string `json:"tool"`
	RuleID    string `json:"ruleId"`
	Message   string `json:"message"`
}

// watchHolds follows the guardian's live stream at base and raises a notification for
// every hold.created event until ctx is done or notifications turn out unavailable. It
// reconnects with ?after= the last seen seq, so a hold created while the stream was down
// is still announced.
func watchHolds(ctx context.Context, base *url.URL, n notifier, logger *slog.Logger) {
	logger = logger.With("component", "hold-notifications")
	var after int64
	backoff := watchMinBackoff
	for ctx.Err() == nil {
		connected, err := followLive(ctx, base, &after, n)
		if errors.Is(err, errNotificationsUnavailable) {
			logger.Warn("hold notifications off", "err", err)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = watchMinBackoff
		}
		logger.Debug("live stream interrupted", "err", err, "retryIn", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, watchMaxBackoff)
	}
}

// followLive reads one websocket connection to the end. connected reports whether the
// dial succeeded, so the caller resets its backoff only after real progress.
func followLive(ctx context.Context, base *url.URL, after *int64, n notifier) (connected bool, err error) {
	wsURL, origin := liveURL(base, *after)
	hdr := http.Header{}
	hdr.Set("Origin", origin)
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, wsURL, hdr)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", wsURL, err)
	}
	defer func() { _ = conn.Close() }()
	conn.SetReadLimit(watchReadLimit)

	// Closing the connection is the only way to interrupt a blocked read.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return true, fmt.Errorf("read %s: %w", wsURL, err)
		}
		var ev liveEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			continue // not an event this watcher understands
		}
		if ev.Seq > *after {
			*after = ev.Seq
		}
		if ev.Type != "hold.created" {
			continue
		}
		var h liveHold
		if err := json.Unmarshal(ev.Payload, &h); err != nil {
			continue
		}
		if h.SessionID == "" {
			h.SessionID = ev.SessionID
		}
		if err := n.Notify(ctx, holdNotification(h)); errors.Is(err, errNotificationsUnavailable) {
			return true, err
		}
	}
}

// liveURL is base's /api/live as a websocket URL, plus the Origin the guardian accepts
// (its own).
func liveURL(base *url.URL, after int64) (wsURL, origin string) {
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/live"
	u.RawPath = ""
	u.Fragment = ""
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	u.RawQuery = q.Encode()
	origin = u.Scheme + "://" + u.Host
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	return u.String(), origin
}

// holdNotification words a held step for a notification popup.
func holdNotification(h liveHold) Notification {
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
