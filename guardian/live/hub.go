// Package live streams the guardian's events to operator consoles over a websocket
// (GET /api/live).
//
// One goroutine (Run) owns the set of connected clients. Publish hands an event to it through a
// buffered channel and never blocks; the hub delivers events to every client in strictly
// increasing seq order, each client through its own bounded buffer. A client whose buffer fills
// is dropped (closed with 1008 "too slow") and reconnects with ?after=SEQ, replaying what it
// missed from the store: a slow or dead console never slows the guardian.
//
// The store is the authority. Publishers may call Publish out of seq order (concurrent
// committers of one group commit return together), and a Publish may even be dropped when the
// hub's queue is full. The hub holds back an event whose predecessors have not arrived yet and,
// if they do not arrive within a short wait, reads the missing ones from the store. This relies
// on the store making events visible in seq order: once seq N is committed, every smaller seq
// that will ever exist is committed too (true of SQLite's single writer).
package live

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Source is the event log the hub replays from: the store.
type Source interface {
	// EventsPage returns events with seq > after in seq order, at most p.Limit and about
	// p.MaxBytes of payload (at least one event), steps over p.MaxStepBulk truncated.
	EventsPage(ctx context.Context, after int64, p record.EventPage) ([]record.Event, error)
}

// Options configure a Hub. Zero values take the defaults noted per field.
type Options struct {
	// Source serves replays (?after=SEQ) and fills holes in the live sequence. Nil means an
	// empty log: no replay, and a dropped Publish makes every client resync.
	Source Source
	// AllowedOrigins are exact Origin values accepted besides same-origin requests and
	// requests without an Origin header, e.g. "wails://wails", "http://wails.localhost".
	AllowedOrigins []string
	// ClientBuffer is the number of events queued per client before it is dropped (256).
	ClientBuffer int
	// ClientBufferBytes bounds the bytes of the frames held for a client, the one being
	// written included; a client whose queue would grow past it is dropped as too slow,
	// like one whose ClientBuffer filled. A client with nothing queued still takes a frame
	// bigger than the bound (4 MiB).
	ClientBufferBytes int
	// MaxStepBytes: a step whose request, response and text add up to more than this is
	// sent truncated (request and response null, the text cut, "truncated": true), live
	// and in replays; GET /api/steps/{seq} has the whole step. Negative: never (64 KiB).
	MaxStepBytes int
	// MaxClients bounds the live connections, handshakes included; a connection beyond it
	// is refused with 503 (256).
	MaxClients int
	// MaxClientsPerIdentity bounds the live connections of one identity (see Identify); a
	// connection beyond it is refused with 429 (16).
	MaxClientsPerIdentity int
	// Identify names whom a request comes from, for MaxClientsPerIdentity: e.g. the
	// signed-in operator, else the client's address. Default: the client's IP address.
	Identify func(r *http.Request) string
	// PublishBuffer is the hub's inbound queue; a Publish that finds it full is counted as
	// dropped and recovered from Source (4096).
	PublishBuffer int
	// WriteTimeout bounds every write to a client (10s).
	WriteTimeout time.Duration
	// PingInterval is how often the server pings (9/10 of PongWait); it must be below
	// PongWait, otherwise the default is used.
	PingInterval time.Duration
	// PongWait is how long a client may stay silent (no pong, no message) before it is
	// considered dead (60s).
	PongWait time.Duration
	// MaxMessageBytes limits messages from clients, which have nothing to say (512).
	MaxMessageBytes int64
	// Logger receives connection and recovery logs (slog.Default()).
	Logger *slog.Logger
	// Authorize, when set, is called before the upgrade; an error answers 401. It is called
	// again, with the upgrade request, while the connection lasts: at every ping, and before
	// the next frame once AuthEpoch has moved. An error then closes the connection (1008),
	// so a stream ends with the sign-in that opened it.
	Authorize func(r *http.Request) error
	// AuthEpoch, when set, changes whenever a sign-in may have ended (a logout, an account
	// removed, a password changed).
	AuthEpoch func() uint64
	// SignInsChanged, when set, is called before the hub sends an audit event of an account's
	// sign-ins ending (record.EndsSignIns), so that AuthEpoch moves first: such a change made
	// by another process (`vigil users remove` beside the guardian, another replica) reaches
	// this one only as its audit event, and a stream must not outlive the sign-in.
	SignInsChanged func()
}

// Counters are the hub's running totals, for stats and logs.
type Counters struct {
	// Clients is the number of connected clients.
	Clients int
	// Published counts events accepted by Publish.
	Published int64
	// Dropped counts Publish calls that found the inbound queue full.
	Dropped int64
	// SlowClients counts clients dropped because their buffer filled.
	SlowClients int64
	// Resyncs counts the times every client was closed to resync from the store because
	// the hub could not recover an event.
	Resyncs int64
	// StoreFills counts reads of the store to fill a hole in the live sequence.
	StoreFills int64
	// Refused counts connections refused by MaxClients or MaxClientsPerIdentity.
	Refused int64
}

const (
	defaultClientBuffer      = 256
	defaultClientBufferBytes = 4 << 20
	defaultMaxStepBytes      = 64 << 10
	defaultMaxClients        = 256
	defaultMaxPerIdentity    = 16
	defaultPublishBuffer     = 4096
	defaultWriteTimeout      = 10 * time.Second
	defaultPongWait          = 60 * time.Second
	defaultMaxMessage        = 512

	// reorderWait is how long an event is held back waiting for a smaller seq that was
	// committed but not yet published; concurrent committers publish within microseconds.
	reorderWait = 20 * time.Millisecond
	// maxWaits bounds how many reorderWait periods a hole may stay open while the inbound
	// queue is still busy (the missing event may be queued) before the store is read.
	maxWaits = 3
	// maxPending bounds the held-back events; beyond it the hole is filled at once.
	maxPending = 4096
	// fillPage and replayPage are the page sizes of store reads, in events and in bytes:
	// a replaying client holds one page, so replayPageBytes is most of what a client that
	// does not read costs.
	fillPage        = 500
	fillPageBytes   = 1 << 20
	replayPage      = 500
	replayPageBytes = 256 << 10
	// fillTimeout bounds one fill from the store, which runs on the hub goroutine.
	fillTimeout = 10 * time.Second
	// closeWait bounds the wait for a peer's answer to our close frame.
	closeWait = time.Second
)

// Close codes sent to clients; see readme-live.md for what a client does with each.
var (
	closeTooSlow   = closeReason{websocket.ClosePolicyViolation, "too slow: reconnect with after"}
	closeGoingAway = closeReason{websocket.CloseGoingAway, "server shutting down"}
	closeResync    = closeReason{websocket.CloseTryAgainLater, "events lost: reconnect with after"}
	closeReplay    = closeReason{websocket.CloseInternalServerErr, "replay failed: reconnect with after"}
)

type closeReason struct {
	code int
	text string
}

// closeSignedOut ends a stream whose sign-in ended.
var closeSignedOut = closeReason{websocket.ClosePolicyViolation, "signed out"}

// frame is one encoded event, shared by every client it goes to.
type frame struct {
	seq     int64
	session string
	data    []byte
	// rec, for a step published by PublishStep, is encoded into data when a client first
	// needs it: with no console connected, nothing is encoded at all.
	rec *record.StepRecord
}

// client is one connection as the hub sees it. The hub goroutine owns the set; the
// connection's handler owns the socket.
type client struct {
	session string
	// after is the replay position, -1 for a live start.
	after int64
	send  chan frame
	// quit is closed by the hub when it drops the client; reason is set just before.
	quit   chan struct{}
	reason closeReason
	// cancel stops the client's replay and connection context.
	cancel context.CancelFunc
	// registered is closed by the hub once the client is in its set and counted.
	registered chan struct{}
	// queued is the bytes of the frames in send and of the one being written: the hub
	// adds, the writer subtracts once a frame is written.
	queued atomic.Int64
	// req is the upgrade request, authorized again while the connection lasts; epoch is
	// the AuthEpoch it was last authorized at. Only the client's writer uses them.
	req   *http.Request
	epoch uint64
}

// Hub fans events out to websocket clients. Create it with NewHub, run Run in one goroutine,
// and mount it at /api/live.
type Hub struct {
	opts     Options
	log      *slog.Logger
	upgrader websocket.Upgrader

	in         chan frame
	register   chan *client
	unregister chan *client
	// stopping is closed when Run begins shutting down.
	stopping chan struct{}
	started  atomic.Bool

	// lostMax is the highest seq a Publish had to drop; the hub fills up to it from Source.
	lostMax atomic.Int64

	clients     atomic.Int64
	published   atomic.Int64
	dropped     atomic.Int64
	slowClients atomic.Int64
	resyncs     atomic.Int64
	fills       atomic.Int64
	refused     atomic.Int64

	// mu guards closed, the connection counts and the Add side of conns, so Run can wait
	// for every connection handler (they read from Source) before it returns.
	mu     sync.Mutex
	closed bool
	conns  sync.WaitGroup
	// open counts connections from admission to the handler's return; perIdentity the
	// same by identity (entries at zero are deleted).
	open        int
	perIdentity map[string]int
}

// NewHub returns a hub with opts' defaults filled in. Run must be running for clients to
// connect.
func NewHub(opts Options) *Hub {
	if opts.Source == nil {
		opts.Source = emptySource{}
	}
	if opts.ClientBuffer <= 0 {
		opts.ClientBuffer = defaultClientBuffer
	}
	if opts.ClientBufferBytes <= 0 {
		opts.ClientBufferBytes = defaultClientBufferBytes
	}
	if opts.MaxStepBytes == 0 {
		opts.MaxStepBytes = defaultMaxStepBytes
	}
	if opts.MaxClients <= 0 {
		opts.MaxClients = defaultMaxClients
	}
	if opts.MaxClientsPerIdentity <= 0 {
		opts.MaxClientsPerIdentity = defaultMaxPerIdentity
	}
	if opts.Identify == nil {
		opts.Identify = clientHost
	}
	if opts.PublishBuffer <= 0 {
		opts.PublishBuffer = defaultPublishBuffer
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = defaultWriteTimeout
	}
	if opts.PongWait <= 0 {
		opts.PongWait = defaultPongWait
	}
	if opts.PingInterval <= 0 || opts.PingInterval >= opts.PongWait {
		opts.PingInterval = opts.PongWait * 9 / 10
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = defaultMaxMessage
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Hub{
		opts:       opts,
		log:        opts.Logger.With("component", "live"),
		in:         make(chan frame, opts.PublishBuffer),
		register:   make(chan *client),
		unregister: make(chan *client),
		stopping:   make(chan struct{}),

		perIdentity: make(map[string]int),
	}
	h.upgrader = websocket.Upgrader{
		HandshakeTimeout: opts.WriteTimeout,
		ReadBufferSize:   1024,
		// ServeHTTP checks the origin itself, before registering the client, so that a
		// rejection is a plain 403 with the API's error body.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
			code := "bad_request"
			if status >= http.StatusInternalServerError {
				code = "internal"
			}
			apijson.Error(w, status, code, reason.Error())
		},
	}
	return h
}

// Publish queues ev for every connected client. It never blocks: when the hub's queue is
// full the event is counted as dropped and, for a stored event (seq > 0), read back from
// Source later, so connected clients still receive it in order. Call it after the event is
// committed; calls may come from many goroutines and out of seq order. ev.Payload must be
// valid JSON (it is sent as is). Events with seq 0 (stats) are live only and may be lost
// under overload.
func (h *Hub) Publish(ev record.Event) {
	if h.isStopping() {
		return
	}
	if ev.Type == record.EventStep && h.opts.MaxStepBytes > 0 && len(ev.Payload) > h.opts.MaxStepBytes {
		// A big step as an event (from the replicas' bus, which passes steps as stored
		// JSON) is sent truncated, as PublishStep sends it.
		rec := new(record.StepRecord)
		if err := json.Unmarshal(ev.Payload, rec); err == nil {
			if rec.Seq == 0 {
				rec.Seq = ev.Seq
			}
			h.send(frame{seq: ev.Seq, session: ev.SessionID, data: encodeStep(rec.Truncate(h.opts.MaxStepBytes))})
			return
		}
	}
	h.observe(ev)
	// Encoding here spreads the work over the publishers instead of the hub goroutine,
	// and copies the payload so the caller may reuse it.
	h.send(frame{seq: ev.Seq, session: ev.SessionID, data: encodeEvent(ev)})
}

// observe calls SignInsChanged for an audit event that ends sign-ins, before it is sent.
func (h *Hub) observe(ev record.Event) {
	if h.opts.SignInsChanged == nil || ev.Type != record.EventAudit {
		return
	}
	var e struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(ev.Payload, &e) == nil && record.EndsSignIns(e.Type) {
		h.opts.SignInsChanged()
	}
}

// PublishStep publishes a stored step's event, its payload the record. The record is
// encoded only if a client is there to receive it, so rec must not change after the call.
// Like Publish, it never blocks.
func (h *Hub) PublishStep(rec *record.StepRecord) {
	if h.isStopping() {
		return
	}
	h.send(frame{seq: rec.Seq, session: rec.SessionID, rec: rec})
}

// isStopping reports whether the hub is shutting down and takes no more events.
func (h *Hub) isStopping() bool {
	select {
	case <-h.stopping:
		return true
	default:
		return false
	}
}

func (h *Hub) send(f frame) {
	select {
	case h.in <- f:
		h.published.Add(1)
	default:
		h.dropped.Add(1)
		if f.seq > 0 {
			for {
				cur := h.lostMax.Load()
				if f.seq <= cur || h.lostMax.CompareAndSwap(cur, f.seq) {
					break
				}
			}
		}
	}
}

// PublishStats publishes a "stats" tick (seq 0, not stored, not replayed).
func (h *Hub) PublishStats(payload json.RawMessage) {
	h.Publish(record.Event{Type: "stats", At: time.Now().UTC(), Payload: payload})
}

// Clients returns the number of connected clients.
func (h *Hub) Clients() int { return int(h.clients.Load()) }

// Counters returns the hub's running totals.
func (h *Hub) Counters() Counters {
	return Counters{
		Clients:     h.Clients(),
		Published:   h.published.Load(),
		Dropped:     h.dropped.Load(),
		SlowClients: h.slowClients.Load(),
		Resyncs:     h.resyncs.Load(),
		StoreFills:  h.fills.Load(),
		Refused:     h.refused.Load(),
	}
}

// page is a store read of at most events events and about bytes bytes, with steps
// truncated as the frames they become.
func (h *Hub) page(events, bytes int) record.EventPage {
	return record.EventPage{Limit: events, MaxBytes: bytes, MaxStepBulk: max(h.opts.MaxStepBytes, 0)}
}

// Run owns the client set and delivers published events until ctx is done. Then it closes
// every client (1001 going away), waits for their handlers to finish, and returns. Call it
// once.
func (h *Hub) Run(ctx context.Context) {
	if !h.started.CompareAndSwap(false, true) {
		h.log.Error("Run called more than once")
		return
	}
	l := &loop{
		hub:     h,
		head:    -1,
		pending: make(map[int64]frame),
		clients: make(map[*client]struct{}),
		timer:   time.NewTimer(reorderWait),
	}
	l.timer.Stop()
	defer l.shutdown()

	// Start from the store's newest seq: anything at or below it was committed before the
	// hub ran, so clients get it by replay, and anything above must arrive in order.
	if head, err := storage.NewestSeq(ctx, h.opts.Source); err != nil {
		if ctx.Err() != nil {
			return
		}
		h.log.Warn("reading the newest seq failed; starting from the first published event", "err", err)
	} else {
		l.head = head
	}

	for {
		select {
		case <-ctx.Done():
			return
		case c := <-h.register:
			l.clients[c] = struct{}{}
			h.clients.Store(int64(len(l.clients)))
			close(c.registered)
		case c := <-h.unregister:
			if _, ok := l.clients[c]; ok {
				delete(l.clients, c)
				h.clients.Store(int64(len(l.clients)))
			}
		case f := <-h.in:
			l.accept(f)
		case <-l.timer.C:
			l.armed = false
			l.expired = true
			l.waits++
		}
		l.settle(ctx)
	}
}

// loop is Run's state; only the Run goroutine touches it.
type loop struct {
	hub     *Hub
	clients map[*client]struct{}
	// head is the highest seq delivered (or known to be covered); -1 until known.
	head int64
	// pending holds events that arrived ahead of a missing smaller seq.
	pending map[int64]frame
	timer   *time.Timer
	armed   bool
	expired bool
	waits   int
}

func (l *loop) accept(f frame) {
	switch {
	case f.seq == 0:
		l.deliver(f)
	case l.head < 0 || f.seq > l.head+1:
		l.pending[f.seq] = f
	case f.seq <= l.head:
		// Already delivered, read from the store while its Publish was on the way.
	default:
		l.deliver(f)
		l.head = f.seq
		l.drain()
	}
}

// drain delivers pending events that continue the sequence.
func (l *loop) drain() {
	for {
		f, ok := l.pending[l.head+1]
		if !ok {
			return
		}
		delete(l.pending, f.seq)
		l.deliver(f)
		l.head = f.seq
	}
}

// settle decides, after every wake-up, whether a hole in the sequence must be filled now,
// later, or not at all.
func (l *loop) settle(ctx context.Context) {
	lost := l.hub.lostMax.Load()
	if len(l.pending) == 0 && (l.head < 0 || lost <= l.head) {
		l.disarm()
		return
	}
	if len(l.pending) >= maxPending ||
		(l.expired && (len(l.hub.in) == 0 || l.waits >= maxWaits)) {
		l.resolve(ctx)
		l.disarm()
		return
	}
	if !l.armed {
		l.timer.Reset(reorderWait)
		l.armed = true
	}
}

func (l *loop) disarm() {
	if l.armed {
		l.timer.Stop()
	}
	l.armed, l.expired, l.waits = false, false, 0
}

// resolve closes the hole: it reads the missing events from the store and delivers them and
// the pending ones in order. If an event dropped by Publish cannot be found, every client is
// told to resync, since each would otherwise miss it without knowing.
func (l *loop) resolve(ctx context.Context) {
	h := l.hub
	if l.head < 0 {
		// The store's head was unknown: the earliest event that arrived starts the sequence.
		l.head = slices.Min(mapKeys(l.pending)) - 1
		l.drain()
	}
	// Drops that happen during this fill are left to the next one.
	lost := h.lostMax.Load()
	target := lost
	if len(l.pending) > 0 {
		target = max(target, slices.Max(mapKeys(l.pending)))
	}
	if target <= l.head {
		return
	}
	h.fills.Add(1)
	fillCtx, cancel := context.WithTimeout(ctx, fillTimeout)
	defer cancel()
	if err := l.fill(fillCtx, target); err != nil {
		if ctx.Err() != nil {
			return // shutting down; every client is closed anyway
		}
		h.log.Error("filling the live sequence from the store failed; clients will resync",
			"after", l.head, "err", err)
		l.head = max(l.head, target)
		clear(l.pending)
		l.resyncAll()
		return
	}
	l.drain()
	// Whatever is still pending lies beyond the store's end or behind seqs the store does not
	// have: those seqs do not exist, so deliver the rest in order.
	keys := mapKeys(l.pending)
	slices.Sort(keys)
	for _, k := range keys {
		if k > l.head {
			l.deliver(l.pending[k])
			l.head = k
		}
	}
	clear(l.pending)
	if lost > l.head {
		h.log.Warn("a dropped event is not in the store; clients will resync", "seq", lost)
		l.head = lost
		l.resyncAll()
	}
}

// fill reads events after head until it passes target or reaches the store's end, and
// delivers them.
func (l *loop) fill(ctx context.Context, target int64) error {
	for l.head < target {
		evs, err := l.hub.opts.Source.EventsPage(ctx, l.head, l.hub.page(fillPage, fillPageBytes))
		if err != nil {
			return fmt.Errorf("events after %d: %w", l.head, err)
		}
		before := l.head
		for _, ev := range evs {
			if ev.Seq <= l.head {
				continue
			}
			// Events another process stored reach the hub here (audit entries written beside
			// the guardian, which it stores from their outbox).
			l.hub.observe(ev)
			l.deliver(frame{seq: ev.Seq, session: ev.SessionID, data: encodeEvent(ev)})
			l.head = ev.Seq
		}
		for k := range l.pending {
			if k <= l.head {
				delete(l.pending, k)
			}
		}
		// A short page may only have reached its byte bound: the end is an empty read.
		if l.head == before {
			return nil
		}
	}
	return nil
}

// deliver queues f for every client it is for, dropping any client whose buffer is full.
func (l *loop) deliver(f frame) {
	for c := range l.clients {
		if c.session != "" && f.seq != 0 && f.session != c.session {
			continue
		}
		if f.data == nil && f.rec != nil {
			f.data, f.rec = encodeStep(f.rec.Truncate(max(l.hub.opts.MaxStepBytes, 0))), nil
		}
		n := int64(len(f.data))
		if q := c.queued.Add(n); q > n && q > int64(l.hub.opts.ClientBufferBytes) {
			l.tooSlow(c)
			continue
		}
		select {
		case c.send <- f:
		default:
			l.tooSlow(c)
		}
	}
}

func (l *loop) tooSlow(c *client) {
	l.hub.slowClients.Add(1)
	l.hub.log.Info("dropping a client that cannot keep up", "session", c.session)
	l.drop(c, closeTooSlow)
}

func (l *loop) drop(c *client, reason closeReason) {
	delete(l.clients, c)
	l.hub.clients.Store(int64(len(l.clients)))
	c.reason = reason
	close(c.quit)
	c.cancel()
}

func (l *loop) resyncAll() {
	l.hub.resyncs.Add(1)
	for c := range l.clients {
		l.drop(c, closeResync)
	}
}

func (l *loop) shutdown() {
	h := l.hub
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	for c := range l.clients {
		l.drop(c, closeGoingAway)
	}
	l.timer.Stop()
	close(h.stopping)
	h.conns.Wait()
}

func mapKeys(m map[int64]frame) []int64 {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

type emptySource struct{}

func (emptySource) EventsPage(context.Context, int64, record.EventPage) ([]record.Event, error) {
	return nil, nil
}
