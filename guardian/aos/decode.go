package aos

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Limits on hostile input. A legitimate AOS request nests about a dozen levels deep and its
// largest arrays are tool lists and memory items.
const (
	// MaxDepth is the deepest nesting of objects and arrays accepted in one request.
	MaxDepth = 64
	// MaxElements is the largest number of members of one object or elements of one array.
	MaxElements = 100_000
	// MaxIDBytes is the longest identifier accepted, in bytes of UTF-8: session, agent,
	// turn, step, tool and user ids and the agent's name. Ids are stored in indexed columns
	// and repeated in every session listing and step, so their size is what the console's
	// pages cost; 256 bytes hold any UUID, URN or readable name.
	MaxIDBytes = 256
)

// frame is one open object or array while decoding. Frames double as the JSON path of the
// value being decoded, so errors can name it without building strings on the happy path.
type frame struct {
	key []byte // current member name (objects); nil before the first member
	idx int    // current element index (arrays)
	n   int    // members or elements seen so far
	arr bool
}

// decoder is a single-pass JSON reader over one buffer. It validates syntax itself, so it
// can report wrong types and missing fields by JSON path, match member names exactly (no
// case folding), and bound depth without recursion when it only skips.
//
// The first error stops decoding: every method returns zero values once err is set.
type decoder struct {
	buf []byte
	pos int

	// base is the path of the value decoding starts at ("params"); baseDepth its nesting
	// depth in the whole request minus one, so limits count from the request's top.
	base      string
	baseDepth int
	// code is the JSON-RPC code for type and validation errors: -32602 inside params.
	code int

	// stack holds the open containers up to MaxDepth; it grows on demand because most
	// requests nest about ten levels.
	stack []frame
	nf    int
	// deep holds the kinds (1 = array) of containers nested beyond the stack, so a hostile
	// body is still checked for syntax in constant memory per level.
	deep []uint64
	nd   int

	// noLimits turns depth and size violations off (SplitBody only checks syntax).
	noLimits bool
	// stored reads a step the guardian stored earlier (ParseStoredStep): what it accepted
	// then is read as it was, though it would be refused now.
	stored bool
	// share makes strings without escapes share buf's memory instead of copying it (see
	// ParseStep): a step has dozens of strings, and a copy each was a third of the
	// guardian's allocations. Unmarshalers never share: encoding/json may reuse its buffer.
	share bool

	// longNumbers counts the numbers of 16 digits or more anyValue has read (longNumber): a
	// value whose reading changes it is read again for the step's text, with its digits
	// (exactJSON). Counting here spares the common step a second pass over its bytes. A
	// uint32 fits in the bools' padding, and no request holds 2^32 numbers.
	longNumbers uint32

	// a2aContext is where a2aContent found the A2A contextId.
	a2aContext gpath

	err   *Error // syntax error, or a validation error while binding
	limit *Error // first depth or size violation; scanning goes on to check syntax
}

func newDecoder(buf []byte, base string, baseDepth, code int) *decoder {
	return &decoder{buf: buf, base: base, baseDepth: baseDepth, code: code}
}

// ---- errors and paths ----

func (d *decoder) syntaxErr(reason string) {
	if d.err == nil {
		d.err = &Error{Code: CodeParseError, Message: "Parse error",
			Data: SyntaxDetail{Offset: d.pos, Reason: reason}}
	}
}

// SyntaxDetail is the Data of a parse error: where the JSON stopped making sense.
type SyntaxDetail struct {
	Offset int    `json:"offset"`
	Reason string `json:"reason"`
}

// path renders the JSON path of the current value.
func (d *decoder) path() string { return d.pathN(d.nf) }

// pathN renders the path selected by the outermost n frames.
func (d *decoder) pathN(n int) string {
	var b strings.Builder
	b.WriteString(d.base)
	for i := 0; i < n; i++ {
		f := &d.stack[i]
		if f.arr {
			if f.n == 0 {
				continue
			}
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(f.idx))
			b.WriteByte(']')
			continue
		}
		if f.key == nil {
			continue
		}
		writeKey(&b, f.key)
	}
	return b.String()
}

// writeKey appends .key, or ["key"] when the name is not a plain identifier. Very long
// names are cut so an error message stays readable.
func writeKey(b *strings.Builder, key []byte) {
	plain := len(key) > 0
	for i, c := range key {
		if c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c >= '0' && c <= '9' || c == '-') {
			continue
		}
		plain = false
		break
	}
	if plain && len(key) <= 128 {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(key)
		return
	}
	s := string(key)
	if len(s) > 128 {
		s = strings.ToValidUTF8(s[:128], "") + "…"
	}
	b.WriteByte('[')
	b.WriteString(strconv.Quote(s))
	b.WriteByte(']')
}

func joinPath(p, name string) string {
	if p == "" {
		return name
	}
	return p + "." + name
}

// fieldError builds the error for a field (or the whole request when field is empty):
// -32602 within params, -32600 on the envelope.
func fieldError(code int, field, reason string) *Error {
	prefix := "invalid params: "
	if code == CodeInvalidRequest {
		prefix = "invalid request: "
	}
	if field == "" {
		return &Error{Code: code, Message: prefix + reason}
	}
	return &Error{Code: code, Message: prefix + field + ": " + reason, Data: FieldError{Field: field, Reason: reason}}
}

// invalid reports a problem with the current value.
func (d *decoder) invalid(reason string) {
	if d.err == nil {
		d.err = fieldError(d.code, d.path(), reason)
	}
}

// invalidField reports a problem with the member name of the object just closed (or
// still open at the current path): a missing or inconsistent field.
func (d *decoder) invalidField(name, reason string) {
	if d.err == nil {
		d.err = fieldError(d.code, joinPath(d.path(), name), reason)
	}
}

func (d *decoder) missing(name string) { d.invalidField(name, "required") }

// require reports the first name whose bit is not set in has.
func (d *decoder) require(has uint32, names ...string) {
	for i, n := range names {
		if has&(1<<i) == 0 {
			d.missing(n)
			return
		}
	}
}

func (d *decoder) limitErr(p, reason string) {
	if d.limit != nil || d.noLimits {
		return
	}
	code := CodeInvalidRequest
	if d.code == CodeInvalidParams || p == "params" || strings.HasPrefix(p, "params.") || strings.HasPrefix(p, "params[") {
		code = CodeInvalidParams
	}
	d.limit = fieldError(code, p, reason)
}

// ---- low-level scanning ----

func (d *decoder) ws() {
	buf, i := d.buf, d.pos
	// Indentation of pretty-printed JSON: skip eight spaces at a time.
	for i+8 <= len(buf) && binary.LittleEndian.Uint64(buf[i:]) == 0x2020202020202020 {
		i += 8
	}
	for i < len(buf) && buf[i] <= ' ' && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\t' || buf[i] == '\r') {
		i++
	}
	d.pos = i
}

// cur returns the byte at the current position after whitespace, 0 at the end.
func (d *decoder) cur() byte {
	d.ws()
	if d.pos < len(d.buf) {
		return d.buf[d.pos]
	}
	return 0
}

func (d *decoder) depth() int { return d.baseDepth + d.nf + d.nd }

func (d *decoder) push(arr bool) {
	if d.depth()+1 > MaxDepth && d.limit == nil && !d.noLimits {
		d.limitErr(d.path(), "nested deeper than "+strconv.Itoa(MaxDepth)+" levels")
	}
	if d.nd == 0 && d.nf < MaxDepth {
		if d.nf == len(d.stack) {
			if d.stack == nil {
				d.stack = make([]frame, 0, 16)
			}
			d.stack = append(d.stack, frame{})
		}
		d.stack[d.nf] = frame{arr: arr}
		d.nf++
		return
	}
	w, bit := d.nd/64, uint(d.nd%64)
	if w == len(d.deep) {
		d.deep = append(d.deep, 0)
	}
	if arr {
		d.deep[w] |= 1 << bit
	} else {
		d.deep[w] &^= 1 << bit
	}
	d.nd++
}

func (d *decoder) pop() {
	if d.nd > 0 {
		d.nd--
		return
	}
	d.nf--
}

func (d *decoder) topIsArray() bool {
	if d.nd > 0 {
		i := d.nd - 1
		return d.deep[i/64]&(1<<uint(i%64)) != 0
	}
	return d.stack[d.nf-1].arr
}

// count records one more member or element in the innermost container.
func (d *decoder) count() {
	if d.nd > 0 {
		return
	}
	f := &d.stack[d.nf-1]
	if f.n > 0 && f.arr {
		f.idx++
	}
	f.n++
	if f.n == MaxElements+1 && d.limit == nil && !d.noLimits {
		what := "members"
		if f.arr {
			what = "elements"
		}
		d.limitErr(d.pathN(d.nf-1), "more than "+strconv.Itoa(MaxElements)+" "+what)
	}
}

// string flags
const (
	strEscaped = 1 << iota
	strNonASCII
)

// scanString reads a string starting at the opening quote and returns the bounds of its
// contents.
func (d *decoder) scanString() (start, end int, flags uint8, ok bool) {
	buf := d.buf
	i := d.pos + 1
	start = i
	for i < len(buf) {
		c := buf[i]
		if plainASCII[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			d.pos = i + 1
			return start, i, flags, true
		case c == '\\':
			flags |= strEscaped
			i++
			if i >= len(buf) {
				d.pos = i
				d.syntaxErr("unterminated string")
				return 0, 0, 0, false
			}
			switch buf[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+4 >= len(buf) || !isHex(buf[i+1]) || !isHex(buf[i+2]) || !isHex(buf[i+3]) || !isHex(buf[i+4]) {
					d.pos = i
					d.syntaxErr(`invalid \u escape in string`)
					return 0, 0, 0, false
				}
				i += 5
			default:
				d.pos = i
				d.syntaxErr("invalid escape in string")
				return 0, 0, 0, false
			}
		case c < 0x20:
			d.pos = i
			d.syntaxErr("control character in string")
			return 0, 0, 0, false
		default:
			flags |= strNonASCII
			i++
		}
	}
	d.pos = i
	d.syntaxErr("unterminated string")
	return 0, 0, 0, false
}

// plainASCII marks the bytes a string holds as they are: printable ASCII other than the
// quote and the backslash.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber reads a number per RFC 8259 and returns its bounds.
func (d *decoder) scanNumber() (start, end int, integer, ok bool) {
	buf := d.buf
	i := d.pos
	start = i
	if i < len(buf) && buf[i] == '-' {
		i++
	}
	switch {
	case i < len(buf) && buf[i] == '0':
		i++
	case i < len(buf) && buf[i] >= '1' && buf[i] <= '9':
		for i < len(buf) && isDigit(buf[i]) {
			i++
		}
	default:
		d.pos = i
		d.syntaxErr("invalid number")
		return 0, 0, false, false
	}
	integer = true
	if i < len(buf) && buf[i] == '.' {
		i++
		if i >= len(buf) || !isDigit(buf[i]) {
			d.pos = i
			d.syntaxErr("invalid number")
			return 0, 0, false, false
		}
		for i < len(buf) && isDigit(buf[i]) {
			i++
		}
		integer = false
	}
	if i < len(buf) && (buf[i] == 'e' || buf[i] == 'E') {
		i++
		if i < len(buf) && (buf[i] == '+' || buf[i] == '-') {
			i++
		}
		if i >= len(buf) || !isDigit(buf[i]) {
			d.pos = i
			d.syntaxErr("invalid number")
			return 0, 0, false, false
		}
		for i < len(buf) && isDigit(buf[i]) {
			i++
		}
		integer = false
	}
	d.pos = i
	return start, i, integer, true
}

func (d *decoder) literal(word string) bool {
	if len(d.buf)-d.pos >= len(word) && string(d.buf[d.pos:d.pos+len(word)]) == word {
		d.pos += len(word)
		return true
	}
	d.syntaxErr("invalid literal")
	return false
}

// readKey reads a member name and the colon after it and records the name in the
// innermost frame.
func (d *decoder) readKey() []byte {
	d.ws()
	if d.pos >= len(d.buf) {
		d.syntaxErr("unexpected end of input")
		return nil
	}
	if d.buf[d.pos] != '"' {
		d.syntaxErr("expected a string member name")
		return nil
	}
	s, e, flags, ok := d.scanString()
	if !ok {
		return nil
	}
	key := d.buf[s:e]
	if flags != 0 {
		key = unquote(key)
	}
	d.ws()
	if d.pos >= len(d.buf) || d.buf[d.pos] != ':' {
		d.syntaxErr("expected ':' after member name")
		return nil
	}
	d.pos++
	if d.nd == 0 {
		d.stack[d.nf-1].key = key
	}
	d.count()
	return key
}

// skip consumes one value, checking its syntax and (unless noLimits) the depth and size
// limits. It never recurses, so nesting depth costs one bit per level at most.
func (d *decoder) skip() {
	if d.err != nil {
		return
	}
	start := d.nf + d.nd
	buf := d.buf
value:
	for {
		d.ws()
		if d.pos >= len(buf) {
			d.syntaxErr("unexpected end of input")
			return
		}
		switch c := buf[d.pos]; {
		case c == '{':
			d.pos++
			d.push(false)
			d.ws()
			if d.pos < len(buf) && buf[d.pos] == '}' {
				d.pos++
				d.pop()
				break
			}
			if d.readKey() == nil && d.err != nil {
				return
			}
			continue value
		case c == '[':
			d.pos++
			d.push(true)
			d.ws()
			if d.pos < len(buf) && buf[d.pos] == ']' {
				d.pos++
				d.pop()
				break
			}
			d.count()
			continue value
		case c == '"':
			if _, _, _, ok := d.scanString(); !ok {
				return
			}
		case c == 't':
			if !d.literal("true") {
				return
			}
		case c == 'f':
			if !d.literal("false") {
				return
			}
		case c == 'n':
			if !d.literal("null") {
				return
			}
		case c == '-' || isDigit(c):
			if _, _, _, ok := d.scanNumber(); !ok {
				return
			}
		default:
			d.syntaxErr("unexpected character " + strconv.QuoteRune(rune(c)))
			return
		}
		// After a value: close finished containers, or move on to the next member.
		for d.nf+d.nd > start {
			d.ws()
			if d.pos >= len(buf) {
				d.syntaxErr("unexpected end of input")
				return
			}
			c := buf[d.pos]
			arr := d.topIsArray()
			switch {
			case c == ',':
				d.pos++
				if arr {
					d.count()
				} else if d.readKey() == nil && d.err != nil {
					return
				}
				continue value
			case arr && c == ']', !arr && c == '}':
				d.pos++
				d.pop()
			case arr:
				d.syntaxErr("expected ',' or ']' in array")
				return
			default:
				d.syntaxErr("expected ',' or '}' in object")
				return
			}
		}
		return
	}
}

// end checks that nothing but whitespace follows the value.
func (d *decoder) end() {
	d.ws()
	if d.err == nil && d.pos != len(d.buf) {
		d.syntaxErr("unexpected data after the JSON value")
	}
}

// ---- typed reading (after the buffer passed skip) ----

// null consumes a null literal if one is next.
func (d *decoder) null() bool {
	if d.err != nil {
		return false
	}
	if d.cur() == 'n' {
		d.pos += 4
		return true
	}
	return false
}

func kindName(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	default:
		return "a number"
	}
}

func (d *decoder) wrongType(want string) {
	d.invalid("must be " + want + ", not " + kindName(d.cur()))
}

func (d *decoder) enterObject() bool { return d.enter('{', "an object") }

func (d *decoder) enterArray() bool { return d.enter('[', "an array") }

// enter opens the object or array ('{' or '[') that must come next.
func (d *decoder) enter(open byte, want string) bool {
	if d.err != nil {
		return false
	}
	if d.cur() != open {
		d.wrongType(want)
		return false
	}
	d.pos++
	d.push(open == '[')
	if d.limit != nil {
		d.err = d.limit
		return false
	}
	return true
}

// nextKey moves to the next member of the object entered last; false after its end.
func (d *decoder) nextKey() ([]byte, bool) {
	if d.err != nil {
		return nil, false
	}
	c := d.cur()
	if c == '}' {
		d.pos++
		d.pop()
		return nil, false
	}
	if d.stack[d.nf-1].n > 0 {
		if c != ',' {
			d.syntaxErr("expected ',' or '}' in object")
			return nil, false
		}
		d.pos++
	}
	key := d.readKey()
	if d.limit != nil && d.err == nil {
		d.err = d.limit
	}
	return key, d.err == nil
}

// nextElem moves to the next element of the array entered last; false after its end.
func (d *decoder) nextElem() bool {
	if d.err != nil {
		return false
	}
	c := d.cur()
	if c == ']' {
		d.pos++
		d.pop()
		return false
	}
	if d.stack[d.nf-1].n > 0 {
		if c != ',' {
			d.syntaxErr("expected ',' or ']' in array")
			return false
		}
		d.pos++
	}
	d.count()
	if d.limit != nil {
		d.err = d.limit
		return false
	}
	return true
}

func (d *decoder) str() string {
	if d.err != nil {
		return ""
	}
	if d.cur() != '"' {
		d.wrongType("a string")
		return ""
	}
	s, e, flags, ok := d.scanString()
	if !ok {
		return ""
	}
	if d.share && flags == 0 && e > s {
		return unsafe.String(&d.buf[s], e-s)
	}
	return makeString(d.buf[s:e], flags)
}

// id reads an identifier: a string of at most MaxIDBytes bytes of valid UTF-8. Unlike
// text (str), an id with invalid UTF-8 or an unpaired surrogate escape is refused rather
// than repaired with U+FFFD: repaired, two distinct ids would name the same session.
func (d *decoder) id() string {
	if d.err != nil {
		return ""
	}
	if d.cur() != '"' {
		d.wrongType("a string")
		return ""
	}
	s, e, flags, ok := d.scanString()
	if !ok {
		return ""
	}
	raw := d.buf[s:e]
	if flags == 0 {
		if len(raw) > MaxIDBytes {
			d.invalid(idTooLong(len(raw)))
			return ""
		}
		if d.share && e > s {
			return unsafe.String(&d.buf[s], e-s)
		}
		return string(raw)
	}
	if !exactText(raw) {
		d.invalid(idNotUTF8)
		return ""
	}
	v := makeString(raw, flags)
	if len(v) > MaxIDBytes {
		d.invalid(idTooLong(len(v)))
		return ""
	}
	return v
}

// idNotUTF8 is the reason an id with bytes or escapes that are not UTF-8 is refused.
const idNotUTF8 = "must be valid UTF-8 (no invalid bytes or unpaired surrogate escapes)"

func idTooLong(n int) string {
	return "must be at most " + strconv.Itoa(MaxIDBytes) + " bytes, not " + strconv.Itoa(n)
}

// exactText reports whether the contents of a JSON string (which passed scanString)
// decode without replacement: valid UTF-8, and every \u escape of a surrogate half part
// of a pair.
func exactText(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1 : i+5])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		if r < 0xDC00 && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
			if r2 := hex4(raw[i+3 : i+7]); r2 >= 0xDC00 && r2 <= 0xDFFF {
				i += 6
				continue
			}
		}
		return false
	}
	return true
}

// optStr reads a string that may also be null.
func (d *decoder) optStr() string {
	if d.null() {
		return ""
	}
	return d.str()
}

func makeString(b []byte, flags uint8) string {
	if flags == 0 || flags == strNonASCII && utf8.Valid(b) {
		return string(b)
	}
	return string(unquote(b))
}

func (d *decoder) boolean() bool {
	if d.err != nil {
		return false
	}
	switch d.cur() {
	case 't':
		d.pos += 4
		return true
	case 'f':
		d.pos += 5
		return false
	}
	d.wrongType("a boolean")
	return false
}

// integer reads a number that has no fractional part (1e3 is fine, 1.5 is not).
func (d *decoder) integer() int64 {
	if d.err != nil {
		return 0
	}
	c := d.cur()
	if c != '-' && !isDigit(c) {
		d.wrongType("an integer")
		return 0
	}
	s, e, isInt, ok := d.scanNumber()
	if !ok {
		return 0
	}
	if isInt {
		if v, err := strconv.ParseInt(string(d.buf[s:e]), 10, 64); err == nil {
			return v
		}
		d.invalid("must be an integer within 64 bits")
		return 0
	}
	f, err := strconv.ParseFloat(string(d.buf[s:e]), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		d.invalid("must be an integer")
		return 0
	}
	return int64(f)
}

func (d *decoder) number() float64 {
	s, e, _, ok := d.scanNumber()
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(string(d.buf[s:e]), 64)
	if err != nil {
		d.invalid("number out of range")
		return 0
	}
	return f
}

// strs reads an array of strings.
func (d *decoder) strs() []string {
	if !d.enterArray() {
		return nil
	}
	out := []string{}
	for d.nextElem() {
		out = append(out, d.str())
	}
	return out
}

// optStrs reads an array of strings that may also be null.
func (d *decoder) optStrs() []string {
	if d.null() {
		return nil
	}
	return d.strs()
}

// anyValue reads any value the way encoding/json decodes into an interface: objects as
// map[string]any, arrays as []any, numbers as float64.
func (d *decoder) anyValue() any {
	if d.err != nil {
		return nil
	}
	switch c := d.cur(); {
	case c == '{':
		m := map[string]any{}
		d.pos++
		d.push(false)
		if d.limit != nil {
			d.err = d.limit
			return nil
		}
		for {
			k, ok := d.nextKey()
			if !ok {
				break
			}
			m[string(k)] = d.anyValue()
		}
		return m
	case c == '[':
		a := []any{}
		d.pos++
		d.push(true)
		if d.limit != nil {
			d.err = d.limit
			return nil
		}
		for d.nextElem() {
			a = append(a, d.anyValue())
		}
		return a
	case c == '"':
		return d.str()
	case c == 't':
		d.pos += 4
		return true
	case c == 'f':
		d.pos += 5
		return false
	case c == 'n':
		d.pos += 4
		return nil
	case c == '-' || isDigit(c):
		start := d.pos
		f := d.number()
		if d.err == nil && longNumber(d.buf[start:d.pos]) {
			d.longNumbers++
		}
		return f
	}
	d.syntaxErr("unexpected character")
	return nil
}

// object reads an object of arbitrary values; null reads as nil (metadata is optional).
func (d *decoder) object() map[string]any {
	if d.null() {
		return nil
	}
	if d.cur() != '{' {
		d.wrongType("an object")
		return nil
	}
	m, _ := d.anyValue().(map[string]any)
	return m
}

// raw returns the next value as it appears in the buffer.
func (d *decoder) raw() json.RawMessage {
	d.ws()
	s := d.pos
	d.skip()
	if d.err != nil {
		return nil
	}
	return json.RawMessage(d.buf[s:d.pos])
}

// unquote decodes the contents of a JSON string with escapes or invalid UTF-8, replacing
// invalid sequences with U+FFFD as encoding/json does.
func unquote(s []byte) []byte {
	out := make([]byte, 0, len(s)+2*utf8.UTFMax)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			i++
			switch s[i] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(s[i+1 : i+5])
				i += 4
				if utf16.IsSurrogate(r) {
					if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
						if r2 := hex4(s[i+3 : i+7]); utf16.DecodeRune(r, r2) != utf8.RuneError {
							r = utf16.DecodeRune(r, r2)
							i += 6
						} else {
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default: // '"', '\\', '/'
				out = append(out, s[i])
			}
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
		}
	}
	return out
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
