package rules

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"
)

// Size limits: a rule is data an operator types into a form, and must not be able to make
// the guardian compile or render something huge.
const (
	MaxExprLen    = 8 << 10 // bytes of a `when` or `set` expression
	MaxMessageLen = 2 << 10 // bytes of a message template
	MaxNodes      = 2000    // AST nodes per expression (expr.MaxNodes)
	MaxIDLen      = 128
	// maxRendered caps an interpolated message (inputs can be large).
	maxRendered = 4 << 10
)

// Options configure compilation and evaluation. The zero value is usable: defaults apply.
type Options struct {
	// DefaultDecision applies when no enforced rule matches (allow).
	DefaultDecision Action
	// OnErrorEnforce decides for an enforced rule that fails at run time (deny: fail closed).
	OnErrorEnforce Action
	// OnErrorMonitor decides for a monitor rule that fails at run time (allow: fail open).
	OnErrorMonitor Action
	// Now is the clock for Env.Now when the Env carries none (time.Now).
	Now func() time.Time
	// MaxHistory caps the session steps helpers see, keeping the newest (1000). The
	// guardian can use it as the number of earlier steps to load.
	MaxHistory int
	// Logger receives rule run-time errors: at most one line per rule per minute, which
	// counts the errors held back since the last one (suppressed); nil logs nothing.
	Logger *slog.Logger
	// Budget is the time one rule may take on one step (DefaultBudget when 0; negative:
	// no time limit). A rule past it, or past the work limits (MaxProduced,
	// VMMemoryBudget), fails with "evaluation budget exceeded (…)" and the error policy
	// decides for it.
	Budget time.Duration
	// HoldTimeout is how long a held step waits for an operator when its rule names no
	// timeout, and when a failing rule's error policy holds (DefaultHoldTimeout when 0).
	// The guardian sets it from --hold-timeout, which also bounds the holds of paused
	// sessions: one default for every hold.
	HoldTimeout time.Duration
}

// DefaultMaxHistory is Options.MaxHistory when unset.
const DefaultMaxHistory = 1000

func (o Options) withDefaults() Options {
	if !o.DefaultDecision.Valid() {
		o.DefaultDecision = ActionAllow
	}
	// A run-time error cannot say how to modify a request, so the error policies are
	// restricted to allow, deny and hold.
	if !o.OnErrorEnforce.Valid() || o.OnErrorEnforce == ActionModify {
		o.OnErrorEnforce = ActionDeny
	}
	if !o.OnErrorMonitor.Valid() || o.OnErrorMonitor == ActionModify {
		o.OnErrorMonitor = ActionAllow
	}
	if o.DefaultDecision == ActionModify {
		o.DefaultDecision = ActionAllow
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxHistory <= 0 {
		o.MaxHistory = DefaultMaxHistory
	}
	if o.Budget == 0 {
		o.Budget = DefaultBudget
	}
	if o.HoldTimeout <= 0 {
		o.HoldTimeout = DefaultHoldTimeout
	}
	return o
}

// Diagnostic is one problem found compiling a rule. Line and Column (1-based) are
// positions inside the field's text: the expression for "when" and "modify.set.NAME", the
// template for "message". FileLine and FileColumn locate it in the rules file, when the rule
// came from one.
type Diagnostic struct {
	RuleID string `json:"ruleId,omitempty"`
	// Index is the rule's position in the list that was compiled.
	Index      int    `json:"-"`
	Field      string `json:"field"`
	Line       int    `json:"line,omitempty"`
	Column     int    `json:"column,omitempty"`
	Message    string `json:"message"`
	Snippet    string `json:"snippet,omitempty"`
	File       string `json:"file,omitempty"`
	FileLine   int    `json:"fileLine,omitempty"`
	FileColumn int    `json:"fileColumn,omitempty"`
}

// String formats the diagnostic as "file:line:col: rule ID: field: message (line:col)".
func (d Diagnostic) String() string {
	var b strings.Builder
	if d.File != "" {
		b.WriteString(d.File)
		if d.FileLine > 0 {
			fmt.Fprintf(&b, ":%d:%d", d.FileLine, d.FileColumn)
		}
		b.WriteString(": ")
	}
	if d.RuleID != "" {
		fmt.Fprintf(&b, "rule %s: ", d.RuleID)
	} else if d.File != "" || d.Index > 0 {
		fmt.Fprintf(&b, "rule #%d: ", d.Index+1)
	}
	if d.Field != "" {
		b.WriteString(d.Field)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	if d.Line > 0 {
		fmt.Fprintf(&b, " (%d:%d)", d.Line, d.Column)
	}
	return b.String()
}

// CompileErrors is the error Load, Compile and CompileFile return when a rule does not
// compile; use errors.As to get the diagnostics.
type CompileErrors []Diagnostic

func (c CompileErrors) Error() string {
	if len(c) == 0 {
		return "rules: no errors"
	}
	var b strings.Builder
	for i, d := range c {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(c)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(d.String())
	}
	return b.String()
}

// Program is a compiled, immutable rule set. Evaluate is safe for concurrent use.
type Program struct {
	rules  []*compiledRule
	active []*compiledRule
	opts   Options
	cache  *regexCache
	pool   sync.Pool // *evalState
	// states counts the evaluation states made, to spread them over the counter shards.
	states atomic.Uint32
	// counter counts evaluations, shared with the programs that replace this one in an
	// Engine; index narrows each step's rules.
	counter *evalCounter
	index   *ruleIndex
	// activeReads is what costly Env fields the active rules may read.
	activeReads reads
	// noMatch is the reasoning of a step no rule matched.
	noMatch string
	// panicLog paces the log lines of evaluations that panicked.
	panicLog logLimiter
}

type compiledRule struct {
	// What every step reads of a candidate rule comes first, together, ahead of the
	// rule's definition: a step looks at dozens of rules, and when the machine's other
	// work has pushed them out of the caches, each line read is a trip to memory.
	guards []guard
	// whole is true when the guards are the whole condition: passing them is a match.
	whole bool
	// reads is what costly Env fields the rule's expressions may read.
	reads reads
	when  *vm.Program
	mode  Mode
	set   []setExpr

	Rule
	code   string
	msg    *template
	redact []redactor
	hold   HoldSpec
	stats  *ruleStats
	// lits is a literal condition of one of the guards, for the index's screening.
	lits *litGroup
}

type setExpr struct {
	name string
	prog *vm.Program
}

var idRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// Validate compiles one draft rule and returns its problems; nil means it compiles.
func Validate(r Rule) []Diagnostic {
	cache := &regexCache{}
	_, diags := compileRule(r, helperOptions(cache), cache)
	return diags
}

// ValidateExpr compiles a bare condition, for editors that check `when` as it is typed.
func ValidateExpr(when string) []Diagnostic {
	_, diags := compileExpr(when, "when", true, helperOptions(&regexCache{}))
	return diags
}

// Compile compiles rules into a Program without touching any Engine: for tests, drafts and
// backtests. Every rule is checked, including disabled ones; any problem fails the whole
// set with CompileErrors.
func Compile(rules []Rule, opts Options) (*Program, error) {
	p, err := compile(rules, opts, nil, &evalCounter{})
	if err != nil {
		return nil, err
	}
	p.activate(nil)
	return p, nil
}

// compile builds a program whose rules keep their stats from prev, by id, and count
// evaluations with counter. The caller then activates it.
func compile(rules []Rule, opts Options, prev map[string]*ruleStats, counter *evalCounter) (*Program, error) {
	p := &Program{opts: opts.withDefaults(), cache: &regexCache{}, counter: counter}
	hopts := helperOptions(p.cache)
	var diags CompileErrors
	seen := make(map[string]int, len(rules))
	for i, r := range rules {
		cr, ds := compileRule(r, hopts, p.cache)
		for k := range ds {
			ds[k].Index = i
		}
		diags = append(diags, ds...)
		if first, dup := seen[r.ID]; dup && r.ID != "" {
			diags = append(diags, Diagnostic{RuleID: r.ID, Index: i, Field: "id",
				Message: fmt.Sprintf("duplicate rule id (also rule #%d)", first+1)})
		}
		seen[r.ID] = i
		if cr == nil {
			continue
		}
		if cr.hold.Timeout == 0 {
			cr.hold.Timeout = Duration(p.opts.HoldTimeout)
		}
		if s := prev[r.ID]; s != nil {
			cr.stats = s
		} else {
			cr.stats = &ruleStats{counter: counter}
		}
		p.rules = append(p.rules, cr)
		if cr.Enabled && cr.mode != ModeOff {
			p.active = append(p.active, cr)
		}
	}
	if len(diags) > 0 {
		return nil, diags
	}
	p.index = newRuleIndex(p.active)
	p.noMatch = reasoning(Verdict{Action: p.opts.DefaultDecision}, nil, nil)
	for _, c := range p.active {
		p.activeReads |= c.reads
	}
	p.pool.New = func() any {
		return &evalState{memo: make(map[memoKey]memoEntry, 8), shard: int(p.states.Add(1) % statShards),
			vm: vm.VM{MemoryBudget: VMMemoryBudget}}
	}
	return p, nil
}

// activate starts the active periods of p's active rules and ends those of its other
// rules and of the rules of old (the program p replaces) that p drops.
func (p *Program) activate(old *Program) {
	now := p.counter.sum()
	kept := make(map[*ruleStats]bool, len(p.rules))
	for _, r := range p.rules {
		kept[r.stats] = true
	}
	if old != nil {
		for _, r := range old.rules {
			if !kept[r.stats] {
				r.stats.setActive(false, now)
			}
		}
	}
	active := make(map[*compiledRule]bool, len(p.active))
	for _, r := range p.active {
		active[r] = true
	}
	for _, r := range p.rules {
		r.stats.setActive(active[r], now)
	}
}

// Rules returns copies of the program's rules in their original order.
func (p *Program) Rules() []Rule {
	out := make([]Rule, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.Rule
	}
	return out
}

// UsesParams reports whether an evaluated rule reads Env.Params. Decoding a step's params
// into a map costs more than many rules, so an Env builder may skip it when this is false
// (and must then evaluate with this same Program).
func (p *Program) UsesParams() bool { return p.reads()&readsParams != 0 }

// UsesToolDef reports whether an evaluated rule reads Env.ToolDef, which an Env builder
// may likewise leave nil when this is false.
func (p *Program) UsesToolDef() bool { return p.reads()&readsToolDef != 0 }

// UsesInputs reports whether an evaluated rule reads Env.Inputs, which an Env builder may
// likewise leave nil when this is false.
func (p *Program) UsesInputs() bool { return p.reads()&readsInputs != 0 }

// Empty reports whether the program evaluates no rule: every step gets the default
// decision, whatever its Env.
func (p *Program) Empty() bool { return len(p.active) == 0 }

func (p *Program) reads() reads { return p.activeReads }

// Options returns the options the program evaluates with, defaults filled in.
func (p *Program) Options() Options { return p.opts }

// Stats returns the per-rule counters of the program's rules.
func (p *Program) Stats() map[string]RuleStats {
	out := make(map[string]RuleStats, len(p.rules))
	for _, r := range p.rules {
		out[r.ID] = r.stats.snapshot()
	}
	return out
}

func compileRule(r Rule, hopts []expr.Option, cache *regexCache) (*compiledRule, []Diagnostic) {
	var diags []Diagnostic
	bad := func(field, format string, args ...any) {
		diags = append(diags, Diagnostic{RuleID: r.ID, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	switch {
	case r.ID == "":
		bad("id", "id is required")
	case len(r.ID) > MaxIDLen:
		bad("id", "id is longer than %d bytes", MaxIDLen)
	case !idRe.MatchString(r.ID):
		bad("id", "id %q may contain only letters, digits, '.', '_', ':' and '-', and must start with a letter or digit", r.ID)
	}
	if !r.Action.Valid() {
		bad("action", "action %q is not one of allow, deny, modify, hold", r.Action)
	}
	if !r.Mode.Valid() {
		bad("mode", "mode %q is not one of enforce, monitor, off", r.Mode)
	}
	if len(r.ReasonCode) > MaxIDLen {
		bad("reasonCode", "reasonCode is longer than %d bytes", MaxIDLen)
	}
	cr := &compiledRule{Rule: r, mode: r.Mode.normalized(), code: r.ReasonCode}
	if cr.code == "" {
		cr.code = r.ID
	}

	var ds []Diagnostic
	cr.when, ds = compileExpr(r.When, "when", true, hopts)
	diags = append(diags, ds...)
	if cr.when != nil {
		cr.guards, cr.whole = guardsOf(r.When, cache)
		cr.reads = readsOf(r.When)
		if g, ok := literalGroupOf(r.When, cache); ok {
			cr.lits = &g
		}
	}

	cr.msg, ds = compileTemplate(r.Message, hopts)
	diags = append(diags, ds...)
	if cr.msg != nil {
		for _, p := range cr.msg.parts {
			if p.prog != nil {
				cr.reads |= readsOf(p.src)
			}
		}
	}

	// A zero timeout is filled in by compile, from the options: the rule names none.
	cr.hold = HoldSpec{OnTimeout: ActionDeny}
	if h := r.Hold; h != nil {
		if h.Timeout > 0 {
			cr.hold.Timeout = h.Timeout
		}
		switch h.OnTimeout {
		case "":
		case ActionAllow, ActionDeny:
			cr.hold.OnTimeout = h.OnTimeout
		default:
			bad("hold.onTimeout", "onTimeout %q must be allow or deny", h.OnTimeout)
		}
		if time.Duration(h.Timeout) > 24*time.Hour {
			bad("hold.timeout", "timeout %s is longer than 24h", h.Timeout)
		}
		// A confirmation on a rule that never holds would silently mean nothing.
		if h.Confirm && r.Action != ActionHold {
			bad("hold.confirm", "confirm applies to hold rules only, not %s", r.Action)
		}
		cr.hold.Confirm = h.Confirm
	}

	if m := r.Modify; m != nil {
		for i, spec := range m.Redact {
			rd, err := newRedactor(spec)
			if err != nil {
				bad(fmt.Sprintf("modify.redact[%d]", i), "%v", err)
				continue
			}
			cr.redact = append(cr.redact, rd)
		}
		names := make([]string, 0, len(m.Set))
		for name := range m.Set {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			field := "modify.set." + name
			if strings.TrimSpace(name) == "" {
				bad(field, "input name is empty")
				continue
			}
			prog, ds := compileExpr(m.Set[name], field, false, hopts)
			diags = append(diags, ds...)
			cr.reads |= readsOf(m.Set[name])
			cr.set = append(cr.set, setExpr{name, prog})
		}
	}
	if r.Action == ActionModify && (r.Modify == nil || len(r.Modify.Redact) == 0 && len(r.Modify.Set) == 0) {
		bad("modify", "a modify rule needs modify.redact or modify.set")
	}
	for i := range diags {
		diags[i].RuleID = r.ID
	}
	if len(diags) > 0 {
		return nil, diags
	}
	return cr, nil
}

// compileExpr compiles one expression; asBool for conditions. It never panics: expr is
// third-party code fed operator input, so a panic is turned into a diagnostic.
func compileExpr(src, field string, asBool bool, hopts []expr.Option) (prog *vm.Program, diags []Diagnostic) {
	if strings.TrimSpace(src) == "" {
		return nil, []Diagnostic{{Field: field, Message: "expression is empty"}}
	}
	if len(src) > MaxExprLen {
		return nil, []Diagnostic{{Field: field, Message: fmt.Sprintf("expression is longer than %d bytes", MaxExprLen)}}
	}
	if !utf8.ValidString(src) {
		return nil, []Diagnostic{{Field: field, Message: "expression is not valid UTF-8"}}
	}
	defer func() {
		if v := recover(); v != nil {
			prog = nil
			diags = []Diagnostic{{Field: field, Message: fmt.Sprintf("expression cannot be compiled: %v", v)}}
		}
	}()
	patcher := &envPatcher{}
	opts := make([]expr.Option, 0, len(hopts)+4)
	opts = append(opts, expr.Env(Env{}))
	opts = append(opts, hopts...)
	opts = append(opts, expr.Patch(patcher), expr.MaxNodes(MaxNodes))
	if asBool {
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, []Diagnostic{exprDiagnostic(field, err)}
	}
	if len(patcher.errs) > 0 {
		pe := patcher.errs[0]
		line, col := runePosition(src, pe.loc)
		return nil, []Diagnostic{{Field: field, Line: line, Column: col, Message: pe.err.Error()}}
	}
	return prog, nil
}

// runePosition converts a rune offset in s to a 1-based line and column.
func runePosition(s string, runeOff int) (line, col int) {
	line, col = 1, 1
	n := 0
	for _, r := range s {
		if n == runeOff {
			break
		}
		n++
		if r == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

// exprDiagnostic turns an expr error into a Diagnostic with a 1-based line and column.
func exprDiagnostic(field string, err error) Diagnostic {
	d := Diagnostic{Field: field, Message: err.Error()}
	var fe *file.Error
	if errors.As(err, &fe) {
		d.Message = fe.Message
		if fe.Line > 0 {
			d.Line = fe.Line
			d.Column = fe.Column + 1
			d.Snippet = strings.TrimPrefix(fe.Snippet, "\n")
		}
	}
	return d
}

// template is a message with {{expr}} placeholders, compiled once.
type template struct {
	parts []templatePart
}

type templatePart struct {
	text string
	src  string      // the placeholder's expression
	prog *vm.Program // nil for literal text
	// field reads a placeholder that names a step field ({{tool}}, {{agent.id}}, most of
	// them) without the VM: a matched rule's message is rendered on the step's path, and
	// the VM's code is the largest part of what an evaluation brings into the caches.
	field strFn
}

func compileTemplate(msg string, hopts []expr.Option) (*template, []Diagnostic) {
	if len(msg) > MaxMessageLen {
		return nil, []Diagnostic{{Field: "message", Message: fmt.Sprintf("message is longer than %d bytes", MaxMessageLen)}}
	}
	t := &template{}
	var diags []Diagnostic
	rest, offset := msg, 0
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if rest != "" {
				t.parts = append(t.parts, templatePart{text: rest})
			}
			break
		}
		if i > 0 {
			t.parts = append(t.parts, templatePart{text: rest[:i]})
		}
		j := strings.Index(rest[i+2:], "}}")
		if j < 0 {
			line, col := position(msg, offset+i)
			diags = append(diags, Diagnostic{Field: "message", Line: line, Column: col, Message: "unclosed {{ in message"})
			break
		}
		src := rest[i+2 : i+2+j]
		prog, ds := compileExpr(src, "message", false, hopts)
		for _, d := range ds {
			// Move the position from inside the placeholder to inside the message.
			start := offset + i + 2
			if d.Line > 0 {
				start += byteOffset(src, d.Line, d.Column)
			}
			d.Line, d.Column = position(msg, start)
			d.Snippet = ""
			diags = append(diags, d)
		}
		part := templatePart{src: src, prog: prog}
		if prog != nil {
			if tree, err := parser.Parse(src); err == nil {
				if _, f, ok := fieldOf(tree.Node); ok {
					part.field = f
				}
			}
		}
		t.parts = append(t.parts, part)
		offset += i + 2 + j + 2
		rest = rest[i+2+j+2:]
	}
	return t, diags
}

// position converts a byte offset in s to a 1-based line and rune column.
func position(s string, off int) (line, col int) {
	if off > len(s) {
		off = len(s)
	}
	line, col = 1, 1
	for _, r := range s[:off] {
		if r == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

// byteOffset converts a 1-based line and rune column in s to a byte offset.
func byteOffset(s string, line, col int) int {
	l, c := 1, 1
	for i, r := range s {
		if l == line && c == col {
			return i
		}
		if r == '\n' {
			l++
			c = 1
		} else {
			c++
		}
	}
	return len(s)
}

// render interpolates the template; a placeholder that fails renders as "?" (the message
// is information, the decision does not depend on it).
func (t *template) render(m *vm.VM, env *Env) string {
	if t == nil || len(t.parts) == 0 {
		return ""
	}
	if len(t.parts) == 1 && t.parts[0].prog == nil {
		return t.parts[0].text
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.prog == nil {
			b.WriteString(p.text)
			continue
		}
		if p.field != nil {
			b.WriteString(p.field(env))
			if b.Len() > maxRendered {
				break
			}
			continue
		}
		if env.state != nil {
			env.state.budget.begin()
		}
		v, err := m.Run(p.prog, env)
		if err == nil && env.state != nil {
			err = env.state.budget.err
		}
		switch {
		case err != nil:
			b.WriteString("?")
		case !isString(v) && sizeOf(v, maxDisplay) > maxDisplay:
			// A list can reference the step's text many times over; it would not fit anyway.
			b.WriteString("…")
		default:
			b.WriteString(display(v))
		}
		if b.Len() > maxRendered {
			break
		}
	}
	s := b.String()
	if len(s) > maxRendered {
		cut := maxRendered
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// display formats a value for a message: lists are joined with ", ".
func display(v any) string {
	switch x := v.(type) {
	case []string:
		return strings.Join(x, ", ")
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = toText(e)
		}
		return strings.Join(parts, ", ")
	}
	return toText(v)
}

// identityGuards are the guard fields that say what a step is and who sent it, known before
// its content: MayAct decides on them alone.
var identityGuards = map[string]bool{"method": true, "kind": true, "role": true,
	"agent.id": true, "agent.name": true, "user.id": true, "mcp.method": true, "a2a.method": true}

// MayAct reports whether the program could decide anything but allow for a step like e,
// whatever its content: the default decision is not allow, or an enforced deny, hold or
// modify rule has no leading test on the step's identity (method, kind, role, agent, user)
// that e fails. A gateway streams a reply as it arrives when this is false, and buffers it
// for a verdict when it is true.
func (p *Program) MayAct(e *Env) bool {
	if d := p.opts.DefaultDecision; d != "" && d != ActionAllow {
		return true
	}
rules:
	for _, r := range p.active {
		if r.mode != ModeEnforce || r.Action == ActionAllow {
			continue
		}
		for _, g := range r.guards {
			if g.test == nil && identityGuards[g.name] && !g.pass(e) {
				continue rules
			}
		}
		return true
	}
	return false
}
