package guardian

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// The cache keeps the counts of each snapshot's window up to date as steps come and the
// oldest leave, across the slice's periodic cut; a snapshot overtaken by a new step has none.
func TestSessionCounts(t *testing.T) {
	for _, max := range []int{1, 2, 5} {
		t.Run(fmt.Sprint("history ", max), func(t *testing.T) {
			s := &sessionState{id: "s", max: max, loaded: true, counts: rules.CountSteps(nil)}
			for i := range 40 {
				kind := "toolCall"
				if i%5 == 0 {
					kind = "toolResult"
				}
				s.add(record.StepRecord{Seq: int64(i + 1), Method: fmt.Sprint("m", i%2), Kind: kind,
					Tool: fmt.Sprint("t", i%3), Decision: []string{"allow", "deny", "hold"}[i%3]})
				h := s.snapshot()
				require.Len(t, h.Steps, min(i+1, max))
				require.Equal(t, rules.CountSteps(h.Steps), h.Counts(), "after step %d", i)
			}
			h := s.snapshot()
			s.add(record.StepRecord{Seq: 99, Method: "m", Decision: "allow"})
			require.Nil(t, h.Counts(), "a newer step makes the snapshot's counts unknown")
		})
	}
	require.Nil(t, (&History{}).Counts())
}

// Counts lent to a snapshot stay as they were while newer steps of the session arrive;
// once returned, the cache changes its counts in place again.
func TestSessionCountsLent(t *testing.T) {
	s := &sessionState{id: "s", max: 10, loaded: true, counts: rules.CountSteps(nil)}
	add := func(tool string) {
		s.add(record.StepRecord{Method: "m", Kind: "toolCall", Tool: tool, Decision: "allow"})
	}
	add("a")
	h := s.snapshot()
	c := h.Counts()
	want := rules.CountSteps(h.Steps)
	require.Equal(t, want, c)
	require.Same(t, c, h.Counts(), "one loan per snapshot")
	add("b") // another step of the session, decided meanwhile
	require.Equal(t, want, c, "lent counts do not change")
	h.release()

	h2 := s.snapshot()
	c2 := h2.Counts()
	require.NotSame(t, c, c2)
	require.Equal(t, rules.CountSteps(h2.Steps), c2)
	h2.release()
	h.release() // a second release changes nothing
	add("c")
	require.Same(t, c2, s.counts, "returned counts are changed in place")
	require.Equal(t, rules.CountSteps(s.window()), s.counts)
	require.Zero(t, s.lent)
}

// A step's strings may share its request's memory (aos.ParseStep). What the session cache
// keeps (the session id, a history step's tool) is its own copy: changing the request's
// bytes afterwards changes nothing there.
func TestSessionCacheKeepsCopies(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "v.db"), sqlite.Options{})
	require.NoError(t, err)
	defer db.Close()
	buf := []byte("sess-1 send_email")
	id, tool := unsafe.String(&buf[0], 6), unsafe.String(&buf[7], 10)
	c := newSessionCache(10, 0, 5, db)
	s := c.get(context.Background(), id)
	h := HistoryStep(record.StepRecord{Tool: tool, Method: "m", Decision: "allow"})
	s.add(record.StepRecord{SessionID: id, Tool: tool, Method: "m", Kind: "toolCall", Decision: "allow"})
	copy(buf, "XXXXXXXXXXXXXXXXX")
	require.Equal(t, "sess-1", s.id)
	require.Same(t, s, c.get(context.Background(), "sess-1"))
	require.Equal(t, []string{"sess-1"}, c.keys())
	require.Equal(t, "send_email", h.Tool)
	require.Equal(t, "send_email", s.steps[0].Tool)
	require.Equal(t, 1, s.counts.Tools["send_email"])
}

// The history keeps its own copy of a step's text, cut or not: a cut text shared the whole
// text's memory, so a session of steps of 1 MiB of text kept 1 MiB per step in its history
// while the cache counted the 8 KiB it shows.
func TestHistoryStepKeepsCopiesOfText(t *testing.T) {
	for _, n := range []int{10, historyTextLimit, historyTextLimit + 1, 1 << 20} {
		buf := []byte(strings.Repeat("a", n))
		text := unsafe.String(&buf[0], len(buf))
		h := HistoryStep(record.StepRecord{Text: text, Method: "m"})
		require.Len(t, h.Text, min(n, historyTextLimit))
		copy(buf, strings.Repeat("X", n))
		require.Equal(t, strings.Repeat("a", min(n, historyTextLimit)), h.Text, "text of %d bytes", n)
	}
}

// A session with a step in flight keeps its entry however many sessions come meanwhile:
// the owners that step claimed are in memory only until the step is stored, and a reload
// from the store would forget them (a held step can wait for minutes).
func TestSessionCacheKeepsSessionsInUse(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "v.db"), sqlite.Options{})
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	c := newSessionCache(2, 0, 5, db)
	held := c.get(ctx, "held")
	require.Empty(t, held.admit("agent-b", "key_b", "agent-b"))
	for i := range 10 {
		s := c.get(ctx, fmt.Sprint("other-", i))
		c.release(s)
	}
	require.Same(t, held, c.get(ctx, "held"), "in use, never evicted")
	c.release(held)
	require.Equal(t, notOwnerKey, held.admit("agent-a", "key_a", "agent-a"))
	require.LessOrEqual(t, len(c.keys()), 3)

	// Released, it is evicted like any other, and what was stored is all a reload knows.
	c.release(held)
	for i := range 3 {
		c.release(c.get(ctx, fmt.Sprint("more-", i)))
	}
	require.NotSame(t, held, c.get(ctx, "held"))
	require.Len(t, c.entries, 2)
}

func TestSessionAdmit(t *testing.T) {
	tests := []struct {
		name                      string
		ownerKey, ownerAgent      string
		agent, key, keyAgent      string
		want                      string
		wantOwnerKey, wantOwnerAg string
	}{
		{"open mode, first agent claims", "", "", "a", "", "", "", "", "a"},
		{"open mode, same agent", "", "a", "a", "", "", "", "", "a"},
		{"open mode, other agent", "", "a", "b", "", "", notOwnerAgent, "", "a"},
		{"open mode, no agent (MCP)", "", "a", "", "", "", "", "", "a"},
		{"key claims an unowned session", "", "", "", "k1", "", "", "k1", ""},
		{"same key", "k1", "a", "a", "k1", "a", "", "k1", "a"},
		{"other key, same agent", "k1", "a", "a", "k2", "a", notOwnerKey, "k1", "a"},
		{"other key, no agent", "k1", "a", "", "k2", "", notOwnerKey, "k1", "a"},
		{"no key into a key's session", "k1", "", "", "", "", notOwnerKey, "k1", ""},
		{"same unscoped key, other agent", "k1", "a", "b", "k1", "", notOwnerAgent, "k1", "a"},
		{"key scoped to another agent, step names none", "", "a", "", "k2", "b", notOwnerAgent, "", "a"},
		{"key scoped to the owner, step names none", "", "a", "", "k2", "a", "", "k2", "a"},
		{"a key's session claimed by its first agent", "k1", "", "a", "k1", "", "", "k1", "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &sessionState{ownerKey: tt.ownerKey, ownerAgent: tt.ownerAgent}
			require.Equal(t, tt.want, s.admit(tt.agent, tt.key, tt.keyAgent))
			require.Equal(t, tt.wantOwnerKey, s.ownerKey)
			require.Equal(t, tt.wantOwnerAg, s.ownerAgent)
		})
	}
}

// The cache is bounded by memory: beyond it the least recently used sessions go, the
// recently used stay, and its accounting matches its entries' sizes.
func TestSessionCacheBoundedByMemory(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "v.db"), sqlite.Options{})
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	const limit = 64 << 10
	c := newSessionCache(0, limit, 50, db)
	text := strings.Repeat("x", 500)
	hot := c.get(ctx, "hot")
	c.release(hot)
	for i := range 200 {
		s := c.get(ctx, fmt.Sprint("s-", i))
		for range 3 {
			s.add(record.StepRecord{Method: "m", Kind: "toolCall", Tool: "t", Decision: "allow", Text: text})
		}
		c.release(s)
		c.release(c.get(ctx, "hot")) // used all along
		require.LessOrEqual(t, c.bytes.Load(), int64(limit), "after session %d", i)
	}
	keys := c.keys()
	require.Contains(t, keys, "hot")
	require.Contains(t, keys, "s-199")
	require.NotContains(t, keys, "s-0")
	require.Greater(t, len(keys), 10)
	var sum int64
	for _, s := range c.entries {
		sum += s.size.Load()
	}
	require.Equal(t, sum, c.bytes.Load())
}

// BenchmarkIdleSessionMemory reports the heap an idle cached session of 20 load-generator
// steps takes, and the cache's estimate of it. Each iteration fills a cache with 20 000
// sessions: run it with -benchtime 1x.
func BenchmarkIdleSessionMemory(b *testing.B) {
	db, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "v.db"), sqlite.Options{})
	require.NoError(b, err)
	defer db.Close()
	ctx := context.Background()
	const n = 20000
	for b.Loop() {
		c := newSessionCache(0, 1<<40, 200, db)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range n {
			s := c.get(ctx, fmt.Sprintf("load-s100000-%d", i))
			for k := range 20 {
				s.add(record.StepRecord{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: strings.Clone("send_email"),
					Decision: "allow", Text: fmt.Sprintf("query=outstanding invoices for customer 8812 in October\nto=dana@corp.example\namount=%d", k*37)})
			}
			c.release(s)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/session")
		b.ReportMetric(float64(c.bytes.Load())/n, "estimate-B/session")
		runtime.KeepAlive(c)
	}
}

// With replicas, a session's steps reach its cached history from the pipeline and from
// the bus: another replica's step may come after a later one, and this replica's own
// comes twice. The history stays in seq order, each step once, with counts to match.
func TestSessionHistoryFromSeveralReplicas(t *testing.T) {
	for _, tc := range []struct {
		name   string
		arrive []int64
		want   []int64
	}{
		{"in order", []int64{1, 2, 3}, []int64{1, 2, 3}},
		{"late step", []int64{1, 3, 2}, []int64{1, 2, 3}},
		{"duplicates", []int64{1, 2, 2, 3, 1, 3}, []int64{1, 2, 3}},
		{"late and duplicate", []int64{4, 1, 3, 2, 4, 3}, []int64{1, 2, 3, 4}},
		{"older than a full window is left out", []int64{2, 3, 4, 5, 1}, []int64{2, 3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sessionState{id: "s", max: 4, loaded: true, counts: rules.CountSteps(nil)}
			for _, seq := range tc.arrive {
				s.add(record.StepRecord{Seq: seq, Method: "m", Kind: "toolCall", Tool: fmt.Sprint("t", seq), Decision: "allow"})
			}
			h := s.snapshot()
			var got []int64
			for _, st := range h.Steps {
				got = append(got, st.Seq)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, len(tc.want), h.StepCount)
			require.Equal(t, rules.CountSteps(h.Steps), h.Counts())
		})
	}
}

// ObserveStep updates a session in memory, owners included, and loads nothing.
func TestObserveStepKeepsTheCacheCoherent(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	g, err := New(Config{}, Options{Store: db})
	require.NoError(t, err)
	g.ObserveStep(&record.StepRecord{Seq: 1, SessionID: "absent"})
	require.Empty(t, g.sessions.keys(), "a session not in memory is not loaded")

	s := g.sessions.get(context.Background(), "s1")
	g.sessions.release(s)
	g.ObserveStep(&record.StepRecord{Seq: 7, SessionID: "s1", KeyID: "k1", AgentID: "a1", Method: "m", Decision: "allow"})
	h := s.snapshot()
	require.Len(t, h.Steps, 1)
	require.EqualValues(t, 7, h.Steps[0].Seq)
	require.Equal(t, notOwnerKey, s.admit("a1", "k2", ""), "the other replica's step claimed the session")
}

// ObserveStepEvent decodes a bus step event only for a session in memory; one it cannot
// decode drops the session, which its next step reloads from the store.
func TestObserveStepEvent(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	g, err := New(Config{}, Options{Store: db})
	require.NoError(t, err)
	g.ObserveStepEvent(record.Event{Seq: 1, Type: record.EventStep, SessionID: "absent", Payload: []byte(`not json`)})
	require.Empty(t, g.sessions.keys())

	s := g.sessions.get(context.Background(), "s1")
	g.sessions.release(s)
	g.ObserveStepEvent(record.Event{Seq: 4, Type: record.EventStep, SessionID: "s1",
		Payload: []byte(`{"sessionId":"s1","method":"m","decision":"deny","text":"t"}`)})
	h := s.snapshot()
	require.Len(t, h.Steps, 1)
	require.EqualValues(t, 4, h.Steps[0].Seq, "the event's seq when the payload has none")
	require.Equal(t, "deny", h.Steps[0].Decision)

	g.ObserveStepEvent(record.Event{Seq: 5, Type: record.EventStep, SessionID: "s1", Payload: []byte(`{`)})
	require.Empty(t, g.sessions.keys())
}
