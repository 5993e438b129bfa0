package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

var stepCases = []testCase{
	{"SaveStepRoundTripsEveryField", func(t *testing.T, db storage.Backend) {
		rec := &record.StepRecord{
			SessionID: "s1", TurnID: "t1", StepID: "st1", Method: "steps/toolCallRequest",
			Kind: "toolCall", AgentID: "agent-1", AgentName: "Bot", UserID: "u1", KeyID: "k1",
			Tool: "send_email", Decision: "deny", ReceivedAt: t0,
			Request:  json.RawMessage(`{"a":[1,2,{"b":"c"}]}`),
			Response: json.RawMessage(`{"result":"<&>"}`),
			MatchedRules: []record.RuleMatch{{RuleID: "r1", Action: "deny", Mode: "enforce", ReasonCode: "RC"},
				{RuleID: "r2", Action: "hold", Mode: "monitor", Error: "boom"}},
			LatencyMicros: 1234, Text: "hello wörld ✓", Held: true,
		}
		save(t, db, rec)
		got, err := db.Step(bg(), rec.Seq)
		require.NoError(t, err)
		require.Equal(t, *rec, got)
		gotJSON, err := json.Marshal(&got)
		require.NoError(t, err)
		recJSON, err := json.Marshal(rec)
		require.NoError(t, err)
		require.JSONEq(t, string(recJSON), string(gotJSON))
	}},
	{"SaveStepNormalisesEdgeValues", func(t *testing.T, db storage.Backend) {
		local := time.FixedZone("X", 3600)
		cases := []struct {
			name string
			rec  *record.StepRecord
			want func(*record.StepRecord)
		}{
			{"time in UTC", &record.StepRecord{SessionID: "s", Method: "m", Decision: "allow", ReceivedAt: t0.In(local)},
				func(r *record.StepRecord) { require.Equal(t, t0, r.ReceivedAt) }},
			{"zero time is now", &record.StepRecord{SessionID: "s", Method: "m", Decision: "allow"},
				func(r *record.StepRecord) { require.WithinDuration(t, time.Now(), r.ReceivedAt, time.Minute) }},
			{"nil rules are empty", &record.StepRecord{SessionID: "s", Method: "m", Decision: "allow", ReceivedAt: t0},
				func(r *record.StepRecord) { require.Equal(t, []record.RuleMatch{}, r.MatchedRules) }},
			{"absent JSON is null", &record.StepRecord{SessionID: "s", Method: "m", Decision: "allow", ReceivedAt: t0},
				func(r *record.StepRecord) { require.Nil(t, r.Request); require.Nil(t, r.Response) }},
			{"invalid JSON becomes a string", &record.StepRecord{SessionID: "s", Method: "m", Decision: "allow", ReceivedAt: t0,
				Request: json.RawMessage(`{not json`)},
				func(r *record.StepRecord) { require.Equal(t, `"{not json"`, string(r.Request)) }},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				save(t, db, c.rec)
				c.want(c.rec)
				got, err := db.Step(bg(), c.rec.Seq)
				require.NoError(t, err)
				c.want(&got)
				require.Equal(t, c.rec.ReceivedAt, got.ReceivedAt)
			})
		}
	}},
	{"SaveStepKeepsAnyBytes", func(t *testing.T, db storage.Backend) {
		// Agents send what they send: a NUL byte or invalid UTF-8 must not lose the step. A
		// backend may store such text changed (U+FFFD), but reads it back as SaveStep left rec.
		rec := step("nul\x00-session", "allow", 0)
		rec.Text = "a\x00b \xff\xfe c"
		rec.Tool = "t\x00ool"
		rec.AgentName = "\xc3"
		rec.Request = json.RawMessage("{\"s\":\"\xff\"}")
		client := &record.Peer{Name: "cli\x00ent", Version: "1\xff"}
		rec.Client, rec.Server = client, &record.Peer{Name: "\xfe"}
		save(t, db, rec)
		require.Equal(t, &record.Peer{Name: "cli\x00ent", Version: "1\xff"}, client, "the caller's peer is not changed")
		got, err := db.Step(bg(), rec.Seq)
		require.NoError(t, err)
		require.Equal(t, *rec, got)
		s, err := db.Session(bg(), rec.SessionID)
		require.NoError(t, err)
		require.Equal(t, int64(1), s.Steps)
		require.Equal(t, rec.Client, s.Client, "the session names the peers as the step does")
		require.Equal(t, rec.Server, s.Server)
	}},
	{"SaveStepRejectsIncompleteRecords", func(t *testing.T, db storage.Backend) {
		for name, rec := range map[string]*record.StepRecord{
			"no session":   {Method: "m", Decision: "allow"},
			"no method":    {SessionID: "s", Decision: "allow"},
			"no decision":  {SessionID: "s", Method: "m"},
			"bad decision": {SessionID: "s", Method: "m", Decision: `a"b`},
		} {
			require.Error(t, db.SaveStep(bg(), rec), name)
		}
		page, err := db.Sessions(bg(), record.SessionQuery{})
		require.NoError(t, err)
		require.Empty(t, page.Sessions)
	}},
	{"StepNotFound", func(t *testing.T, db storage.Backend) {
		_, err := db.Step(bg(), 12345)
		require.ErrorIs(t, err, record.ErrNotFound)
	}},
	{"StepsInArrivalOrder", func(t *testing.T, db storage.Backend) {
		var want []int64
		for i := range 7 {
			// Received times out of order: arrival (seq) order is what counts.
			want = append(want, save(t, db, step("a", "allow", time.Duration(7-i)*time.Second)).Seq)
			save(t, db, step("b", "allow", 0))
		}
		requireIncreasing(t, want)
		got, err := db.Steps(bg(), record.StepQuery{SessionID: "a"})
		require.NoError(t, err)
		require.Equal(t, want, seqsOf(got))
		got, err = db.Steps(bg(), record.StepQuery{SessionID: "a", After: want[2], Limit: 3})
		require.NoError(t, err)
		require.Equal(t, want[3:6], seqsOf(got))
		got, err = db.Steps(bg(), record.StepQuery{SessionID: "missing"})
		require.NoError(t, err)
		require.Empty(t, got)
	}},
	{"StepsLimitIsClamped", func(t *testing.T, db storage.Backend) {
		for range 5 {
			save(t, db, step("a", "allow", 0))
		}
		for _, limit := range []int{-1, 0, 100000} {
			got, err := db.Steps(bg(), record.StepQuery{SessionID: "a", Limit: limit})
			require.NoError(t, err)
			require.Len(t, got, 5)
		}
	}},
	{"RecentStepsAndStepsIn", func(t *testing.T, db storage.Backend) {
		var a, all []int64
		for i := range 6 {
			s := save(t, db, step("a", "allow", time.Duration(i)))
			a = append(a, s.Seq)
			all = append(all, s.Seq)
			all = append(all, save(t, db, step("b", "deny", time.Duration(i))).Seq)
		}
		cases := []struct {
			name string
			got  func() ([]record.StepRecord, error)
			want []int64
		}{
			{"recent", func() ([]record.StepRecord, error) { return db.RecentSteps(bg(), "a", 3) }, a[3:]},
			{"recent, more than there are", func() ([]record.StepRecord, error) { return db.RecentSteps(bg(), "a", 100) }, a},
			{"recent, none asked", func() ([]record.StepRecord, error) { return db.RecentSteps(bg(), "a", 0) }, []int64{}},
			{"recent, unknown session", func() ([]record.StepRecord, error) { return db.RecentSteps(bg(), "zz", 5) }, []int64{}},
			{"in, no bounds", func() ([]record.StepRecord, error) { return db.StepsIn(bg(), record.StepRange{}) }, all},
			{"in, after and before", func() ([]record.StepRecord, error) {
				return db.StepsIn(bg(), record.StepRange{After: all[1], Before: all[5]})
			}, all[2:5]},
			{"in, limited", func() ([]record.StepRecord, error) {
				return db.StepsIn(bg(), record.StepRange{After: all[1], Limit: 2})
			}, all[2:4]},
			{"in, before the first", func() ([]record.StepRecord, error) { return db.StepsIn(bg(), record.StepRange{Before: all[0]}) }, []int64{}},
			{"session before, no bound", func() ([]record.StepRecord, error) { return db.SessionStepsBefore(bg(), "a", 0, 2) }, a[4:]},
			{"session before a seq", func() ([]record.StepRecord, error) { return db.SessionStepsBefore(bg(), "a", a[3], 2) }, a[1:3]},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got, err := c.got()
				require.NoError(t, err)
				require.Equal(t, c.want, seqsOf(got))
			})
		}
	}},
	{"StepWindow", func(t *testing.T, db storage.Backend) {
		after, last, err := db.StepWindow(bg(), 0, 3)
		require.NoError(t, err)
		require.Equal(t, []int64{0, 0}, []int64{after, last}, "no steps")
		var all []int64
		for i := range 6 {
			all = append(all, save(t, db, step(fmt.Sprint("s", i%2), "allow", 0)).Seq)
		}
		for _, c := range []struct {
			before int64
			n      int
			want   []int64 // the window's steps
		}{
			{0, 3, all[3:]},
			{0, 6, all},
			{0, 100, all},
			{all[4], 2, all[2:4]},
			{all[0], 2, []int64{}},
			{all[5] + 1, 1, all[5:]},
		} {
			after, last, err := db.StepWindow(bg(), c.before, c.n)
			require.NoError(t, err)
			steps, err := db.StepsIn(bg(), record.StepRange{After: after, Before: last + 1})
			require.NoError(t, err)
			require.Equal(t, c.want, seqsOf(steps), "before %d, n %d", c.before, c.n)
			if len(c.want) > 0 {
				require.Equal(t, c.want[len(c.want)-1], last)
			}
		}
	}},
	{"StepReadsStopAtMaxBytes", func(t *testing.T, db storage.Backend) {
		// Reads of big steps end at a byte bound, whatever their limit: the first step always
		// comes, and a read stops with the step that reaches the bound.
		var seqs []int64
		for range 5 {
			rec := step("big", "allow", 0)
			rec.Text = strings.Repeat("x", 1000)
			seqs = append(seqs, save(t, db, rec).Seq)
		}
		one := storage.StepBytes(func() *record.StepRecord { r, err := db.Step(bg(), seqs[0]); require.NoError(t, err); return &r }())
		require.Greater(t, one, 1000)
		for _, c := range []struct {
			maxBytes, want int
		}{{0, 5}, {1, 1}, {one, 1}, {one + 1, 2}, {2 * one, 2}, {3*one - 1, 3}, {100 * one, 5}} {
			got, err := db.Steps(bg(), record.StepQuery{SessionID: "big", MaxBytes: c.maxBytes})
			require.NoError(t, err)
			require.Equal(t, seqs[:c.want], seqsOf(got), "Steps, MaxBytes %d", c.maxBytes)
			got, err = db.StepsIn(bg(), record.StepRange{MaxBytes: c.maxBytes})
			require.NoError(t, err)
			require.Equal(t, seqs[:c.want], seqsOf(got), "StepsIn, MaxBytes %d", c.maxBytes)
		}
	}},
	{"SessionStepsBeforeAreHistory", func(t *testing.T, db storage.Backend) {
		rec := step("h", "deny", 0)
		rec.Tool, rec.MatchedRules = "shell", []record.RuleMatch{{RuleID: "r1", Action: "deny"}}
		rec.Text = strings.Repeat("é", storage.HistoryText+10)
		save(t, db, rec)
		got, err := db.SessionStepsBefore(bg(), "h", 0, 5)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Nil(t, got[0].Request)
		require.Nil(t, got[0].Response)
		require.Empty(t, got[0].MatchedRules)
		require.Equal(t, strings.Repeat("é", storage.HistoryText), got[0].Text)
		want := storage.AsHistory(*rec)
		require.Equal(t, want, got[0], "AsHistory says what the history read gives")
	}},
	{"RecentStepsAreHistory", func(t *testing.T, db storage.Backend) {
		// What the guardian's session history keeps of a step, and no more: a reloaded
		// session does not read its steps' requests and answers.
		rec := step("h", "deny", 0)
		rec.Tool, rec.TurnID, rec.MatchedRules = "shell", "t1", []record.RuleMatch{{RuleID: "r1", Action: "deny"}}
		rec.Text = strings.Repeat("é", storage.HistoryText+10)
		save(t, db, rec)
		got, err := db.RecentSteps(bg(), "h", 5)
		require.NoError(t, err)
		require.Len(t, got, 1)
		h := got[0]
		require.Equal(t, []any{rec.Seq, "h", "t1", "steps/toolCallRequest", "toolCall", "shell", "deny"},
			[]any{h.Seq, h.SessionID, h.TurnID, h.Method, h.Kind, h.Tool, h.Decision})
		require.True(t, rec.ReceivedAt.Equal(h.ReceivedAt))
		require.Nil(t, h.Request)
		require.Nil(t, h.Response)
		require.Empty(t, h.MatchedRules)
		require.Equal(t, strings.Repeat("é", storage.HistoryText), h.Text, "cut by characters, never inside one")
	}},
	{"ConcurrentSaveStepLosesNothing", func(t *testing.T, db storage.Backend) {
		const writers, per = 16, 25
		var (
			mu   sync.Mutex
			recs []*record.StepRecord
			wg   sync.WaitGroup
		)
		done := make(chan struct{})
		// Pollers follow the log as a live client does: every event they are given must be
		// after the last one, and at the end they must have seen every event: a seq that
		// became visible after a higher one was handed out would be skipped for good.
		type pollResult struct {
			seen []int64
			err  error
		}
		results := make(chan pollResult, 3)
		for range 3 {
			go func() {
				var (
					seen  []int64
					after int64
				)
				for {
					select {
					case <-done:
						// One last read after every writer returned.
						for {
							evs, err := db.EventsAfter(bg(), after, 1000)
							if err != nil {
								results <- pollResult{err: err}
								return
							}
							if len(evs) == 0 {
								results <- pollResult{seen: seen}
								return
							}
							for _, e := range evs {
								seen = append(seen, e.Seq)
							}
							after = evs[len(evs)-1].Seq
						}
					default:
					}
					evs, err := db.EventsAfter(bg(), after, 7)
					if err != nil {
						results <- pollResult{err: err}
						return
					}
					for _, e := range evs {
						if e.Seq <= after {
							results <- pollResult{err: fmt.Errorf("event %d after %d", e.Seq, after)}
							return
						}
						seen = append(seen, e.Seq)
						after = e.Seq
					}
				}
			}()
		}
		for w := range writers {
			wg.Go(func() {
				for i := range per {
					rec := step(fmt.Sprint("s", w%4), "allow", time.Duration(i))
					rec.StepID = fmt.Sprint(w, "-", i)
					if err := db.SaveStep(bg(), rec); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					recs = append(recs, rec)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(done)
		all := eventSeqs(allEvents(t, db))
		for range 3 {
			r := <-results
			require.NoError(t, r.err)
			require.Equal(t, all, r.seen, "a poller skipped or repeated an event")
		}
		require.Len(t, recs, writers*per)
		bySeq := map[int64]string{}
		for _, rec := range recs {
			_, dup := bySeq[rec.Seq]
			require.False(t, dup, "seq %d given twice", rec.Seq)
			bySeq[rec.Seq] = rec.StepID
		}
		require.Len(t, all, writers*per)
		for _, seq := range all {
			got, err := db.Step(bg(), seq)
			require.NoError(t, err)
			require.Equal(t, bySeq[seq], got.StepID)
		}
		var total int64
		for i := range 4 {
			s, err := db.Session(bg(), fmt.Sprint("s", i))
			require.NoError(t, err)
			total += s.Steps
			steps, err := db.Steps(bg(), record.StepQuery{SessionID: s.ID, Limit: 1000})
			require.NoError(t, err)
			require.Len(t, steps, int(s.Steps))
			require.Equal(t, steps[len(steps)-1].Seq, s.LastSeq)
			requireIncreasing(t, seqsOf(steps))
		}
		require.Equal(t, int64(writers*per), total)
	}},
}
