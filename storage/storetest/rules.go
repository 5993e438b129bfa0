package storetest

import (
	"encoding/json"
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
