package rules

import (
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// Literal screening. Many rules that every step is checked against (prompt injection,
// jailbreaks) start with a test that needs a literal in a step field: `text matches
// "(?i)ignore … instructions"` needs "instructions", `containsAny(text, [...])` one of its
// strings. Checking such a rule reads its guards, their closures, the regexp and its
// literals: cache lines that, between two steps of one agent, the machine's other work
// has evicted. Instead, all the rules' literals of one field are looked for in one pass
// over the field's lower-cased text, and a rule none of whose literals occurs is dropped
// from the candidates by a bit test, as its guard would have rejected it.

// litGroup is a guard's necessary condition: one of lits (ASCII-lower-cased) occurs in
// the field's text ASCII-lower-cased, unless the text has a rune that case-folds onto an
// ASCII letter (see litSpecial).
type litGroup struct {
	field string
	get   func(*Env) string
	lits  []string
}

// maxFieldLiterals bounds the literals looked for in one field; rules past it keep only
// their guards.
const maxFieldLiterals = 512

// litEnt keeps a literal's length and offsets in 16 bits. A literal is written out in its
// rule's expression (escapes only shorten it), so MaxExprLen bounds it: this fails to
// compile when MaxExprLen outgrows 16 bits.
const _ = uint16(MaxExprLen)

// literalGroupOf returns a literal condition of one of the guards of src (the conjuncts
// guardsOf turns into guards), or false when none has one.
func literalGroupOf(src string, cache *regexCache) (litGroup, bool) {
	tree, err := parser.Parse(src)
	if err != nil {
		return litGroup{}, false
	}
	for _, c := range conjuncts(tree.Node) {
		if typeOf(c, tBad) != tBool {
			break // as guardsOf: no guard after a conjunct that may fail
		}
		if _, ok := guardOf(c); ok {
			continue // an equality test; the rule index handles it
		}
		if _, _, ok := guardBool(c, cache); !ok {
			continue // not a guard
		}
		if g, ok := literalsOf(c, cache); ok {
			return g, true
		}
	}
	return litGroup{}, false
}

// literalsOf recognises the guards that need a literal in a field: a constant regexp
// with required literals, icontains, containsAny, contains, startsWith, endsWith, and a
// disjunction of such tests on one field.
func literalsOf(n ast.Node, cache *regexCache) (litGroup, bool) {
	var g litGroup
	switch x := n.(type) {
	case *ast.BinaryNode:
		switch x.Operator {
		case "||", "or":
			l, ok := literalsOf(x.Left, cache)
			if !ok {
				return g, false
			}
			r, ok := literalsOf(x.Right, cache)
			if !ok || r.field != l.field {
				return g, false
			}
			l.lits = append(l.lits[:len(l.lits):len(l.lits)], r.lits...)
			return l, true
		case "matches":
			pat, ok := x.Right.(*ast.StringNode)
			if !ok {
				return g, false
			}
			return regexpLiterals(x.Left, pat.Value, cache)
		case "contains", "startsWith", "endsWith":
			lit, ok := x.Right.(*ast.StringNode)
			if !ok {
				return g, false
			}
			return fieldLiterals(x.Left, []string{lit.Value}, false)
		}
	case *ast.CallNode:
		id, ok := x.Callee.(*ast.IdentifierNode)
		if !ok || len(x.Arguments) != 2 {
			return g, false
		}
		switch id.Value {
		case "regexMatch":
			pat, ok := x.Arguments[1].(*ast.StringNode)
			if !ok {
				return g, false
			}
			return regexpLiterals(x.Arguments[0], pat.Value, cache)
		case "glob":
			// A glob is a regexp anchored at both ends: its required literals are needed
			// in the text just the same.
			pat, ok := x.Arguments[0].(*ast.StringNode)
			if !ok || !validGlob(pat) {
				return g, false
			}
			src, err := globRegexp(pat.Value)
			if err != nil {
				return g, false
			}
			return requiredIn(x.Arguments[1], requiredLiterals(src))
		case "icontains":
			lit, ok := x.Arguments[1].(*ast.StringNode)
			if !ok {
				return g, false
			}
			return fieldLiterals(x.Arguments[0], []string{lit.Value}, true)
		case "containsAny":
			arr, ok := x.Arguments[1].(*ast.ArrayNode)
			if !ok {
				return g, false
			}
			var lits []string
			for _, e := range arr.Nodes {
				s, ok := e.(*ast.StringNode)
				if !ok {
					return g, false
				}
				lits = append(lits, s.Value)
			}
			return fieldLiterals(x.Arguments[0], lits, true)
		}
	}
	return g, false
}

// regexpLiterals is the literal condition of `field matches pattern`: the regexp's
// prefilter. A literal that is not case-folded occurs in the text only if its lower-cased
// form occurs in the lower-cased text.
func regexpLiterals(field ast.Node, pattern string, cache *regexCache) (litGroup, bool) {
	en := cache.entry(pattern)
	if en.err != nil {
		return litGroup{}, false
	}
	return requiredIn(field, en.pre)
}

// requiredIn is the literal group of a regexp's required literals pre (nil: none known)
// in field.
func requiredIn(field ast.Node, pre []literal) (litGroup, bool) {
	if pre == nil {
		return litGroup{}, false
	}
	lits := make([]string, len(pre))
	for i, l := range pre {
		lits[i] = l.s
	}
	return fieldLiterals(field, lits, false)
}

// fieldLiterals builds the group of a test on a step field. Folded tests (icontains,
// containsAny) compare strings.ToLower forms: an ASCII literal occurs in the text's
// strings.ToLower only if it occurs in its ASCII lower-casing (or the text has a special
// rune), but a non-ASCII one may not, so such tests give no group. An empty literal
// occurs everywhere (or, in containsAny, is ignored): no group either.
func fieldLiterals(field ast.Node, lits []string, folded bool) (litGroup, bool) {
	name, get, ok := litFieldOf(field)
	if !ok || len(lits) == 0 {
		return litGroup{}, false
	}
	g := litGroup{field: name, get: get}
	for _, l := range lits {
		if folded {
			l = strings.ToLower(l)
			for i := 0; i < len(l); i++ {
				if l[i] >= utf8.RuneSelf {
					return litGroup{}, false
				}
			}
		}
		if l == "" {
			return litGroup{}, false
		}
		g.lits = append(g.lits, asciiLower(l))
	}
	return g, true
}

// litFieldOf is fieldOf, and also inputs.NAME as the guards read it (inputText).
func litFieldOf(n ast.Node) (string, func(*Env) string, bool) {
	if name, get, ok := fieldOf(n); ok {
		return name, get, true
	}
	if input, get, ok := inputText(n); ok {
		return "inputs." + input, get, true
	}
	return "", nil, false
}

// litSpecial reports whether s has a rune that strings.ToLower or the regexp's case
// folding turns into (or matches with) an ASCII letter: İ (lower-cases to i), ſ (folds
// with s) and K (the Kelvin sign, with k). Then the screening cannot tell and lets every
// rule through.
func litSpecial(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.ContainsRune(s[i:], '\u0130') || strings.ContainsRune(s[i:], '\u017f') ||
				strings.ContainsRune(s[i:], '\u212a')
		}
	}
	return false
}

// litFilter drops from a step's candidates the rules whose literal condition fails.
type litFilter struct {
	// gated has a bit for each rule with a literal condition.
	gated  []uint64
	fields []litField
}

// litField is the literals of one field, indexed by their rarest byte: the text is read
// once, and at each byte that is some literal's anchor those literals are compared.
type litField struct {
	get  func(*Env) string
	lits []string
	// anchors has a bit per byte that anchors a literal; start[c]..start[c+1] are the
	// entries of ents anchored at c.
	anchors [4]uint64
	start   [257]uint16
	ents    []litEnt
	// rules[i*words:(i+1)*words] are the rules literal i satisfies; all those gated on
	// this field.
	rules []uint64
	all   []uint64
}

// litEnt is a literal as the scan meets it at its anchor: where it would start and how long
// it is, and its first four bytes, so that an anchor byte the literal does not continue
// from is turned away without reading the literal's own string (a cache line of its own).
type litEnt struct {
	// key is the literal's first four bytes, little-endian (0 for a shorter literal,
	// which is compared whole).
	key       uint32
	id, at, n uint16
}

// first4 reads s[i:i+4] little-endian, as litEnt.key holds a literal's first bytes.
func first4(s string, i int) uint32 {
	return uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
}

func newLitFilter(active []*compiledRule) *litFilter {
	words := (len(active) + 63) / 64
	f := &litFilter{gated: make([]uint64, words)}
	type building struct {
		litField
		ids   map[string]int
		owner [][]int // rules by literal
	}
	byName := map[string]*building{}
	names := []string{}
	for i, r := range active {
		if r.lits == nil {
			continue
		}
		b := byName[r.lits.field]
		if b == nil {
			b = &building{litField: litField{get: r.lits.get, all: make([]uint64, words)}, ids: map[string]int{}}
			byName[r.lits.field] = b
			names = append(names, r.lits.field)
		}
		var ids []int
		for _, l := range r.lits.lits {
			id, ok := b.ids[l]
			if !ok {
				id = len(b.lits)
				ids = append(ids, id)
				b.ids[l] = id
				b.lits = append(b.lits, l)
				b.owner = append(b.owner, nil)
			} else {
				ids = append(ids, id)
			}
		}
		if len(b.lits) > maxFieldLiterals {
			// Over the bound: this rule keeps only its guards (its new literals stay,
			// owned by nobody, and are dropped below).
			continue
		}
		for _, id := range ids {
			b.owner[id] = append(b.owner[id], i)
		}
		f.gated[i/64] |= 1 << (i % 64)
		b.all[i/64] |= 1 << (i % 64)
	}
	// The step's text goes last: the regexp prefilters of the rules that pass then find it
	// lower-cased already (foldedOf keeps the last string it folded).
	isText := func(name string) int {
		if name == "text" {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(names, func(a, b string) int { return cmp.Compare(isText(a), isText(b)) })
	for _, name := range names {
		b := byName[name]
		lf := &b.litField
		n := min(len(lf.lits), maxFieldLiterals)
		lf.lits = lf.lits[:n]
		// anchorAt is the offset of each literal's anchor byte in it.
		anchorAt := make([]int, n)
		lf.rules = make([]uint64, n*words)
		var count [256]int
		for id, l := range lf.lits {
			at := 0
			for k := 1; k < len(l); k++ {
				if commonness[l[k]] < commonness[l[at]] {
					at = k
				}
			}
			anchorAt[id] = at
			count[l[at]]++
			for _, i := range b.owner[id] {
				lf.rules[id*words+i/64] |= 1 << (i % 64)
			}
		}
		for c := range 256 {
			lf.start[c+1] = lf.start[c] + uint16(count[c])
			if count[c] > 0 {
				lf.anchors[c/64] |= 1 << (c % 64)
			}
		}
		lf.ents = make([]litEnt, n)
		next := lf.start
		for id, l := range lf.lits {
			c := l[anchorAt[id]]
			ent := litEnt{id: uint16(id), at: uint16(anchorAt[id]), n: uint16(len(l))}
			if len(l) >= 4 {
				ent.key = first4(l, 0)
			}
			lf.ents[next[c]] = ent
			next[c]++
		}
		f.fields = append(f.fields, *lf)
	}
	if len(f.fields) == 0 {
		return nil
	}
	return f
}

// screen clears from mask the candidate rules none of whose literals occurs; ok is a
// scratch buffer of mask's length.
func (f *litFilter) screen(e *Env, mask, ok []uint64) {
	gated := false
	for w := range mask {
		if mask[w]&f.gated[w] != 0 {
			gated = true
			break
		}
	}
	if !gated {
		return
	}
	clear(ok)
	for k := range f.fields {
		lf := &f.fields[k]
		wanted := false
		for w := range mask {
			if mask[w]&lf.all[w] != 0 {
				wanted = true
				break
			}
		}
		if !wanted {
			continue
		}
		s := lf.get(e)
		if litSpecial(s) {
			for w := range ok {
				ok[w] |= lf.all[w]
			}
			continue
		}
		lf.scan(foldedOf(e, s).lower, ok)
	}
	for w := range mask {
		mask[w] &^= f.gated[w] &^ ok[w]
	}
}

// scan sets in ok the rules of the literals that occur in s, a lower-cased text.
func (lf *litField) scan(s string, ok []uint64) {
	var found [maxFieldLiterals / 64]uint64
	words := len(ok)
	for p := 0; p < len(s); p++ {
		c := s[p]
		if lf.anchors[c/64]&(1<<(c%64)) == 0 {
			continue
		}
		for _, ent := range lf.ents[lf.start[c]:lf.start[c+1]] {
			id := ent.id
			if found[id/64]&(1<<(id%64)) != 0 {
				continue
			}
			q := p - int(ent.at)
			if q < 0 || q+int(ent.n) > len(s) || ent.n >= 4 && first4(s, q) != ent.key {
				continue
			}
			if l := lf.lits[id]; s[q:q+len(l)] == l {
				found[id/64] |= 1 << (id % 64)
				for w, b := range lf.rules[int(id)*words : int(id+1)*words] {
					ok[w] |= b
				}
			}
		}
	}
}
