package rules

import "sync/atomic"

// ruleIndex narrows a step's candidate rules by their guards. A rule with a guard
// `tool == "send_email"` (or `kind in [...]`) can only match a step whose tool is one of its
// values, so a step is only checked against the rules filed under its own field values and
// the rules that have no such guard. Policies are mostly rules of this shape about other
// tools and kinds; with 100 rules most are never visited for a given step.
type ruleIndex struct {
	// always has a bit for each active rule without an indexable first guard.
	always []uint64
	fields []fieldIndex
	// expiring are the positions of rules with an expiry time, checked on each step.
	expiring []int
	// lits screens the candidates by the literals their guards need; nil when none does.
	lits *litFilter
}

// fieldIndex files rules by the value their first guard wants of one field.
type fieldIndex struct {
	name    string
	get     func(*Env) string
	buckets map[string][]uint64
}

func newRuleIndex(active []*compiledRule) *ruleIndex {
	words := (len(active) + 63) / 64
	x := &ruleIndex{always: make([]uint64, words), lits: newLitFilter(active)}
	for i, r := range active {
		if r.ExpiresAt != nil {
			x.expiring = append(x.expiring, i)
		}
		g, ok := indexGuard(r.guards)
		if !ok {
			x.always[i/64] |= 1 << (i % 64)
			continue
		}
		f := x.field(g)
		for _, v := range g.values {
			b := f.buckets[v]
			if b == nil {
				b = make([]uint64, words)
				f.buckets[v] = b
			}
			b[i/64] |= 1 << (i % 64)
		}
	}
	return x
}

// indexGuard picks the guard a rule is filed under. Any equality guard will do, wherever
// it stands: a rule matches only when every guard passes, and guards cannot fail (see
// guardsOf), so a step whose field has none of the guard's values cannot match, and the
// rule's other guards and condition would not have run for it either. The guard that
// narrows most is preferred: one on a field of many values (tool, agent.id) over kind,
// method and role, which few values cover; then fewer values over more.
// (`kind == "toolCall" && tool == "search_web"` is filed under its tool.)
func indexGuard(gs []guard) (guard, bool) {
	var best guard
	found := false
	for _, g := range gs {
		if g.field == nil || g.negate {
			continue
		}
		if !found || narrower(g, best) {
			best, found = g, true
		}
	}
	return best, found
}

// narrower reports whether a is expected to leave fewer candidates than b.
func narrower(a, b guard) bool {
	if ca, cb := coarseField(a.name), coarseField(b.name); ca != cb {
		return cb
	}
	return len(a.values) < len(b.values)
}

// coarseField tells the fields whose few values each cover many steps.
func coarseField(name string) bool { return name == "kind" || name == "method" || name == "role" }

func (x *ruleIndex) field(g guard) *fieldIndex {
	for i := range x.fields {
		if x.fields[i].name == g.name {
			return &x.fields[i]
		}
	}
	x.fields = append(x.fields, fieldIndex{name: g.name, get: g.field, buckets: map[string][]uint64{}})
	return &x.fields[len(x.fields)-1]
}

// candidates sets mask to the rules e can match (all of them when all is true, for a
// timed evaluation that measures every rule) and clears expired rules, counting them as
// skipped.
func (x *ruleIndex) candidates(mask []uint64, e *Env, active []*compiledRule, all bool) []uint64 {
	mask = append(mask[:0], x.always...)
	if all {
		for i := range mask {
			mask[i] = ^uint64(0)
		}
		if r := len(active) % 64; r != 0 {
			mask[len(mask)-1] = 1<<r - 1
		}
	} else {
		for i := range x.fields {
			f := &x.fields[i]
			if b, ok := f.buckets[f.get(e)]; ok {
				for w := range mask {
					mask[w] |= b[w]
				}
			}
		}
		if x.lits != nil {
			x.lits.screen(e, mask, scratchOf(e, len(mask)))
		}
	}
	for _, i := range x.expiring {
		if r := active[i]; !e.Now.Before(*r.ExpiresAt) {
			mask[i/64] &^= 1 << (i % 64)
			r.stats.skipped.Add(1)
		}
	}
	return mask
}

// evalCounter counts the evaluations of a rule set and of the ones that replace it in an
// Engine. A rule's evaluation count derives from it (see ruleStats), so evaluating a step
// costs one counter increment instead of one per rule. Evaluation states count in
// different shards, so cores do not write the same cache line on every step.
type evalCounter struct {
	shards [statShards]paddedCounter
}

// statShards is the number of counter shards; evaluation states are spread over them.
const statShards = 8

// paddedCounter fills a cache line, so neighbouring shards do not share one.
type paddedCounter struct {
	n atomic.Int64
	_ [56]byte
}

func (c *evalCounter) add(shard int) { c.shards[shard].n.Add(1) }

func (c *evalCounter) sum() int64 {
	var n int64
	for i := range c.shards {
		n += c.shards[i].n.Load()
	}
	return n
}

// scratchOf is a buffer of n words for the screening, the evaluation state's when there is
// one.
func scratchOf(e *Env, n int) []uint64 {
	if st := e.state; st != nil {
		if cap(st.litOK) < n {
			st.litOK = make([]uint64, n)
		}
		return st.litOK[:n]
	}
	return make([]uint64, n)
}
