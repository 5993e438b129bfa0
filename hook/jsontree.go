package hook

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// The settings files install edits are the user's: a decode into map[string]any and back
// would sort their keys, escape their & < >, round their big numbers and reflow their
// layout. Install edits this tree instead: every value keeps the bytes it was written with
// and every container the whitespace around its members, so writing an unedited tree gives
// back the file byte for byte, and an edit changes only the members it adds or removes.

// jnode is one JSON value as the file spells it.
type jnode struct {
	// kind is '{' or '[' for a container, 0 for a scalar.
	kind byte
	// raw is a scalar's text as written (a string keeps its escapes, a number its digits).
	raw     []byte
	members []*jmember
	// closeWS is the whitespace before the closing bracket.
	closeWS string
}

// jmember is one member of an object or one element of an array, with the whitespace
// around it.
type jmember struct {
	// lead is the whitespace before the member (after the opening bracket or the comma).
	lead string
	// key is the decoded key, rawKey the key as written (objects only).
	key    string
	rawKey []byte
	// colon is the text between key and value: ":" and the whitespace around it.
	colon string
	val   *jnode
	// trail is the whitespace between the value and the comma after it.
	trail string
}

// jdoc is a whole file: the root value and the whitespace around it.
type jdoc struct {
	lead, trail string
	root        *jnode
}

// parseJSON reads b, which must be one valid JSON value (check with json.Valid first).
func parseJSON(b []byte) *jdoc {
	p := &jparser{b: b}
	d := &jdoc{lead: p.ws()}
	d.root = p.value()
	d.trail = p.ws()
	return d
}

func (d *jdoc) bytes() []byte {
	var b bytes.Buffer
	b.WriteString(d.lead)
	d.root.write(&b)
	b.WriteString(d.trail)
	return b.Bytes()
}

type jparser struct {
	b []byte
	i int
}

// ws reads whitespace, and the comments of a settings file that allows them (see
// stripComments): they are kept with the whitespace around them, so they stay where the
// user wrote them.
func (p *jparser) ws() string {
	start := p.i
	for p.i < len(p.b) {
		switch {
		case strings.IndexByte(" \t\r\n", p.b[p.i]) >= 0:
			p.i++
		case bytes.HasPrefix(p.b[p.i:], []byte("//")):
			if end := bytes.IndexByte(p.b[p.i:], '\n'); end >= 0 {
				p.i += end // the newline is whitespace
			} else {
				p.i = len(p.b)
			}
		case bytes.HasPrefix(p.b[p.i:], []byte("/*")):
			// stripComments accepted the file: every block comment is closed.
			p.i += 2 + bytes.Index(p.b[p.i+2:], []byte("*/")) + 2
		default:
			return string(p.b[start:p.i])
		}
	}
	return string(p.b[start:p.i])
}

func (p *jparser) value() *jnode {
	switch c := p.b[p.i]; c {
	case '{', '[':
		p.i++
		n := &jnode{kind: c}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		lead := p.ws()
		if p.b[p.i] == end {
			p.i++
			n.closeWS = lead
			return n
		}
		for {
			m := &jmember{lead: lead}
			if c == '{' {
				m.rawKey = p.str()
				// Valid JSON: the key decodes.
				_ = json.Unmarshal(m.rawKey, &m.key)
				before := p.ws()
				p.i++ // ':'
				m.colon = before + ":" + p.ws()
			}
			m.val = p.value()
			ws := p.ws()
			n.members = append(n.members, m)
			if p.b[p.i] == ',' {
				m.trail = ws
				p.i++
				lead = p.ws()
				continue
			}
			p.i++ // the closing bracket
			n.closeWS = ws
			return n
		}
	case '"':
		return &jnode{raw: p.str()}
	default:
		start := p.i
		for p.i < len(p.b) && strings.IndexByte(" \t\r\n,]}/", p.b[p.i]) < 0 {
			p.i++
		}
		return &jnode{raw: p.b[start:p.i]}
	}
}

// str reads a string token, quotes included.
func (p *jparser) str() []byte {
	start := p.i
	p.i++
	for p.b[p.i] != '"' {
		if p.b[p.i] == '\\' {
			p.i++
		}
		p.i++
	}
	p.i++
	return p.b[start:p.i]
}

func (n *jnode) write(b *bytes.Buffer) {
	if n.kind == 0 {
		b.Write(n.raw)
		return
	}
	b.WriteByte(n.kind)
	for i, m := range n.members {
		b.WriteString(m.lead)
		if n.kind == '{' {
			b.Write(m.rawKey)
			b.WriteString(m.colon)
		}
		m.val.write(b)
		if i < len(n.members)-1 {
			b.WriteString(m.trail)
			b.WriteByte(',')
		}
	}
	b.WriteString(n.closeWS)
	if n.kind == '{' {
		b.WriteByte('}')
	} else {
		b.WriteByte(']')
	}
}

func (n *jnode) bytes() []byte {
	var b bytes.Buffer
	n.write(&b)
	return b.Bytes()
}

func (n *jnode) isObject() bool { return n != nil && n.kind == '{' }
func (n *jnode) isArray() bool  { return n != nil && n.kind == '[' }

// isNull reports a JSON null; a missing value (nil) counts as one.
func (n *jnode) isNull() bool { return n == nil || (n.kind == 0 && string(n.raw) == "null") }

// get returns the value of key in an object (the last one, as encoding/json reads
// duplicates), or nil.
func (n *jnode) get(key string) *jnode {
	if i := n.index(key); i >= 0 {
		return n.members[i].val
	}
	return nil
}

func (n *jnode) index(key string) int {
	if !n.isObject() {
		return -1
	}
	for i := len(n.members) - 1; i >= 0; i-- {
		if n.members[i].key == key {
			return i
		}
	}
	return -1
}

// str returns the value of a string node.
func (n *jnode) str() (string, bool) {
	if n == nil || n.kind != 0 || len(n.raw) == 0 || n.raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(n.raw, &s) != nil {
		return "", false
	}
	return s, true
}

// value decodes the node as encoding/json would.
func (n *jnode) value() any {
	var v any
	_ = json.Unmarshal(n.bytes(), &v)
	return v
}

// jstyle is how a file lays out what it holds, for the members install adds.
type jstyle struct {
	// nl and indent lay out one member a line; nl is "" for a file on one line.
	nl, indent string
	// colon is what goes between a key and its value, sep what follows a comma on one line.
	colon, sep string
}

// styleOf reads the layout of a file from its root object's first members: two-space
// indentation when the file says nothing (a new or empty file).
func styleOf(root *jnode) jstyle {
	st := jstyle{nl: "\n", indent: "  ", colon: ": ", sep: " "}
	if !root.isObject() || len(root.members) == 0 {
		return st
	}
	first := root.members[0]
	// A comment in the whitespace copied for new members would be written again with
	// each: only its whitespace is.
	st.colon = uncommented(first.colon)
	if nl, indent, ok := lineBreak(first.lead); ok {
		st.nl, st.indent = nl, indent
		return st
	}
	st.nl, st.indent = "", ""
	st.sep = ""
	if strings.HasSuffix(st.colon, " ") {
		st.sep = " "
	}
	if len(root.members) > 1 {
		st.sep = uncommented(root.members[1].lead)
	}
	return st
}

// uncommented is whitespace read by jparser.ws without its comments (a // comment's
// newline stays).
func uncommented(ws string) string {
	if !strings.Contains(ws, "/") {
		return ws
	}
	var b strings.Builder
	for i := 0; i < len(ws); i++ {
		switch {
		case strings.HasPrefix(ws[i:], "//"):
			end := strings.IndexByte(ws[i:], '\n')
			if end < 0 {
				return b.String()
			}
			i += end - 1
		case strings.HasPrefix(ws[i:], "/*"):
			end := strings.Index(ws[i+2:], "*/")
			if end < 0 {
				return b.String()
			}
			i += 2 + end + 1
		default:
			b.WriteByte(ws[i])
		}
	}
	return b.String()
}

// stripComments returns b with its // and /* */ comments outside strings replaced by
// spaces (a // comment's newline kept), as the strip-json-comments module Gemini CLI reads
// its settings with does, and whether every block comment was closed. Offsets are kept, so
// a JSON error in the result points at the file's own bytes.
func stripComments(b []byte) ([]byte, bool) {
	out := bytes.Clone(b)
	for i := 0; i < len(out); i++ {
		switch {
		case out[i] == '"':
			for i++; i < len(out) && out[i] != '"'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				return nil, false
			}
			for k := i; k < i+2+end+2; k++ {
				if out[k] != '\n' && out[k] != '\r' {
					out[k] = ' '
				}
			}
			i += 2 + end + 1
		}
	}
	return out, true
}

// lead is the whitespace before a member at depth.
func (st jstyle) lead(depth int) string {
	if st.nl == "" {
		return ""
	}
	return st.nl + strings.Repeat(st.indent, depth)
}

// jobj is an object to add, its keys in order.
type jobj []jkv

type jkv struct {
	key string
	val any
}

// newNode renders v at depth (0 for the root) in the file's style.
func newNode(v any, depth int, st jstyle) *jnode {
	var n *jnode
	switch v := v.(type) {
	case *jnode:
		return v
	case jobj:
		n = &jnode{kind: '{'}
		for _, kv := range v {
			n.members = append(n.members, &jmember{lead: st.lead(depth + 1), key: kv.key, rawKey: encode(kv.key),
				colon: st.colon, val: newNode(kv.val, depth+1, st)})
		}
	case []any:
		n = &jnode{kind: '['}
		for _, x := range v {
			n.members = append(n.members, &jmember{lead: st.lead(depth + 1), val: newNode(x, depth+1, st)})
		}
	default:
		return &jnode{raw: encode(v)}
	}
	if len(n.members) > 0 {
		n.closeWS = st.lead(depth)
		if st.nl == "" {
			for _, m := range n.members[1:] {
				m.lead = st.sep
			}
		}
	}
	return n
}

// encode is json.Marshal of a key or scalar without HTML escaping (a command's && stays
// as written). Only strings, numbers and booleans are encoded here.
func encode(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// insert adds m at index i of container n (at depth), with whitespace copied from its
// neighbours where it has some, so that removing m again gives back n as it was.
func (n *jnode) insert(i int, m *jmember, depth int, st jstyle) {
	switch {
	case len(n.members) == 0:
		m.lead = st.lead(depth + 1)
		if strings.Contains(n.closeWS, "/") {
			// A comment in an empty container (Gemini CLI's settings) stays, before the
			// member, so that remove can give it back.
			m.lead = n.closeWS + m.lead
		}
		n.closeWS = st.lead(depth)
	case i == 0:
		m.lead = n.members[0].lead
		n.members[0].lead = n.between(st)
	default:
		m.lead = n.between(st)
	}
	n.members = slices.Insert(n.members, i, m)
}

// between is the whitespace before a member that is not the first: a neighbour's, without
// the comments in it, which are the user's and stay where they are written, once.
func (n *jnode) between(st jstyle) string {
	switch {
	case len(n.members) > 1:
		return withoutComments(n.members[1].lead)
	case strings.ContainsRune(n.members[0].lead, '\n'):
		return withoutComments(n.members[0].lead)
	case st.nl == "":
		return st.sep
	}
	// A container on one line in a file that is not.
	return " "
}

// remove drops the member at index i, the inverse of insert.
func (n *jnode) remove(i int) {
	m := n.members[i]
	if i == 0 && len(n.members) > 1 {
		n.members[1].lead = m.lead
	}
	if last := len(n.members) - 1; i == last && i > 0 {
		// The member before becomes the last, which is written without its trail (the
		// text between its value and the comma): a comment there stays, before the
		// closing bracket.
		prev := n.members[i-1]
		n.closeWS = prev.trail + n.closeWS
		prev.trail = ""
	}
	n.members = slices.Delete(n.members, i, i+1)
	if len(n.members) == 0 {
		n.closeWS = commentedBefore(m.lead, n.closeWS)
	}
}

// commentedBefore is what insert found in an empty container whose member, now removed,
// had lead: the comments it moved in front of the member (lead ends with closeWS and one
// more indentation), or "" when there were none.
func commentedBefore(lead, closeWS string) string {
	k := strings.LastIndex(lead, closeWS)
	if k < 0 || strings.Trim(lead[k+len(closeWS):], " \t") != "" || !strings.Contains(lead[:k], "/") {
		return ""
	}
	// A // comment that runs to the end would take the closing bracket with it: these are
	// comments the user wrote before the member, not ones insert moved, and go with it.
	if j := strings.LastIndex(lead[:k], "//"); j >= 0 && !strings.Contains(lead[j:k], "\n") {
		return ""
	}
	return lead[:k]
}

// withoutComments is whitespace read by jparser.ws for a new member: the line break and
// indentation before its key when there is one, else the whitespace without its comments.
func withoutComments(ws string) string {
	if !strings.Contains(ws, "/") {
		return ws
	}
	if nl, indent, ok := lineBreak(ws); ok {
		return nl + indent
	}
	return uncommented(ws)
}

// lineBreak is the last line break in whitespace ws ("\n" or "\r\n") and the indentation
// after it (its spaces and tabs, not a comment that follows them); ok is false when ws
// breaks no line.
func lineBreak(ws string) (nl, indent string, ok bool) {
	i := strings.LastIndexByte(ws, '\n')
	if i < 0 {
		return "", "", false
	}
	nl = "\n"
	if i > 0 && ws[i-1] == '\r' {
		nl = "\r\n"
	}
	line := ws[i+1:]
	return nl, line[:len(line)-len(strings.TrimLeft(line, " \t"))], true
}

// set gives key the value v in object n (at depth): in place when the key is there, else
// appended (or first, with first).
func (n *jnode) set(key string, v any, depth int, st jstyle, first bool) {
	if i := n.index(key); i >= 0 {
		n.members[i].val = newNode(v, depth+1, st)
		return
	}
	m := &jmember{key: key, rawKey: encode(key), colon: st.colon, val: newNode(v, depth+1, st)}
	at := len(n.members)
	if first {
		at = 0
	}
	n.insert(at, m, depth, st)
}
