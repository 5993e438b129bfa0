package live

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
)

// ServeHTTP upgrades GET /api/live?after=SEQ&session=ID to a websocket and streams events.
//
// Without after the client starts live: it receives events published from the moment the
// handshake completes, with no replay. With after=N it first receives every stored event with
// seq > N (after=0: the whole log), then live events, with neither a gap nor a duplicate.
// session=ID keeps only that session's events (stats ticks still pass). A connection past
// MaxClients (503) or its identity's MaxClientsPerIdentity (429) is refused before the
// upgrade.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		apijson.Error(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
		return
	}
	if !h.originAllowed(r) {
		h.log.Info("rejected a websocket from another origin", "origin", r.Header.Get("Origin"), "host", r.Host)
		apijson.Error(w, http.StatusForbidden, "forbidden", "origin not allowed")
		return
	}
	var epoch uint64
	if h.opts.AuthEpoch != nil {
		epoch = h.opts.AuthEpoch() // before Authorize: a change between them is seen later
	}
	if h.opts.Authorize != nil {
		if err := h.opts.Authorize(r); err != nil {
			h.log.Info("rejected an unauthorized websocket", "err", err)
			apijson.Error(w, http.StatusUnauthorized, "unauthorized", "not authorized")
			return
		}
	}
	q := r.URL.Query()
	after := int64(-1)
	if q.Has("after") {
		n, err := strconv.ParseInt(q.Get("after"), 10, 64)
		if err != nil || n < 0 {
			apijson.Error(w, http.StatusBadRequest, "bad_request", "after must be a seq (an integer >= 0)")
			return
		}
		after = n
	}
	if !websocket.IsWebSocketUpgrade(r) {
		apijson.Error(w, http.StatusBadRequest, "bad_request", "websocket upgrade required")
		return
	}

	id := h.opts.Identify(r)
	if ref := h.admit(id); ref != nil {
		if ref.capped {
			h.refused.Add(1)
			h.log.Info("refused a live connection", "identity", id, "status", ref.status, "reason", ref.msg)
		}
		apijson.Error(w, ref.status, ref.code, ref.msg)
		return
	}
	defer h.release(id)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	c := &client{
		session:    q.Get("session"),
		after:      after,
		send:       make(chan frame, h.opts.ClientBuffer),
		quit:       make(chan struct{}),
		cancel:     cancel,
		registered: make(chan struct{}),
		req:        r,
		epoch:      epoch,
	}
	// Register before the handshake completes: every event published after the client sees
	// the 101 reaches it, and a replay, which starts after this, overlaps rather than gaps.
	select {
	case h.register <- c:
		<-c.registered
	case <-h.stopping:
		apijson.Error(w, refuseClosed.status, refuseClosed.code, refuseClosed.msg)
		return
	case <-r.Context().Done():
		return
	}
	defer h.leave(c)

	conn, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		h.log.Debug("websocket upgrade failed", "err", err)
		return // the upgrader has answered
	}
	h.serve(ctx, c, conn)
}

// refusal is the answer to a websocket request the hub does not take.
type refusal struct {
	status    int
	code, msg string
	// capped is true for a refusal by MaxClients or MaxClientsPerIdentity.
	capped bool
}

var refuseClosed = &refusal{status: http.StatusServiceUnavailable, code: "unavailable", msg: "server shutting down"}

// admit counts a new connection of identity id, or says why not: the caps keep what clients
// can make the server hold bounded, in total and per identity, whatever each connection
// costs.
func (h *Hub) admit(id string) *refusal {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return refuseClosed
	case h.open >= h.opts.MaxClients:
		return &refusal{http.StatusServiceUnavailable, "too_many_live_clients", fmt.Sprintf(
			"the guardian already serves %d live connections, its most; try again later", h.opts.MaxClients), true}
	case h.perIdentity[id] >= h.opts.MaxClientsPerIdentity:
		return &refusal{http.StatusTooManyRequests, "too_many_live_connections", fmt.Sprintf(
			"you already have %d live connections open, the most one client may; close one first",
			h.opts.MaxClientsPerIdentity), true}
	}
	h.open++
	h.perIdentity[id]++
	h.conns.Add(1)
	return nil
}

// release undoes admit once the connection's handler is done.
func (h *Hub) release(id string) {
	h.mu.Lock()
	h.open--
	h.perIdentity[id]--
	if h.perIdentity[id] <= 0 {
		delete(h.perIdentity, id)
	}
	h.mu.Unlock()
	h.conns.Done()
}

// clientHost is the default identity: the client's IP address without the port.
func clientHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// leave unregisters c; the hub ignores a client it has dropped already.
func (h *Hub) leave(c *client) {
	select {
	case h.unregister <- c:
	case <-h.stopping:
	}
}

func (h *Hub) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser: browsers always send Origin on websocket requests
	}
	for _, o := range h.opts.AllowedOrigins {
		if strings.EqualFold(o, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// serve runs one connection: a reader goroutine for control frames, this goroutine for
// everything written. It returns when the connection is closed.
func (h *Hub) serve(ctx context.Context, c *client, conn *websocket.Conn) {
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer c.cancel()
		h.readLoop(conn)
	}()

	reason := h.writeLoop(ctx, c, conn, readerDone)
	if reason.code != 0 {
		msg := websocket.FormatCloseMessage(reason.code, reason.text)
		if err := conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(h.opts.WriteTimeout)); err == nil {
			// Give the peer a moment to answer the close, so it reads our frame before the
			// TCP connection goes away.
			t := time.NewTimer(min(h.opts.WriteTimeout, closeWait))
			select {
			case <-readerDone:
			case <-t.C:
			}
			t.Stop()
		}
	}
	_ = conn.Close()
	<-readerDone
}

// readLoop handles pongs and close frames and notices dead peers; clients have nothing to
// say, so messages are discarded.
func (h *Hub) readLoop(conn *websocket.Conn) {
	conn.SetReadLimit(h.opts.MaxMessageBytes)
	_ = conn.SetReadDeadline(time.Now().Add(h.opts.PongWait))
	conn.SetPongHandler(func(string) error {
		return conn.SetReadDeadline(time.Now().Add(h.opts.PongWait))
	})
	for {
		if _, _, err := conn.NextReader(); err != nil {
			if websocket.IsUnexpectedCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived) {
				h.log.Debug("websocket read ended", "err", err)
			}
			return
		}
	}
}

// writeLoop replays (when asked) and then writes live events and pings. It returns the close
// frame to send, or a zero reason when the connection is already gone.
func (h *Hub) writeLoop(ctx context.Context, c *client, conn *websocket.Conn, readerDone <-chan struct{}) closeReason {
	ping := time.NewTicker(h.opts.PingInterval)
	defer ping.Stop()

	// last is the highest seq this client has been sent or skipped; live events at or below
	// it were covered by the replay.
	var last int64
	if c.after >= 0 {
		var (
			reason closeReason
			ok     bool
		)
		last, reason, ok = h.replay(ctx, c, conn, readerDone, ping.C)
		if !ok {
			return reason
		}
	}
	for {
		// Prefer quitting over writing what is queued: a dropped client resumes with after.
		select {
		case <-c.quit:
			return c.reason
		case <-readerDone:
			return closeReason{}
		default:
		}
		select {
		case <-c.quit:
			return c.reason
		case <-readerDone:
			return closeReason{}
		case f := <-c.send:
			if f.seq != 0 && f.seq <= last {
				c.queued.Add(-int64(len(f.data)))
				continue
			}
			if !h.stillAuthorized(c, false) {
				return closeSignedOut
			}
			err := h.write(conn, f.data)
			c.queued.Add(-int64(len(f.data)))
			if err != nil {
				h.log.Debug("websocket write failed", "err", err)
				return closeReason{}
			}
			if f.seq != 0 {
				last = f.seq
			}
		case <-ping.C:
			if !h.stillAuthorized(c, true) {
				return closeSignedOut
			}
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(h.opts.WriteTimeout)); err != nil {
				return closeReason{}
			}
		}
	}
}

// stillAuthorized authorizes c's upgrade request again when the AuthEpoch moved since it
// last was, or always when always (at a ping, which also catches a sign-in that expired).
func (h *Hub) stillAuthorized(c *client, always bool) bool {
	if h.opts.Authorize == nil {
		return true
	}
	var epoch uint64
	if h.opts.AuthEpoch != nil {
		epoch = h.opts.AuthEpoch()
		if epoch == c.epoch && !always {
			return true
		}
	} else if !always {
		return true
	}
	if err := h.opts.Authorize(c.req); err != nil {
		h.log.Info("closed a live stream whose sign-in ended", "err", err)
		return false
	}
	c.epoch = epoch
	return true
}

// replay sends stored events after c.after, page by page, and returns the last seq it read.
// It reads a page only once the previous one is written, so a client that does not read
// holds one page (bounded in bytes), not the log. Live events queue up in c.send meanwhile;
// ok is false when the connection must end.
func (h *Hub) replay(ctx context.Context, c *client, conn *websocket.Conn, readerDone <-chan struct{}, ping <-chan time.Time) (last int64, reason closeReason, ok bool) {
	last = c.after
	for {
		select {
		case <-c.quit:
			return last, c.reason, false
		case <-readerDone:
			return last, closeReason{}, false
		case <-ping:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(h.opts.WriteTimeout)); err != nil {
				return last, closeReason{}, false
			}
		default:
		}
		evs, err := h.opts.Source.EventsPage(ctx, last, h.page(replayPage, replayPageBytes))
		if err != nil {
			if ctx.Err() != nil {
				select {
				case <-c.quit:
					return last, c.reason, false
				default:
					return last, closeReason{}, false
				}
			}
			h.log.Error("replay failed", "after", last, "err", err)
			return last, closeReplay, false
		}
		if len(evs) == 0 {
			// A short page may only have reached its byte bound: the end is an empty read.
			return last, closeReason{}, true
		}
		for i, ev := range evs {
			// What is written need not stay: a write to a stalled client may wait long.
			evs[i] = record.Event{}
			if ev.Seq <= last {
				continue
			}
			last = ev.Seq
			if c.session != "" && ev.SessionID != c.session {
				continue
			}
			if !h.stillAuthorized(c, false) {
				return last, closeSignedOut, false
			}
			if err := h.write(conn, encodeEvent(ev)); err != nil {
				h.log.Debug("websocket write failed", "err", err)
				return last, closeReason{}, false
			}
		}
	}
}

func (h *Hub) write(conn *websocket.Conn, data []byte) error {
	if err := conn.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout)); err != nil {
		return err
	}
	return conn.WriteMessage(websocket.TextMessage, data)
}
