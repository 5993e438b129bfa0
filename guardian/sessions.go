package guardian

import (
	"context"
	"strings"
	"sync"

	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// sessionCache keeps the recent history of active sessions in memory, so rules can look at
// a session's earlier steps without a query per step. A miss loads from the store.
type sessionCache struct {
	mu      sync.Mutex
	entries map[string]*sessionState
	order   []string // insertion order, for eviction
	max     int
	hist    int
	store   Store
}

type sessionState struct {
	mu     sync.Mutex
	id     string
	count  int
	steps  []rules.HistoryStep
	max    int
	loaded bool
	// counts counts the newest max steps, the ones a snapshot shows. lent is how many
	// snapshots are reading them: add changes a copy instead while any is (copy on write),
	// so a step whose rules read the counts costs no copy when its session has no other
	// step in flight.
	counts *rules.SessionCounts
	lent   int
}

func newSessionCache(max, hist int, store Store) *sessionCache {
	return &sessionCache{entries: make(map[string]*sessionState), max: max, hist: hist, store: store}
}

func (c *sessionCache) get(ctx context.Context, id string) *sessionState {
	c.mu.Lock()
	s, ok := c.entries[id]
	if !ok {
		id = strings.Clone(id) // it may share the request's memory (aos.ParseStep)
		s = &sessionState{id: id, max: c.hist}
		c.entries[id] = s
		c.order = append(c.order, id)
		if len(c.order) > c.max {
			// Evict the oldest inserted entries; a later step of theirs reloads from the store.
			drop := len(c.order) - c.max
			for _, old := range c.order[:drop] {
				delete(c.entries, old)
			}
			c.order = append(c.order[:0:0], c.order[drop:]...)
		}
	}
	c.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		s.loaded = true
		if sess, err := c.store.Session(ctx, id); err == nil {
			s.count = int(sess.Steps)
			if recent, err := c.store.RecentSteps(ctx, id, c.hist); err == nil {
				s.steps = make([]rules.HistoryStep, len(recent))
				for i, r := range recent {
					s.steps[i] = HistoryStep(r)
				}
			}
		}
		s.counts = rules.CountSteps(s.window())
	}
	return s
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

func (s *sessionState) add(rec storage.StepRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	}
	s.steps = append(s.steps, h)
}

// historyTextLimit bounds the text kept per earlier step, so a session that retrieved large
// documents cannot make the in-memory history grow without bound.
const historyTextLimit = 8 << 10

// HistoryStep is what rules see of an earlier step: no request bodies, just the facts.
func HistoryStep(r storage.StepRecord) rules.HistoryStep {
	text := r.Text
	if len(text) > historyTextLimit {
		text = strings.ToValidUTF8(text[:historyTextLimit], "")
	}
	// The tool name may share the request's memory (aos.ParseStep): a copy keeps the
	// history from keeping every request alive.
	return rules.HistoryStep{Method: r.Method, Kind: r.Kind, Tool: strings.Clone(r.Tool), Decision: r.Decision,
		Text: text, Seq: r.Seq, ReceivedAt: r.ReceivedAt}
}
