package rules

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm/runtime"
)

// DefaultBudget is Options.Budget when unset: the time one rule may take on one step.
const DefaultBudget = 100 * time.Millisecond

// Work limits of one rule's evaluation on one step, besides its time budget.
const (
	// MaxProduced bounds the bytes of text one evaluation may build (string +, toJSON,
	// string(), join, replace, upper, …): an expression can double a string at each step
	// and would otherwise exhaust the guardian's memory long before any clock noticed.
	MaxProduced = 32 << 20
	// VMMemoryBudget is expr's own budget of one run: elements of ranges, arrays, maps,
	// and bytes of repeat().
	VMMemoryBudget = 1_000_000
	// checkEvery is the work units between clock reads: reading the clock on every loop
	// iteration would cost more than many iterations do.
	checkEvery = 16
	// maxDisplay bounds a non-string value a message placeholder may render.
	maxDisplay = 1 << 20
)

// ErrBudget is wrapped by the run-time error of a rule that exceeded its evaluation
// budget (Match.Error then reads "evaluation budget exceeded (…)").
var ErrBudget = errors.New("evaluation budget exceeded")

// budget bounds one rule's evaluation. Helpers and loop iterations spend work units; the
// clock is read once per checkEvery units, so a rule that does nothing costly never reads
// it. The clock reading is shared by the rules of a step: a rule's time starts at the
// last reading before its first costly operation, which at worst charges it the few
// microseconds of cheap work since then.
type budget struct {
	limit time.Duration
	// ctx, when set, stops the evaluation when it is done (drafts under a request).
	ctx context.Context
	// clock is the step's last clock reading (zero before the first); start is the
	// rule's, zero until its first costly operation.
	clock, start time.Time
	units        int
	produced     int
	err          error
}

// begin starts the budget of one rule (or one message placeholder).
func (b *budget) begin() {
	b.start, b.units, b.produced, b.err = time.Time{}, 0, 0, nil
}

// spend charges the work of scanning `scanned` bytes and building `produced` bytes, and
// returns the budget error once the rule is over its budget (and on every later call).
func (b *budget) spend(scanned, produced int) error {
	if b.err != nil {
		return b.err
	}
	if b.produced += produced; b.produced > MaxProduced || produced < 0 {
		b.err = fmt.Errorf("%w (built more than %d MiB of text)", ErrBudget, MaxProduced>>20)
		return b.err
	}
	b.units += 1 + scanned>>12
	if b.units < checkEvery && !b.start.IsZero() {
		return nil
	}
	b.units = 0
	if b.start.IsZero() && !b.clock.IsZero() {
		b.start = b.clock
		return nil
	}
	now := time.Now()
	b.clock = now
	if b.start.IsZero() {
		b.start = now
		return nil
	}
	if b.ctx != nil {
		if err := b.ctx.Err(); err != nil {
			b.err = fmt.Errorf("evaluation cancelled: %w", err)
			return b.err
		}
	}
	if b.limit > 0 && now.Sub(b.start) > b.limit {
		b.err = fmt.Errorf("%w (ran longer than %s)", ErrBudget, b.limit)
	}
	return b.err
}

// spend charges the evaluation behind e, if any (an Env evaluated outside Evaluate has no
// budget).
func spend(e *Env, scanned, produced int) error {
	if e.state == nil {
		return nil
	}
	return e.state.budget.spend(scanned, produced)
}

// budgetError turns expr's own memory budget panic into a budget error.
func budgetError(err error) error {
	if err != nil && strings.Contains(err.Error(), "memory budget exceeded") && !errors.Is(err, ErrBudget) {
		return fmt.Errorf("%w (allocated more than %d elements)", ErrBudget, VMMemoryBudget)
	}
	return err
}

// tickFunc is inserted at the start of every predicate body (all, any, map, filter,
// reduce, …) by envPatcher, so that every loop iteration spends a unit.
const tickFunc = "$tick"

// tickPredicate makes a predicate body `X` into `$tick($env); X`, which has X's type.
func tickPredicate(n *ast.PredicateNode) {
	if seq, ok := n.Node.(*ast.SequenceNode); ok && len(seq.Nodes) > 0 {
		if c, ok := seq.Nodes[0].(*ast.CallNode); ok && isIdent(c.Callee, tickFunc) {
			return // already patched
		}
	}
	tick := &ast.CallNode{Callee: &ast.IdentifierNode{Value: tickFunc},
		Arguments: []ast.Node{&ast.IdentifierNode{Value: "$env"}}}
	n.Node = &ast.SequenceNode{Nodes: []ast.Node{tick, n.Node}}
}

// addFunc replaces `+` where either side may be a string, so that building text counts.
const addFunc = "$add"

// mayBeString reports whether a node's static type is string or unknown.
func mayBeString(n ast.Node) bool {
	t := n.Type()
	return t == nil || t.Kind() == reflect.String || t.Kind() == reflect.Interface
}

// budgetedBuiltins are expr builtins whose work grows with their input, each with what a
// call costs: bytes scanned and bytes built. Vigil defines functions of the same names,
// which take the evaluation's Env (envPatcher inserts it), charge the budget first and
// then call expr's own implementation.
var budgetedBuiltins = map[string]func(args []any) (scanned, produced int){
	"toJSON": func(a []any) (int, int) {
		n := sizeOf(a[0], MaxProduced+1)
		return n, n
	},
	"string": func(a []any) (int, int) {
		if _, ok := a[0].(string); ok {
			return 0, 0
		}
		n := sizeOf(a[0], MaxProduced+1)
		return n, n
	},
	"fromJSON":    func(a []any) (int, int) { n := strLen(a[0]); return n, n },
	"upper":       func(a []any) (int, int) { n := strLen(a[0]); return n, n },
	"lower":       func(a []any) (int, int) { n := strLen(a[0]); return n, n },
	"trim":        func(a []any) (int, int) { return strLen(a[0]), 0 },
	"trimPrefix":  func(a []any) (int, int) { return strLen(a[0]), 0 },
	"trimSuffix":  func(a []any) (int, int) { return strLen(a[0]), 0 },
	"indexOf":     func(a []any) (int, int) { return strLen(a[0]), 0 },
	"lastIndexOf": func(a []any) (int, int) { return strLen(a[0]), 0 },
	"split":       func(a []any) (int, int) { n := strLen(a[0]); return n, n },
	"splitAfter":  func(a []any) (int, int) { n := strLen(a[0]); return n, n },
	"toBase64":    func(a []any) (int, int) { n := strLen(a[0]); return n, base64.StdEncoding.EncodedLen(n) },
	"fromBase64":  func(a []any) (int, int) { n := strLen(a[0]); return n, n },
	"repeat": func(a []any) (int, int) {
		n := strLen(a[0]) * max(0, min(runtime.ToInt(a[1]), 1e6+1))
		return n, n
	},
	"join": func(a []any) (int, int) {
		glue := ""
		if len(a) > 1 {
			glue, _ = a[1].(string)
		}
		n := 0
		switch x := a[0].(type) {
		case []string:
			for _, s := range x {
				n += len(s) + len(glue)
			}
		case []any:
			for _, s := range x {
				n += strLen(s) + len(glue)
			}
		}
		return n, n
	},
	"replace": func(a []any) (int, int) {
		s, old, repl := strLen(a[0]), a[1], strLen(a[2])
		o, _ := old.(string)
		str, _ := a[0].(string)
		count := 0
		if o == "" {
			count = utf8.RuneCountInString(str) + 1
		} else if repl > len(o) {
			count = strings.Count(str, o)
		}
		if len(a) > 3 {
			if limit := runtime.ToInt(a[3]); limit >= 0 {
				count = min(count, limit)
			}
		}
		return s, s + count*max(0, repl-len(o))
	},
}

func strLen(v any) int {
	s, _ := v.(string)
	return len(s)
}

var envType = reflect.TypeFor[Env]()

// budgetOptions returns the functions that count work: the loop tick, `+` on strings and
// the budgeted builtins.
func budgetOptions() []expr.Option {
	opts := []expr.Option{
		expr.Function(tickFunc, func(p ...any) (any, error) {
			if e, ok := p[0].(*Env); ok && e.state != nil {
				if err := e.state.budget.spend(0, 0); err != nil {
					return nil, err
				}
			}
			return true, nil
		}, new(func(Env) bool)),
		expr.Function(addFunc, func(p ...any) (any, error) {
			a, aok := p[1].(string)
			b, bok := p[2].(string)
			if !aok || !bok {
				return runtime.Add(p[1], p[2]), nil
			}
			if err := spend(envOf(p[0]), len(a)+len(b), len(a)+len(b)); err != nil {
				return nil, err
			}
			return a + b, nil
		}, new(func(Env, string, string) string), new(func(Env, any, any) any)),
	}
	for name, cost := range budgetedBuiltins {
		opts = append(opts, budgetedBuiltin(name, cost))
	}
	return opts
}

// budgetedBuiltin defines name as expr's builtin of that name with the Env first, charging
// cost before each call.
func budgetedBuiltin(name string, cost func([]any) (int, int)) expr.Option {
	b := builtin.Builtins[builtin.Index[name]]
	call := b.Func
	switch {
	case name == "toJSON":
		call = toJSON
	case call != nil:
	case b.Fast != nil:
		call = func(args ...any) (any, error) { return b.Fast(args[0]), nil }
	case b.Safe != nil:
		call = func(args ...any) (any, error) {
			v, _, err := b.Safe(args...)
			return v, err
		}
	default:
		panic("rules: builtin " + name + " has no implementation")
	}
	types := make([]any, len(b.Types))
	for i, t := range b.Types {
		in := []reflect.Type{envType}
		for k := range t.NumIn() {
			in = append(in, t.In(k))
		}
		out := make([]reflect.Type, t.NumOut())
		for k := range out {
			out[k] = t.Out(k)
		}
		types[i] = reflect.New(reflect.FuncOf(in, out, t.IsVariadic())).Interface()
	}
	return expr.Function(name, func(p ...any) (any, error) {
		args := p[1:]
		scanned, produced := cost(args)
		if err := spend(envOf(p[0]), scanned, produced); err != nil {
			return nil, err
		}
		return call(args...)
	}, types...)
}

// toJSON is expr's toJSON (indented by two spaces) without HTML escaping: expr's writes
// `<`, `>` and `&` as \u003c, \u003e and \u0026, so `toJSON(params) contains "<script>"`
// never matched and a message quoting a step showed the escapes.
func toJSON(args ...any) (any, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(args[0]); err != nil {
		return nil, fmt.Errorf("toJSON: %w", err)
	}
	// Encode ends the text with a newline that MarshalIndent does not write.
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// sizeOf estimates the bytes v takes as text (JSON or fmt), stopping once past limit.
func sizeOf(v any, limit int) int {
	n := 0
	sizeInto(&n, reflect.ValueOf(v), limit, 0)
	return n
}

func sizeInto(n *int, v reflect.Value, limit, depth int) {
	if *n > limit {
		return
	}
	// Indentation and punctuation of one element at this depth, as toJSON writes it.
	*n += 4 + 2*depth
	if depth > 100 {
		*n = limit + 1 // deeper than anything a step decodes into
		return
	}
	switch v.Kind() {
	case reflect.Invalid:
	case reflect.String:
		*n += v.Len()
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			sizeInto(n, v.Elem(), limit, depth)
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			*n += v.Len() * 2
			return
		}
		for i := range v.Len() {
			sizeInto(n, v.Index(i), limit, depth+1)
			if *n > limit {
				return
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			sizeInto(n, it.Key(), limit, depth+1)
			sizeInto(n, it.Value(), limit, depth+1)
			if *n > limit {
				return
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			if t.Field(i).IsExported() {
				*n += len(t.Field(i).Name)
				sizeInto(n, v.Field(i), limit, depth+1)
			}
		}
	default:
		*n += 20
	}
}
