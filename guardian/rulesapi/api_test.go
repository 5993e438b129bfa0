package rulesapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

func TestCRUDVersionsRestore(t *testing.T) {
	f := newFixture(t)

	var created ruleJSON
	f.call("POST", "/api/rules", denyTool("no-email", "send_email"), http.StatusCreated, &created)
	require.Equal(t, 1, created.Version)
	require.Equal(t, t0, created.UpdatedAt)
	require.True(t, created.Enabled)

	var e apiErr
	f.call("POST", "/api/rules", denyTool("no-email", "other"), http.StatusConflict, &e)
	require.Equal(t, "conflict", e.Error.Code)

	var got ruleJSON
	f.call("GET", "/api/rules/no-email", nil, http.StatusOK, &got)
	require.Equal(t, created.Rule, got.Rule)

	upd := denyTool("no-email", "send_mail")
	upd.Version = 1
	var updated ruleJSON
	f.call("PUT", "/api/rules/no-email", upd, http.StatusOK, &updated)
	require.Equal(t, 2, updated.Version)
	require.Equal(t, `tool == "send_mail"`, updated.When)

	// An editor holding version 1 no longer may save over version 2.
	stale := denyTool("no-email", "fax")
	stale.Version = 1
	f.call("PUT", "/api/rules/no-email", stale, http.StatusConflict, &e)
	require.Contains(t, e.Error.Message, "now version 2")

	// Saving identical content creates no version.
	upd.Version = 0
	f.call("PUT", "/api/rules/no-email", upd, http.StatusOK, &updated)
	require.Equal(t, 2, updated.Version)

	f.call("PUT", "/api/rules/nobody", denyTool("nobody", "x"), http.StatusNotFound, &e)
	require.Equal(t, "not_found", e.Error.Code)
	f.call("PUT", "/api/rules/no-email", denyTool("other-id", "x"), http.StatusBadRequest, &e)
	require.Equal(t, "invalid_request", e.Error.Code)

	var diff Diff
	f.call("GET", "/api/rules/no-email/diff", nil, http.StatusOK, &diff)
	require.Equal(t, 1, diff.From)
	require.Equal(t, 2, diff.To)
	fields := []string{}
	for _, c := range diff.Changes {
		fields = append(fields, c.Field)
	}
	require.Equal(t, []string{"name", "when", "reasonCode"}, fields)
	require.JSONEq(t, `"tool == \"send_email\""`, string(diff.Changes[1].From))
	require.JSONEq(t, `"tool == \"send_mail\""`, string(diff.Changes[1].To))
	require.Contains(t, diff.Unified, "-    when: tool == \"send_email\"")
	require.Contains(t, diff.Unified, "+    when: tool == \"send_mail\"")
	require.Contains(t, diff.Unified, "     action: deny")

	var restored ruleJSON
	f.call("POST", "/api/rules/no-email/versions/1/restore", nil, http.StatusOK, &restored)
	require.Equal(t, 3, restored.Version)
	require.Equal(t, `tool == "send_email"`, restored.When)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("send_email")).Action)

	var del struct {
		RuleID  string `json:"ruleId"`
		Version int    `json:"version"`
	}
	f.call("DELETE", "/api/rules/no-email", nil, http.StatusOK, &del)
	require.Equal(t, 4, del.Version)
	f.call("GET", "/api/rules/no-email", nil, http.StatusNotFound, &e)
	f.call("DELETE", "/api/rules/no-email", nil, http.StatusNotFound, &e)
	require.Empty(t, f.svc.Engine().Rules())
	require.Equal(t, rules.ActionAllow, f.svc.Engine().Evaluate(toolEnv("send_email")).Action)

	// Deleted rules keep their history, and a restore brings them back.
	var vs struct {
		Versions []record.RuleVersion `json:"versions"`
	}
	f.call("GET", "/api/rules/no-email/versions", nil, http.StatusOK, &vs)
	require.Len(t, vs.Versions, 4)
	ops := []string{}
	for _, v := range vs.Versions {
		ops = append(ops, v.Op)
		require.Equal(t, "dana", v.Operator)
	}
	require.Equal(t, []string{"delete", "restore", "update", "create"}, ops)

	var v2 record.RuleVersion
	f.call("GET", "/api/rules/no-email/versions/2", nil, http.StatusOK, &v2)
	require.Equal(t, `tool == "send_mail"`, v2.Rule.When)
	f.call("GET", "/api/rules/no-email/versions/9", nil, http.StatusNotFound, &e)
	f.call("GET", "/api/rules/no-email/versions/zero", nil, http.StatusBadRequest, &e)

	f.call("POST", "/api/rules/no-email/versions/2/restore", nil, http.StatusOK, &restored)
	require.Equal(t, 5, restored.Version)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("send_mail")).Action)

	var list struct {
		Rules []ruleJSON `json:"rules"`
	}
	f.call("GET", "/api/rules", nil, http.StatusOK, &list)
	require.Len(t, list.Rules, 1)
	require.Equal(t, 5, list.Rules[0].Version)
}

// TestRestoreUnchangedCreatesNoVersion: restoring the version the rule already is adds no
// version (it used to add one with an empty diff), as saving an unchanged rule adds none.
func TestRestoreUnchangedCreatesNoVersion(t *testing.T) {
	f := newFixture(t)
	f.call("POST", "/api/rules", denyTool("r", "x"), http.StatusCreated, nil)
	versions := func() []int {
		var vs struct {
			Versions []record.RuleVersion `json:"versions"`
		}
		f.call("GET", "/api/rules/r/versions", nil, http.StatusOK, &vs)
		out := []int{}
		for _, v := range vs.Versions {
			out = append(out, v.Version)
		}
		return out
	}
	restore := func(n string) ruleJSON {
		var r ruleJSON
		f.call("POST", "/api/rules/r/versions/"+n+"/restore", nil, http.StatusOK, &r)
		return r
	}
	events := len(f.published())

	r := restore("1")
	require.Equal(t, 1, r.Version, "answered with the rule as it is")
	require.Equal(t, t0, r.UpdatedAt)
	require.Equal(t, []int{1}, versions())
	require.Len(t, f.published(), events, "no rule.changed either")

	f.call("PUT", "/api/rules/r", denyTool("r", "y"), http.StatusOK, nil)
	require.Equal(t, 2, restore("2").Version)
	// A restore that changes the rule still saves a copy as the newest version; restoring
	// that content again (from either version) changes nothing.
	require.Equal(t, 3, restore("1").Version)
	require.Equal(t, 3, restore("1").Version)
	require.Equal(t, 3, restore("3").Version)
	require.Equal(t, []int{3, 2, 1}, versions())

	// Enabled is content: restoring the enabled version of a disabled rule is a change.
	f.call("POST", "/api/rules/r/disable", nil, http.StatusOK, nil)
	require.True(t, restore("3").Enabled)
	require.Equal(t, []int{5, 4, 3, 2, 1}, versions())

	// A deleted rule is not current, so restoring its last version brings it back.
	f.call("DELETE", "/api/rules/r", nil, http.StatusOK, nil)
	require.Equal(t, 7, restore("5").Version)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("x")).Action)
}

func TestInvalidRuleIsRefused(t *testing.T) {
	f := newFixture(t)
	f.call("POST", "/api/rules", denyTool("keep", "rm"), http.StatusCreated, nil)
	before := f.svc.Engine().Rules()
	eventsBefore := len(f.published())

	bad := denyTool("bad", "x")
	bad.When = "tool == \n  && inputs.x"
	var e apiErr
	f.call("POST", "/api/rules", bad, http.StatusBadRequest, &e)
	require.Equal(t, "invalid_rule", e.Error.Code)
	require.NotEmpty(t, e.Error.Details)
	d := e.Error.Details[0]
	require.Equal(t, "when", d.Field)
	require.Equal(t, "bad", d.RuleID)
	require.Equal(t, 2, d.Line)
	require.Positive(t, d.Column)
	require.Contains(t, e.Error.Message, "when")

	upd := denyTool("keep", "rm")
	upd.Action = "explode"
	f.call("PUT", "/api/rules/keep", upd, http.StatusBadRequest, &e)
	require.Equal(t, "action", e.Error.Details[0].Field)

	reserved := denyTool("export", "x")
	f.call("POST", "/api/rules", reserved, http.StatusBadRequest, &e)
	require.Contains(t, e.Error.Details[0].Message, "reserved")

	f.call("POST", "/api/rules", `{"id":`, http.StatusBadRequest, &e)
	require.Equal(t, "invalid_request", e.Error.Code)

	// Neither the engine nor the store changed, and nothing was published.
	require.Equal(t, before, f.svc.Engine().Rules())
	_, err := f.db.RuleVersions(context.Background(), "bad")
	require.ErrorIs(t, err, record.ErrNotFound)
	got, err := f.db.GetRule(context.Background(), "keep")
	require.NoError(t, err)
	require.Equal(t, 1, got.Version)
	require.Len(t, f.published(), eventsBefore)
}

func TestValidateEndpoint(t *testing.T) {
	f := newFixture(t)
	type result struct {
		OK     bool               `json:"ok"`
		Errors []rules.Diagnostic `json:"errors"`
	}
	tests := []struct {
		name   string
		body   any
		ok     bool
		field  string
		line   int
		column int
	}{
		{name: "good when", body: map[string]any{"when": `tool == "x"`}, ok: true},
		{name: "unknown name", body: map[string]any{"when": `tool == "x" && nope`}, field: "when", line: 1, column: 16},
		{name: "second line", body: map[string]any{"when": "tool == \"x\"\n  || nope"}, field: "when", line: 2, column: 6},
		{name: "good rule", body: map[string]any{"rule": denyTool("a", "x")}, ok: true},
		{name: "bad message", body: map[string]any{"rule": rules.Rule{ID: "a", When: "true", Action: "deny", Message: "{{ nope }}"}}, field: "message"},
		{name: "duplicate ids", body: map[string]any{"rules": []rules.Rule{denyTool("a", "x"), denyTool("a", "y")}}, field: "id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var res result
			f.call("POST", "/api/rules/validate", tc.body, http.StatusOK, &res)
			require.Equal(t, tc.ok, res.OK, "%+v", res.Errors)
			if tc.ok {
				require.Empty(t, res.Errors)
				return
			}
			require.NotEmpty(t, res.Errors)
			require.Equal(t, tc.field, res.Errors[0].Field)
			if tc.line > 0 {
				require.Equal(t, tc.line, res.Errors[0].Line, "%+v", res.Errors[0])
				require.Equal(t, tc.column, res.Errors[0].Column, "%+v", res.Errors[0])
			}
		})
	}
	var e apiErr
	f.call("POST", "/api/rules/validate", map[string]any{}, http.StatusBadRequest, &e)
}

func TestEnableDisable(t *testing.T) {
	f := newFixture(t)
	f.call("POST", "/api/rules", denyTool("no-rm", "rm"), http.StatusCreated, nil)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("rm")).Action)

	var r ruleJSON
	f.call("POST", "/api/rules/no-rm/disable", nil, http.StatusOK, &r)
	require.False(t, r.Enabled)
	require.Equal(t, 2, r.Version)
	require.Equal(t, rules.ActionAllow, f.svc.Engine().Evaluate(toolEnv("rm")).Action)

	f.call("POST", "/api/rules/no-rm/disable", nil, http.StatusOK, &r)
	require.Equal(t, 2, r.Version, "disabling a disabled rule changes nothing")

	f.call("POST", "/api/rules/no-rm/enable", nil, http.StatusOK, &r)
	require.True(t, r.Enabled)
	require.Equal(t, 3, r.Version)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("rm")).Action)

	var e apiErr
	f.call("POST", "/api/rules/ghost/enable", nil, http.StatusNotFound, &e)

	vs, err := f.db.RuleVersions(context.Background(), "no-rm")
	require.NoError(t, err)
	require.Equal(t, "enable", vs[0].Op)
	require.Equal(t, "disable", vs[1].Op)
}

func TestRuleChangedEvents(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.call("POST", "/api/rules", denyTool("a", "x"), http.StatusCreated, nil)
	f.call("POST", "/api/rules/a/disable", nil, http.StatusOK, nil)
	f.call("DELETE", "/api/rules/a", nil, http.StatusOK, nil)
	f.call("POST", "/api/rules/a/versions/1/restore", nil, http.StatusOK, nil)
	f.call("POST", "/api/rules/import?mode=merge", "rules:\n  - {id: b, when: 'true', action: allow}\n", http.StatusOK, nil)

	all := f.published()
	allStored, err := f.db.EventsAfter(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, allStored, len(all))
	var pub, stored, audits []record.Event
	for i, ev := range all {
		require.Equal(t, allStored[i].Seq, ev.Seq, "published with the stored seq")
		if ev.Type == record.EventAudit {
			audits = append(audits, ev)
			continue
		}
		pub, stored = append(pub, ev), append(stored, allStored[i])
	}
	require.Len(t, pub, 5)

	// Every change is in the audit log, after its rule.changed event, with its diff.
	wantAudit := []struct{ typ, diff string }{
		{"rule.create", `[{"op":"replace","path":"","value":{"action":"deny","enabled":true,"id":"a","message":"{{tool}} is not allowed","mode":"enforce","name":"no x","priority":0,"reasonCode":"NO_x","when":"tool == \"x\""},"old":null}]`},
		{"rule.disable", `[{"op":"replace","path":"/enabled","value":false,"old":true}]`},
		{"rule.delete", `[{"op":"replace","path":"","value":null,"old":{"action":"deny","enabled":false,"id":"a","message":"{{tool}} is not allowed","mode":"enforce","name":"no x","priority":0,"reasonCode":"NO_x","when":"tool == \"x\""}}]`},
		{"rule.restore", `[{"op":"replace","path":"","value":{"action":"deny","enabled":true,"id":"a","message":"{{tool}} is not allowed","mode":"enforce","name":"no x","priority":0,"reasonCode":"NO_x","when":"tool == \"x\""},"old":null}]`},
		{"rule.import", `[{"op":"replace","path":"","value":{"action":"allow","enabled":true,"id":"b","mode":"enforce","priority":0,"when":"true"},"old":null}]`},
	}
	require.Len(t, audits, len(wantAudit))
	for i, ev := range audits {
		var e record.AuditEntry
		require.NoError(t, json.Unmarshal(ev.Payload, &e))
		require.Equal(t, wantAudit[i].typ, e.Type)
		require.Equal(t, "dana", e.Operator)
		require.JSONEq(t, wantAudit[i].diff, string(e.Diff), e.Type)
		require.Greater(t, ev.Seq, pub[i].Seq)
	}
	entries, err := f.db.ListAudit(ctx, record.AuditQuery{Type: "rule"})
	require.NoError(t, err)
	require.Len(t, entries, 5)

	wantOps := []string{"create", "disable", "delete", "restore", "reload"}
	for i, ev := range pub {
		require.Equal(t, record.EventRuleChanged, ev.Type)
		require.Equal(t, stored[i].Seq, ev.Seq, "published with the stored seq")
		require.JSONEq(t, string(stored[i].Payload), string(ev.Payload))
		if i > 0 {
			require.Greater(t, ev.Seq, pub[i-1].Seq)
		}
		var p record.RuleChangedPayload
		require.NoError(t, json.Unmarshal(ev.Payload, &p))
		require.Equal(t, wantOps[i], p.Op)
		switch p.Op {
		case "delete":
			require.Nil(t, p.Rule)
			require.Equal(t, "a", p.RuleID)
		case "reload":
			require.Nil(t, p.Rule)
			require.Equal(t, []string{"b"}, p.RuleIDs)
		default:
			require.NotNil(t, p.Rule)
			require.Equal(t, "a", p.Rule.ID)
			require.Equal(t, i+1, p.Rule.Version)
		}
	}
}

func TestListShowsStatsAndExpiry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	past := t0.Add(-time.Hour)
	future := t0.Add(time.Hour)

	gone := denyTool("remembered-old", "wire")
	gone.ExpiresAt = &past
	live := denyTool("remembered-new", "fax")
	live.ExpiresAt = &future
	require.NoError(t, f.svc.Upsert(ctx, gone, "hold:h1"))
	require.NoError(t, f.svc.Upsert(ctx, live, "hold:h2"))
	require.NoError(t, f.svc.Upsert(ctx, live, "hold:h2"), "an identical upsert is a no-op")
	live.Message = "changed"
	require.NoError(t, f.svc.Upsert(ctx, live, "hold:h3"))

	var inv *InvalidRulesError
	require.ErrorAs(t, f.svc.Upsert(ctx, rules.Rule{ID: "x", When: "(", Action: "deny"}, "hold"), &inv)

	// The expired rule is loaded but not evaluated.
	require.Equal(t, rules.ActionAllow, f.svc.Engine().Evaluate(toolEnv("wire")).Action)
	require.Equal(t, rules.ActionDeny, f.svc.Engine().Evaluate(toolEnv("fax")).Action)
	require.Equal(t, rules.ActionAllow, f.svc.Engine().Evaluate(toolEnv("mail")).Action)

	var list struct {
		Rules []ruleJSON `json:"rules"`
	}
	f.call("GET", "/api/rules", nil, http.StatusOK, &list)
	require.Len(t, list.Rules, 2)
	byID := map[string]ruleJSON{}
	for _, r := range list.Rules {
		byID[r.ID] = r
	}
	require.True(t, byID["remembered-old"].Expired, "%+v", byID["remembered-old"])
	require.False(t, byID["remembered-new"].Expired)
	require.Equal(t, 2, byID["remembered-new"].Version)
	require.Equal(t, int64(3), byID["remembered-new"].Stats.Evaluations)
	require.Equal(t, int64(1), byID["remembered-new"].Stats.Matches)
	require.Zero(t, byID["remembered-old"].Stats.Evaluations)

	raw := f.call("GET", "/api/rules/remembered-new", nil, http.StatusOK, nil)
	for _, k := range []string{`"stats":{`, `"evaluations":3`, `"matches":1`, `"errors":0`, `"avgMicros":`, `"expired":false`} {
		require.Contains(t, string(raw), k)
	}
	vs, err := f.db.RuleVersions(ctx, "remembered-new")
	require.NoError(t, err)
	require.Equal(t, "hold:h3", vs[0].Operator)
	require.Equal(t, "update", vs[0].Op)
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	f := newFixture(t)
	code, _ := f.do("PATCH", "/api/rules/a", "{}")
	require.Equal(t, http.StatusMethodNotAllowed, code)
	var e apiErr
	f.call("GET", "/api/rules/a/diff?from=x", nil, http.StatusBadRequest, &e)
	require.True(t, strings.Contains(e.Error.Message, "from"))
	f.call("GET", "/api/rules/a/diff", nil, http.StatusNotFound, &e)
	huge := `{"id":"a","when":"true","action":"deny","description":"` + strings.Repeat("x", maxBody) + `"}`
	f.call("POST", "/api/rules", huge, http.StatusRequestEntityTooLarge, &e)
	require.Equal(t, "too_large", e.Error.Code)
}
