package hook

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// BurntSushi/toml is lenient about where a table may be defined: it lets a [table] header
// extend an inline table (hooks = { state = {} } then [hooks.state."…"]) and reopen a
// table that dotted keys defined. Codex reads config.toml with a strict parser and
// rejects such a file, so the edits to it are checked again here, by the rules of TOML
// 1.0 on defining keys and tables, in the way python3's tomllib applies them. Everything
// else about the syntax is BurntSushi's to check first: this reads only the structure
// (headers, keys, where each value ends) of a document it already accepted.

// checkTOMLDefinitions reports a key or table of doc defined twice, a [table] or dotted
// key that extends an inline table or array, and a table reopened against the rules.
func checkTOMLDefinitions(doc string) error {
	_, err := tomlDefinitions(doc)
	return err
}

// tomlDefinitions applies the rules to doc and returns the flags it ends with.
func tomlDefinitions(doc string) (*tomlDefs, error) {
	stmts, err := tomlStatements(doc)
	if err != nil {
		return nil, err
	}
	c := &tomlDefs{flags: &tomlFlags{}, data: &tomlData{}}
	var header []string
	for _, s := range stmts {
		switch s.kind {
		case '[', 'A':
			c.finalizePending()
			if err := c.header(s.key, s.kind == 'A'); err != nil {
				return nil, err
			}
			header = s.key
		default:
			if err := c.keyValue(header, s.key, s.frozen); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// tomlStatement is a table header ('['), an array-of-tables header ('A') or a key/value
// line ('=').
type tomlStatement struct {
	kind byte
	key  []string
	// frozen: the value is an inline table or an array, which nothing after it may extend.
	frozen bool
}

// tomlStatements splits doc into its statements.
func tomlStatements(doc string) ([]tomlStatement, error) {
	p := &tomlScanner{s: doc}
	var out []tomlStatement
	for {
		p.skipBlank(true)
		if p.i >= len(p.s) {
			return out, nil
		}
		var st tomlStatement
		if p.s[p.i] == '[' {
			st.kind = '['
			p.i++
			if p.peek('[') {
				st.kind = 'A'
				p.i++
			}
			key, err := p.key()
			if err != nil {
				return nil, err
			}
			st.key = key
			closing := "]"
			if st.kind == 'A' {
				closing = "]]"
			}
			if !strings.HasPrefix(p.s[p.i:], closing) {
				return nil, p.errorf("table header not closed")
			}
			p.i += len(closing)
		} else {
			st.kind = '='
			key, err := p.key()
			if err != nil {
				return nil, err
			}
			st.key = key
			if !p.peek('=') {
				return nil, p.errorf("no = after key")
			}
			p.i++
			p.skipBlank(false)
			if st.frozen, err = p.value(); err != nil {
				return nil, err
			}
		}
		p.skipBlank(false)
		if p.i < len(p.s) && p.s[p.i] != '\n' && !strings.HasPrefix(p.s[p.i:], "\r\n") {
			return nil, p.errorf("unexpected text after a statement")
		}
		out = append(out, st)
	}
}

type tomlScanner struct {
	s string
	i int
}

func (p *tomlScanner) errorf(format string, args ...any) error {
	line := strings.Count(p.s[:min(p.i, len(p.s))], "\n") + 1
	return fmt.Errorf("line %d: "+format, append([]any{line}, args...)...)
}

func (p *tomlScanner) peek(c byte) bool { return p.i < len(p.s) && p.s[p.i] == c }

// skipBlank skips spaces, tabs and a comment, and with newlines line ends and blank lines
// too.
func (p *tomlScanner) skipBlank(newlines bool) {
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == ' ' || c == '\t':
			p.i++
		case c == '#':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
		case newlines && (c == '\n' || c == '\r'):
			p.i++
		default:
			return
		}
	}
}

// key reads a (dotted) key and the blanks after it.
func (p *tomlScanner) key() ([]string, error) {
	var parts []string
	for {
		p.skipBlank(false)
		if p.i >= len(p.s) {
			return nil, p.errorf("key expected")
		}
		var part string
		switch p.s[p.i] {
		case '"':
			end, err := p.basicString(p.i)
			if err != nil {
				return nil, err
			}
			if part, err = unescapeTOML(p.s[p.i+1 : end-1]); err != nil {
				return nil, p.errorf("%v", err)
			}
			p.i = end
		case '\'':
			end := strings.IndexByte(p.s[p.i+1:], '\'')
			if end < 0 {
				return nil, p.errorf("literal key not closed")
			}
			part = p.s[p.i+1 : p.i+1+end]
			p.i += end + 2
		default:
			start := p.i
			// Lenient: BurntSushi has checked which characters a bare key may hold.
			for p.i < len(p.s) && !strings.ContainsRune(" \t\r\n.=[]\"'#,{}", rune(p.s[p.i])) {
				p.i++
			}
			if p.i == start {
				return nil, p.errorf("key expected")
			}
			part = p.s[start:p.i]
		}
		parts = append(parts, part)
		p.skipBlank(false)
		if !p.peek('.') {
			return parts, nil
		}
		p.i++
	}
}

// basicString is the end (after the closing quote) of the one-line basic string at i.
func (p *tomlScanner) basicString(i int) (int, error) {
	for j := i + 1; j < len(p.s); j++ {
		switch p.s[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		case '\n':
			return 0, p.errorf("string not closed")
		}
	}
	return 0, p.errorf("string not closed")
}

// multiline is the end of the multi-line string at p.i opened by delim (three double or
// three single quotes). Up to two quotes right before the closing delimiter belong to the
// string.
func (p *tomlScanner) multiline(delim string) (int, error) {
	for j := p.i + 3; j < len(p.s); j++ {
		switch {
		case delim[0] == '"' && p.s[j] == '\\':
			j++
		case strings.HasPrefix(p.s[j:], delim):
			end := j + 3
			for k := 0; k < 2 && end < len(p.s) && p.s[end] == delim[0]; k++ {
				end++
			}
			return end, nil
		}
	}
	return 0, p.errorf("multi-line string not closed")
}

// value skips the value at p.i; frozen when it is an inline table or an array.
func (p *tomlScanner) value() (frozen bool, err error) {
	if p.i >= len(p.s) {
		return false, p.errorf("value expected")
	}
	switch c := p.s[p.i]; {
	case c == '[' || c == '{':
		return true, p.skipNested()
	case strings.HasPrefix(p.s[p.i:], `"""`), strings.HasPrefix(p.s[p.i:], `'''`):
		end, err := p.multiline(p.s[p.i : p.i+3])
		p.i = end
		return false, err
	case c == '"':
		end, err := p.basicString(p.i)
		p.i = end
		return false, err
	case c == '\'':
		end := strings.IndexAny(p.s[p.i+1:], "'\n")
		if end < 0 || p.s[p.i+1+end] != '\'' {
			return false, p.errorf("string not closed")
		}
		p.i += end + 2
		return false, nil
	}
	// A number, boolean or date (which may hold a space): to the end of the line or a
	// comment.
	for p.i < len(p.s) && p.s[p.i] != '\n' && p.s[p.i] != '#' {
		p.i++
	}
	return false, nil
}

// skipNested skips an array or inline table: brackets count only outside strings and
// comments.
func (p *tomlScanner) skipNested() error {
	depth := 0
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '[' || c == '{':
			depth++
			p.i++
		case c == ']' || c == '}':
			depth--
			p.i++
			if depth == 0 {
				return nil
			}
		case c == '#':
			p.skipBlank(false)
		case c == '"' || c == '\'':
			if _, err := p.value(); err != nil {
				return err
			}
		default:
			p.i++
		}
	}
	return p.errorf("array or inline table not closed")
}

// unescapeTOML decodes the escapes of a basic string's content.
func unescapeTOML(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		if i >= len(s) {
			return "", errors.New("bad escape")
		}
		switch s[i] {
		case 'b':
			b.WriteByte('\b')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'f':
			b.WriteByte('\f')
		case 'r':
			b.WriteByte('\r')
		case 'e':
			b.WriteByte(0x1b)
		case '"', '\\':
			b.WriteByte(s[i])
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[s[i]]
			if i+1+n > len(s) {
				return "", errors.New("bad escape")
			}
			r, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil || !utf8.ValidRune(rune(r)) {
				return "", errors.New("bad escape")
			}
			b.WriteRune(rune(r))
			i += n
		default:
			return "", fmt.Errorf("bad escape \\%c", s[i])
		}
	}
	return b.String(), nil
}

// tomlDefs applies the rules on defining tables and keys, as tomllib does: each table
// path carries flags, explicit (defined by a header, or by dotted keys in an earlier
// section) and frozen (an inline table or array, with all under it).
type tomlDefs struct {
	flags   *tomlFlags
	data    *tomlData
	pending [][]string
}

const (
	tomlExplicit = 1 << iota
	tomlFrozen
)

func (c *tomlDefs) finalizePending() {
	for _, k := range c.pending {
		c.flags.set(k, tomlExplicit, false)
	}
	c.pending = nil
}

func (c *tomlDefs) header(key []string, array bool) error {
	if array {
		if c.flags.is(key, tomlFrozen) {
			return fmt.Errorf("[[%s]] extends an inline table or array", tomlKeyString(key))
		}
		// A new element: what the previous one defined is free again, but not the key
		// itself for a [table] header.
		c.flags.unsetAll(key)
		c.flags.set(key, tomlExplicit, false)
		return c.data.appendToList(key)
	}
	if c.flags.is(key, tomlExplicit) || c.flags.is(key, tomlFrozen) {
		return fmt.Errorf("table [%s] is defined twice or extends an inline table", tomlKeyString(key))
	}
	c.flags.set(key, tomlExplicit, false)
	_, err := c.data.nest(key)
	return err
}

func (c *tomlDefs) keyValue(header, key []string, frozen bool) error {
	abs := append(append([]string{}, header...), key...)
	for i := len(header) + 1; i < len(abs); i++ {
		// A dotted key may not add to a table a header defined, and the tables it defines
		// may not be reopened by a later section.
		if c.flags.is(abs[:i], tomlExplicit) {
			return fmt.Errorf("dotted key %s redefines table %s", tomlKeyString(abs), tomlKeyString(abs[:i]))
		}
		c.pending = append(c.pending, abs[:i:i])
	}
	parent := abs[:len(abs)-1]
	if c.flags.is(parent, tomlFrozen) {
		return fmt.Errorf("key %s extends an inline table or array", tomlKeyString(abs))
	}
	nest, err := c.data.nest(parent)
	if err != nil {
		return err
	}
	stem := abs[len(abs)-1]
	if _, ok := nest.kids[stem]; ok {
		return fmt.Errorf("key %s is defined twice", tomlKeyString(abs))
	}
	if frozen {
		c.flags.set(abs, tomlFrozen, true)
	}
	nest.kids[stem] = &tomlData{leaf: true}
	return nil
}

// tomlFlags is a tree of flags by key path.
type tomlFlags struct {
	flags, recursive int
	kids             map[string]*tomlFlags
}

func (f *tomlFlags) set(key []string, flag int, recursive bool) {
	for _, k := range key {
		if f.kids == nil {
			f.kids = map[string]*tomlFlags{}
		}
		next := f.kids[k]
		if next == nil {
			next = &tomlFlags{}
			f.kids[k] = next
		}
		f = next
	}
	if recursive {
		f.recursive |= flag
	} else {
		f.flags |= flag
	}
}

// is reports flag on key, or recursively on a table above it.
func (f *tomlFlags) is(key []string, flag int) bool {
	if len(key) == 0 {
		return false
	}
	for _, k := range key[:len(key)-1] {
		if f = f.kids[k]; f == nil {
			return false
		}
		if f.recursive&flag != 0 {
			return true
		}
	}
	f = f.kids[key[len(key)-1]]
	return f != nil && (f.flags|f.recursive)&flag != 0
}

func (f *tomlFlags) unsetAll(key []string) {
	for _, k := range key[:len(key)-1] {
		if f = f.kids[k]; f == nil {
			return
		}
	}
	delete(f.kids, key[len(key)-1])
}

// tomlData is the shape of the document: a table (kids), an array of tables (elems) or
// any other value (leaf).
type tomlData struct {
	kids   map[string]*tomlData
	elems  []*tomlData
	isList bool
	leaf   bool
}

// nest is the table at key, created as needed; through an array of tables, its last
// element.
func (d *tomlData) nest(key []string) (*tomlData, error) {
	if d.kids == nil {
		d.kids = map[string]*tomlData{}
	}
	for i, k := range key {
		next := d.kids[k]
		if next == nil {
			next = &tomlData{kids: map[string]*tomlData{}}
			d.kids[k] = next
		}
		if next.isList {
			next = next.elems[len(next.elems)-1]
		}
		if next.leaf {
			return nil, fmt.Errorf("%s is a value, not a table", tomlKeyString(key[:i+1]))
		}
		d = next
	}
	return d, nil
}

func (d *tomlData) appendToList(key []string) error {
	parent, err := d.nest(key[:len(key)-1])
	if err != nil {
		return err
	}
	stem := key[len(key)-1]
	elem := &tomlData{kids: map[string]*tomlData{}}
	switch cur := parent.kids[stem]; {
	case cur == nil:
		parent.kids[stem] = &tomlData{isList: true, elems: []*tomlData{elem}}
	case cur.isList:
		cur.elems = append(cur.elems, elem)
	default:
		return fmt.Errorf("[[%s]] is already a table or value", tomlKeyString(key))
	}
	return nil
}

// tomlKeyString writes a key path as TOML would.
func tomlKeyString(key []string) string {
	parts := make([]string, len(key))
	for i, k := range key {
		if k != "" && !strings.ContainsFunc(k, func(r rune) bool {
			return !(r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) {
			parts[i] = k
		} else {
			parts[i] = tomlQuote(k)
		}
	}
	return strings.Join(parts, ".")
}
