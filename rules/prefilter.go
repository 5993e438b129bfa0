package rules

import (
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// literal is a string every match of a regexp contains (case-insensitively when fold).
type literal struct {
	s    string
	fold bool
}

// maxLiterals bounds the alternatives of a prefilter.
const maxLiterals = 8

// requiredLiterals returns literals one of which every match of pattern contains, or nil
// when it cannot tell. `(?i)(ignore|disregard) (all )?previous instructions` gives
// "previous instructions"; `(?i)jailbreak|dan mode` gives both alternatives.
func requiredLiterals(pattern string) []literal {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	lits := required(re.Simplify())
	for i := range lits {
		// A part of a required literal is required too; leading and trailing spaces only
		// slow the search down (strings.Index scans for the first byte, and text is full
		// of spaces).
		lits[i].s = strings.Trim(lits[i].s, " ")
	}
	if len(lits) == 0 || minLen(lits) < 2 {
		return nil
	}
	return lits
}

func required(r *syntax.Regexp) []literal {
	switch r.Op {
	case syntax.OpLiteral:
		if r.Flags&syntax.FoldCase != 0 {
			// Only ASCII folds cheaply and exactly (see anyLiteralIn for K and ſ).
			for _, c := range r.Rune {
				if c >= utf8.RuneSelf {
					return nil
				}
			}
			return []literal{{strings.ToLower(string(r.Rune)), true}}
		}
		if s := exactPart(r.Rune); s != "" {
			return []literal{{s, false}}
		}
	case syntax.OpCapture, syntax.OpPlus:
		return required(r.Sub[0])
	case syntax.OpRepeat:
		if r.Min >= 1 {
			return required(r.Sub[0])
		}
	case syntax.OpConcat:
		var best []literal
		for _, sub := range r.Sub {
			if l := required(sub); l != nil && (best == nil || minLen(l) > minLen(best)) {
				best = l
			}
		}
		return best
	case syntax.OpAlternate:
		var all []literal
		for _, sub := range r.Sub {
			l := required(sub)
			if l == nil {
				return nil
			}
			all = append(all, l...)
		}
		if len(all) > maxLiterals {
			return nil
		}
		return all
	}
	return nil
}

// exactPart returns the longest run of the literal rs whose UTF-8 bytes every match
// contains, "" for none. The regexp reads each byte of invalid UTF-8 in the text as
// U+FFFD, so U+FFFD in a pattern matches "\xe9" as well as its own bytes EF BF BD: those
// bytes are not required. A rune that is not valid (a surrogate) matches nothing, and
// string() writes it as U+FFFD: it is split off alike. Every other rune decodes only from
// its own encoding, so the runes between are required as they are, one after the other.
// (Globs reach here through globRegexp, which writes an invalid byte of the glob as U+FFFD.)
func exactPart(rs []rune) string {
	best := ""
	from := 0
	for i := 0; i <= len(rs); i++ {
		if i < len(rs) && rs[i] != utf8.RuneError && utf8.ValidRune(rs[i]) {
			continue
		}
		if from == 0 && i == len(rs) {
			return string(rs) // the common case: all of it
		}
		if s := string(rs[from:i]); len(s) > len(best) {
			best = s
		}
		from = i + 1
	}
	return best
}

func minLen(lits []literal) int {
	m := -1
	for _, l := range lits {
		if m < 0 || len(l.s) < m {
			m = len(l.s)
		}
	}
	return m
}

// anyLiteralIn reports whether s contains one of lits. Case-insensitive literals are
// searched in s lower-cased once per evaluation. Only K (Kelvin sign) and ſ (long s) fold
// onto ASCII letters from outside ASCII, so their presence turns the prefilter off.
func anyLiteralIn(e *Env, lits []literal, s string) bool {
	var f *folded
	for _, l := range lits {
		if !l.fold {
			if containsLiteral(s, l.s) {
				return true
			}
			continue
		}
		if f == nil {
			f = foldedOf(e, s)
			if f.special {
				return true
			}
		}
		if containsLiteral(f.lower, l.s) {
			return true
		}
	}
	return false
}

// containsLiteral is strings.Contains(s, lit), but scans s for lit's rarest byte rather
// than its first: "instructions 7" is found by looking for '7', not for every 'i' of an
// English text.
func containsLiteral(s, lit string) bool {
	if len(lit) == 0 || len(lit) > len(s) {
		return len(lit) == 0
	}
	at := 0
	for i := 1; i < len(lit); i++ {
		if commonness[lit[i]] < commonness[lit[at]] {
			at = i
		}
	}
	c := lit[at]
	for i := at; i < len(s)-(len(lit)-at-1); {
		j := strings.IndexByte(s[i:], c)
		if j < 0 {
			return false
		}
		if p := i + j - at; p+len(lit) <= len(s) && s[p:p+len(lit)] == lit {
			return true
		}
		i += j + 1
	}
	return false
}

// commonness ranks bytes by how often they occur in text: space and the frequent letters
// high, digits, punctuation and capitals (absent from lower-cased text) low.
var commonness = func() (t [256]uint8) {
	const byFrequency = " etaoinsrhldcumfpgwybvkxjqz" // most frequent first
	for i := range len(byFrequency) {
		t[byFrequency[i]] = uint8(len(byFrequency) - i)
	}
	return t
}()

// folded is a string ASCII-lower-cased for the prefilters, and whether it has a rune that
// folds onto an ASCII letter.
type folded struct {
	src, lower string
	special    bool
}

// foldedOf folds s, once per evaluation for the string last asked for: every regexp
// prefilter of a step asks about the same text, one after the other.
func foldedOf(e *Env, s string) *folded {
	var f *folded
	if st := e.state; st != nil {
		f = &st.folded
		if f.lower != "" && f.src == s {
			return f
		}
	} else {
		f = new(folded)
	}
	*f = folded{src: s, lower: asciiLower(s),
		special: strings.ContainsRune(s, '\u212a') || strings.ContainsRune(s, '\u017f')}
	return f
}
