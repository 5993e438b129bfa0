package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

func testRule(id, when string) rules.Rule {
	return rules.Rule{ID: id, Name: "rule " + id, When: when, Action: rules.ActionDeny,
		Mode: rules.ModeEnforce, Enabled: true, Priority: 10, ReasonCode: "R_" + id}
}

func TestRuleSaveVersionsAndEvents(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)

	r := testRule("no-email", `tool == "send_email"`)
	r.UpdatedAt = t0
	saved, ev, err := db.SaveRule(ctx, r, "dana", record.RuleOpCreate)
	require.NoError(t, err)
	require.Equal(t, 1, saved.Version)
	require.Equal(t, t0, saved.UpdatedAt)
	require.Equal(t, record.EventRuleChanged, ev.Type)
	require.Positive(t, ev.Seq)

	var p record.RuleChangedPayload
	require.NoError(t, json.Unmarshal(ev.Payload, &p))
	require.Equal(t, record.RuleOpCreate, p.Op)
	require.Equal(t, "no-email", p.RuleID)
	require.NotNil(t, p.Rule)
	require.Equal(t, saved, *p.Rule)

	got, err := db.GetRule(ctx, "no-email")
	require.NoError(t, err)
	require.Equal(t, saved, got)

	r.When = `tool == "send_email" && inputs.to != ""`
	r.UpdatedAt = t0.Add(time.Minute)
	saved2, ev2, err := db.SaveRule(ctx, r, "eli", record.RuleOpUpdate)
	require.NoError(t, err)
	require.Equal(t, 2, saved2.Version)
	require.Greater(t, ev2.Seq, ev.Seq)

	vs, err := db.RuleVersions(ctx, "no-email")
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.Equal(t, 2, vs[0].Version, "newest first")
	require.Equal(t, "eli", vs[0].Operator)
	require.Equal(t, record.RuleOpUpdate, vs[0].Op)
	require.Equal(t, saved2, vs[0].Rule)
	require.Equal(t, "dana", vs[1].Operator)
	require.Equal(t, `tool == "send_email"`, vs[1].Rule.When)

	v1, err := db.RuleVersion(ctx, "no-email", 1)
	require.NoError(t, err)
	require.Equal(t, vs[1], v1)
	_, err = db.RuleVersion(ctx, "no-email", 9)
	require.ErrorIs(t, err, record.ErrNotFound)

	// The events are in the shared sequence, readable by the live stream.
	// Each change is followed by its audit entry.
	events, err := db.EventsAfter(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, events, 4)
	require.Equal(t, ev.Seq, events[0].Seq)
	require.Equal(t, record.EventAudit, events[1].Type)
	require.JSONEq(t, string(ev2.Payload), string(events[2].Payload))
	require.Equal(t, record.EventAudit, events[3].Type)
	audit, err := db.ListAudit(ctx, record.AuditQuery{Type: "rule"})
	require.NoError(t, err)
	require.Len(t, audit, 2)
	require.Equal(t, "rule.update", audit[0].Type)
	require.Equal(t, "eli", audit[0].Operator)
	require.JSONEq(t, `[{"op":"replace","path":"/when","value":"tool == \"send_email\" \u0026\u0026 inputs.to != \"\"","old":"tool == \"send_email\""}]`, string(audit[0].Diff))
	require.JSONEq(t, `{"version":2}`, string(audit[0].Detail))
	require.Equal(t, "rule.create", audit[1].Type)
}

func TestRuleDeleteKeepsHistory(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)

	_, _, err := db.SaveRule(ctx, testRule("a", "true"), "dana", record.RuleOpCreate)
	require.NoError(t, err)
	_, _, err = db.SaveRule(ctx, testRule("b", "false"), "dana", record.RuleOpCreate)
	require.NoError(t, err)

	gone, ev, err := db.DeleteRule(ctx, "a", "eli", t0)
	require.NoError(t, err)
	require.Equal(t, 2, gone.Version, "the delete is a version")
	require.Equal(t, "true", gone.When)
	var p record.RuleChangedPayload
	require.NoError(t, json.Unmarshal(ev.Payload, &p))
	require.Equal(t, record.RuleChangedPayload{Op: record.RuleOpDelete, RuleID: "a"}, p)
	require.JSONEq(t, `{"op":"delete","rule":null,"ruleId":"a"}`, string(ev.Payload))

	_, err = db.GetRule(ctx, "a")
	require.ErrorIs(t, err, record.ErrNotFound)
	list, err := db.ListRules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "b", list[0].ID)

	vs, err := db.RuleVersions(ctx, "a")
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.Equal(t, record.RuleOpDelete, vs[0].Op)
	require.Equal(t, "eli", vs[0].Operator)
	require.Equal(t, "true", vs[0].Rule.When)

	// A rule created again under the same id continues the numbering.
	again, _, err := db.SaveRule(ctx, testRule("a", "1 == 1"), "dana", record.RuleOpRestore)
	require.NoError(t, err)
	require.Equal(t, 3, again.Version)

	seqBefore := newestSeq(t, db)
	_, _, err = db.DeleteRule(ctx, "missing", "eli", time.Time{})
	require.ErrorIs(t, err, record.ErrNotFound)
	require.Equal(t, seqBefore, newestSeq(t, db), "a failed delete writes no event")
	_, err = db.RuleVersions(ctx, "missing")
	require.ErrorIs(t, err, record.ErrNotFound)
}

func TestRuleBatchAllOrNothing(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	_, _, err := db.SaveRule(ctx, testRule("old", "true"), "dana", record.RuleOpCreate)
	require.NoError(t, err)
	seqBefore := newestSeq(t, db)

	// The failing delete comes last: the saves before it must be rolled back with it.
	_, _, err = db.ApplyRules(ctx, record.RuleBatch{
		Changes: []record.RuleChange{
			{Op: record.RuleOpImport, Rule: testRule("new", "true")},
			{Op: record.RuleOpDelete, Rule: rules.Rule{ID: "old"}},
			{Op: record.RuleOpDelete, Rule: rules.Rule{ID: "nope"}},
		},
		Operator: "file", EventOp: record.RuleOpReload,
	})
	require.ErrorIs(t, err, record.ErrNotFound)
	require.Equal(t, seqBefore, newestSeq(t, db))
	list, err := db.ListRules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "old", list[0].ID)
	require.Equal(t, 1, countRows(t, db, "rule_versions"))

	saved, events, err := db.ApplyRules(ctx, record.RuleBatch{
		Changes: []record.RuleChange{
			{Op: record.RuleOpImport, Rule: testRule("new", "true")},
			{Op: record.RuleOpDelete, Rule: rules.Rule{ID: "old"}},
		},
		Operator: "file", EventOp: record.RuleOpReload, At: t0,
	})
	require.NoError(t, err)
	require.Len(t, saved, 2)
	require.Equal(t, 1, saved[0].Version)
	require.Equal(t, 2, saved[1].Version)
	require.Len(t, events, 3, "one reload event for the batch, then an audit entry per change")
	require.JSONEq(t, `{"op":"reload","rule":null,"ruleId":"","ruleIds":["new","old"]}`, string(events[0].Payload))
	require.Equal(t, record.EventAudit, events[1].Type)
	require.Equal(t, record.EventAudit, events[2].Type)
	require.Equal(t, t0, events[0].At)

	_, _, err = db.ApplyRules(ctx, record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpCreate}}})
	require.ErrorContains(t, err, "no rule id")
}

func TestRuleRoundTripsEveryField(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	exp := time.Date(2030, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600))
	r := rules.Rule{
		ID: "full", Name: "Full", Description: "every field", When: `tool == "x"`,
		Action: rules.ActionHold, Message: "held {{tool}}", ReasonCode: "FULL", Priority: 7,
		Mode: rules.ModeMonitor, Enabled: false,
		Hold:      &rules.HoldSpec{Timeout: rules.Duration(90 * time.Second), OnTimeout: rules.ActionDeny},
		Modify:    &rules.ModifySpec{Redact: []string{"pii"}, Set: map[string]string{"to": `"x"`}},
		ExpiresAt: &exp,
	}
	saved, _, err := db.SaveRule(ctx, r, "dana", record.RuleOpCreate)
	require.NoError(t, err)
	require.Equal(t, time.UTC, saved.ExpiresAt.Location(), "expiry is stored in UTC")
	require.True(t, exp.Equal(*saved.ExpiresAt))
	got, err := db.GetRule(ctx, "full")
	require.NoError(t, err)
	require.Equal(t, saved, got)
	require.False(t, got.Enabled)
	var enabled bool
	require.NoError(t, db.Reader().QueryRow(`SELECT enabled FROM rules WHERE id = 'full'`).Scan(&enabled))
	require.False(t, enabled)
}

func TestStepWindows(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	var recs []*record.StepRecord
	for i := range 6 {
		sid := "s1"
		if i%2 == 1 {
			sid = "s2"
		}
		recs = append(recs, save(t, db, step(sid, "allow", time.Duration(i)*time.Second)))
	}
	// A rule event in between takes a seq but is not a step.
	_, _, err := db.SaveRule(ctx, testRule("a", "true"), "dana", record.RuleOpCreate)
	require.NoError(t, err)
	recs = append(recs, save(t, db, step("s1", "deny", 10*time.Second)))

	seqs := func(steps []record.StepRecord) []int64 {
		out := []int64{}
		for _, s := range steps {
			out = append(out, s.Seq)
		}
		return out
	}
	window := func(before int64, n int) []record.StepRecord {
		after, last, err := db.StepWindow(ctx, before, n)
		require.NoError(t, err)
		steps, err := db.StepsIn(ctx, record.StepRange{After: after, Before: last + 1, Limit: n})
		require.NoError(t, err)
		return steps
	}
	all := window(0, 1000)
	require.Len(t, all, 7)
	require.Equal(t, recs[0].Seq, all[0].Seq, "oldest first")
	require.Equal(t, *recs[6], all[6])
	require.Equal(t, []int64{recs[4].Seq, recs[5].Seq, recs[6].Seq}, seqs(window(0, 3)))
	require.Equal(t, []int64{recs[1].Seq, recs[2].Seq}, seqs(window(recs[3].Seq, 2)), "the rule event is no step")

	hist, err := db.SessionStepsBefore(ctx, "s1", recs[6].Seq, 0)
	require.NoError(t, err)
	require.Equal(t, []int64{recs[0].Seq, recs[2].Seq, recs[4].Seq}, seqs(hist))
	hist, err = db.SessionStepsBefore(ctx, "s1", 0, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{recs[4].Seq, recs[6].Seq}, seqs(hist))
	hist, err = db.SessionStepsBefore(ctx, "nobody", 0, 10)
	require.NoError(t, err)
	require.Empty(t, hist)
}

func newestSeq(t *testing.T, db *DB) int64 {
	t.Helper()
	seq, err := lastSeq(context.Background(), db.Reader())
	require.NoError(t, err)
	return seq
}

// TestRulePreconditionsBesideHolder races rule writes of the guardian holding the database
// and of a command beside it (another connection, as another process has): the
// preconditions are checked inside each write's transaction, which holds the database's
// write lock from its start, so of a create of one id, or of two edits made from one
// version, exactly one is stored.
func TestRulePreconditionsBesideHolder(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	holder, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, holder.Close()) })
	beside, err := Open(ctx, path, Options{Beside: true, Readers: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, beside.Close()) })
	dbs := []*DB{holder, beside}

	raceBoth := func(change func(i int) record.RuleChange) []error {
		errs := make([]error, len(dbs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, _, errs[i] = db.ApplyRules(ctx, record.RuleBatch{Operator: fmt.Sprintf("op%d", i),
					Changes: []record.RuleChange{change(i)}})
			}()
		}
		close(start)
		wg.Wait()
		return errs
	}
	for round := range 10 {
		id := fmt.Sprintf("race-%d", round)
		errs := raceBoth(func(i int) record.RuleChange {
			r := testRule(id, "true")
			r.Name = fmt.Sprintf("by %d", i)
			return record.RuleChange{Op: record.RuleOpCreate, Rule: r}
		})
		require.Equal(t, 1, countNil(errs), "round %d: exactly one create of %s: %v", round, id, errs)
		for _, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, record.ErrExists)
			}
		}
		errs = raceBoth(func(i int) record.RuleChange {
			r := testRule(id, fmt.Sprintf("%d == %d", i, i))
			r.Version = 1
			return record.RuleChange{Op: record.RuleOpUpdate, Rule: r}
		})
		require.Equal(t, 1, countNil(errs), "round %d: exactly one update of version 1: %v", round, errs)
		for _, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, storage.ErrStaleRule)
			}
		}
		vs, err := holder.RuleVersions(ctx, id)
		require.NoError(t, err)
		require.Equal(t, []string{record.RuleOpUpdate, record.RuleOpCreate}, []string{vs[0].Op, vs[1].Op})
		require.Len(t, vs, 2)
	}
}

func countNil(errs []error) int {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	return n
}
