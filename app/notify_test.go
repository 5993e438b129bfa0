package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// fakeGuardian serves /api/live: each connection gets the next script of frames, then
// is closed, except the last, which stays open until the client leaves.
type fakeGuardian struct {
	t       *testing.T
	scripts [][]string

	mu      sync.Mutex
	conns   int
	afters  []string
	origins []string
}

func (g *fakeGuardian) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/live" {
		http.NotFound(w, r)
		return
	}
	up := websocket.Upgrader{CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "http://"+r.Host }}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer func() { _ = c.Close() }()
	g.mu.Lock()
	n := g.conns
	g.conns++
	g.afters = append(g.afters, r.URL.Query().Get("after"))
	g.origins = append(g.origins, r.Header.Get("Origin"))
	g.mu.Unlock()

	last := n >= len(g.scripts)-1
	if n >= len(g.scripts) {
		n = len(g.scripts) - 1
	}
	for _, f := range g.scripts[n] {
		if err := c.WriteMessage(websocket.TextMessage, []byte(f)); err != nil {
			return
		}
	}
	if last {
		// Hold the connection open until the client goes away.
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}
}

func (g *fakeGuardian) seen() (afters, origins []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.afters...), append([]string(nil), g.origins...)
}

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

func startWatch(t *testing.T, base string, n notifier) (cancel func(), done <-chan struct{}) {
	t.Helper()
	u, err := url.Parse(base + "/")
	require.NoError(t, err)
	ctx, cancelCtx := context.WithCancel(context.Background())
	d := make(chan struct{})
	go func() {
		defer close(d)
		watchHolds(ctx, u, n, quietLogger())
	}()
	return cancelCtx, d
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

func TestWatchHoldsNotifiesAndResumesAfterLastSeq(t *testing.T) {
	g := &fakeGuardian{t: t, scripts: [][]string{
		{
			`{"seq":0,"type":"stats","payload":{"steps":1}}`,
			`{"seq":5,"type":"step","sessionId":"s1","payload":{"seq":5}}`,
			`not json`,
			`{"seq":6,"type":"hold.created","sessionId":"s1","payload":{"id":"h6","tool":"transfer_funds","ruleId":"big-transfer","message":"over 1000"}}`,
			`{"seq":7,"type":"hold.resolved","sessionId":"s1","payload":{"id":"h6","status":"approved"}}`,
		},
		{
			`{"seq":9,"type":"hold.created","sessionId":"s2","payload":{"id":"h9","method":"steps/message"}}`,
		},
	}}
	srv := httptest.NewServer(g)
	defer srv.Close()

	w := newFakeWindow()
	cancel, done := startWatch(t, srv.URL, w)
	notes := waitNoted(t, w, 2)
	cancel()
	waitDone(t, done, "watchHolds")

	require.Equal(t, []Notification{
		{ID: "vigil-hold-h6", Title: "Vigil: step held", Body: "transfer_funds in session s1 waits for review (rule big-transfer): over 1000"},
		{ID: "vigil-hold-h9", Title: "Vigil: step held", Body: "steps/message in session s2 waits for review"},
	}, notes)
	afters, origins := g.seen()
	require.GreaterOrEqual(t, len(afters), 2)
	require.Equal(t, "", afters[0], "the first connection starts from now")
	require.Equal(t, "7", afters[1], "a reconnect resumes after the last seq seen")
	require.Equal(t, srv.URL, origins[0], "the watcher presents the guardian's own origin")
}

func TestWatchHoldsStopsWhenNotificationsUnavailable(t *testing.T) {
	g := &fakeGuardian{t: t, scripts: [][]string{{
		`{"seq":1,"type":"hold.created","payload":{"id":"h1"}}`,
		`{"seq":2,"type":"hold.created","payload":{"id":"h2"}}`,
	}}}
	srv := httptest.NewServer(g)
	defer srv.Close()

	w := newFakeWindow()
	w.notifyErr = errNotificationsUnavailable
	cancel, done := startWatch(t, srv.URL, w)
	defer cancel()
	waitDone(t, done, "watchHolds without a notification service")
	require.Len(t, w.noted, 1, "the watcher gives up after the first failure")
}

func TestWatchHoldsWaitsForGuardian(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close() // nothing listens there any more

	w := newFakeWindow()
	cancel, done := startWatch(t, base, w)
	select {
	case <-done:
		t.Fatal("watchHolds gave up while the guardian was unreachable")
	case <-time.After(2 * watchMinBackoff):
	}
	cancel()
	waitDone(t, done, "watchHolds after cancel")
}

func TestLiveURL(t *testing.T) {
	tests := []struct {
		base       string
		after      int64
		ws, origin string
	}{
		{"http://127.0.0.1:7878/", 0, "ws://127.0.0.1:7878/api/live", "http://127.0.0.1:7878"},
		{"http://127.0.0.1:7878/", 42, "ws://127.0.0.1:7878/api/live?after=42", "http://127.0.0.1:7878"},
		{"https://vigil.example/console/?x=1#f", 0, "wss://vigil.example/console/api/live", "https://vigil.example"},
		{"http://[::1]:7878/", 3, "ws://[::1]:7878/api/live?after=3", "http://[::1]:7878"},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			u, err := url.Parse(tt.base)
			require.NoError(t, err)
			ws, origin := liveURL(u, tt.after)
			require.Equal(t, tt.ws, ws)
			require.Equal(t, tt.origin, origin)
		})
	}
}

func TestHoldNotification(t *testing.T) {
	long := strings.Repeat("é", 400)
	tests := []struct {
		name string
		hold liveHold
		body string
	}{
		{"tool, rule and message", liveHold{ID: "a", SessionID: "s1", Tool: "send_email", RuleID: "external-email", Message: "to x@y"},
			"send_email in session s1 waits for review (rule external-email): to x@y"},
		{"method when no tool", liveHold{ID: "b", Method: "steps/memoryStore"}, "steps/memoryStore waits for review"},
		{"nothing known", liveHold{ID: "c"}, "A step waits for review"},
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
		n := holdNotification(liveHold{ID: "d", Message: long})
		require.Equal(t, notifyBodyMax, len([]rune(n.Body)))
		require.True(t, strings.HasSuffix(n.Body, "é…"))
	})
}

func TestRunWithHoldNotifications(t *testing.T) {
	g := &fakeGuardian{t: t, scripts: [][]string{{
		`{"seq":3,"type":"hold.created","sessionId":"s1","payload":{"id":"h3","tool":"rm"}}`,
	}}}
	srv := httptest.NewServer(g)
	defer srv.Close()

	w := newFakeWindow()
	_, done := runAsync(t, context.Background(), Options{URL: srv.URL + "/", Logger: quietLogger(), HoldNotifications: true}, w, nil)
	notes := waitNoted(t, w, 1)
	require.Equal(t, "vigil-hold-h3", notes[0].ID)

	close(w.userDone)
	require.NoError(t, waitErr(t, done), "closing the window stops the watcher and returns")
}
