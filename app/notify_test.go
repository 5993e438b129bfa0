package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

func waitNoted(t *testing.T, w *fakeWindow, n int) []Notification {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-w.noted:
		case <-time.After(5 * time.Second):
			_, _, _, notes := w.snapshot()
			t.Fatalf("got %d notifications, want %d: %+v", len(notes), n, notes)
		}
	}
	_, _, _, notes := w.snapshot()
	return notes
}

// startWatch runs feed.Watch for w until the returned cancel; done closes when Watch
// returns, and log holds what it logged (read it only after done).
func startWatch(t *testing.T, feed *HoldFeed, w *fakeWindow) (cancel func(), done <-chan struct{}, log *bytes.Buffer) {
	t.Helper()
	log = &bytes.Buffer{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancelCtx := context.WithCancel(context.Background())
	d := make(chan struct{})
	go func() {
		defer close(d)
		feed.Watch(ctx, w.Notify, logger)
	}()
	t.Cleanup(func() {
		cancelCtx()
		<-d
	})
	return cancelCtx, d, log
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

// holdEvent is a hold.created event as the guardian's bus delivers it.
func holdEvent(t *testing.T, seq int64, session string, h record.Hold) record.Event {
	t.Helper()
	payload, err := json.Marshal(h)
	require.NoError(t, err)
	return record.Event{Seq: seq, Type: record.EventHoldCreated, SessionID: session, At: time.Now(), Payload: payload}
}

func TestHoldFeedNotifiesHeldSteps(t *testing.T) {
	feed := NewHoldFeed()
	w := newFakeWindow()
	cancel, done, _ := startWatch(t, feed, w)

	feed.PublishStep(&record.StepRecord{Seq: 4})
	for _, ev := range []record.Event{
		{Seq: 5, Type: record.EventStep, SessionID: "s1", Payload: json.RawMessage(`{"seq":5}`)},
		{Seq: 6, Type: record.EventHoldCreated, SessionID: "s1", Payload: json.RawMessage(`not json`)},
		holdEvent(t, 7, "s1", record.Hold{ID: "h7", SessionID: "s1", Tool: "transfer_funds", RuleID: "big-transfer",
			Message: "over 1000", Request: json.RawMessage(`{"big":"request"}`)}),
		{Seq: 8, Type: record.EventHoldResolved, SessionID: "s1", Payload: json.RawMessage(`{"id":"h7","status":"approved"}`)},
		// The event's session stands in for one the payload lacks.
		{Seq: 9, Type: record.EventHoldCreated, SessionID: "s2", Payload: json.RawMessage(`{"id":"h9","method":"steps/message"}`)},
	} {
		feed.Publish(ev)
	}
	notes := waitNoted(t, w, 2)
	cancel()
	waitDone(t, done, "Watch after cancel")

	require.Equal(t, []Notification{
		{ID: "vigil-hold-h7", Title: "Vigil: step held", Body: "transfer_funds in session s1 waits for review (rule big-transfer): over 1000"},
		{ID: "vigil-hold-h9", Title: "Vigil: step held", Body: "steps/message in session s2 waits for review"},
	}, notes)
}

func TestHoldFeedStopsWhenNotificationsUnavailable(t *testing.T) {
	feed := NewHoldFeed()
	feed.Publish(holdEvent(t, 1, "s1", record.Hold{ID: "h1"}))
	feed.Publish(holdEvent(t, 2, "s1", record.Hold{ID: "h2"}))

	w := newFakeWindow()
	// As the desktop build reports a missing session bus.
	w.notifyErr = fmt.Errorf("%w: %w", errNotificationsUnavailable, errors.New("no session bus"))
	_, done, log := startWatch(t, feed, w)
	waitDone(t, done, "Watch without a notification service")

	require.Len(t, w.noted, 1, "the watcher gives up after the first failure")
	require.Equal(t, 1, strings.Count(log.String(), "hold notifications off"), log.String())
	require.Contains(t, log.String(), "no session bus")

	// The bus keeps publishing to a feed nobody reads; that must not block it.
	late := holdEvent(t, 3, "s1", record.Hold{ID: "late"})
	published := make(chan struct{})
	go func() {
		defer close(published)
		for range 2 * holdFeedSize {
			feed.Publish(late)
		}
	}()
	waitDone(t, published, "Publish to a feed whose watcher stopped")
}

func TestHoldFeedKeepsGoingAfterAFailedNotification(t *testing.T) {
	feed := NewHoldFeed()
	w := newFakeWindow()
	w.notifyErr = errors.New("org.freedesktop.Notifications was not provided")
	cancel, done, log := startWatch(t, feed, w)
	for i := range 3 {
		feed.Publish(holdEvent(t, int64(i), "s1", record.Hold{ID: fmt.Sprint("h", i)}))
	}
	waitNoted(t, w, 3)
	cancel()
	waitDone(t, done, "Watch after cancel")

	out := log.String()
	require.Equal(t, 1, strings.Count(out, `level=WARN msg="hold notification not shown"`), out)
	require.Equal(t, 2, strings.Count(out, `level=DEBUG msg="hold notification not shown"`), out)
	require.NotContains(t, out, "hold notifications off")
}

func TestHoldFeedDropsOldestWhenFull(t *testing.T) {
	const extra = 3
	feed := NewHoldFeed()
	var events []record.Event
	for i := range holdFeedSize + extra {
		events = append(events, holdEvent(t, int64(i), "s1", record.Hold{ID: fmt.Sprint("h", i)}))
	}
	published := make(chan struct{})
	go func() {
		defer close(published)
		for _, ev := range events {
			feed.Publish(ev)
		}
	}()
	waitDone(t, published, "Publish to a full feed")

	w := newFakeWindow()
	cancel, done, log := startWatch(t, feed, w)
	notes := waitNoted(t, w, holdFeedSize)
	cancel()
	waitDone(t, done, "Watch after cancel")

	require.Len(t, notes, holdFeedSize)
	require.Equal(t, fmt.Sprint("vigil-hold-h", extra), notes[0].ID, "the oldest holds are dropped")
	require.Equal(t, fmt.Sprint("vigil-hold-h", holdFeedSize+extra-1), notes[len(notes)-1].ID)
	require.Contains(t, log.String(), "hold notifications dropped")
	require.Contains(t, log.String(), fmt.Sprint(" count=", extra))
}

func TestHoldNotification(t *testing.T) {
	long := strings.Repeat("é", 400)
	tests := []struct {
		name string
		hold heldStep
		body string
	}{
		{"tool, rule and message", heldStep{ID: "a", SessionID: "s1", Tool: "send_email", RuleID: "external-email", Message: "to x@y"},
			"send_email in session s1 waits for review (rule external-email): to x@y"},
		{"method when no tool", heldStep{ID: "b", Method: "steps/memoryStore"}, "steps/memoryStore waits for review"},
		{"nothing known", heldStep{ID: "c"}, "A step waits for review"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := holdNotification(tt.hold)
			require.Equal(t, "vigil-hold-"+tt.hold.ID, n.ID)
			require.Equal(t, "Vigil: step held", n.Title)
			require.Equal(t, tt.body, n.Body)
		})
	}
	t.Run("long message truncated by runes", func(t *testing.T) {
		n := holdNotification(heldStep{ID: "d", Message: long})
		require.Equal(t, notifyBodyMax, len([]rune(n.Body)))
		require.True(t, strings.HasSuffix(n.Body, "é…"))
	})
}

func TestRunWithHoldNotifications(t *testing.T) {
	feed := NewHoldFeed()
	w := newFakeWindow()
	_, done := runAsync(t, context.Background(), Options{URL: "http://127.0.0.1:7878/", Logger: quietLogger(), Holds: feed}, w, nil)
	feed.Publish(holdEvent(t, 3, "s1", record.Hold{ID: "h3", Tool: "rm"}))
	notes := waitNoted(t, w, 1)
	require.Equal(t, "vigil-hold-h3", notes[0].ID)

	close(w.userDone)
	require.NoError(t, waitErr(t, done), "closing the window stops the watcher and returns")
}
