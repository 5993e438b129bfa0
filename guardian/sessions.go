package guardian

import (
	"context"
	"sync"

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
	steps  []storage.StepRecord
	max    int
	loaded bool
}

func newSessionCache(max, hist int, store Store) *sessionCache {
	return &sessionCache{entries: make(map[string]*sessionState), max: max, hist: hist, store: store}
}

func (c *sessionCache) get(ctx context.Context, id string) *sessionState {
	c.mu.Lock()
	s, ok := c.entries[id]
	if !ok {
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
				s.steps = recent
			}
		}
	}
	return s
}

// snapshot copies the history for one evaluation; the slice is never mutated afterwards.
func (s *sessionState) snapshot() *History {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &History{SessionID: s.id, StepCount: s.count, Steps: s.steps[:len(s.steps):len(s.steps)]}
}

func (s *sessionState) add(rec storage.StepRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	// Keep only what rules need from the history; the request bodies stay in the store.
	rec.Request, rec.Response = nil, nil
	if len(s.steps) >= s.max {
		n := make([]storage.StepRecord, 0, s.max)
		n = append(n, s.steps[len(s.steps)-s.max+1:]...)
		s.steps = n
	}
	s.steps = append(s.steps, rec)
}
