package guardian

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// sessionCache keeps the recent history and the owners of active sessions in memory, so
// rules can look at a session's earlier steps, and steps be checked against the session's
// owners, without a query per step. A miss loads from the store. It is bounded by the
// memory its entries take (and, optionally, by their number), evicting the least recently
// used: a guardian with many sessions keeps every one that fits rather than cycling a fixed
// number through the store. An entry with a step in flight is not evicted: its owners may
// be claimed in memory only, until the step is stored.
type sessionCache struct {
	mu      sync.Mutex
	entries map[string]*sessionState
	// lru is the sentinel of the entries' ring, most recently used first (lru.next).
	lru sessionState
	// maxEntries bounds the entries' number (0: no bound), maxBytes their memory.
	maxEntries int
	maxBytes   int64
	// bytes is the memory the entries take, as sessionState.size estimates it.
	bytes atomic.Int64
	hist  int
	store Store
}

type sessionState struct {
	// pins counts the steps in flight (between get and release).
	pins atomic.Int32
	// prev and next link the cache's LRU ring, under the cache's mu.
	prev, next *sessionState
	// size estimates the memory the entry takes, in bytes; it changes under mu. cache is
	// the cache that accounts for it.
	size  atomic.Int64
	cache *sessionCache

	mu sync.Mutex
	id string
	// ownerKey and ownerAgent own the session: the API key id and agent id of its first
	// steps that carried one (storage keeps the same in the session's row).
	ownerKey, ownerAgent string
	count                int
	steps                []rules.HistoryStep
	max                  int
	loaded               bool
	// counts counts the newest max steps, the ones a snapshot shows. lent is how many
	// snapshots are reading them: add changes a copy instead while any is (copy on write),
	// so a step whose rules read the counts costs no copy when its session has no other
	// step in flight.
	counts *rules.SessionCounts
	lent   int
}

// Memory estimates of a cache entry: sessionBytes for the entry itself, its map slot, id,
// counts and memo; stepBytes for each history slot (a rules.HistoryStep), to which a step's
// own text and tool are added.
const (
	sessionBytes = 1536
	stepBytes    = int64(unsafe.Sizeof(rules.HistoryStep{}))
)

// DefaultSessionCacheBytes is the session cache's memory bound when none is configured.
const DefaultSessionCacheBytes = 512 << 20

func newSessionCache(maxEntries int, maxBytes int64, hist int, store Store) *sessionCache {
	if maxBytes <= 0 {
		maxBytes = DefaultSessionCacheBytes
	}
	c := &sessionCache{entries: make(map[string]*sessionState), maxEntries: maxEntries, maxBytes: maxBytes,
		hist: hist, store: store}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// get returns the session's state for a step, which must call release when done with it.
func (c *sessionCache) get(ctx context.Context, id string) *sessionState {
	c.mu.Lock()
	s, ok := c.entries[id]
	if ok {
		c.unlink(s)
	} else {
		id = strings.Clone(id) // it may share the request's memory (aos.ParseStep)
		s = &sessionState{id: id, max: c.hist, cache: c}
		s.size.Store(sessionBytes + int64(len(id)))
		c.bytes.Add(s.size.Load())
		c.entries[id] = s
	}
	c.pushFront(s)
	s.pins.Add(1)
	if !ok {
		c.evict()
	}
	c.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		s.loaded = true
		if sess, err := c.store.Session(ctx, id); err == nil {
			s.ownerKey, s.ownerAgent = sess.KeyID, sess.AgentID
			s.count = int(sess.Steps)
			if recent, err := c.store.RecentSteps(ctx, id, c.hist); err == nil {
				s.steps = make([]rules.HistoryStep, len(recent))
				for i, r := range recent {
					s.steps[i] = HistoryStep(r)
				}
			}
		}
		s.counts = rules.CountSteps(s.window())
		c.resize(s)
	}
	return s
}

// evict drops the least recently used entries without a step in flight while the cache is
// over its bounds. Entries with steps in flight stay (there are at most as many as requests
// in flight); a later step of an evicted session reloads it from the store. c.mu is held.
func (c *sessionCache) evict() {
	for e := c.lru.prev; e != &c.lru && c.over(); {
		prev := e.prev
		if e.pins.Load() == 0 {
			c.unlink(e)
			delete(c.entries, e.id)
			c.bytes.Add(-e.size.Load())
		}
		e = prev
	}
}

func (c *sessionCache) over() bool {
	return c.bytes.Load() > c.maxBytes || c.maxEntries > 0 && len(c.entries) > c.maxEntries
}

func (c *sessionCache) unlink(s *sessionState) {
	s.prev.next, s.next.prev = s.next, s.prev
	s.prev, s.next = nil, nil
}

func (c *sessionCache) pushFront(s *sessionState) {
	s.prev, s.next = &c.lru, c.lru.next
	c.lru.next.prev = s
	c.lru.next = s
}

// resize recomputes s's memory estimate and the cache's (c may be nil). s.mu is held.
func (c *sessionCache) resize(s *sessionState) {
	n := sessionBytes + int64(len(s.id)) + int64(cap(s.steps))*stepBytes
	for i := range s.steps {
		n += int64(len(s.steps[i].Text) + len(s.steps[i].Tool))
	}
	d := n - s.size.Swap(n)
	if c != nil {
		c.bytes.Add(d)
	}
}

// keys returns the cached session ids, most recently used first.
func (c *sessionCache) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for e := c.lru.next; e != &c.lru; e = e.next {
		out = append(out, e.id)
	}
	return out
}

// release ends a step's use of s (from get).
func (c *sessionCache) release(s *sessionState) { s.pins.Add(-1) }

// Why admit refuses a step.
const (
	notOwnerKey   = "the session belongs to another API key"
	notOwnerAgent = "the session belongs to another agent"
)

// admit checks that a step may join the session, and makes the step's key and agent the
// session's owners where it has none yet. agentID is the step's context.agent.id, keyID
// and keyAgent the id of the request's API key and the agent it is scoped to ("" when
// absent). A session with an owner key takes steps of that key only; a session with an
// owner agent takes no step of another agent: one naming another, or sent with a key
// scoped to another. It returns why a step is refused, "" when it is not.
func (s *sessionState) admit(agentID, keyID, keyAgent string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if refused := s.refusal(agentID, keyID, keyAgent); refused != "" {
		return refused
	}
	if s.ownerKey == "" && keyID != "" {
		s.ownerKey = keyID
	}
	if s.ownerAgent == "" && agentID != "" {
		s.ownerAgent = strings.Clone(agentID) // it may share the request's memory
	}
	return ""
}

// mayJoin is admit without claiming the session: why a step would be refused, "" when it
// would not (a preview, which adds nothing to the session).
func (s *sessionState) mayJoin(agentID, keyID, keyAgent string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusal(agentID, keyID, keyAgent)
}

// SessionRefusal is why a request made with API key keyID (scoped to agent keyAgent; both
// "" without a key) may not touch the session, "" when it may: what admit would refuse a
// step of it for, without adding a step or claiming the session. A gateway asks it before
// serving a request of a session that is no step (reading or deleting it), or before
// forwarding anything of a turn.
func (g *Guardian) SessionRefusal(ctx context.Context, sessionID, keyID, keyAgent string) string {
	s := g.sessions.get(ctx, sessionID)
	defer g.sessions.release(s)
	return s.mayJoin("", keyID, keyAgent)
}

// refusal is why a step may not join the session. s.mu is held.
func (s *sessionState) refusal(agentID, keyID, keyAgent string) string {
	if s.ownerKey != "" && keyID != s.ownerKey {
		return notOwnerKey
	}
	if claimed := cmp.Or(agentID, keyAgent); s.ownerAgent != "" && claimed != "" && claimed != s.ownerAgent {
		return notOwnerAgent
	}
	return ""
}

// ownerError is the -32602 answer to a step admit refused, naming where the step named
// its session: a member of the request (from, a JSON path), the X-Vigil-Session header
// ("header"), or nothing (the fallback session of a client address).
func ownerError(sessionID, from, reason string) *aos.Error {
	switch from {
	case "":
		return &aos.Error{Code: aos.CodeInvalidParams, Message: "invalid params: " + reason,
			Data: map[string]any{"sessionId": sessionID, "reason": reason}}
	case "header":
		return &aos.Error{Code: aos.CodeInvalidParams, Message: "invalid params: X-Vigil-Session header: " + reason,
			Data: map[string]any{"header": "X-Vigil-Session", "reason": reason}}
	}
	return &aos.Error{Code: aos.CodeInvalidParams, Message: "invalid params: " + from + ": " + reason,
		Data: aos.FieldError{Field: from, Reason: reason}}
}

// snapshot copies the history for one evaluation; the slice is never mutated afterwards.
func (s *sessionState) snapshot() *History {
	s.mu.Lock()
	defer s.mu.Unlock()
	steps := s.window()
	return &History{SessionID: s.id, StepCount: s.count, Steps: steps[:len(steps):len(steps)],
		from: s, fromCount: s.count}
}

// window is the newest max steps. s.mu must be held.
func (s *sessionState) window() []rules.HistoryStep {
	if len(s.steps) > s.max {
		return s.steps[len(s.steps)-s.max:]
	}
	return s.steps
}

// lendCounts lends the counts if the session still has count steps (then they count
// exactly the snapshot's steps); they stay unchanged until returned with returnCounts.
func (s *sessionState) lendCounts(count int) *rules.SessionCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count != count || s.counts == nil {
		return nil
	}
	s.lent++
	return s.counts
}

// returnCounts ends a loan of lendCounts. Counts replaced by a copy meanwhile are nobody's
// to change any more: their loans need no bookkeeping.
func (s *sessionState) returnCounts(c *rules.SessionCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c == s.counts {
		s.lent--
	}
}

// add puts a stored step into the session's history, accounting for its memory in the
// cache it belongs to. Steps normally arrive in seq order; with replicas, another
// replica's step can arrive (from the bus) after a later one of this replica, and a step
// can arrive twice (this replica's own, once from the pipeline and once from the bus): a
// late step goes in its place and a step already there is not added again.
func (s *sessionState) add(rec record.StepRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.steps)
	if rec.Seq > 0 {
		for i > 0 && s.steps[i-1].Seq >= rec.Seq {
			if s.steps[i-1].Seq == rec.Seq {
				return
			}
			i--
		}
	}
	if i < len(s.steps) {
		s.insert(i, rec)
		return
	}
	s.count++
	h := HistoryStep(rec)
	if s.counts != nil && s.max > 0 {
		if s.lent > 0 {
			s.counts, s.lent = s.counts.Clone(), 0
		}
		if len(s.steps) >= s.max { // the window's oldest step leaves it
			s.counts.Add(&s.steps[len(s.steps)-s.max], -1)
		}
		s.counts.Add(&h, 1)
	}
	// The slice holds up to twice the history and is cut back to it only then, so a long
	// session costs one copy per HistorySize steps rather than one per step. Snapshots see
	// the newest max steps; a cut makes a new array, so no snapshot is ever changed.
	if len(s.steps) >= 2*s.max {
		n := make([]rules.HistoryStep, 0, 2*s.max)
		n = append(n, s.steps[len(s.steps)-s.max+1:]...)
		s.steps = n
		s.steps = append(s.steps, h)
		s.cache.resize(s)
		return
	}
	before := cap(s.steps)
	s.steps = append(s.steps, h)
	d := int64(cap(s.steps)-before)*stepBytes + int64(len(h.Text)+len(h.Tool))
	s.size.Add(d)
	if s.cache != nil {
		s.cache.bytes.Add(d)
	}
}

// insert puts a late step at index i of the history, in a new array (snapshots share the
// old one), and counts the window again. A step older than a full window is outside what
// rules see and may have been counted before the history was cut: it is left out. s.mu is
// held.
func (s *sessionState) insert(i int, rec record.StepRecord) {
	if i == 0 && len(s.steps) >= s.max {
		return
	}
	s.count++
	n := make([]rules.HistoryStep, 0, len(s.steps)+1)
	n = append(n, s.steps[:i]...)
	n = append(n, HistoryStep(rec))
	n = append(n, s.steps[i:]...)
	s.steps = n
	if s.counts != nil {
		s.counts, s.lent = rules.CountSteps(s.window()), 0
	}
	s.cache.resize(s)
}

// observe applies a step stored by another replica to a session this replica has in
// memory: its history, and its owners where it has none yet (the first step that
// carried a key or an agent id claimed them, wherever it landed).
func (s *sessionState) observe(rec *record.StepRecord) {
	s.mu.Lock()
	loaded := s.loaded
	if loaded {
		if s.ownerKey == "" && rec.KeyID != "" {
			s.ownerKey = rec.KeyID
		}
		if s.ownerAgent == "" && rec.AgentID != "" {
			s.ownerAgent = rec.AgentID
		}
	}
	s.mu.Unlock()
	if loaded {
		s.add(*rec)
	}
}

// peek returns a cached session without loading it or counting it as used.
func (c *sessionCache) peek(id string) *sessionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[id]
}

// ObserveStepEvent is ObserveStep for a "step" event of the replicas' bus, whose payload
// is the stored record's JSON: it is decoded only for a session in memory.
func (g *Guardian) ObserveStepEvent(ev record.Event) {
	s := g.sessions.peek(ev.SessionID)
	if s == nil {
		return
	}
	var rec record.StepRecord
	if err := json.Unmarshal(ev.Payload, &rec); err != nil {
		g.log.Warn("undecodable step event from the bus; the session reloads on its next step", "seq", ev.Seq, "err", err)
		g.sessions.forget(s)
		return
	}
	if rec.Seq == 0 {
		rec.Seq = ev.Seq
	}
	s.observe(&rec)
}

// forget drops a session from the cache unless a step is in flight, so its next step
// loads it from the store.
func (c *sessionCache) forget(s *sessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[s.id] == s && s.pins.Load() == 0 {
		c.unlink(s)
		delete(c.entries, s.id)
		c.bytes.Add(-s.size.Load())
	}
}

// ObserveStep keeps the session cache coherent with steps other replicas stored (the bus
// delivers every replica's steps, this one's too, in seq order). Only sessions in memory
// are touched: one that is not loads from the store, which has the step, when its next
// step comes. It does not block on anything but the session's own lock.
func (g *Guardian) ObserveStep(rec *record.StepRecord) {
	if s := g.sessions.peek(rec.SessionID); s != nil {
		s.observe(rec)
	}
}

// historyTextLimit bounds the text kept per earlier step, so a session that retrieved large
// documents cannot make the in-memory history grow without bound.
const historyTextLimit = storage.HistoryText

// HistoryStep is what rules see of an earlier step: no request bodies, just the facts.
func HistoryStep(r record.StepRecord) rules.HistoryStep {
	text := r.Text
	if len(text) > historyTextLimit {
		text = strings.ToValidUTF8(text[:historyTextLimit], "")
	}
	// The tool name and the text may share the request's memory (aos.ParseStep), and a cut
	// text shares the whole text's: copies keep the history from keeping every request and
	// text alive (a step of 1 MiB of text kept 1 MiB, not the 8 KiB the cache counts).
	return rules.HistoryStep{Method: r.Method, Kind: r.Kind, Tool: strings.Clone(r.Tool), Decision: r.Decision,
		Text: strings.Clone(text), Seq: r.Seq, ReceivedAt: r.ReceivedAt}
}
