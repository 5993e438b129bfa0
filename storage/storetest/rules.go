package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

func rule(id, when string) rules.Rule {
	return rules.Rule{ID: id, Name: "rule " + id, When: when, Action: rules.ActionDeny,
		Mode: rules.ModeEnforce, Enabled: true, Message: "no", ReasonCode: "RC_" + id}
}

var ruleCases = []testCase{
	{"RuleSaveVersionsEventsAndAudit", func(t *testing.T, db storage.Backend) {
		exp := t0.Add(time.Hour).In(time.FixedZone("X", 3600))
		r := rule("r1", "true")
		r.ExpiresAt = &exp
		saved, events, err := db.ApplyRules(bg(), record.RuleBatch{Operator: "ann", At: t0,
			Changes: []record.RuleChange{{Op: record.RuleOpCreate, Rule: r}}})
		require.NoError(t, err)
		require.Len(t, saved, 1)
		require.Equal(t, 1, saved[0].Version)
		require.Equal(t, t0, saved[0].UpdatedAt)
		require.Equal(t, t0.Add(time.Hour), *saved[0].ExpiresAt)
		require.Len(t, events, 2, "a rule.changed event and an audit entry")
		require.Equal(t, record.EventRuleChanged, events[0].Type)
		require.Equal(t, record.EventAudit, events[1].Type)
		var p record.RuleChangedPayload
		require.NoError(t, json.Unmarshal(events[0].Payload, &p))
		require.Equal(t, record.RuleOpCreate, p.Op)
		require.Equal(t, "r1", p.RuleID)
		require.NotNil(t, p.Rule)

		got, err := db.GetRule(bg(), "r1")
		require.NoError(t, err)
		require.Equal(t, saved[0], got)

		r.When = "false"
		saved, _, err = db.ApplyRules(bg(), record.RuleBatch{Operator: "bob", At: t0.Add(time.Second),
			Changes: []record.RuleChange{{Op: record.RuleOpUpdate, Rule: r}}})
		require.NoError(t, err)
		require.Equal(t, 2, saved[0].Version)
		versions, err := db.RuleVersions(bg(), "r1")
		require.NoError(t, err)
		require.Len(t, versions, 2)
		require.Equal(t, []int{2, 1}, []int{versions[0].Version, versions[1].Version}, "newest first")
		require.Equal(t, "false", versions[0].Rule.When)
		require.Equal(t, "bob", versions[0].Operator)
		require.Equal(t, record.RuleOpUpdate, versions[0].Op)
		v1, err := db.RuleVersion(bg(), "r1", 1)
		require.NoError(t, err)
		require.Equal(t, "true", v1.Rule.When)
		require.Equal(t, t0, v1.SavedAt)
		_, err = db.RuleVersion(bg(), "r1", 3)
		require.ErrorIs(t, err, record.ErrNotFound)
		entries, err := db.ListAudit(bg(), record.AuditQuery{Type: "rule"})
		require.NoError(t, err)
		require.Len(t, entries, 2)
		require.Equal(t, "rule.update", entries[0].Type)
		require.Equal(t, "r1", entries[0].RuleID)
		require.JSONEq(t, `{"version":2}`, string(entries[0].Detail))
		require.NotEmpty(t, entries[0].Diff)

		_, err = db.GetRule(bg(), "missing")
		require.ErrorIs(t, err, record.ErrNotFound)
		_, err = db.RuleVersions(bg(), "missing")
		require.ErrorIs(t, err, record.ErrNotFound)
	}},
	{"RuleDeleteKeepsHistory", func(t *testing.T, db storage.Backend) {
		_, _, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpCreate, Rule: rule("r", "true")}}})
		require.NoError(t, err)
		saved, events, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpDelete, Rule: rules.Rule{ID: "r"}}}})
		require.NoError(t, err)
		require.Equal(t, 2, saved[0].Version)
		require.Equal(t, "true", saved[0].When, "a delete returns the rule as it was")
		var p record.RuleChangedPayload
		require.NoError(t, json.Unmarshal(events[0].Payload, &p))
		require.Nil(t, p.Rule)
		_, err = db.GetRule(bg(), "r")
		require.ErrorIs(t, err, record.ErrNotFound)
		list, err := db.ListRules(bg())
		require.NoError(t, err)
		require.Empty(t, list)
		versions, err := db.RuleVersions(bg(), "r")
		require.NoError(t, err)
		require.Len(t, versions, 2)
		// Created again, the numbering continues.
		saved, _, err = db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpRestore, Rule: versions[1].Rule}}})
		require.NoError(t, err)
		require.Equal(t, 3, saved[0].Version)
	}},
	{"RuleBatchAllOrNothingAndReload", func(t *testing.T, db storage.Backend) {
		_, _, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpCreate, Rule: rule("old", "true")}}})
		require.NoError(t, err)
		before := allEvents(t, db)
		_, _, err = db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{
			{Op: record.RuleOpCreate, Rule: rule("new", "true")},
			{Op: record.RuleOpDelete, Rule: rules.Rule{ID: "old"}},
			{Op: record.RuleOpDelete, Rule: rules.Rule{ID: "nope"}},
		}})
		require.ErrorIs(t, err, record.ErrNotFound)
		list, err := db.ListRules(bg())
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "old", list[0].ID)
		require.Equal(t, before, allEvents(t, db), "a failed batch writes no event")

		for name, b := range map[string]record.RuleBatch{
			"empty": {},
			"no id": {Changes: []record.RuleChange{{Op: record.RuleOpCreate}}},
			"no op": {Changes: []record.RuleChange{{Rule: rule("x", "true")}}},
		} {
			_, _, err := db.ApplyRules(bg(), b)
			require.Error(t, err, name)
		}

		saved, events, err := db.ApplyRules(bg(), record.RuleBatch{EventOp: record.RuleOpReload, Changes: []record.RuleChange{
			{Op: record.RuleOpImport, Rule: rule("b", "true")},
			{Op: record.RuleOpImport, Rule: rule("a", "true")},
		}})
		require.NoError(t, err)
		require.Len(t, saved, 2)
		require.Len(t, events, 3, "one reload event, then an audit entry per change")
		var p record.RuleChangedPayload
		require.NoError(t, json.Unmarshal(events[0].Payload, &p))
		require.Equal(t, record.RuleOpReload, p.Op)
		require.Equal(t, []string{"b", "a"}, p.RuleIDs)
		requireIncreasing(t, eventSeqs(events))
		list, err = db.ListRules(bg())
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "old"}, []string{list[0].ID, list[1].ID, list[2].ID}, "by id")
	}},
}

// ruleRaceWriters is how many writers race in the concurrent rule cases: enough that, on a
// backend with a connection pool, several transactions are in flight at once, as they are
// when replicas sharing one database take the same request.
const ruleRaceWriters = 8

// race runs fn once per writer, all released at once, and returns their errors in writer
// order.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// ruleAudits is the audit log of rule changes, newest first.
func ruleAudits(t testing.TB, db storage.Backend) []record.AuditEntry {
	t.Helper()
	entries, err := db.ListAudit(bg(), record.AuditQuery{Type: "rule", Limit: 1000})
	require.NoError(t, err)
	return entries
}

func versionOps(t testing.TB, db storage.Backend, id string) []string {
	t.Helper()
	vs, err := db.RuleVersions(bg(), id)
	require.NoError(t, err)
	ops := []string{}
	for _, v := range vs {
		ops = append(ops, v.Op)
	}
	return ops
}

var ruleConditionCases = []testCase{
	// Two operators creating one id at once (two replicas, or a CLI beside the guardian):
	// one create wins and the others are refused, instead of each "creating" the rule over
	// the last.
	{"RuleConcurrentCreateOneWins", func(t *testing.T, db storage.Backend) {
		errs := race(ruleRaceWriters, func(i int) error {
			r := rule("race", "true")
			r.Name = fmt.Sprintf("by writer %d", i)
			_, _, err := db.ApplyRules(bg(), record.RuleBatch{Operator: fmt.Sprintf("op%d", i), At: t0,
				Changes: []record.RuleChange{{Op: record.RuleOpCreate, Rule: r}}})
			return err
		})
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "writers %d and %d both created the rule", winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, record.ErrExists, "writer %d", i)
		}
		require.NotEqual(t, -1, winner, "no create succeeded: %v", errs)
		require.Equal(t, []string{record.RuleOpCreate}, versionOps(t, db, "race"))
		got, err := db.GetRule(bg(), "race")
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("by writer %d", winner), got.Name, "the winner's rule is stored")
		require.Equal(t, 1, got.Version)
		require.Len(t, ruleAudits(t, db), 1, "a refused create audits nothing")

		// A create refused in a batch fails the batch: nothing of it is stored.
		before := allEvents(t, db)
		_, _, err = db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{
			{Op: record.RuleOpCreate, Rule: rule("fresh", "true")},
			{Op: record.RuleOpCreate, Rule: rule("race", "false")},
		}})
		require.ErrorIs(t, err, record.ErrExists)
		_, err = db.GetRule(bg(), "fresh")
		require.ErrorIs(t, err, record.ErrNotFound)
		require.Equal(t, before, allEvents(t, db))

		// A deleted rule's id can be created again; its numbering carries on.
		_, _, err = db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpDelete, Rule: rules.Rule{ID: "race"}}}})
		require.NoError(t, err)
		saved, _, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpCreate, Rule: rule("race", "true")}}})
		require.NoError(t, err)
		require.Equal(t, 3, saved[0].Version)
	}},
	// Editors that all read version 1 save at once: the first save makes version 2 and the
	// others, made from a version that is no longer the stored one, are refused.
	{"RuleConcurrentUpdateSameVersionOneWins", func(t *testing.T, db storage.Backend) {
		_, _, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpCreate, Rule: rule("race", "true")}}})
		require.NoError(t, err)
		errs := race(ruleRaceWriters, func(i int) error {
			r := rule("race", fmt.Sprintf("%d == %d", i, i))
			r.Version = 1
			_, _, err := db.ApplyRules(bg(), record.RuleBatch{Operator: fmt.Sprintf("op%d", i), At: t0,
				Changes: []record.RuleChange{{Op: record.RuleOpUpdate, Rule: r}}})
			return err
		})
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "writers %d and %d both updated version 1", winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, storage.ErrStaleRule, "writer %d", i)
			var stale *storage.StaleRuleError
			require.ErrorAs(t, err, &stale)
			require.Equal(t, storage.StaleRuleError{ID: "race", Stored: 2, Expected: 1}, *stale)
		}
		require.NotEqual(t, -1, winner, "no update succeeded: %v", errs)
		require.Equal(t, []string{record.RuleOpUpdate, record.RuleOpCreate}, versionOps(t, db, "race"))
		got, err := db.GetRule(bg(), "race")
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%d == %d", winner, winner), got.When, "the winner's edit is stored")
		require.Len(t, ruleAudits(t, db), 2, "a refused update audits nothing")

		// Made from the stored version, the next edit succeeds; without a version it is not
		// checked.
		r := rule("race", "false")
		r.Version = 2
		saved, _, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpUpdate, Rule: r}}})
		require.NoError(t, err)
		require.Equal(t, 3, saved[0].Version)
		r.Version, r.When = 0, "1 == 1"
		saved, _, err = db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpUpdate, Rule: r}}})
		require.NoError(t, err)
		require.Equal(t, 4, saved[0].Version)
		// Enable and disable are edits of the stored rule too.
		r.Version, r.Enabled = 3, false
		_, _, err = db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpDisable, Rule: r}}})
		require.ErrorIs(t, err, storage.ErrStaleRule)
	}},
	// Replicas started together with one rules file import it at once: the rules are
	// stored once, and an import that finds them already stored writes nothing.
	{"RuleIdenticalImportStoresOneVersion", func(t *testing.T, db storage.Backend) {
		file := []record.RuleChange{
			{Op: record.RuleOpImport, Rule: rule("a", "true")},
			{Op: record.RuleOpImport, Rule: rule("b", "false")},
		}
		var mu sync.Mutex
		var events []record.Event
		errs := race(ruleRaceWriters, func(i int) error {
			_, evs, err := db.ApplyRules(bg(), record.RuleBatch{Operator: "rules-file", EventOp: record.RuleOpReload,
				At: t0.Add(time.Duration(i) * time.Second), Changes: file})
			mu.Lock()
			events = append(events, evs...)
			mu.Unlock()
			return err
		})
		for i, err := range errs {
			require.NoError(t, err, "writer %d", i)
		}
		for _, id := range []string{"a", "b"} {
			require.Equal(t, []string{record.RuleOpImport}, versionOps(t, db, id), "rule %s", id)
		}
		audits := ruleAudits(t, db)
		require.Len(t, audits, 2, "one audit entry per rule stored, none with an empty diff")
		for _, a := range audits {
			require.NotEqual(t, "[]", string(a.Diff))
		}
		require.Len(t, events, 3, "one reload event and two audit entries in all")
		require.Equal(t, allEvents(t, db), events)

		// Imported again, nothing is stored; each result is the rule as stored.
		before := allEvents(t, db)
		saved, evs, err := db.ApplyRules(bg(), record.RuleBatch{EventOp: record.RuleOpReload, Changes: file})
		require.NoError(t, err)
		require.Empty(t, evs)
		require.Equal(t, []int{1, 1}, []int{saved[0].Version, saved[1].Version})
		stored, err := db.GetRule(bg(), "a")
		require.NoError(t, err)
		require.Equal(t, stored, saved[0])
		require.Equal(t, before, allEvents(t, db))

		// Only the rule that differs is stored; the reload event names it alone.
		changed := rule("b", "1 == 1")
		saved, evs, err = db.ApplyRules(bg(), record.RuleBatch{EventOp: record.RuleOpReload, Changes: []record.RuleChange{
			file[0], {Op: record.RuleOpImport, Rule: changed}}})
		require.NoError(t, err)
		require.Equal(t, []int{1, 2}, []int{saved[0].Version, saved[1].Version})
		require.Len(t, evs, 2, "the reload event and one audit entry")
		var p record.RuleChangedPayload
		require.NoError(t, json.Unmarshal(evs[0].Payload, &p))
		require.Equal(t, []string{"b"}, p.RuleIDs)
		require.Equal(t, []string{record.RuleOpImport}, versionOps(t, db, "a"))
	}},
	{"RuleUnchangedSaveAndMissingRule", func(t *testing.T, db storage.Backend) {
		exp := t0.Add(time.Hour).In(time.FixedZone("X", 3600))
		r := rule("r", "true")
		r.ExpiresAt = &exp
		_, _, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: record.RuleOpCreate, Rule: r}}})
		require.NoError(t, err)
		before := allEvents(t, db)
		// The same content, whatever version, time and zone it comes with, is no change.
		same := r
		same.Version, same.UpdatedAt = 1, t0.Add(time.Minute)
		for _, op := range []string{record.RuleOpUpdate, record.RuleOpEnable, record.RuleOpRestore, record.RuleOpImport, record.RuleOpRevert} {
			saved, evs, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: op, Rule: same}}})
			require.NoError(t, err, op)
			require.Empty(t, evs, op)
			require.Equal(t, 1, saved[0].Version, op)
		}
		require.Equal(t, before, allEvents(t, db))
		require.Equal(t, []string{record.RuleOpCreate}, versionOps(t, db, "r"))

		// An edit of a rule that is not there (deleted meanwhile) does not bring it back.
		for _, op := range []string{record.RuleOpUpdate, record.RuleOpEnable, record.RuleOpDisable} {
			_, _, err := db.ApplyRules(bg(), record.RuleBatch{Changes: []record.RuleChange{{Op: op, Rule: rule("gone", "true")}}})
			require.ErrorIs(t, err, record.ErrNotFound, op)
		}
		_, err = db.RuleVersions(bg(), "gone")
		require.ErrorIs(t, err, record.ErrNotFound)
	}},
}
