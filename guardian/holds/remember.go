package holds

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Remembered approvals are ordinary allow rules, recognisable by their id prefix.
const (
	// RememberPrefix starts the id of every rule made by "approve and remember".
	RememberPrefix = "remember-"
	// RememberReasonCode is the reasonCode of those rules.
	RememberReasonCode = "REMEMBERED_APPROVAL"
	// RememberPriority puts remembered approvals ahead of other allow rules.
	RememberPriority = 1000
	// DefaultRememberFor is the expiry of a remembered approval when none is given.
	DefaultRememberFor = 24 * time.Hour
	// MaxRememberFor bounds how long an approval can be remembered.
	MaxRememberFor = 366 * 24 * time.Hour
)

// Scopes of a remembered approval.
const (
	// ScopeTool allows this agent's further calls of this tool, whatever the inputs.
	ScopeTool = "tool"
	// ScopeInputs allows only calls with exactly these inputs.
	ScopeInputs = "inputs"
)

// RememberSpec asks an approval to be remembered as an allow rule.
type RememberSpec struct {
	// Scope is ScopeTool or ScopeInputs.
	Scope string
	// ExpiresIn is how long the rule lasts; zero means DefaultRememberFor.
	ExpiresIn time.Duration
}

// IsRemembered reports whether a rule id names a remembered approval.
func IsRemembered(ruleID string) bool { return strings.HasPrefix(ruleID, RememberPrefix) }

// rememberedMatch returns the first enforced, error-free allow match of a remembered
// approval: such a rule lets a held step through, since by the rules' combination an allow
// never outranks a hold on its own.
func rememberedMatch(matches []record.RuleMatch) (string, bool) {
	for _, m := range matches {
		if IsRemembered(m.RuleID) && m.Action == string(rules.ActionAllow) && m.Error == "" &&
			(m.Mode == string(rules.ModeEnforce) || m.Mode == "") {
			return m.RuleID, true
		}
	}
	return "", false
}

// RememberRule builds the allow rule that remembers an operator's approval of a held step:
// scoped to the step's agent and tool, and with ScopeInputs to its exact inputs as well.
// The id is derived from the condition, so remembering the same thing twice yields the same
// rule (an update, not a duplicate).
func RememberRule(req Request, spec RememberSpec, operator, holdID string, now time.Time) (rules.Rule, error) {
	if req.AgentID == "" {
		return rules.Rule{}, &FieldError{Field: "remember", Message: "the held step names no agent id, so there is nothing to scope a remembered approval to"}
	}
	if req.Tool == "" {
		return rules.Rule{}, &FieldError{Field: "remember", Message: "only tool calls can be remembered: the held step names no tool"}
	}
	expires := spec.ExpiresIn
	if expires == 0 {
		expires = DefaultRememberFor
	}
	if expires < 0 || expires > MaxRememberFor {
		return rules.Rule{}, &FieldError{Field: "remember.expiresIn", Message: fmt.Sprintf("expiresIn must be at least 1s and at most %d days", MaxRememberFor/(24*time.Hour))}
	}
	when := "agent.id == " + strconv.Quote(req.AgentID) + " && tool == " + strconv.Quote(req.Tool)
	name := fmt.Sprintf("Remembered: %s may call %s", req.AgentID, req.Tool)
	switch spec.Scope {
	case ScopeTool:
	case ScopeInputs:
		var inputs map[string]any
		if req.Inputs != nil {
			inputs = req.Inputs()
		}
		cond, err := inputsCondition(inputs)
		if err != nil {
			return rules.Rule{}, &FieldError{Field: "remember.scope", Message: err.Error()}
		}
		when += " && " + cond
		name += " with these inputs"
	default:
		return rules.Rule{}, &FieldError{Field: "remember.scope", Message: `scope must be "tool" or "inputs"`}
	}
	sum := sha256.Sum256([]byte(when))
	at := now.UTC().Add(expires)
	note := fmt.Sprintf("Approved and remembered by %s from hold %s at %s.", operator, holdID,
		now.UTC().Format(time.RFC3339))
	r := rules.Rule{
		ID:          RememberPrefix + slug(req.AgentID) + "-" + slug(req.Tool) + "-" + hex.EncodeToString(sum[:4]),
		Name:        name,
		Description: note,
		When:        when,
		Action:      rules.ActionAllow,
		Message:     fmt.Sprintf("Allowed: %s approved this earlier.", operator),
		ReasonCode:  RememberReasonCode,
		Priority:    RememberPriority,
		Mode:        rules.ModeEnforce,
		Enabled:     true,
		ExpiresAt:   &at,
	}
	// Refused here rather than by the rule store after the approval has been given.
	if diags := rules.Validate(r); len(diags) > 0 {
		msg := diags[0].Message
		if spec.Scope == ScopeInputs {
			msg = "the inputs are too large to remember exactly; remember the tool instead (" + msg + ")"
		}
		return rules.Rule{}, &FieldError{Field: "remember", Message: msg}
	}
	return r, nil
}

var slugStrip = regexp.MustCompile(`[^a-z0-9]+`)

// slug makes an id fragment: lower-case letters and digits joined by dashes, at most 32.
func slug(s string) string {
	s = strings.Trim(slugStrip.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 32 {
		s = strings.TrimRight(s[:32], "-")
	}
	if s == "" {
		s = "x"
	}
	return s
}

// inputsCondition compiles inputs into an expr condition that holds exactly for equal
// inputs. Every nested value is guarded by its type and length before it is indexed, so
// the condition is false (never a runtime error, which a fail-closed policy would turn into
// a deny) for inputs of another shape. Keys are visited in sorted order: the same inputs
// always give the same text, and so the same rule id.
func inputsCondition(inputs map[string]any) (string, error) {
	var parts []string
	parts = append(parts, fmt.Sprintf("len(inputs) == %d", len(inputs)))
	if err := mapConditions("inputs", inputs, &parts); err != nil {
		return "", err
	}
	return strings.Join(parts, " && "), nil
}

func mapConditions(path string, m map[string]any, parts *[]string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := memberPath(path, k)
		if m[k] == nil {
			// A missing key also reads as nil; "in" tells them apart.
			*parts = append(*parts, strconv.Quote(k)+" in "+path, p+" == nil")
			continue
		}
		if err := valueConditions(p, m[k], parts); err != nil {
			return err
		}
	}
	return nil
}

func valueConditions(path string, v any, parts *[]string) error {
	switch x := v.(type) {
	case nil:
		*parts = append(*parts, path+" == nil")
	case string:
		*parts = append(*parts, path+" == "+strconv.Quote(x))
	case bool:
		*parts = append(*parts, path+" == "+strconv.FormatBool(x))
	case float64:
		lit, err := numberLiteral(x)
		if err != nil {
			return err
		}
		*parts = append(*parts, path+" == "+lit)
	case float32:
		return valueConditions(path, float64(x), parts)
	case int:
		*parts = append(*parts, path+" == "+strconv.Itoa(x))
	case int64:
		*parts = append(*parts, path+" == "+strconv.FormatInt(x, 10))
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return fmt.Errorf("input %s: number %s cannot be compared exactly", path, x)
		}
		return valueConditions(path, f, parts)
	case map[string]any:
		*parts = append(*parts, "type("+path+`) == "map"`, fmt.Sprintf("len(%s) == %d", path, len(x)))
		return mapConditions(path, x, parts)
	case []any:
		*parts = append(*parts, "type("+path+`) == "array"`, fmt.Sprintf("len(%s) == %d", path, len(x)))
		for i, e := range x {
			if err := valueConditions(fmt.Sprintf("%s[%d]", path, i), e, parts); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("input %s: a %T cannot be remembered exactly", path, v)
	}
	return nil
}

// numberLiteral writes f as an expr number literal that compares equal to f.
func numberLiteral(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("number %v cannot be compared exactly", f)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10), nil
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s, nil
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// exprWord reports names that cannot follow a dot safely; such keys use ["key"] instead.
func exprWord(s string) bool {
	switch s {
	case "true", "false", "nil", "not", "and", "or", "in", "matches", "contains",
		"startsWith", "endsWith", "let", "if", "else", "then":
		return true
	}
	return false
}

func memberPath(path, key string) string {
	if identRe.MatchString(key) && !exprWord(key) {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}
