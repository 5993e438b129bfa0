package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// File is a rules file: rules and the test cases that pin their behaviour.
type File struct {
	Rules []Rule     `json:"rules" yaml:"rules"`
	Tests []TestCase `json:"tests,omitempty" yaml:"tests,omitempty"`

	name string
	// pos[i] holds the positions of rule i's fields ("" is the rule itself).
	pos   []map[string]nodePos
	lines []string
}

// Name is the file name given to ParseFile.
func (f *File) Name() string { return f.name }

// TestCase is one step with the decision the rules must reach for it.
type TestCase struct {
	Name string   `json:"name" yaml:"name"`
	Step TestStep `json:"step" yaml:"step"`
	// History are the session's earlier steps, oldest first.
	History []TestHistory `json:"history,omitempty" yaml:"history,omitempty"`
	Expect  Action        `json:"expect" yaml:"expect"`
	// ReasonCode, when set, must all appear in the verdict's reason codes.
	ReasonCode []string `json:"reasonCode,omitempty" yaml:"reasonCode,omitempty"`
	// Rule, when set, must be the deciding rule.
	Rule string `json:"rule,omitempty" yaml:"rule,omitempty"`
	// Now, when set, is the evaluation time.
	Now *time.Time `json:"now,omitempty" yaml:"now,omitempty"`
	// Line is where the test starts in its file (0 when not from a file).
	Line int `json:"-" yaml:"-"`
}

// TestStep is a step as the agent would send it: a method and its params object.
type TestStep struct {
	Method string          `json:"method" yaml:"method"`
	Params json.RawMessage `json:"params,omitempty" yaml:"params,omitempty"`
}

type yamlTestStep struct {
	Method string `yaml:"method"`
	Params any    `yaml:"params,omitempty"`
}

// MarshalYAML writes params as YAML rather than a JSON string.
func (s TestStep) MarshalYAML() (any, error) {
	out := yamlTestStep{Method: s.Method}
	if len(s.Params) > 0 {
		if err := json.Unmarshal(s.Params, &out.Params); err != nil {
			return nil, fmt.Errorf("test step params: %w", err)
		}
	}
	return out, nil
}

// UnmarshalYAML reads params written as YAML (or JSON, which is YAML).
func (s *TestStep) UnmarshalYAML(n *yaml.Node) error {
	var in yamlTestStep
	if err := n.Decode(&in); err != nil {
		return err
	}
	s.Method = in.Method
	s.Params = nil
	if in.Params != nil {
		b, err := json.Marshal(in.Params)
		if err != nil {
			return fmt.Errorf("line %d: params: %w", n.Line, err)
		}
		s.Params = b
	}
	return nil
}

// TestHistory is an earlier step of a test's session; Repeat > 1 stands for that many
// identical steps.
type TestHistory struct {
	HistoryStep `yaml:",inline"`
	Repeat      int `json:"repeat,omitempty" yaml:"repeat,omitempty"`
}

// FileError is a problem in a rules file at a position.
type FileError struct {
	File    string
	Line    int
	Column  int
	Message string
	Err     error
}

func (e *FileError) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Message)
}

func (e *FileError) Unwrap() error { return e.Err }

// nodePos is where a value sits in the file and how it is written, to map positions
// inside an expression back to the file.
type nodePos struct {
	line, col int
	style     yaml.Style
	indent    int // content indentation of a block scalar
}

var (
	// A rule's fields are those its JSON decoding knows, so the file and the API accept the
	// same ones.
	ruleKeys     = keySet(fieldNames(new(Rule).jsonFields())...)
	holdKeys     = keySet(fieldNames(new(HoldSpec).jsonFields())...)
	modifyKeys   = keySet(fieldNames(new(ModifySpec).jsonFields())...)
	testKeys     = keySet("name", "step", "history", "expect", "reasonCode", "rule", "now")
	stepKeys     = keySet("method", "params")
	historyKeys  = keySet("method", "kind", "tool", "decision", "text", "seq", "receivedAt", "repeat")
	topLevelKeys = keySet("rules", "tests")
	yamlLineRe   = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
)

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// ParseFile reads a rules file in YAML or JSON (chosen by the .json extension or a leading
// '{'). Unknown fields are errors; every error carries the file's line and column.
func ParseFile(name string, data []byte) (*File, error) {
	f := &File{name: name}
	ferr := func(line, col int, err error) error {
		return &FileError{File: name, Line: line, Column: col, Message: err.Error(), Err: err}
	}
	trimmed := bytes.TrimSpace(data)
	if strings.EqualFold(filepath.Ext(name), ".json") || bytes.HasPrefix(trimmed, []byte("{")) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				// Offset counts the offending byte; point at it.
				line, col := position(string(data), max(int(se.Offset)-1, 0))
				return nil, ferr(line, col, err)
			}
			return nil, ferr(0, 0, err)
		}
	}
	top, err := singleDocument(name, data)
	if err != nil {
		return nil, err
	}
	if top == nil {
		return f, nil
	}
	if top.Kind != yaml.MappingNode {
		return nil, ferr(top.Line, top.Column, errors.New("a rules file is a mapping with `rules` and `tests`"))
	}
	// Top-level keys starting with "x-" are free for YAML anchors shared by tests (a step
	// context, say); everything else must be known.
	for i := 0; i+1 < len(top.Content); i += 2 {
		if k := top.Content[i]; !topLevelKeys[k.Value] && !strings.HasPrefix(k.Value, "x-") {
			return nil, ferr(k.Line, k.Column, fmt.Errorf("unknown field %q in rules file", k.Value))
		}
	}
	lines := strings.Split(string(data), "\n")
	f.lines = lines
	for i := 0; i+1 < len(top.Content); i += 2 {
		key, val := top.Content[i].Value, top.Content[i+1]
		if !topLevelKeys[key] || val.Kind == yaml.ScalarNode && val.Tag == "!!null" {
			continue
		}
		if val.Kind != yaml.SequenceNode {
			return nil, ferr(val.Line, val.Column, fmt.Errorf("%s must be a list", key))
		}
		for _, item := range val.Content {
			var err error
			if key == "rules" {
				err = f.parseRule(item, lines)
			} else {
				err = f.parseTest(item)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// singleDocument returns the content of the file's one YAML document, nil when it has
// none. yaml.Unmarshal reads only the first document of a stream, so a second one (after
// `---`) would be dropped without a word: its rules never loaded, its errors never
// reported. A document with content after the first is therefore an error. Empty
// documents (a bare `---` before or after the rules, as editors and concatenation leave)
// hold nothing to lose and are skipped.
func singleDocument(name string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var top *yaml.Node
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return top, nil
		} else if err != nil {
			return nil, yamlError(name, err)
		}
		if len(doc.Content) == 0 || emptyDocument(doc.Content[0]) {
			continue
		}
		if top != nil {
			return nil, &FileError{File: name, Line: doc.Line, Column: doc.Column,
				Message: "a second YAML document starts here, but a rules file is one document: " +
					"move its rules and tests into the first one's `rules` and `tests`"}
		}
		top = doc.Content[0]
	}
}

// emptyDocument reports whether n is the content of a document with nothing written in it
// (an explicit `null` or `~` is something written, and is checked as a rules file).
func emptyDocument(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == ""
}

func (f *File) parseRule(n *yaml.Node, lines []string) error {
	if n.Kind != yaml.MappingNode {
		return &FileError{File: f.name, Line: n.Line, Column: n.Column, Message: "a rule must be a mapping"}
	}
	if err := checkKeys(f.name, n, ruleKeys, "rule"); err != nil {
		return err
	}
	pos := map[string]nodePos{"": {line: n.Line, col: n.Column}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, deref(n.Content[i+1])
		pos[key] = scalarPos(val, lines)
		switch key {
		case "hold":
			if err := checkKeys(f.name, val, holdKeys, "hold"); err != nil {
				return err
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				pos["hold."+val.Content[j].Value] = scalarPos(val.Content[j+1], lines)
			}
		case "modify":
			if err := checkKeys(f.name, val, modifyKeys, "modify"); err != nil {
				return err
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				k, v := val.Content[j].Value, deref(val.Content[j+1])
				switch k {
				case "redact":
					for x, e := range v.Content {
						pos[fmt.Sprintf("modify.redact[%d]", x)] = scalarPos(e, lines)
					}
				case "set":
					for x := 0; x+1 < len(v.Content); x += 2 {
						pos["modify.set."+v.Content[x].Value] = scalarPos(v.Content[x+1], lines)
					}
				}
			}
		}
	}
	var r Rule
	if err := n.Decode(&r); err != nil {
		return yamlError(f.name, err)
	}
	f.Rules = append(f.Rules, r)
	f.pos = append(f.pos, pos)
	return nil
}

func (f *File) parseTest(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return &FileError{File: f.name, Line: n.Line, Column: n.Column, Message: "a test must be a mapping"}
	}
	if err := checkKeys(f.name, n, testKeys, "test"); err != nil {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, n.Content[i+1]
		switch key {
		case "step":
			if err := checkKeys(f.name, val, stepKeys, "step"); err != nil {
				return err
			}
		case "history":
			for _, h := range deref(val).Content {
				if err := checkKeys(f.name, h, historyKeys, "history step"); err != nil {
					return err
				}
			}
		}
	}
	var tc TestCase
	if err := n.Decode(&tc); err != nil {
		return yamlError(f.name, err)
	}
	tc.Line = n.Line
	f.Tests = append(f.Tests, tc)
	return nil
}

// checkKeys rejects keys outside allowed, so a misspelt field is an error rather than
// silently ignored (a rule without its `when` would otherwise never match).
func checkKeys(name string, n *yaml.Node, allowed map[string]bool, what string) error {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil
		}
		return &FileError{File: name, Line: n.Line, Column: n.Column, Message: what + " must be a mapping"}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Value == "<<" && k.Tag == "!!merge" {
			if err := checkMerged(name, n.Content[i+1], allowed, what); err != nil {
				return err
			}
			continue
		}
		if !allowed[k.Value] {
			return &FileError{File: name, Line: k.Line, Column: k.Column,
				Message: fmt.Sprintf("unknown field %q in %s", k.Value, what)}
		}
	}
	return nil
}

// checkMerged checks the mappings merged in with `<<: *anchor` (or a list of them).
func checkMerged(name string, v *yaml.Node, allowed map[string]bool, what string) error {
	v = deref(v)
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			if err := checkKeys(name, e, allowed, what); err != nil {
				return err
			}
		}
		return nil
	}
	return checkKeys(name, v, allowed, what)
}

// deref follows YAML aliases (*anchor) to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// yamlError turns a yaml.v3 error ("yaml: line 3: …", or a TypeError listing several) into
// a FileError with the line.
func yamlError(name string, err error) error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FileError{File: name, Line: line, Message: m[2], Err: err}
	}
	return &FileError{File: name, Message: msg, Err: err}
}

func scalarPos(n *yaml.Node, lines []string) nodePos {
	p := nodePos{line: n.Line, col: n.Column, style: n.Style}
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		for l := n.Line; l < len(lines); l++ { // lines[l] is file line l+1
			t := lines[l]
			if strings.TrimSpace(t) == "" {
				continue
			}
			p.indent = len(t) - len(strings.TrimLeft(t, " "))
			break
		}
	}
	return p
}

// locate maps a 1-based line and column inside a field's text to the file.
func (p nodePos) locate(line, col int, lines []string) (int, int) {
	if line <= 0 {
		return p.line, p.col
	}
	switch {
	case p.style&yaml.LiteralStyle != 0:
		return p.line + line, p.indent + col
	case p.style&yaml.FoldedStyle != 0:
		fl, c := p.line+line, col
		for fl-1 < len(lines) {
			n := utf8.RuneCountInString(strings.TrimSpace(lines[fl-1]))
			if c <= n+1 || fl >= len(lines) {
				break
			}
			c -= n + 1
			fl++
		}
		return fl, p.indent + c
	}
	if line > 1 {
		return p.line + line - 1, col
	}
	c := p.col + col - 1
	if p.style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		c++
	}
	return p.line, c
}

// Locate fills in File, FileLine and FileColumn of a diagnostic about rule d.Index of f.
func (f *File) Locate(d Diagnostic) Diagnostic {
	d.File = f.name
	if d.Index < 0 || d.Index >= len(f.pos) {
		return d
	}
	pos := f.pos[d.Index]
	p, ok := pos[d.Field]
	if !ok {
		p = pos[""]
		d.FileLine, d.FileColumn = p.line, p.col
		return d
	}
	d.FileLine, d.FileColumn = p.locate(d.Line, d.Column, f.lines)
	return d
}

// CompileFile compiles a parsed file's rules; compile errors carry file positions.
func CompileFile(f *File, opts Options) (*Program, error) {
	p, err := Compile(f.Rules, opts)
	var ce CompileErrors
	if errors.As(err, &ce) {
		out := make(CompileErrors, len(ce))
		for i, d := range ce {
			out[i] = f.Locate(d)
		}
		return nil, out
	}
	return p, err
}

// fileRule is a Rule as written to files: defaults left out.
type fileRule struct {
	ID          string      `json:"id" yaml:"id"`
	Name        string      `json:"name,omitempty" yaml:"name,omitempty"`
	Description string      `json:"description,omitempty" yaml:"description,omitempty"`
	When        string      `json:"when" yaml:"when"`
	Action      Action      `json:"action" yaml:"action"`
	Message     string      `json:"message,omitempty" yaml:"message,omitempty"`
	ReasonCode  string      `json:"reasonCode,omitempty" yaml:"reasonCode,omitempty"`
	Priority    int         `json:"priority,omitempty" yaml:"priority,omitempty"`
	Mode        Mode        `json:"mode,omitempty" yaml:"mode,omitempty"`
	Enabled     *bool       `json:"enabled,omitempty" yaml:"enabled,omitempty"`
	Hold        *HoldSpec   `json:"hold,omitempty" yaml:"hold,omitempty"`
	Modify      *ModifySpec `json:"modify,omitempty" yaml:"modify,omitempty"`
	ExpiresAt   *time.Time  `json:"expiresAt,omitempty" yaml:"expiresAt,omitempty"`
	Version     int         `json:"version,omitempty" yaml:"version,omitempty"`
	UpdatedAt   *time.Time  `json:"updatedAt,omitempty" yaml:"updatedAt,omitempty"`
}

type fileDoc struct {
	Rules []fileRule `json:"rules" yaml:"rules"`
	Tests []TestCase `json:"tests,omitempty" yaml:"tests,omitempty"`
}

// MarshalFile writes f as "yaml" or "json"; ParseFile reads the result back to the same
// rules and tests.
func MarshalFile(f *File, format string) ([]byte, error) {
	doc := fileDoc{Rules: make([]fileRule, len(f.Rules)), Tests: f.Tests}
	for i, r := range f.Rules {
		fr := fileRule{ID: r.ID, Name: r.Name, Description: r.Description, When: r.When,
			Action: r.Action, Message: r.Message, ReasonCode: r.ReasonCode, Priority: r.Priority,
			Hold: r.Hold, Modify: r.Modify, ExpiresAt: r.ExpiresAt, Version: r.Version}
		if r.Mode != ModeEnforce {
			fr.Mode = r.Mode
		}
		if !r.Enabled {
			off := false
			fr.Enabled = &off
		}
		if !r.UpdatedAt.IsZero() {
			t := r.UpdatedAt
			fr.UpdatedAt = &t
		}
		doc.Rules[i] = fr
	}
	switch format {
	case "json":
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("rules: marshal json: %w", err)
		}
		return append(b, '\n'), nil
	case "yaml", "yml", "":
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(doc); err != nil {
			return nil, fmt.Errorf("rules: marshal yaml: %w", err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("rules: marshal yaml: %w", err)
		}
		return buf.Bytes(), nil
	}
	return nil, fmt.Errorf("rules: unknown file format %q (want yaml or json)", format)
}
