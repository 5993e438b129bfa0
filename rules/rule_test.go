package rules

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecodeJSONRefusesUnknownFields(t *testing.T) {
	cases := []struct {
		name, body, field, message string
	}{
		{"misspelt top-level field", `{"id":"a","when":"true","action":"deny","priorty":5}`, "priorty", `unknown field "priorty"`},
		{"field rules do not have", `{"id":"a","when":"true","action":"deny","mood":"monitor"}`, "mood", `unknown field "mood"`},
		{"misspelt when", `{"id":"a","whne":"true","action":"deny"}`, "whne", `unknown field "whne"`},
		{"keys are case-sensitive, as in a file", `{"id":"a","When":"true","action":"deny"}`, "When", `unknown field "When"`},
		{"hold field", `{"id":"a","when":"true","action":"hold","hold":{"timout":"1m"}}`, "hold.timout", `unknown field "timout"`},
		{"modify field", `{"id":"a","when":"true","action":"modify","modify":{"redcat":["pii"]}}`, "modify.redcat", `unknown field "redcat"`},
		{"first one in the text", `{"zz":1,"id":"a","aa":2}`, "zz", `unknown field "zz"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeJSON([]byte(tc.body), "stats")
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, Diagnostic{RuleID: "a", Field: tc.field, Message: tc.message}, fe.Diagnostic())
			// Stored rules are read leniently: a field from another version is no reason to stop.
			var r Rule
			require.NoError(t, json.Unmarshal([]byte(tc.body), &r))
			require.Equal(t, "a", r.ID)
		})
	}

	// Every field a rule has is accepted, with the fields the caller says to ignore.
	body := `{"id":"a","name":"n","description":"d","when":"true","action":"hold","message":"m",
		"reasonCode":"R","priority":3,"mode":"monitor","enabled":false,
		"hold":{"timeout":"90s","onTimeout":"allow","confirm":true},"modify":{"redact":["pii"],"set":{"x":"1"}},
		"expiresAt":"2030-01-02T03:04:05Z","version":4,"updatedAt":"2025-01-01T00:00:00Z",
		"stats":{"evaluations":1},"expired":false}`
	r, err := DecodeJSON([]byte(body), "stats", "expired")
	require.NoError(t, err)
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, Rule{ID: "a", Name: "n", Description: "d", When: "true", Action: ActionHold, Message: "m",
		ReasonCode: "R", Priority: 3, Mode: ModeMonitor, Enabled: false,
		Hold:      &HoldSpec{Timeout: Duration(90 * time.Second), OnTimeout: ActionAllow, Confirm: true},
		Modify:    &ModifySpec{Redact: []string{"pii"}, Set: map[string]string{"x": "1"}},
		ExpiresAt: &exp, Version: 4, UpdatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}, r)
	var lenient Rule
	require.NoError(t, json.Unmarshal([]byte(body), &lenient))
	require.Equal(t, r, lenient, "both decodings read a rule alike")

	r, err = DecodeJSON([]byte(`{"id":"a","hold":null,"modify":null,"expiresAt":null}`))
	require.NoError(t, err)
	require.Equal(t, Rule{ID: "a", Enabled: true, Mode: ModeEnforce}, r, "defaults, and null for no spec")
	_, err = DecodeJSON([]byte(`[1]`))
	require.EqualError(t, err, "a rule must be a JSON object, not a list")
}

func TestRuleJSONFieldErrors(t *testing.T) {
	cases := []struct {
		name, body, field, message string
	}{
		{"negative hold timeout", `{"id":"a","hold":{"timeout":"-1m"}}`, "hold.timeout", `invalid duration "-1m": must not be negative`},
		{"hold timeout not a duration", `{"id":"a","hold":{"timeout":"soon"}}`, "hold.timeout", `invalid duration "soon": write it like "90s", "2m" or "1h30m"`},
		{"hold timeout a number", `{"id":"a","hold":{"timeout":120}}`, "hold.timeout", `must be a duration such as "2m", not 120`},
		{"expiresAt not a time", `{"id":"a","expiresAt":"tomorrow"}`, "expiresAt", `"tomorrow" is not an RFC 3339 time such as "2025-07-01T00:00:00Z"`},
		{"updatedAt a number", `{"id":"a","updatedAt":5}`, "updatedAt", `5 is not an RFC 3339 time such as "2025-07-01T00:00:00Z"`},
		{"priority a string", `{"id":"a","priority":"high"}`, "priority", `must be an integer, not "high"`},
		{"priority a fraction", `{"id":"a","priority":1.5}`, "priority", `must be an integer, not 1.5`},
		{"enabled a string", `{"id":"a","enabled":"yes"}`, "enabled", `must be true or false, not "yes"`},
		{"hold not an object", `{"id":"a","hold":"2m"}`, "hold", `must be an object, not a string`},
		{"redact not a list", `{"id":"a","modify":{"redact":"pii"}}`, "modify.redact", `must be a list, not "pii"`},
		{"long values are cut", `{"id":"a","when":["` + strings.Repeat("x", 100) + `"]}`, "when", `must be a string, not ["` + strings.Repeat("x", 62) + `…`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := Diagnostic{RuleID: "a", Field: tc.field, Message: tc.message}
			_, err := DecodeJSON([]byte(tc.body))
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, want, fe.Diagnostic())
			require.Equal(t, "rule a: "+tc.field+": "+tc.message, err.Error())
			var r Rule
			err = json.Unmarshal([]byte(tc.body), &r)
			require.ErrorAs(t, err, &fe, "stored rules name the field too")
			require.Equal(t, want, fe.Diagnostic())
		})
	}
}

// TestRuleFieldsMatchTags keeps the fields the file and the API accept (jsonFields) in step
// with the fields a rule is written with: a field added to the structs but not to the list
// would be refused when a client sends back what it got, or when an export is imported.
func TestRuleFieldsMatchTags(t *testing.T) {
	for _, tc := range []struct {
		v      any
		fields map[string]any
	}{
		{Rule{}, new(Rule).jsonFields()},
		{HoldSpec{}, new(HoldSpec).jsonFields()},
		{ModifySpec{}, new(ModifySpec).jsonFields()},
	} {
		typ := reflect.TypeOf(tc.v)
		var tags []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			tags = append(tags, name)
		}
		require.ElementsMatch(t, tags, fieldNames(tc.fields), typ.Name())
	}
	require.True(t, errors.Is(&FieldError{Err: errTest}, errTest), "FieldError unwraps")
}

var errTest = errors.New("test")
