package rules

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
)

// envHelpers receive the evaluation's *Env as a hidden first argument (inserted by
// envPatcher), which is how pii(text) is computed once per step however many rules call it.
// The text helpers all take it, so that the text they read in a map or a list is built once
// per evaluation and charged to its budget (textArg).
var envHelpers = map[string]bool{
	"pii": true, "piiKinds": true, "emails": true, "secrets": true, "secretKinds": true,
	"urls": true, "sessionText": true, "countTool": true, "countMethod": true,
	"countKind": true, "countDecision": true, "countToolWithin": true, "sessionHas": true,
	"toolStreak": true, "regexMatch": true, "regexFind": true, "domain": true,
	"glob": true, "icontains": true, "containsAny": true,
}

// envPatcher inserts `$env` as the first argument of calls to envHelpers and routes the
// `matches` operator through the Program's regexp cache, whose literal prefilter skips most
// regexp runs (and expr would compile a non-constant pattern on every evaluation). It
// checks constant regexp and glob arguments, so a bad one is a compile error.
type envPatcher struct {
	errs []patchError
}

type patchError struct {
	loc int // rune offset in the expression
	err error
}

func (p *envPatcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.PredicateNode:
		tickPredicate(n)
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok {
			return
		}
		p.checkConstant(id.Value, n)
		// The builtins that count their work take the Env too (see budgetedBuiltins).
		if !envHelpers[id.Value] && budgetedBuiltins[id.Value] == nil {
			return
		}
		if len(n.Arguments) > 0 {
			if a, ok := n.Arguments[0].(*ast.IdentifierNode); ok && a.Value == "$env" {
				return
			}
		}
		args := append([]ast.Node{&ast.IdentifierNode{Value: "$env"}}, n.Arguments...)
		ast.Patch(node, &ast.CallNode{Callee: n.Callee, Arguments: args})
	case *ast.BinaryNode:
		if n.Operator == "+" && mayBeString(n.Left) && mayBeString(n.Right) {
			ast.Patch(node, &ast.CallNode{
				Callee:    &ast.IdentifierNode{Value: addFunc},
				Arguments: []ast.Node{&ast.IdentifierNode{Value: "$env"}, n.Left, n.Right},
			})
			return
		}
		if n.Operator != "matches" {
			return
		}
		if c, constant := n.Right.(*ast.StringNode); constant {
			if _, err := regexp.Compile(c.Value); err != nil {
				return // left to expr, which reports it with its position
			}
		}
		ast.Patch(node, &ast.CallNode{
			Callee:    &ast.IdentifierNode{Value: "regexMatch"},
			Arguments: []ast.Node{&ast.IdentifierNode{Value: "$env"}, n.Left, n.Right},
		})
	}
}

// checkConstant validates constant pattern arguments of regexMatch, regexFind and glob.
func (p *envPatcher) checkConstant(name string, n *ast.CallNode) {
	args := n.Arguments
	if len(args) > 0 {
		if a, ok := args[0].(*ast.IdentifierNode); ok && a.Value == "$env" {
			args = args[1:]
		}
	}
	var idx int
	switch name {
	case "regexMatch", "regexFind":
		idx = 1
	case "glob":
		idx = 0
	default:
		return
	}
	if idx >= len(args) {
		return
	}
	c, ok := args[idx].(*ast.StringNode)
	if !ok {
		return
	}
	var err error
	if name == "glob" {
		var src string
		if src, err = globRegexp(c.Value); err == nil {
			_, err = regexp.Compile(src)
		}
	} else {
		_, err = regexp.Compile(c.Value)
	}
	if err != nil {
		p.errs = append(p.errs, patchError{loc: c.Location().From, err: err})
	}
}

// maxCachedRegexps bounds a Program's regexp cache; patterns beyond it compile per call.
const maxCachedRegexps = 1024

// regexCache holds the regular expressions (and translated globs) a Program's rules use at
// run time. It belongs to one Program, so a reload starts clean.
type regexCache struct {
	m     sync.Map // regexp -> regexEntry
	globs sync.Map // glob -> regexEntry
	size  atomic.Int64
}

type regexEntry struct {
	re  *regexp.Regexp
	err error
	// pre are literals one of which any match contains; nil when none is known.
	pre []literal
}

func (c *regexCache) entry(pattern string) regexEntry {
	if v, ok := c.m.Load(pattern); ok {
		return v.(regexEntry)
	}
	// A pattern taken from a step may share the request's memory; the cache keeps it.
	pattern = strings.Clone(pattern)
	var e regexEntry
	e.re, e.err = regexp.Compile(pattern)
	if e.err != nil {
		e.err = fmt.Errorf("invalid regular expression %q: %w", pattern, e.err)
	} else {
		e.pre = requiredLiterals(pattern)
	}
	if c.size.Load() < maxCachedRegexps {
		if _, loaded := c.m.LoadOrStore(pattern, e); !loaded {
			c.size.Add(1)
		}
	}
	return e
}

func (c *regexCache) get(pattern string) (*regexp.Regexp, error) {
	e := c.entry(pattern)
	return e.re, e.err
}

// match runs pattern on s, skipping the regexp when s lacks all of its required literals.
func (c *regexCache) match(e *Env, pattern, s string) (bool, error) {
	en := c.entry(pattern)
	if en.err != nil {
		return false, en.err
	}
	return en.match(e, s), nil
}

// match runs a valid entry's regexp on s, skipping it when s lacks all required literals.
func (en regexEntry) match(e *Env, s string) bool {
	if en.pre != nil && !anyLiteralIn(e, en.pre, s) {
		return false
	}
	return en.re.MatchString(s)
}

func (c *regexCache) glob(pattern, s string) (bool, error) {
	e := c.globEntry(pattern)
	if e.err != nil {
		return false, e.err
	}
	return e.re.MatchString(s), nil
}

// globEntry compiles a glob once. Globs have a map of their own: keyed by the pattern as
// it is, a lookup on every step builds no key.
func (c *regexCache) globEntry(pattern string) regexEntry {
	if v, ok := c.globs.Load(pattern); ok {
		return v.(regexEntry)
	}
	src, err := globRegexp(pattern)
	var re *regexp.Regexp
	if err == nil {
		re, err = regexp.Compile(src)
	}
	if err != nil {
		err = fmt.Errorf("invalid glob %q: %w", pattern, err)
	}
	e := regexEntry{re: re, err: err}
	if c.size.Load() < maxCachedRegexps {
		if _, loaded := c.globs.LoadOrStore(pattern, e); !loaded {
			c.size.Add(1)
		}
	}
	return e
}

// isGlob reports whether a tool/kind argument is a pattern rather than a plain name.
func isGlob(s string) bool { return strings.ContainsAny(s, "*?[\\") }

// evalState is the per-evaluation scratch space, pooled by the Program.
type evalState struct {
	env  Env
	vm   vm.VM
	memo map[memoKey]memoEntry
	sess *sessionIndex
	// has caches sessionHas answers by selector and text.
	has []hasEntry
	// folded is the text the regexp prefilters last lower-cased.
	folded folded
	// budget bounds the rule being evaluated.
	budget budget
	// filled are the deferred Env fields already computed (Env.Defer).
	filled reads
	// shard is the counter shard this state counts in; evaluations counts its own
	// evaluations, to pick the timed ones; mask is the candidate rules' buffer. They
	// outlive reset.
	shard       int
	evaluations uint64
	mask        []uint64
	// litOK is the literal screening's buffer; it outlives reset too.
	litOK []uint64
	// texts are the maps and lists the text helpers read, with their text (textArg).
	texts []textEntry
}

// hasEntry is a sessionHas answer. The question is kept as its two strings: joined with a
// separator, ("a\x00", "b") and ("a", "\x00b") would be the same question, and joining
// them cost an allocation per call.
type hasEntry struct {
	sel, sub string
	v        bool
}

// memoKey identifies a helper call by the argument's address and length rather than its
// content: the same `text` is passed many times and hashing it each time would cost more
// than some helpers. The entry keeps the string, which both confirms a hit and keeps its
// memory from being reused by another string during the evaluation.
type memoKey struct {
	fn string
	p  *byte
	n  int
}

// memoEntry holds a result in the field of its type: stored in an interface, every slice
// result would be one more allocation per helper and step.
type memoEntry struct {
	s     string
	str   string
	strs  []string
	spans []span
}

// memoResult lists the result types memoEntry has a field for.
type memoResult interface {
	string | []string | []span
}

// slotOf is the field of m that holds a T.
func slotOf[T memoResult](m *memoEntry) *T {
	var p unsafe.Pointer
	switch any((*T)(nil)).(type) {
	case *string:
		p = unsafe.Pointer(&m.str)
	case *[]string:
		p = unsafe.Pointer(&m.strs)
	case *[]span:
		p = unsafe.Pointer(&m.spans)
	default:
		panic("rules: memoResult and slotOf disagree") // unreachable: T is one of the three
	}
	return (*T)(p)
}

func (st *evalState) reset() {
	st.env = Env{}
	clear(st.memo)
	st.sess = nil
	clear(st.has) // its strings may be a request's: a pooled state must not keep them alive
	st.has = st.has[:0]
	st.folded = folded{}
	st.budget = budget{}
	st.filled = 0
	clear(st.texts) // they are a step's values: a pooled state must not keep them alive
	st.texts = st.texts[:0]
}

// envOf returns the evaluation's Env passed as a helper's hidden first argument.
func envOf(v any) *Env {
	e, _ := v.(*Env)
	if e == nil {
		e = &Env{}
	}
	return e
}

// memo returns fn(s) computed once per evaluation and helper.
func memo[T memoResult](e *Env, name, s string, fn func(string) T) T {
	st := e.state
	if st == nil {
		return fn(s)
	}
	k := memoKey{name, unsafe.StringData(s), len(s)}
	m, ok := st.memo[k]
	if ok && m.s == s {
		return *slotOf[T](&m)
	}
	m = memoEntry{s: s}
	v := fn(s)
	*slotOf[T](&m) = v
	st.memo[k] = m
	return v
}

// maxTexts bounds the converted values an evaluation keeps. Past it a value is converted on
// every call: a predicate over a long list meets each element once anyway.
const maxTexts = 8

// textEntry is a map or a list a text helper read, and its text.
type textEntry struct {
	// v keeps the value alive, so that no other value takes its address during the
	// evaluation.
	v any
	// p is the map, or the list's first element; n is the list's length (-1 for a map).
	p    unsafe.Pointer
	n    int
	text string
}

// textOf is the text a text helper reads in v: a string as it is, nil (also a nil map, list
// or pointer, such as the inputs of a step that has none) as "", anything else as toText
// writes it: numbers and booleans as written, maps and lists as their JSON. The guards read
// inputs with it; the helpers with textArg, which gives the same text.
func textOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if isNil(v) {
		return ""
	}
	return toText(v)
}

// isNil reports whether v is nil, or a nil map, list, pointer or function.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Map, reflect.Slice, reflect.Pointer, reflect.Func, reflect.Chan:
		return r.IsNil()
	}
	return false
}

// textArg is textOf(v) for a helper evaluating in e. Building JSON is charged to the budget
// as toJSON is, before it is built. A map or a list is converted once per evaluation:
// pii(inputs) in ten rules encodes the inputs once, and its text, having one address, is
// scanned once (memo keys on the address).
func textArg(e *Env, v any) (string, error) {
	var p unsafe.Pointer
	n := -1
	switch x := v.(type) {
	case string:
		return x, nil
	case nil:
		return "", nil
	case bool, int, int64, float64:
		return toText(v), nil // a few bytes, written without JSON
	case map[string]any:
		if x == nil {
			return "", nil
		}
		p = reflect.ValueOf(x).UnsafePointer()
	case []any:
		if x == nil {
			return "", nil
		}
		p, n = unsafe.Pointer(unsafe.SliceData(x)), len(x)
	default:
		if isNil(v) {
			return "", nil
		}
	}
	st := e.state
	if st != nil && p != nil {
		for i := range st.texts {
			if t := &st.texts[i]; t.p == p && t.n == n {
				return t.text, nil
			}
		}
	}
	size := sizeOf(v, MaxProduced+1)
	if err := spend(e, size, size); err != nil {
		return "", err
	}
	s := toText(v)
	if st != nil && p != nil && len(st.texts) < maxTexts {
		st.texts = append(st.texts, textEntry{v: v, p: p, n: n, text: s})
	}
	return s, nil
}

// lowerOf is strings.ToLower(s), computed once per evaluation: the icontains and
// containsAny tests of a step's rules mostly ask about the same text or reasoning.
func lowerOf(e *Env, s string) string { return memo(e, "toLower", s, strings.ToLower) }

func piiSpans(e *Env, s string) []span    { return memo(e, "piiSpans", s, findPII) }
func secretSpans(e *Env, s string) []span { return memo(e, "secretSpans", s, findSecrets) }
func urlSpans(e *Env, s string) []span    { return memo(e, "urlSpans", s, findURLs) }

// scanners are the text-scanning helpers: what they find, and what of it they return.
var scanners = map[string]struct {
	find    func(*Env, string) []span
	project func(string, []span) []string
}{
	"pii":         {piiSpans, spanStrings},
	"piiKinds":    {piiSpans, func(_ string, sp []span) []string { return spanKinds(sp, piiKindOrder) }},
	"emails":      {piiSpans, onlyKind(PIIEmail)},
	"secrets":     {secretSpans, spanStrings},
	"secretKinds": {secretSpans, func(_ string, sp []span) []string { return spanKinds(sp, secretKindOrder) }},
	"urls":        {urlSpans, spanStrings},
}

// onlyKind projects the spans of one kind.
func onlyKind(kind string) func(string, []span) []string {
	return func(s string, sp []span) []string {
		out := []string{}
		for _, x := range sp {
			if x.kind == kind {
				out = append(out, s[x.start:x.end])
			}
		}
		return out
	}
}

// scanList is the result of the scanner name on s, computed once per evaluation.
func scanList(e *Env, name, s string) []string {
	sc := scanners[name]
	return memo(e, name, s, func(s string) []string {
		_ = spend(e, len(s), 0) // an overrun shows at the next check: the work is done
		return sc.project(s, sc.find(e, s))
	})
}

// urlDomains is domain() of each of urls(s), for guards.
func urlDomains(e *Env, s string) []string { return memo(e, "urlDomains", s, domainsOfURLs) }

func domainsOfURLs(s string) []string {
	spans := findURLs(s)
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = domainOf(s[sp.start:sp.end])
	}
	return out
}

// sessionIndex aggregates the history once per evaluation for the counting helpers; each
// map is built on first use.
type sessionIndex struct {
	steps                            []HistoryStep
	tools, methods, kinds, decisions map[string]int
	text                             *string
	lower                            []string
}

// isToolCall reports whether a history step is a tool invocation (not its result).
func isToolCall(h *HistoryStep) bool { return h.Tool != "" && h.Kind != "toolResult" }

// sameSteps reports whether s is the evaluation's own session, so its index may be used.
func sameSteps(e *Env, s Session) bool {
	a, b := s.Steps, e.Session.Steps
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// counts returns (building once) the map of counts of one HistoryStep field.
func (ix *sessionIndex) counts(field string) map[string]int {
	var slot *map[string]int
	switch field {
	case "tool":
		slot = &ix.tools
	case "method":
		slot = &ix.methods
	case "kind":
		slot = &ix.kinds
	default:
		slot = &ix.decisions
	}
	if *slot != nil {
		return *slot
	}
	m := map[string]int{}
	for i := range ix.steps {
		h := &ix.steps[i]
		switch field {
		case "tool":
			if isToolCall(h) {
				m[h.Tool]++
			}
		case "method":
			m[h.Method]++
		case "kind":
			m[h.Kind]++
		case "decision":
			m[h.Decision]++
		}
	}
	*slot = m
	return m
}

// sessionOf returns the aggregate index of s, cached when s is the evaluation's session.
func sessionOf(e *Env, s Session) *sessionIndex {
	st := e.state
	if st == nil || !sameSteps(e, s) {
		return &sessionIndex{steps: s.Steps}
	}
	if st.sess == nil {
		st.sess = &sessionIndex{steps: s.Steps}
		if c := s.counts; c != nil {
			st.sess.tools, st.sess.methods, st.sess.kinds, st.sess.decisions = c.Tools, c.Methods, c.Kinds, c.Decisions
		}
	}
	return st.sess
}

// countIn counts name in m; a glob name sums every matching key.
func countIn(c *regexCache, m map[string]int, name string) (int, error) {
	if !isGlob(name) {
		return m[name], nil
	}
	n := 0
	for k, v := range m {
		ok, err := c.glob(name, k)
		if err != nil {
			return 0, err
		}
		if ok {
			n += v
		}
	}
	return n, nil
}

func sessionTextOf(e *Env, s Session) string {
	join := func() string {
		n := 0
		for _, h := range s.Steps {
			n += len(h.Text) + 1
		}
		_ = spend(e, n, n) // an overrun shows at the next check
		var b strings.Builder
		b.Grow(n)
		for i, h := range s.Steps {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(h.Text)
		}
		return b.String()
	}
	if e.state == nil || !sameSteps(e, s) {
		return join()
	}
	if m := memoOf(e, s); m != nil {
		if t, ok := m.sessionText(s); ok {
			_ = spend(e, len(t), len(t)) // what the join would have cost the budget
			return t
		}
	}
	ix := sessionOf(e, s)
	if ix.text == nil {
		t := join()
		ix.text = &t
	}
	return *ix.text
}

// lowerText returns the lower-cased text of step i, cached per evaluation.
func lowerText(e *Env, s Session, i int) string {
	if e.state == nil || !sameSteps(e, s) {
		return strings.ToLower(s.Steps[i].Text)
	}
	ix := sessionOf(e, s)
	if ix.lower == nil {
		ix.lower = make([]string, len(s.Steps))
		for k := range s.Steps {
			ix.lower[k] = strings.ToLower(s.Steps[k].Text)
		}
	}
	return ix.lower[i]
}

// stepMatches reports whether a history step's tool or kind matches the selector ("" and
// "*" select every step).
func stepMatches(c *regexCache, h *HistoryStep, sel string) (bool, error) {
	if sel == "" || sel == "*" {
		return true, nil
	}
	if !isGlob(sel) {
		return h.Tool == sel || h.Kind == sel, nil
	}
	if ok, err := c.glob(sel, h.Tool); err != nil || ok {
		return ok, err
	}
	return c.glob(sel, h.Kind)
}

// sessionHas reports whether an earlier step selected by sel (a tool or kind, glob, "*")
// has text containing sub (already lower-cased).
func sessionHas(c *regexCache, e *Env, s Session, sel, sub string) (bool, error) {
	all, pattern := sel == "" || sel == "*", isGlob(sel)
	for i := range s.Steps {
		h := &s.Steps[i]
		ok := all || h.Tool == sel || h.Kind == sel
		if !ok && pattern {
			var err error
			if ok, err = stepMatches(c, h, sel); err != nil {
				return false, err
			}
		}
		if ok && strings.Contains(lowerText(e, s, i), sub) {
			return true, nil
		}
	}
	return false, nil
}

// sessionHasCached is sessionHas answered once per evaluation and question, from the
// session's memo when it has one.
func sessionHasCached(c *regexCache, e *Env, s Session, sel, sub string) (bool, error) {
	if e.state == nil || !sameSteps(e, s) {
		return sessionHas(c, e, s, sel, sub)
	}
	for _, q := range e.state.has {
		if q.sel == sel && q.sub == sub {
			return q.v, nil
		}
	}
	var v bool
	var err error
	ok := false
	if m := memoOf(e, s); m != nil {
		v, ok, err = m.sessionHas(c, s, sel, sub)
	}
	if !ok && err == nil {
		v, err = sessionHas(c, e, s, sel, sub)
	}
	if err == nil {
		e.state.has = append(e.state.has, hasEntry{sel, sub, v})
	}
	return v, err
}

// countToolWithin counts the calls of tool name (a glob allowed) in s received within d
// before now, from the session's memo when it has one.
func countToolWithin(c *regexCache, e *Env, s Session, name string, d time.Duration) (int, error) {
	since := e.Now.Add(-d)
	if m := memoOf(e, s); m != nil {
		if n, ok, err := m.countWithin(c, s, name, since); ok || err != nil {
			return n, err
		}
	}
	n := 0
	for i := len(s.Steps) - 1; i >= 0; i-- {
		h := &s.Steps[i]
		if h.ReceivedAt.Before(since) {
			break // history is oldest first
		}
		if !isToolCall(h) {
			continue
		}
		ok := h.Tool == name
		if isGlob(name) {
			var err error
			if ok, err = c.glob(name, h.Tool); err != nil {
				return 0, err
			}
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// toolStreak counts the newest consecutive calls of tool name (a glob allowed) in s.
func toolStreak(c *regexCache, s Session, name string) (int, error) {
	n := 0
	for i := len(s.Steps) - 1; i >= 0; i-- {
		h := &s.Steps[i]
		if !isToolCall(h) {
			continue
		}
		ok := h.Tool == name
		if isGlob(name) {
			var err error
			if ok, err = c.glob(name, h.Tool); err != nil {
				return 0, err
			}
		}
		if !ok {
			break
		}
		n++
	}
	return n, nil
}

func toStrings(v any) []string {
	switch x := v.(type) {
	case []string:
		return x
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			out[i] = toText(e)
		}
		return out
	case nil:
		return nil
	}
	return []string{toText(v)}
}

func toDuration(v any) (time.Duration, error) {
	switch x := v.(type) {
	case time.Duration:
		return x, nil
	case string:
		return time.ParseDuration(x)
	case int:
		return time.Duration(x) * time.Second, nil
	case float64:
		return time.Duration(x * float64(time.Second)), nil
	}
	return 0, fmt.Errorf("expected a duration, got %T", v)
}

// helperOptions returns the expr options that define Vigil's helper functions; the regexp
// cache c belongs to the Program being compiled.
func helperOptions(c *regexCache) []expr.Option {
	str := func(v any) string { return toText(v) }
	// The text a helper reads is typed any: whatever the value, it reads its text (textArg).
	spanFn := func(name string) expr.Option {
		return expr.Function(name, func(p ...any) (any, error) {
			e := envOf(p[0])
			if err := spend(e, 0, 0); err != nil {
				return nil, err
			}
			s, err := textArg(e, p[1])
			if err != nil {
				return nil, err
			}
			return scanList(e, name, s), nil
		}, new(func(Env, any) []string))
	}
	session := func(v any) Session { s, _ := v.(Session); return s }
	counter := func(name, field string) expr.Option {
		return expr.Function(name, func(p ...any) (any, error) {
			e := envOf(p[0])
			return countIn(c, sessionOf(e, session(p[1])).counts(field), str(p[2]))
		}, new(func(Env, Session, string) int))
	}

	return append(budgetOptions(),
		spanFn("pii"), spanFn("piiKinds"), spanFn("emails"), spanFn("secrets"), spanFn("secretKinds"),
		spanFn("urls"),
		expr.Function("domain", func(p ...any) (any, error) {
			e := envOf(p[0])
			s, err := textArg(e, p[1])
			if err != nil {
				return nil, err
			}
			return memo(e, "domain", s, domainOf), nil
		}, new(func(Env, any) string)),
		expr.Function("glob", func(p ...any) (any, error) {
			s, err := textArg(envOf(p[0]), p[2])
			if err != nil {
				return false, err
			}
			return c.glob(str(p[1]), s)
		}, new(func(Env, string, any) bool)),
		expr.Function("regexMatch", func(p ...any) (any, error) {
			e := envOf(p[0])
			s, err := textArg(e, p[1])
			if err != nil {
				return false, err
			}
			if err := spend(e, len(s), 0); err != nil {
				return false, err
			}
			return c.match(e, str(p[2]), s)
		}, new(func(Env, any, string) bool)),
		expr.Function("regexFind", func(p ...any) (any, error) {
			e := envOf(p[0])
			s, err := textArg(e, p[1])
			if err != nil {
				return nil, err
			}
			if err := spend(e, len(s), 0); err != nil {
				return nil, err
			}
			re, err := c.get(str(p[2]))
			if err != nil {
				return nil, err
			}
			out := re.FindAllString(s, 100)
			if out == nil {
				out = []string{}
			}
			return out, nil
		}, new(func(Env, any, string) []string)),
		expr.Function("icontains", func(p ...any) (any, error) {
			s, err := textArg(envOf(p[0]), p[1])
			if err != nil {
				return false, err
			}
			return strings.Contains(strings.ToLower(s), strings.ToLower(str(p[2]))), nil
		}, new(func(Env, any, string) bool)),
		expr.Function("containsAny", func(p ...any) (any, error) {
			s, err := textArg(envOf(p[0]), p[1])
			if err != nil {
				return false, err
			}
			s = strings.ToLower(s)
			for _, sub := range toStrings(p[2]) {
				if sub != "" && strings.Contains(s, strings.ToLower(sub)) {
					return true, nil
				}
			}
			return false, nil
		}, new(func(Env, any, []any) bool), new(func(Env, any, []string) bool)),
		counter("countTool", "tool"),
		counter("countMethod", "method"),
		counter("countKind", "kind"),
		counter("countDecision", "decision"),
		expr.Function("countToolWithin", func(p ...any) (any, error) {
			e := envOf(p[0])
			s := session(p[1])
			name := str(p[2])
			d, err := toDuration(p[3])
			if err != nil {
				return 0, err
			}
			return countToolWithin(c, e, s, name, d)
		}, new(func(Env, Session, string, time.Duration) int)),
		expr.Function("toolStreak", func(p ...any) (any, error) {
			return toolStreak(c, session(p[1]), str(p[2]))
		}, new(func(Env, Session, string) int)),
		expr.Function("lastTool", func(p ...any) (any, error) {
			s := session(p[0])
			for i := len(s.Steps) - 1; i >= 0; i-- {
				if isToolCall(&s.Steps[i]) {
					return s.Steps[i].Tool, nil
				}
			}
			return "", nil
		}, new(func(Session) string)),
		expr.Function("sessionText", func(p ...any) (any, error) {
			e := envOf(p[0])
			if err := spend(e, 0, 0); err != nil {
				return nil, err
			}
			return sessionTextOf(e, session(p[1])), nil
		}, new(func(Env, Session) string)),
		expr.Function("sessionHas", func(p ...any) (any, error) {
			e := envOf(p[0])
			s := session(p[1])
			sel := str(p[2])
			return sessionHasCached(c, e, s, sel, strings.ToLower(str(p[3])))
		}, new(func(Env, Session, string, string) bool)),
		// The clock is the Env's `now`, so evaluation is repeatable in tests and backtests.
		expr.DisableBuiltin("now"),
	)
}
