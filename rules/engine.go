package rules

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Engine holds the live rule set. Evaluate reads the current Program through an atomic
// pointer, so it never takes a lock and a Load never blocks or half-applies a request.
type Engine struct {
	opts Options
	prog atomic.Pointer[Program]
	// counter counts the evaluations of all the engine's programs, for the rule stats.
	counter *evalCounter
	// mu serialises Load so stats carry over from the program being replaced.
	mu sync.Mutex
}

// NewEngine returns an engine with no rules: every step gets the default decision.
func NewEngine(opts Options) *Engine {
	e := &Engine{opts: opts.withDefaults(), counter: &evalCounter{}}
	p, err := compile(nil, e.opts, nil, e.counter)
	if err != nil {
		panic(fmt.Sprintf("rules: empty program does not compile: %v", err))
	}
	p.activate(nil)
	e.prog.Store(p)
	return e
}

// Load compiles all rules and then swaps them in at once. On any compile error nothing
// changes and the error wraps CompileErrors. A rule keeps its counters across loads as
// long as its id stays.
func (e *Engine) Load(rules []Rule) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.prog.Load()
	prev := map[string]*ruleStats{}
	for _, r := range old.rules {
		prev[r.ID] = r.stats
	}
	p, err := compile(rules, e.opts, prev, e.counter)
	if err != nil {
		return fmt.Errorf("rules: load: %w", err)
	}
	p.activate(old)
	e.prog.Store(p)
	return nil
}

// Rules returns the loaded rules in load order.
func (e *Engine) Rules() []Rule { return e.prog.Load().Rules() }

// Program returns the current compiled program (immutable; safe to keep and evaluate).
func (e *Engine) Program() *Program { return e.prog.Load() }

// Options returns the engine's options with defaults filled in.
func (e *Engine) Options() Options { return e.opts }

// Evaluate decides one step with the current rules. Safe for concurrent use.
func (e *Engine) Evaluate(env *Env) Verdict { return e.prog.Load().Evaluate(env) }

// Stats returns the counters of the loaded rules, by rule id.
func (e *Engine) Stats() map[string]RuleStats { return e.prog.Load().Stats() }
