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
	"encoding/json"
	"fmt"
	"strings"
	"time"

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
func (r *Rule) UnmarshalJSON(b []byte) error {
	type plain Rule
	p := plain{Enabled: true}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = Rule(p)
	r.Mode = r.Mode.normalized()
	return nil
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

// DefaultHoldTimeout is used for hold rules without a hold spec or with a zero timeout.
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
		return fmt.Errorf("invalid duration %q: %w", s, err)
	}
	if v < 0 {
		return fmt.Errorf("invalid duration %q: negative", s)
	}
	*d = Duration(v)
	return nil
}
