package storetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

var maintenanceCases = []testCase{
	{"PruneByAge", func(t *testing.T, db storage.Backend) {
		now := t0.Add(10 * time.Hour)
		var kept []int64
		for i := range 10 {
			sid := fmt.Sprint("old", i%3)
			if i >= 6 {
				sid = "new"
			}
			rec := save(t, db, step(sid, "allow", time.Duration(i)*time.Hour))
			if i >= 6 {
				kept = append(kept, rec.Seq)
			}
		}
		// A paused session and one with a pending hold keep their rows without steps.
		_, err := db.SetSessionControl(bg(), record.SessionControl{SessionID: "old1", Control: record.ControlPause}, nil)
		require.NoError(t, err)
		_, err = db.CreateHold(bg(), newHold("h", "old2"), nil)
		require.NoError(t, err)
		ev := &record.Event{Type: "custom"}
		require.NoError(t, db.AppendEvent(bg(), ev))
		_, err = db.AppendAudit(bg(), &record.AuditEntry{Type: "x.y", At: t0})
		require.NoError(t, err)
		waitIndexed(t, db)

		res, err := db.Prune(bg(), now, record.Retention{})
		require.NoError(t, err)
		require.Zero(t, res.Steps, "no policy prunes nothing")

		res, err = db.Prune(bg(), now, record.Retention{MaxAge: 4*time.Hour + time.Minute, BatchSize: 2})
		require.NoError(t, err)
		require.Equal(t, int64(6), res.Steps)
		require.Equal(t, int64(1), res.Sessions, "old0 went; old1 is paused, old2 has a pending hold")
		require.GreaterOrEqual(t, res.Batches, 3)
		steps, err := db.StepsIn(bg(), record.StepRange{Limit: 100})
		require.NoError(t, err)
		require.Equal(t, kept, seqsOf(steps))
		_, err = db.Session(bg(), "old0")
		require.ErrorIs(t, err, record.ErrNotFound)
		for _, id := range []string{"old1", "old2", "new"} {
			_, err = db.Session(bg(), id)
			require.NoError(t, err, id)
		}
		var types []string
		for _, e := range allEvents(t, db) {
			if e.Type != record.EventStep {
				types = append(types, e.Type)
			}
		}
		require.Contains(t, types, "custom", "only steps are pruned")
		require.Contains(t, types, record.EventHoldCreated)
		entries, err := db.ListAudit(bg(), record.AuditQuery{})
		require.NoError(t, err)
		require.Len(t, entries, 1, "the audit log is kept")
		page, err := db.Search(bg(), record.SearchQuery{Decision: "allow"})
		require.NoError(t, err)
		var found []int64
		for _, h := range page.Steps {
			found = append([]int64{h.Seq}, found...)
		}
		require.Equal(t, kept, found, "search finds no pruned step")
	}},
	{"PruneBySizeTrimsOnceToTheTarget", func(t *testing.T, db storage.Backend) {
		// Steps of some 4 KB of text that does not compress away, so that they are most of
		// the database whatever the backend's fixed overhead.
		rnd := rand.New(rand.NewPCG(1, 2))
		const n = 400
		var seqs []int64
		for i := range n {
			rec := step(fmt.Sprint("s", i%8), "allow", time.Duration(i)*time.Second)
			words := make([]string, 500)
			for j := range words {
				words[j] = strconv.FormatUint(rnd.Uint64(), 36)[:7]
			}
			rec.Text = strings.Join(words, " ")
			seqs = append(seqs, save(t, db, rec).Seq)
		}
		indexNow(t, db)
		now := t0.Add(time.Hour)
		full, err := db.Prune(bg(), now, record.Retention{})
		require.NoError(t, err)
		bound := full.UsedBefore / 4 * 3
		policy := record.Retention{MaxBytes: bound, BatchSize: 20}

		res, err := db.Prune(bg(), now, policy)
		require.NoError(t, err)
		require.Positive(t, res.Steps)
		require.Less(t, res.Steps, int64(n), "steps still fit under the bound")
		require.LessOrEqual(t, res.UsedAfter, bound/10*9, "trimmed to nine tenths of the bound")
		left, err := db.StepsIn(bg(), record.StepRange{Limit: n})
		require.NoError(t, err)
		require.Len(t, left, n-int(res.Steps))
		require.Equal(t, seqs[res.Steps], left[0].Seq, "the oldest went")

		// The used size went down with the steps: the next passes find it under the bound
		// and delete nothing (a size that never shrank would delete again on every pass).
		for pass := range 3 {
			again, err := db.Prune(bg(), now, policy)
			require.NoError(t, err)
			require.Zero(t, again.Steps, "pass %d after the size prune", pass+2)
			require.LessOrEqual(t, again.UsedBefore, bound)
		}
	}},
	{"SeqsNeverRepeatAfterPruningTheNewest", func(t *testing.T, db storage.Backend) {
		var last int64
		for i := range 3 {
			last = save(t, db, step("s", "allow", time.Duration(i))).Seq
		}
		res, err := db.Prune(bg(), t0.Add(time.Hour), record.Retention{MaxAge: time.Minute})
		require.NoError(t, err)
		require.Equal(t, int64(3), res.Steps)
		next := save(t, db, step("s", "allow", 2*time.Hour))
		require.Greater(t, next.Seq, last)
		ev := &record.Event{Type: "x"}
		require.NoError(t, db.AppendEvent(bg(), ev))
		require.Greater(t, ev.Seq, next.Seq)
		evs, err := db.EventsAfter(bg(), last, 10)
		require.NoError(t, err)
		// (A backend may log the pruning as an event of its own.)
		require.Contains(t, eventSeqs(evs), next.Seq, "a reader resuming after the pruned seq sees the new step")
		require.Contains(t, eventSeqs(evs), ev.Seq)
	}},
	{"RunRetention", func(t *testing.T, db storage.Backend) {
		// Disabled: returns at once.
		db.RunRetention(bg(), record.Retention{}, nil)
		save(t, db, step("s", "allow", 0))
		ctx, cancel := context.WithCancel(bg())
		done := make(chan struct{})
		go func() {
			defer close(done)
			db.RunRetention(ctx, record.Retention{MaxAge: time.Hour, Interval: time.Hour}, nil)
		}()
		require.Eventually(t, func() bool {
			steps, err := db.StepsIn(bg(), record.StepRange{Limit: 10})
			return err == nil && len(steps) == 0
		}, 30*time.Second, 10*time.Millisecond, "the first pass runs at once")
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("RunRetention did not return when its context ended")
		}
	}},
	{"ExportStepsThenAudit", func(t *testing.T, db storage.Backend) {
		a := save(t, db, step("a", "allow", 0))
		b := save(t, db, step("b", "deny", time.Hour))
		_, err := db.AppendAudit(bg(), &record.AuditEntry{Type: "x.y", SessionID: "a", At: t0})
		require.NoError(t, err)
		_, err = db.AppendAudit(bg(), &record.AuditEntry{Type: "x.z", SessionID: "b", At: t0.Add(2 * time.Hour)})
		require.NoError(t, err)
		export := func(o record.ExportOptions) ([]map[string]any, record.ExportResult) {
			var buf bytes.Buffer
			res, err := db.Export(bg(), &buf, o)
			require.NoError(t, err)
			var out []map[string]any
			sc := bufio.NewScanner(&buf)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var m map[string]any
				require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
				out = append(out, m)
			}
			return out, res
		}
		lines, res := export(record.ExportOptions{Steps: true, Audit: true})
		require.Equal(t, record.ExportResult{Steps: 2, Audit: 2}, res)
		require.Len(t, lines, 4)
		require.Equal(t, []any{"step", "step", "audit", "audit"}, []any{lines[0]["record"], lines[1]["record"], lines[2]["record"], lines[3]["record"]})
		require.Equal(t, float64(a.Seq), lines[0]["seq"])
		require.Equal(t, float64(b.Seq), lines[1]["seq"])
		stepJSONMap := func(seq int64) map[string]any {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(stepJSON(t, db, seq)), &m))
			m["record"] = "step"
			return m
		}
		require.Equal(t, stepJSONMap(a.Seq), lines[0], "a line is the API's record")

		_, res = export(record.ExportOptions{Steps: true, Audit: true, Since: t0.Add(time.Minute)})
		require.Equal(t, record.ExportResult{Steps: 1, Audit: 1}, res)
		_, res = export(record.ExportOptions{Steps: true, Audit: true, SessionID: "a"})
		require.Equal(t, record.ExportResult{Steps: 1, Audit: 1}, res)
		lines, res = export(record.ExportOptions{Audit: true})
		require.Equal(t, record.ExportResult{Audit: 2}, res)
		require.Equal(t, "audit", lines[0]["record"])
	}},
	{"WritesAfterCloseFail", func(t *testing.T, db storage.Backend) {
		rec := save(t, db, step("s", "allow", 0))
		require.NoError(t, db.Close())
		require.NoError(t, db.Close(), "closing twice is harmless")
		require.Error(t, db.SaveStep(bg(), step("s", "allow", 0)))
		require.Error(t, db.AppendEvent(bg(), &record.Event{Type: "x"}))
		_, err := db.AppendAudit(bg(), &record.AuditEntry{Type: "x.y"})
		require.Error(t, err)
		require.Positive(t, rec.Seq)
	}},
	{"DescribeAndIngestStats", func(t *testing.T, db storage.Backend) {
		require.NotEmpty(t, db.Describe())
		save(t, db, step("s", "allow", 0))
		st := db.IngestStats()
		require.GreaterOrEqual(t, st.PendingSteps, int64(0))
	}},
}
