package rules

import (
	"encoding/binary"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// sessionMemo answers the history helpers that would otherwise scan the whole history on
// every step (sessionHas, countToolWithin, sessionText) from aggregates that grow with the
// session: each stored step is looked at once per distinct question, not once per step.
//
// It travels with a session's counts (Session.WithCounts), so it lives as long as the
// guardian keeps the session. Earlier steps never change, so what it knows is keyed by a
// step's absolute position in the session, StepCount-len(Steps)+i for Steps[i], and stays
// true whatever window of the history a snapshot shows. A question it cannot answer exactly
// (a snapshot older than what it has seen, a window reaching before what it holds,
// timestamps out of order) falls back to the scan.
type sessionMemo struct {
	mu     sync.Mutex
	has    map[string]*hasMemo
	within map[string]*withinMemo
	text   *textMemo
}

// maxMemoKeys bounds the distinct questions a session remembers; beyond them (a selector
// built from step data, say) helpers scan.
const maxMemoKeys = 64

// hasMemo is what is known of a question asked of each step (sessionHas(sel, sub), a
// predicate of any(session.steps, …)): positions [start, scanned) were looked at, and
// newest is the newest of them that answered yes (-1 for none).
type hasMemo struct {
	start, scanned, newest int
}

// withinMemo counts the tool calls a countToolWithin selector picks: cum[k] is how many of
// positions [start, start+k) it picks. mono stays true while the steps' times never go
// back, which lets a window be found by binary search.
type withinMemo struct {
	start int
	cum   []int32
	mono  bool
	last  time.Time
}

// textMemo is the history's text, each step's followed by '\n', from position start on:
// offs[k] is where position start+k begins in buf. Returned strings point into buf; later
// appends write after them and compaction makes a new buf, so they never change.
type textMemo struct {
	start int
	buf   []byte
	offs  []int
}

func newSessionMemo() *sessionMemo { return &sessionMemo{} }

// window returns the absolute positions [base, end) of s.Steps.
func window(s Session) (base, end int) { return s.StepCount - len(s.Steps), s.StepCount }

// memoOf returns the memo of s when it is the evaluation's own session and carries one.
func memoOf(e *Env, s Session) *sessionMemo {
	if e.state == nil || s.counts == nil || s.counts.memo == nil || !sameSteps(e, s) || s.StepCount < len(s.Steps) {
		return nil
	}
	return s.counts.memo
}

// sessionHas answers sessionHas(s, sel, sub) (sub lower-cased); ok is false when the memo
// cannot answer exactly.
func (m *sessionMemo) sessionHas(c *regexCache, s Session, sel, sub string) (v, ok bool, err error) {
	all, pattern := sel == "" || sel == "*", isGlob(sel)
	return m.anyStep(hasKey(sel, sub), s, func(st *HistoryStep) (bool, error) {
		hit := all || st.Tool == sel || st.Kind == sel
		if !hit && pattern {
			var err error
			if hit, err = stepMatches(c, st, sel); err != nil {
				return false, err
			}
		}
		return hit && strings.Contains(strings.ToLower(st.Text), sub), nil
	})
}

// hasKey is the question key of sessionHas(sel, sub). sel's length goes first, as a
// uvarint (self-delimiting), so that no two questions share a key: with a separator
// between sel and sub, ("a\x00", "b") and ("a", "\x00b") would. The other questions'
// keys start "steps\x00" and "text\x00". One allocation, as the joined key had.
func hasKey(sel, sub string) string {
	var n [binary.MaxVarintLen64]byte
	w := binary.PutUvarint(n[:], uint64(len(sel)))
	var b strings.Builder
	b.Grow(len("has\x00") + w + len(sel) + len(sub))
	b.WriteString("has\x00")
	b.Write(n[:w])
	b.WriteString(sel)
	b.WriteString(sub)
	return b.String()
}

// anyStep reports whether a step of s answers yes to the question key, which pred asks of
// one step; ok is false when the memo cannot answer exactly.
func (m *sessionMemo) anyStep(key string, s Session, pred func(*HistoryStep) (bool, error)) (v, ok bool, err error) {
	base, end := window(s)
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.has[key]
	if h == nil {
		if len(m.has) >= maxMemoKeys {
			return false, false, nil
		}
		if m.has == nil {
			m.has = map[string]*hasMemo{}
		}
		h = &hasMemo{start: base, scanned: base, newest: -1}
		m.has[key] = h
	}
	if base < h.start || end < h.scanned {
		return false, false, nil
	}
	if h.scanned < base { // steps it never saw left the window meanwhile
		h.start, h.scanned = base, base
	}
	for pos := h.scanned; pos < end; pos++ {
		yes, err := pred(&s.Steps[pos-base])
		if err != nil {
			return false, false, err
		}
		if yes {
			h.newest = pos
		}
		h.scanned = pos + 1
	}
	return h.newest >= base, true, nil
}

// countWithin answers countToolWithin(s, name, since); ok is false when it cannot.
func (m *sessionMemo) countWithin(c *regexCache, s Session, name string, since time.Time) (n int, ok bool, err error) {
	base, end := window(s)
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.within[name]
	if w != nil && w.start+len(w.cum)-1 < base {
		w = nil // steps it never saw left the window meanwhile: start again
		delete(m.within, name)
	}
	if w == nil {
		if m.within == nil {
			m.within = map[string]*withinMemo{}
		}
		w = &withinMemo{start: base, cum: []int32{0}, mono: true}
		if len(m.within) >= maxMemoKeys {
			return 0, false, nil
		}
		m.within[name] = w
	}
	scanned := w.start + len(w.cum) - 1
	if base < w.start {
		return 0, false, nil
	}
	for pos := max(scanned, base); pos < end; pos++ {
		st := &s.Steps[pos-base]
		if st.ReceivedAt.Before(w.last) {
			w.mono = false
		}
		w.last = st.ReceivedAt
		hit := false
		if isToolCall(st) {
			hit = st.Tool == name
			if isGlob(name) {
				if hit, err = c.glob(name, st.Tool); err != nil {
					return 0, false, err
				}
			}
		}
		next := w.cum[len(w.cum)-1]
		if hit {
			next++
		}
		w.cum = append(w.cum, next)
	}
	// Keep the counts of about two windows: an old start is cut off now and then.
	if keep := base - w.start; keep > 0 && len(w.cum) > 2*(end-base)+64 {
		w.cum = append([]int32(nil), w.cum[keep:]...)
		w.start = base
	}
	if !w.mono || end-w.start >= len(w.cum) {
		return 0, false, nil
	}
	// The scan counts the steps after the newest one received before since: with times in
	// order, those are the steps from the first one not before since.
	first := sort.Search(len(s.Steps), func(i int) bool { return !s.Steps[i].ReceivedAt.Before(since) })
	from := base + first
	return int(w.cum[end-w.start] - w.cum[from-w.start]), true, nil
}

// sessionText answers sessionText(s); ok is false when it cannot.
func (m *sessionMemo) sessionText(s Session) (string, bool) {
	base, end := window(s)
	if base == end {
		return "", true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.text
	if t == nil || base < t.start || t.start+len(t.offs)-1 < base {
		t = &textMemo{start: base, offs: []int{0}}
		m.text = t
	}
	scanned := t.start + len(t.offs) - 1
	if keep := base - t.start; keep > 0 && len(t.buf) > 2*(t.offs[len(t.offs)-1]-t.offs[keep])+4096 {
		// Compact: the new buffer holds the window's text only.
		n := &textMemo{start: base, buf: append([]byte(nil), t.buf[t.offs[keep]:]...)}
		n.offs = make([]int, 0, len(t.offs)-keep)
		for _, o := range t.offs[keep:] {
			n.offs = append(n.offs, o-t.offs[keep])
		}
		t, m.text = n, n
	}
	for pos := max(scanned, base); pos < end; pos++ {
		t.buf = append(t.buf, s.Steps[pos-base].Text...)
		t.buf = append(t.buf, '\n')
		t.offs = append(t.offs, len(t.buf))
	}
	if end-t.start >= len(t.offs) {
		return "", false
	}
	from, to := t.offs[base-t.start], t.offs[end-t.start]-1 // without the last '\n'
	if to <= from {
		return "", true
	}
	return unsafe.String(&t.buf[from], to-from), true
}
