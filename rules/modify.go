package rules

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Redaction targets accepted in modify.redact besides the PII kinds and regexes.
const (
	RedactPII     = "pii"
	RedactSecrets = "secrets"
	RedactURLs    = "urls"
)

// redactor finds spans to replace: a named finder (kind) or a regular expression.
type redactor struct {
	spec string
	kind string
	re   *regexp.Regexp
}

func newRedactor(spec string) (redactor, error) {
	switch spec {
	case RedactPII, RedactSecrets, RedactURLs, PIIEmail, PIIPhone, PIICreditCard, PIIIBAN, PIISSN:
		return redactor{spec: spec, kind: spec}, nil
	case "emails":
		return redactor{spec: spec, kind: PIIEmail}, nil
	case "":
		return redactor{}, fmt.Errorf("empty redaction pattern")
	}
	if len(spec) > MaxExprLen {
		return redactor{}, fmt.Errorf("redaction pattern is longer than %d bytes", MaxExprLen)
	}
	re, err := regexp.Compile(spec)
	if err != nil {
		return redactor{}, fmt.Errorf("invalid redaction pattern %q: %w", spec, err)
	}
	return redactor{spec: spec, re: re}, nil
}

func (rd redactor) find(s string) []span {
	switch rd.kind {
	case "":
		var out []span
		for _, m := range rd.re.FindAllStringIndex(s, -1) {
			if m[1] > m[0] {
				out = append(out, span{m[0], m[1], ""})
			}
		}
		return out
	case RedactPII:
		return findPII(s)
	case RedactSecrets:
		return findSecrets(s)
	case RedactURLs:
		return findURLs(s)
	}
	var out []span
	for _, sp := range findPII(s) {
		if sp.kind == rd.kind {
			out = append(out, sp)
		}
	}
	return out
}

// Modification is the merged change of the enforced modify rules that matched a step:
// the redactions to apply to every string of the request and the input values to set.
// It knows nothing of AOS: the guardian walks the params with Apply and sets the inputs
// it is told about in the protocol's own shape.
type Modification struct {
	// Redact lists the redaction targets in the order they apply.
	Redact []string `json:"redact,omitempty"`
	// Set maps input names to the values their expressions evaluated to.
	Set map[string]any `json:"set,omitempty"`
	// Rules are the contributing rule ids, deciding order.
	Rules []string `json:"rules"`

	redactors []redactor
}

// mergeModify merges the enforced modify hits; on a `set` conflict the earlier hit
// (higher priority, then lower id) wins.
func mergeModify(hits []hit) *Modification {
	var m *Modification
	for i := range hits {
		h := &hits[i]
		if !h.decides || h.err != nil || h.action != ActionModify {
			continue
		}
		if m == nil {
			m = &Modification{}
		}
		m.Rules = append(m.Rules, h.r.ID)
		for _, rd := range h.r.redact {
			if !contains(m.Redact, rd.spec) {
				m.Redact = append(m.Redact, rd.spec)
				m.redactors = append(m.redactors, rd)
			}
		}
		for k, v := range h.set {
			if m.Set == nil {
				m.Set = map[string]any{}
			}
			if _, taken := m.Set[k]; !taken {
				m.Set[k] = v
			}
		}
	}
	return m
}

// NewRedaction returns a Modification that redacts targets (named as modify.redact names
// them: "secrets", "pii", "email", a regular expression…) and sets nothing: for text the
// guardian sends elsewhere, such as a rule's message quoting the step.
func NewRedaction(targets ...string) (*Modification, error) {
	m := &Modification{}
	for _, t := range targets {
		rd, err := newRedactor(t)
		if err != nil {
			return nil, err
		}
		m.Redact = append(m.Redact, rd.spec)
		m.redactors = append(m.redactors, rd)
	}
	return m, nil
}

// RedactString replaces every redaction target in s with [REDACTED:kind] (or [REDACTED]
// for a regular expression) and returns the result and the number of replacements.
func (m *Modification) RedactString(s string) (string, int) {
	return m.redact(s, false)
}

// redact is RedactString; named only, it uses only the named kinds (PII, secrets, URLs),
// not the regular expressions: for an object's keys, where a credential or an address
// used as a key is still one, while a rule's pattern for values would as easily match an
// argument's name and leave the tool a call it cannot read.
func (m *Modification) redact(s string, named bool) (string, int) {
	if m == nil || len(m.redactors) == 0 || s == "" {
		return s, 0
	}
	var spans []span
	for _, rd := range m.redactors {
		if named && rd.re != nil {
			continue
		}
		spans = append(spans, rd.find(s)...)
	}
	if len(spans) == 0 {
		return s, 0
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].start != spans[j].start {
			return spans[i].start < spans[j].start
		}
		return spans[i].end > spans[j].end
	})
	var b strings.Builder
	last, n := 0, 0
	for _, sp := range spans {
		if sp.end <= last {
			continue // inside a span already replaced
		}
		start := sp.start
		if start < last {
			start = last // overlaps the previous one: extend it
		} else {
			b.WriteString(s[last:start])
			if sp.kind == "" {
				b.WriteString("[REDACTED]")
			} else {
				b.WriteString("[REDACTED:" + sp.kind + "]")
			}
			n++
		}
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// Apply returns a copy of doc (a generic JSON value: map[string]any, []any, strings,
// numbers…) with every string redacted, map keys included (for the named kinds, see
// ApplyTo), and the number of replacements. It then calls inputs, when not nil, once per `set` entry in name order, so
// the caller can place the values where its protocol keeps inputs (after redaction, so a
// value set by a rule is never redacted).
func (m *Modification) Apply(doc any, inputs func(name string, value any)) (any, int) {
	if m == nil {
		return doc, 0
	}
	out, n := m.ApplyTo(doc, Structure{})
	if inputs != nil {
		names := make([]string, 0, len(m.Set))
		for k := range m.Set {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			inputs(k, m.Set[k])
		}
	}
	return out, n
}

// Structure tells redaction which parts of a protocol document are its structure rather
// than the step's content. With neither set, all of the document is content.
type Structure struct {
	// Skip reports map keys whose values are structure (ids, method names, the step
	// context): left alone, not descended into. Their own names are not redacted either,
	// nor any key outside content, since the protocol defines them.
	Skip func(key string) bool
	// Content reports map keys whose values are content through and through (a tool's
	// arguments, a data part): everything in them is redacted, keys included, whatever
	// Skip says of a key there, since an argument named "id" or "name" is still the
	// agent's data. nil, with Skip set, means no such keys; with neither set, the whole
	// document is content.
	Content func(key string) bool
}

// ApplyTo is the redaction of Apply over a document with a structure: see Structure.
// Keys in content are redacted for the named kinds only (PII, secrets, URLs), not for
// regular expressions. Two keys of one object that redact to the same text keep both
// values: the later ones (in key order) get " #2", " #3"… appended.
func (m *Modification) ApplyTo(doc any, st Structure) (any, int) {
	if m == nil || len(m.redactors) == 0 {
		return doc, 0
	}
	total := 0
	redact := func(s string) string {
		out, n := m.redact(s, false)
		total += n
		return out
	}
	// redactKeys redacts the keys of a content object, in key order so that the suffixes
	// of colliding keys do not depend on map order.
	redactKeys := func(n int, keys func(yield func(string) bool)) map[string]string {
		names := make([]string, 0, n)
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		out := make(map[string]string, n)
		used := make(map[string]bool, n)
		for _, k := range names {
			r, n := m.redact(k, true)
			total += n
			if used[r] {
				for i := 2; ; i++ {
					if c := r + " #" + strconv.Itoa(i); !used[c] {
						r = c
						break
					}
				}
			}
			used[r] = true
			out[k] = r
		}
		return out
	}
	whole := st.Skip == nil && st.Content == nil
	var walk func(v any, content bool) any
	walk = func(v any, content bool) any {
		switch x := v.(type) {
		case string:
			return redact(x)
		case map[string]any:
			out := make(map[string]any, len(x))
			if content {
				names := redactKeys(len(x), maps.Keys(x))
				for k, e := range x {
					out[names[k]] = walk(e, true)
				}
				return out
			}
			for k, e := range x {
				switch {
				case st.Content != nil && st.Content(k):
					out[k] = walk(e, true)
				case st.Skip != nil && st.Skip(k):
					out[k] = e
				default:
					out[k] = walk(e, false)
				}
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = walk(e, content)
			}
			return out
		case map[string]string:
			out := make(map[string]string, len(x))
			if content {
				names := redactKeys(len(x), maps.Keys(x))
				for k, e := range x {
					out[names[k]] = redact(e)
				}
				return out
			}
			for k, e := range x {
				if st.Skip != nil && st.Skip(k) && (st.Content == nil || !st.Content(k)) {
					out[k] = e
				} else {
					out[k] = redact(e)
				}
			}
			return out
		case []string:
			out := make([]string, len(x))
			for i, e := range x {
				out[i] = redact(e)
			}
			return out
		}
		return v
	}
	return walk(doc, whole), total
}

// UnmarshalJSON decodes a Modification and rebuilds its redactors, so a stored verdict
// can still be applied.
func (m *Modification) UnmarshalJSON(b []byte) error {
	type plain Modification
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*m = Modification(p)
	m.redactors = nil
	for _, spec := range m.Redact {
		rd, err := newRedactor(spec)
		if err != nil {
			return err
		}
		m.redactors = append(m.redactors, rd)
	}
	return nil
}
