// Package rules is Vigil's policy engine: rules written in expr
// (github.com/expr-lang/expr) decide allow, deny, modify or hold for every step an agent
// reports.
//
// A rule's condition sees a typed Env (so a misspelt field is a compile error, not a silent
// false) and a set of pure helper functions (PII and secret finders, URL and glob helpers,
// counters over the session history). Rules compile once into a Program; an Engine swaps
// Programs atomically so a reload never drops or half-applies a request.
//
// The package is a leaf: it knows nothing of AOS or storage. The guardian builds an Env from
// a step (see guardian/ruleenv) and turns the Verdict into a protocol answer.
package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Action is what a rule asks for when its condition holds.
type Action string

// The actions a rule can take.
const (
	ActionAllow  Action = "allow"
	ActionDeny   Action = "deny"
	ActionModify Action = "modify"
	ActionHold   Action = "hold"
)

// Valid reports whether a is one of the four actions.
func (a Action) Valid() bool {
	switch a {
	case ActionAllow, ActionDeny, ActionModify, ActionHold:
		return true
	}
	return false
}

// rank orders actions for combination: deny > hold > modify > allow.
func (a Action) rank() int {
	switch a {
	case ActionDeny:
		return 4
	case ActionHold:
		return 3
	case ActionModify:
		return 2
	case ActionAllow:
		return 1
	}
	return 0
}

// Mode says whether a rule's matches decide (enforce), are only recorded (monitor), or
// whether the rule is not evaluated at all (off).
type Mode string

// The rule modes.
const (
	ModeEnforce Mode = "enforce"
	ModeMonitor Mode = "monitor"
	ModeOff     Mode = "off"
)

// Valid reports whether m is a known mode; the empty mode means enforce.
func (m Mode) Valid() bool {
	switch m {
	case "", ModeEnforce, ModeMonitor, ModeOff:
		return true
	}
	return false
}

// normalized maps the empty mode to enforce.
func (m Mode) normalized() Mode {
	if m == "" {
		return ModeEnforce
	}
	return m
}

// Rule is one policy rule as stored, edited and exchanged in files and over the API.
type Rule struct {
	ID          string `json:"id" yaml:"id"`
	Name        string `json:"name,omitempty" yaml:"name,omitempty"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
	// When is an expr expression that must evaluate to a bool.
	When   string `json:"when" yaml:"when"`
	Action Action `json:"action" yaml:"action"`
	// Message is shown to the agent; {{expr}} placeholders are interpolated.
	Message    string `json:"message,omitempty" yaml:"message,omitempty"`
	ReasonCode string `json:"reasonCode,omitempty" yaml:"reasonCode,omitempty"`
	// Priority orders rules with the same action: higher first.
	Priority int  `json:"priority" yaml:"priority,omitempty"`
	Mode     Mode `json:"mode" yaml:"mode,omitempty"`
	// Enabled defaults to true when absent from a file or a JSON body.
	Enabled   bool        `json:"enabled" yaml:"enabled"`
	Hold      *HoldSpec   `json:"hold,omitempty" yaml:"hold,omitempty"`
	Modify    *ModifySpec `json:"modify,omitempty" yaml:"modify,omitempty"`
	ExpiresAt *time.Time  `json:"expiresAt,omitempty" yaml:"expiresAt,omitempty"`
	Version   int         `json:"version,omitempty" yaml:"version,omitempty"`
	UpdatedAt time.Time   `json:"updatedAt,omitzero" yaml:"updatedAt,omitempty"`
}

// UnmarshalJSON decodes a rule, defaulting Enabled to true and Mode to enforce when absent.
// A value that cannot be read is a *FieldError naming its field. Fields a rule does not have
// are ignored here: this decodes the rules Vigil stored and published itself, which another
// version of Vigil may have written, and refusing them would stop a guardian from starting.
// What a person writes goes through DecodeJSON or ParseFile, which refuse unknown fields.
func (r *Rule) UnmarshalJSON(b []byte) error {
	return r.decodeJSON(b, false, nil)
}

// DecodeJSON decodes a rule as a client sends it: like UnmarshalJSON, but a field a rule
// does not have is a *FieldError, as it is in a rules file, so a misspelt "whne" or
// "priorty" is reported instead of silently dropped. The fields named in ignore are
// accepted and dropped: the read-only fields an API answers with next to a rule's own
// (counters, say), which a client may send back unchanged.
func DecodeJSON(b []byte, ignore ...string) (Rule, error) {
	var r Rule
	err := r.decodeJSON(b, true, keySet(ignore...))
	return r, err
}

func (r *Rule) decodeJSON(b []byte, strict bool, ignore map[string]bool) error {
	*r = Rule{Enabled: true, Mode: ModeEnforce}
	if string(bytes.TrimSpace(b)) == "null" {
		return nil // as Go's own decoding of null: nothing to read, so the defaults
	}
	members, err := objectMembers(b)
	if err != nil {
		return fmt.Errorf("a rule must be a JSON object, not %s", jsonKind(b))
	}
	if err := decodeMembers(members, "", r.jsonFields(), strict, ignore); err != nil {
		// Name the rule, wherever its id stands in the object.
		for _, m := range members {
			if m.key == "id" {
				_ = json.Unmarshal(m.raw, &err.RuleID) // an id that is no string names no rule
			}
		}
		return err
	}
	r.Mode = r.Mode.normalized()
	return nil
}

// FieldError is a field of a JSON rule that cannot be read: a value of the wrong type or
// form, or, decoded with DecodeJSON, a field rules do not have.
type FieldError struct {
	RuleID string
	// Field is the field's path, as in a Diagnostic: "priority", "hold.timeout".
	Field   string
	Message string
	Err     error
}

func (e *FieldError) Error() string { return e.Diagnostic().String() }

func (e *FieldError) Unwrap() error { return e.Err }

// Diagnostic is the error in the form Validate reports a rule's problems in.
func (e *FieldError) Diagnostic() Diagnostic {
	return Diagnostic{RuleID: e.RuleID, Field: e.Field, Message: e.Message}
}

// jsonFields are the JSON fields of a rule and where each decodes to. The rules file accepts
// the same fields (ruleKeys), so a rule reads alike from a file and from the API.
func (r *Rule) jsonFields() map[string]any {
	return map[string]any{
		"id": &r.ID, "name": &r.Name, "description": &r.Description, "when": &r.When,
		"action": &r.Action, "message": &r.Message, "reasonCode": &r.ReasonCode,
		"priority": &r.Priority, "mode": &r.Mode, "enabled": &r.Enabled, "hold": &r.Hold,
		"modify": &r.Modify, "expiresAt": &r.ExpiresAt, "version": &r.Version,
		"updatedAt": &r.UpdatedAt,
	}
}

func (h *HoldSpec) jsonFields() map[string]any {
	return map[string]any{"timeout": &h.Timeout, "onTimeout": &h.OnTimeout, "confirm": &h.Confirm}
}

func (m *ModifySpec) jsonFields() map[string]any {
	return map[string]any{"redact": &m.Redact, "set": &m.Set}
}

// fieldNames lists the keys of a jsonFields map.
func fieldNames(fields map[string]any) []string {
	out := make([]string, 0, len(fields))
	for k := range fields {
		out = append(out, k)
	}
	return out
}

// member is one key and value of a JSON object.
type member struct {
	key string
	raw json.RawMessage
}

// objectMembers splits a JSON object into its members in the order written, so the first
// bad field reported is the first one in the text.
func objectMembers(b []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not an object")
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, member{key: tok.(string), raw: raw})
	}
	return out, nil
}

// decodeMembers decodes members into the destinations of fields, one field at a time so an
// error names the field (prefix + key). Nested hold and modify objects are decoded the same
// way. A key without a destination is an error when strict, unless ignore has it.
func decodeMembers(members []member, prefix string, fields map[string]any, strict bool, ignore map[string]bool) *FieldError {
	for _, m := range members {
		field := prefix + m.key
		dst, ok := fields[m.key]
		if !ok {
			if strict && !ignore[m.key] {
				return &FieldError{Field: field, Message: fmt.Sprintf("unknown field %q", m.key)}
			}
			continue
		}
		isNull := string(m.raw) == "null"
		var err *FieldError
		switch d := dst.(type) {
		case **HoldSpec:
			*d = nil
			if !isNull {
				*d = new(HoldSpec)
				err = decodeObject(m.raw, field, (*d).jsonFields(), strict)
			}
		case **ModifySpec:
			*d = nil
			if !isNull {
				*d = new(ModifySpec)
				err = decodeObject(m.raw, field, (*d).jsonFields(), strict)
			}
		default:
			if e := json.Unmarshal(m.raw, dst); e != nil {
				err = &FieldError{Field: field, Message: valueMessage(dst, m.raw, e), Err: e}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeObject decodes the nested object raw of field.
func decodeObject(raw json.RawMessage, field string, fields map[string]any, strict bool) *FieldError {
	members, err := objectMembers(raw)
	if err != nil {
		return &FieldError{Field: field, Message: "must be an object, not " + jsonKind(raw)}
	}
	return decodeMembers(members, field+".", fields, strict, nil)
}

// valueMessage says why raw does not decode into dst, in terms of the JSON written rather
// than Go types.
func valueMessage(dst any, raw json.RawMessage, err error) string {
	var te *json.UnmarshalTypeError
	switch dst.(type) {
	case *time.Time, **time.Time:
		return fmt.Sprintf("%s is not an RFC 3339 time such as \"2025-07-01T00:00:00Z\"", shorten(raw))
	case *Duration:
		if errors.As(err, &te) {
			return fmt.Sprintf("must be a duration such as \"2m\", not %s", shorten(raw))
		}
	}
	if errors.As(err, &te) {
		return fmt.Sprintf("must be %s, not %s", typeWord(te.Type), shorten(raw))
	}
	return err.Error()
}

// shorten cuts a value quoted in a message to a readable length.
func shorten(raw json.RawMessage) string {
	const most = 64
	if len(raw) <= most {
		return string(raw)
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	return string(raw[:cut]) + "…"
}

// typeWord names the JSON value a Go type decodes from.
func typeWord(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.Kind().String()
}

// jsonKind names the kind of JSON value b is.
func jsonKind(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "a string"
	case '[':
		return "a list"
	case '{':
		return "an object"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	return "a number"
}

// MarshalJSON writes a rule with its mode spelled out ("" is written as enforce).
func (r Rule) MarshalJSON() ([]byte, error) {
	type plain Rule
	p := plain(r)
	p.Mode = p.Mode.normalized()
	return json.Marshal(p)
}

// UnmarshalYAML decodes a rule with the same defaults as UnmarshalJSON.
func (r *Rule) UnmarshalYAML(n *yaml.Node) error {
	type plain Rule
	p := plain{Enabled: true}
	if err := n.Decode(&p); err != nil {
		return err
	}
	*r = Rule(p)
	r.Mode = r.Mode.normalized()
	return nil
}

// Expired reports whether the rule has an expiry at or before now.
func (r *Rule) Expired(now time.Time) bool {
	return r.ExpiresAt != nil && !now.Before(*r.ExpiresAt)
}

// DefaultHoldTimeout is Options.HoldTimeout when unset: how long a hold rule without a
// hold spec, or with a zero timeout, waits.
const DefaultHoldTimeout = 2 * time.Minute

// HoldSpec says how long a held step waits for an operator and what happens then.
type HoldSpec struct {
	Timeout Duration `json:"timeout" yaml:"timeout"`
	// OnTimeout is allow or deny.
	OnTimeout Action `json:"onTimeout" yaml:"onTimeout"`
	// Confirm asks the console for a second, explicit step before an approval is sent: for
	// holds where one keypress is too little (large payments, deletions).
	Confirm bool `json:"confirm,omitempty" yaml:"confirm,omitempty"`
}

// ModifySpec says how a modify rule changes the request.
type ModifySpec struct {
	// Redact lists what to replace in every string of the params: "pii", "secrets", a PII
	// kind ("email", "phone", "creditCard", "iban", "ssn"), "urls", or a regular expression.
	Redact []string `json:"redact,omitempty" yaml:"redact,omitempty"`
	// Set maps an input name to an expr expression whose value replaces that input.
	Set map[string]string `json:"set,omitempty" yaml:"set,omitempty"`
}

// Duration is a time.Duration that reads and writes as a Go duration string ("2m", "1h30m").
type Duration time.Duration

// String formats d without zero units: 2m, 1h30m, 1m30s, 500ms.
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string such as "2m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"2m\": %w", err)
	}
	return d.parse(s)
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a duration string such as "2m".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a string like \"2m\"", n.Line)
	}
	if err := d.parse(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

func (d *Duration) parse(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		// time's own message only repeats the value behind a "time:" prefix; say what to
		// write instead.
		return fmt.Errorf("invalid duration %q: write it like \"90s\", \"2m\" or \"1h30m\"", s)
	}
	if v < 0 {
		return fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	*d = Duration(v)
	return nil
}
