package rulesapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Diff compares two versions of one rule.
type Diff struct {
	RuleID string `json:"ruleId"`
	From   int    `json:"from"`
	To     int    `json:"to"`
	// Changes lists the fields that differ, in field order.
	Changes []FieldChange `json:"changes"`
	// Unified is a line diff of the two versions as rules-file YAML.
	Unified string `json:"unified"`
}

// FieldChange is one rule field that differs; a value absent in a version is null.
type FieldChange struct {
	Field string          `json:"field"`
	From  json.RawMessage `json:"from"`
	To    json.RawMessage `json:"to"`
}

// ruleFields is the order fields are reported in: the order of the rule's JSON.
var ruleFields = []string{"id", "name", "description", "when", "action", "message", "reasonCode",
	"priority", "mode", "enabled", "hold", "modify", "expiresAt"}

// DiffVersions compares version from with version to of rule id. to 0 means the newest
// version; from 0 means the version before to.
func (s *Service) DiffVersions(ctx context.Context, id string, from, to int) (Diff, error) {
	if to == 0 {
		vs, err := s.store.RuleVersions(ctx, id)
		if err != nil {
			return Diff{}, err
		}
		to = vs[0].Version
	}
	if from == 0 {
		from = to - 1
	}
	if from < 1 {
		return Diff{}, fmt.Errorf("rule %q has no version before %d: %w", id, to, ErrBadRequest)
	}
	a, err := s.store.RuleVersion(ctx, id, from)
	if err != nil {
		return Diff{}, err
	}
	b, err := s.store.RuleVersion(ctx, id, to)
	if err != nil {
		return Diff{}, err
	}
	return diffRules(id, a, b)
}

func diffRules(id string, a, b record.RuleVersion) (Diff, error) {
	fa, err := fieldsOf(a.Rule)
	if err != nil {
		return Diff{}, err
	}
	fb, err := fieldsOf(b.Rule)
	if err != nil {
		return Diff{}, err
	}
	d := Diff{RuleID: id, From: a.Version, To: b.Version, Changes: []FieldChange{}}
	for _, f := range ruleFields {
		va, vb := fa[f], fb[f]
		if bytes.Equal(va, vb) {
			continue
		}
		d.Changes = append(d.Changes, FieldChange{Field: f, From: orNull(va), To: orNull(vb)})
	}
	ya, err := ruleYAML(a.Rule)
	if err != nil {
		return Diff{}, err
	}
	yb, err := ruleYAML(b.Rule)
	if err != nil {
		return Diff{}, err
	}
	d.Unified = unified(fmt.Sprintf("version %d", a.Version), fmt.Sprintf("version %d", b.Version), ya, yb)
	return d, nil
}

func orNull(v json.RawMessage) json.RawMessage {
	if v == nil {
		return json.RawMessage("null")
	}
	return v
}

// fieldsOf returns the rule's fields as compact JSON, without version and save time.
func fieldsOf(r rules.Rule) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(normalize(r))
	if err != nil {
		return nil, fmt.Errorf("rulesapi: encode rule: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("rulesapi: decode rule: %w", err)
	}
	for k, v := range m {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, fmt.Errorf("rulesapi: compact rule field %s: %w", k, err)
		}
		m[k] = buf.Bytes()
	}
	return m, nil
}

// ruleYAML is the rule as it appears in an exported rules file.
func ruleYAML(r rules.Rule) ([]string, error) {
	b, err := rules.MarshalFile(&rules.File{Rules: []rules.Rule{normalize(r)}}, "yaml")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n"), nil
}

// maxDiffCells bounds the LCS table; rules are small, but stored text is operator input.
const maxDiffCells = 4 << 20

// unified renders a whole-file line diff of a and b (every line, marked ' ', '-' or '+').
func unified(nameA, nameB string, a, b []string) string {
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	if len(a)*len(b) > maxDiffCells {
		for _, l := range a {
			out.WriteString("-" + l + "\n")
		}
		for _, l := range b {
			out.WriteString("+" + l + "\n")
		}
		return out.String()
	}
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out.WriteString(" " + a[i] + "\n")
			i++
			j++
		case j < len(b) && (i == len(a) || lcs[i][j+1] > lcs[i+1][j]):
			out.WriteString("+" + b[j] + "\n")
			j++
		default:
			out.WriteString("-" + a[i] + "\n")
			i++
		}
	}
	return out.String()
}
