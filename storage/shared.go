package storage

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vigil-guardian/vigil/record"
)

// What follows is the part of a backend's work that does not depend on its database: every
// backend calls these instead of keeping a copy.

// RetentionLoop applies r through prune now and then every r.Interval until ctx is done or
// closed reports the database closed, logging what each pass pruned. It returns at once
// when r bounds nothing. A backend's RunRetention is this loop around its own Prune.
func RetentionLoop(ctx context.Context, r record.Retention, log *slog.Logger, closed func(error) bool,
	prune func(ctx context.Context, now time.Time, r record.Retention) (record.PruneResult, error)) {
	if !r.Enabled() {
		return
	}
	r = r.WithDefaults()
	log = log.With("component", "retention")
	log.Info("step retention on", "maxAge", r.MaxAge, "maxBytes", r.MaxBytes, "interval", r.Interval)
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		start := time.Now()
		res, err := prune(ctx, start, r)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && closed(err):
			log.Warn("database closed; retention stopped")
			return
		case err != nil:
			log.Warn("prune failed", "err", err, "steps", res.Steps)
		case res.Steps > 0 || res.Sessions > 0:
			log.Info("pruned old steps", "steps", res.Steps, "sessions", res.Sessions,
				"batches", res.Batches, "usedBefore", res.UsedBefore, "usedAfter", res.UsedAfter,
				"vacuumedPages", res.VacuumedPages, "took", time.Since(start).Round(time.Millisecond))
		default:
			log.Debug("nothing to prune", "used", res.UsedAfter)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Snippet is the part of text around the first of words found in it (case-insensitive;
// the start when none is), at most record.SnippetBytes, whitespace collapsed, with … where
// it was cut: a search hit's snippet, the same whichever backend found it.
func Snippet(text string, words []string) string {
	at := -1
	lower := strings.ToLower(text)
	for _, w := range words {
		w = strings.ToLower(strings.TrimSpace(w))
		if w == "" {
			continue
		}
		if i := strings.Index(lower, w); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	start := 0
	if at > record.SnippetBytes/3 {
		// at indexes the lower-cased text, whose length may differ outside ASCII.
		start = min(at-record.SnippetBytes/3, len(text))
	}
	end := min(len(text), start+record.SnippetBytes)
	// Whole runes only: lower-casing keeps ASCII offsets; for the rest, cut at rune starts.
	for start > 0 && start < len(text) && !utf8.RuneStart(text[start]) {
		start--
	}
	for end < len(text) && !utf8.RuneStart(text[end]) {
		end--
	}
	out := strings.Join(strings.Fields(text[start:end]), " ")
	if start > 0 {
		out = "…" + out
	}
	if end < len(text) {
		out += "…"
	}
	return out
}

// NotifyChannel is the PostgreSQL notification channel a backend shared by replicas notifies
// after every transaction that appends events, with the highest seq it committed as the
// payload; the replicas' bus listens on it.
const NotifyChannel = "vigil_events"

// NoSearchWord is why a search text without a word is refused (record.ErrBadQuery): the
// index keeps words of letters and digits only, and such a text would otherwise narrow
// nothing and find every step.
const NoSearchWord = "q: no word to search for (the search finds words of letters and digits)"

// HistoryText is how many characters of a step's text RecentSteps returns: the guardian's
// session history keeps at most 8 KiB of it per step.
const HistoryText = 8 << 10

// StepBytes is the size a read step holds, as record.StepQuery's MaxBytes counts it: its
// request, answer and text, and its other strings.
func StepBytes(rec *record.StepRecord) int {
	n := len(rec.Request) + len(rec.Response) + len(rec.Text) + len(rec.SessionID) + len(rec.TurnID) +
		len(rec.StepID) + len(rec.Method) + len(rec.Kind) + len(rec.AgentID) + len(rec.AgentName) +
		len(rec.UserID) + len(rec.Tool) + len(rec.Decision) + len(rec.KeyID)
	for _, m := range rec.MatchedRules {
		n += len(m.RuleID) + len(m.Action) + len(m.Mode) + len(m.ReasonCode) + len(m.Error)
	}
	return n
}

// AsHistory is rec as RecentSteps returns it: without request and answer, its matched rules
// an empty list, its text cut to HistoryText characters (never inside one).
func AsHistory(rec record.StepRecord) record.StepRecord {
	rec.Request, rec.Response, rec.MatchedRules = nil, nil, []record.RuleMatch{}
	if len(rec.Text) > HistoryText { // a text of at most HistoryText bytes has no more characters
		n := 0
		for i := range rec.Text {
			if n == HistoryText {
				// A copy: the cut text would keep the whole one alive.
				rec.Text = strings.Clone(rec.Text[:i])
				break
			}
			n++
		}
	}
	return rec
}

// EventPager reads the event log a page at a time (Backend's EventsPage).
type EventPager interface {
	EventsPage(ctx context.Context, after int64, p record.EventPage) ([]record.Event, error)
}

// NewestSeq finds the newest seq in src with O(log n) single-event reads: gallop up until
// nothing follows, then bisect. Seqs may have holes; "something follows x" stays monotonic.
func NewestSeq(ctx context.Context, src EventPager) (int64, error) {
	next := func(x int64) (int64, bool, error) {
		// One event, its payload unread where it can be: only its seq matters.
		evs, err := src.EventsPage(ctx, x, record.EventPage{Limit: 1, MaxBytes: 1, MaxStepBulk: 1})
		if err != nil || len(evs) == 0 {
			return 0, false, err
		}
		return evs[0].Seq, true, nil
	}
	// Invariant: the newest seq is in [lo, hi]; lo exists (or is 0).
	lo, hi := int64(0), int64(-1)
	for x := int64(0); hi < 0; {
		s, ok, err := next(x)
		if err != nil {
			return 0, err
		}
		if !ok {
			hi = x
			break
		}
		lo = s
		if s == math.MaxInt64 {
			return s, nil
		}
		if s >= math.MaxInt64/2 {
			x = math.MaxInt64 - 1
		} else {
			x = 2 * s
		}
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		s, ok, err := next(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = s
		} else {
			hi = mid
		}
	}
	return lo, nil
}
