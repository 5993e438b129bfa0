package rulesapi

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// TestUnknownAndBadFieldsAreRefused: a field rules do not have, or a value of the wrong
// form, is refused naming the field, where it used to be dropped while the rest was saved
// ("mood" left the rule enforcing) or answered as a JSON syntax problem.
func TestUnknownAndBadFieldsAreRefused(t *testing.T) {
	f := newFixture(t)
	f.call("POST", "/api/rules", rules.Rule{ID: "tmp-allow", When: `tool == "x"`, Action: rules.ActionAllow}, http.StatusCreated, nil)

	const deny = `"id":"tmp-allow","when":"tool == \"x\"","action":"deny"`
	cases := []struct {
		name, method, path, body string
		code, field, message     string
	}{
		{"unknown field in PUT", "PUT", "/api/rules/tmp-allow", `{` + deny + `,"mood":"monitor"}`,
			"invalid_rule", "mood", `the rule is not valid: rule tmp-allow: mood: unknown field "mood"`},
		{"misspelt field in PUT", "PUT", "/api/rules/tmp-allow", `{` + deny + `,"priorty":5}`,
			"invalid_rule", "priorty", `the rule is not valid: rule tmp-allow: priorty: unknown field "priorty"`},
		{"misspelt hold field", "PUT", "/api/rules/tmp-allow", `{` + deny + `,"hold":{"timout":"1m"}}`,
			"invalid_rule", "hold.timout", `the rule is not valid: rule tmp-allow: hold.timout: unknown field "timout"`},
		{"unknown field in POST", "POST", "/api/rules", `{"id":"new","whne":"true","action":"deny"}`,
			"invalid_rule", "whne", `the rule is not valid: rule new: whne: unknown field "whne"`},
		{"unknown field in a draft to test", "POST", "/api/rules/test", `{"rules":[{` + deny + `,"mood":"off"}],"step":{"method":"m"}}`,
			"invalid_rule", "mood", `the rule is not valid: rule tmp-allow: mood: unknown field "mood"`},
		{"unknown field in a draft to backtest", "POST", "/api/rules/backtest", `{"rules":[{` + deny + `,"whne":"x"}]}`,
			"invalid_rule", "whne", `the rule is not valid: rule tmp-allow: whne: unknown field "whne"`},
		{"negative hold timeout", "PUT", "/api/rules/tmp-allow", `{` + deny + `,"hold":{"timeout":"-1m"}}`,
			"invalid_rule", "hold.timeout", `the rule is not valid: rule tmp-allow: hold.timeout: invalid duration "-1m": must not be negative`},
		{"bad expiresAt", "PUT", "/api/rules/tmp-allow", `{` + deny + `,"expiresAt":"tomorrow"}`,
			"invalid_rule", "expiresAt", `the rule is not valid: rule tmp-allow: expiresAt: "tomorrow" is not an RFC 3339 time such as "2025-07-01T00:00:00Z"`},
		{"priority of the wrong type", "POST", "/api/rules", `{"id":"p","when":"true","action":"deny","priority":"high"}`,
			"invalid_rule", "priority", `the rule is not valid: rule p: priority: must be an integer, not "high"`},
		{"unknown field in a backtest", "POST", "/api/rules/backtest", `{"limt":5}`,
			"invalid_request", "", `request body: unknown field "limt"`},
		{"unknown field in a test step", "POST", "/api/rules/test", `{"rules":[],"step":{"method":"m","parms":{}}}`,
			"invalid_request", "", `request body: unknown field "parms"`},
		{"unknown field in validate", "POST", "/api/rules/validate", `{"when":"true","rulez":[]}`,
			"invalid_request", "", `request body: unknown field "rulez"`},
		{"a second JSON value", "PUT", "/api/rules/tmp-allow", `{` + deny + `} {"id":"tmp-allow"}`,
			"invalid_request", "", `request body holds more than one JSON value`},
		{"field of the wrong type", "POST", "/api/rules/backtest", `{"limit":"5"}`,
			"invalid_request", "", `request body: limit cannot be a JSON string`},
		{"not an object", "POST", "/api/rules/test", `[1]`,
			"invalid_request", "", `request body must be a JSON object, not a JSON array`},
		{"a rule that is not an object", "POST", "/api/rules/validate", `{"rules":[1]}`,
			"invalid_request", "", `request body: a rule must be a JSON object, not a number`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e apiErr
			f.callIn(t, tc.method, tc.path, tc.body, http.StatusBadRequest, &e)
			require.Equal(t, tc.code, e.Error.Code)
			require.Equal(t, tc.message, e.Error.Message)
			if tc.field != "" {
				require.Len(t, e.Error.Details, 1)
				require.Equal(t, tc.field, e.Error.Details[0].Field)
			}
		})
	}

	// Nothing was saved: the rule still allows, at version 1.
	var got ruleJSON
	f.call("GET", "/api/rules/tmp-allow", nil, http.StatusOK, &got)
	require.Equal(t, 1, got.Version)
	require.Equal(t, rules.ActionAllow, f.svc.Engine().Evaluate(toolEnv("x")).Action)
	f.call("GET", "/api/rules/new", nil, http.StatusNotFound, nil)
}

// TestValidateReportsFieldProblems: validate answers a rule's unreadable field as it
// answers its other problems, as an error in its list, not with ok:true.
func TestValidateReportsFieldProblems(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, body string
		want       rules.Diagnostic
	}{
		{"unknown field", `{"rule":{"id":"v","when":"true","action":"deny","whne":"x"}}`,
			rules.Diagnostic{RuleID: "v", Field: "whne", Message: `unknown field "whne"`}},
		{"negative timeout", `{"rule":{"id":"v","when":"true","action":"hold","hold":{"timeout":"-1m"}}}`,
			rules.Diagnostic{RuleID: "v", Field: "hold.timeout", Message: `invalid duration "-1m": must not be negative`}},
		{"in a rule set", `{"rules":[{"id":"a","when":"true","action":"deny"},{"id":"b","when":"true","action":"deny","mood":"x"}]}`,
			rules.Diagnostic{RuleID: "b", Field: "mood", Message: `unknown field "mood"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var res struct {
				OK     bool               `json:"ok"`
				Errors []rules.Diagnostic `json:"errors"`
			}
			f.callIn(t, "POST", "/api/rules/validate", tc.body, http.StatusOK, &res)
			require.False(t, res.OK)
			require.Equal(t, []rules.Diagnostic{tc.want}, res.Errors)
		})
	}
}

// TestRulesSentBackAsReceived: whatever the API answers a rule with, a client may send
// back: the console's held-step check sends GET /api/rules' rules to the test endpoint as
// they came, counters and all, and an editor may save what it loaded.
func TestRulesSentBackAsReceived(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - {id: from-file, when: tool == \"f\", action: deny}\n"), 0o600))
	f := newFixture(t, func(o *Options) { o.RulesFile = path })
	_, err := f.svc.ImportFile(ctx, path, ModeMerge, "file")
	require.NoError(t, err)
	f.call("POST", "/api/rules", `{"id":"everything","name":"n","description":"d","when":"tool == \"t\"",
		"action":"hold","message":"m","reasonCode":"R","priority":2,"mode":"monitor","enabled":false,
		"hold":{"timeout":"90s","onTimeout":"allow","confirm":true},"expiresAt":"2030-01-01T00:00:00Z"}`, http.StatusCreated, nil)
	f.call("POST", "/api/rules", `{"id":"redact","when":"true","action":"modify","modify":{"redact":["pii"],"set":{"to":"\"x\""}}}`,
		http.StatusCreated, nil)
	f.svc.Engine().Evaluate(toolEnv("f")) // counters to send back

	var list struct {
		Rules []json.RawMessage `json:"rules"`
	}
	f.call("GET", "/api/rules", nil, http.StatusOK, &list)
	require.Len(t, list.Rules, 3)
	keys := map[string]bool{}
	for _, raw := range list.Rules {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &m))
		for k := range m {
			keys[k] = true
		}
	}
	for _, k := range viewFields {
		require.True(t, keys[k], "the test sends back every read-only field, %s too", k)
	}

	for _, raw := range list.Rules {
		var r ruleJSON
		require.NoError(t, json.Unmarshal(raw, &r))
		var saved ruleJSON
		f.call("PUT", "/api/rules/"+r.ID, string(raw), http.StatusOK, &saved)
		require.Equal(t, r.Version, saved.Version, "%s: unchanged, so no new version", r.ID)
		var v struct {
			OK bool `json:"ok"`
		}
		f.call("POST", "/api/rules/validate", `{"rule":`+string(raw)+`}`, http.StatusOK, &v)
		require.True(t, v.OK, r.ID)
	}
	rawList, err := json.Marshal(list.Rules)
	require.NoError(t, err)
	var tr TestResult
	f.call("POST", "/api/rules/test", `{"rules":`+string(rawList)+`,"step":{"method":"m","params":{"tool":"f"}}}`, http.StatusOK, &tr)
	require.Equal(t, rules.ActionDeny, tr.Decision)
	f.call("POST", "/api/rules/backtest", `{"rules":`+string(rawList)+`}`, http.StatusOK, nil)

	// A version's rule and a live event's rule are plain rules; both go back too.
	var vs struct {
		Versions []struct {
			Rule json.RawMessage `json:"rule"`
		} `json:"versions"`
	}
	f.call("GET", "/api/rules/everything/versions", nil, http.StatusOK, &vs)
	f.call("PUT", "/api/rules/everything", string(vs.Versions[0].Rule), http.StatusOK, nil)
	var p record.RuleChangedPayload
	for _, ev := range f.published() {
		var one record.RuleChangedPayload
		require.NoError(t, json.Unmarshal(ev.Payload, &one))
		if one.Rule != nil {
			p = one
		}
	}
	require.NotNil(t, p.Rule)
	rule, err := json.Marshal(p.Rule)
	require.NoError(t, err)
	f.call("PUT", "/api/rules/"+p.Rule.ID, string(rule), http.StatusOK, nil)
}
