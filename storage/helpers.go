package storage

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The helpers below are what both backends need and neither's database does: value
// conversions, query text and the export's line format.

// ClampLimit returns def for n <= 0 and at most hi: a page size a client asked for.
func ClampLimit(n, def, hi int) int {
	if n <= 0 {
		return def
	}
	return min(n, hi)
}

// EscapeLike makes s match literally inside a LIKE pattern with ESCAPE '\'.
func EscapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// Percentile returns the nearest-rank p-th percentile of sorted values, 0 when empty.
func Percentile(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// StoredJSON returns nil for an empty value (stored as NULL, read as JSON null), raw when
// it is trusted or valid JSON, and otherwise the JSON string of its bytes. Invalid UTF-8,
// which a JSON decoder reads as U+FFFD (and json.Valid lets through), is stored as
// U+FFFD: every read, export and live event carries the step as JSON text, which
// must be UTF-8 (RFC 8259 §8.1; a websocket text frame even more so, RFC 6455 §5.6).
func StoredJSON(raw json.RawMessage, trusted bool) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	if trusted || json.Valid(raw) {
		if !utf8.Valid(raw) {
			// Outside strings a byte of 0x80 or more is no JSON, so the bytes replaced are
			// inside strings, where U+FFFD keeps the text valid JSON.
			return bytes.ToValidUTF8(raw, []byte("\uFFFD"))
		}
		return raw
	}
	s, _ := json.Marshal(string(raw)) // marshalling a string cannot fail
	return s
}

// IDSeparators are dropped from ids in the search index, so that an id is one word there
// ("sess-42" is "sess42") as well as its parts: a filter by id then looks up one rare word
// (or its beginning) instead of a phrase of common ones ("sess", "42"). SquashID does the
// same to a filter.
const IDSeparators = "-_.:@/"

// SquashID drops IDSeparators from an id.
func SquashID(id string) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(IDSeparators, r) {
			return -1
		}
		return r
	}, id)
}

// HasWord reports whether s has a letter or a digit: a word, which is all the search index
// keeps of a text or an id.
func HasWord(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }) >= 0
}

// IDMatch is how an id column is compared with a search filter the index cannot answer.
type IDMatch struct {
	Value    string // what the id is compared with
	Squashed bool   // the id is compared squashed (SquashID)
	Prefix   bool   // the id begins with Value, rather than equals it
}

// WordlessID says how the session, agent or user filter v is matched when it has no word
// (HasWord), and reports false when it has one and the index answers it. The index keeps
// only words, so it has nothing to look such a filter up by ("---", "🙂🙂🙂", "%"), and
// dropping the filter would widen the search to every step. It is compared with the id
// itself instead, as a filter with words matches: separators ignored and from the id's
// start once minPrefix characters are typed. A filter of separators only would squash to
// nothing, which names every id made of separators and the empty one (the steps of no
// user): it must equal the id as typed.
func WordlessID(v string, minPrefix int) (IDMatch, bool) {
	if v == "" || HasWord(v) {
		return IDMatch{}, false
	}
	sq := SquashID(v)
	if sq == "" {
		return IDMatch{Value: v}, true
	}
	return IDMatch{Value: sq, Squashed: true, Prefix: utf8.RuneCountInString(sq) >= minPrefix}, true
}

// Phrase is one term of a search: a word, or the text between double quotes.
type Phrase struct {
	Text   string
	Quoted bool
}

// SplitQuery splits free text into words and "quoted phrases"; an unclosed quote runs to
// the end.
func SplitQuery(s string) []Phrase {
	var out []Phrase
	for {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			return out
		}
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return append(out, Phrase{Text: s[1:], Quoted: true})
			}
			out = append(out, Phrase{Text: s[1 : 1+end], Quoted: true})
			s = s[end+2:]
			continue
		}
		end := strings.IndexFunc(s, unicode.IsSpace)
		if end < 0 {
			end = len(s)
		}
		out = append(out, Phrase{Text: s[:end]})
		s = s[end:]
	}
}

// WriteExportRecord writes v's JSON object as one line of an export, with "record":kind as
// its first field.
func WriteExportRecord(w *bufio.Writer, kind string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) < 2 || b[0] != '{' {
		return fmt.Errorf("record is not a JSON object: %.40s", b)
	}
	_, _ = w.WriteString(`{"record":"` + kind + `"`)
	if len(b) > 2 { // not "{}"
		_ = w.WriteByte(',')
	}
	_, _ = w.Write(b[1:])
	// bufio.Writer keeps the first write error and returns it from every later call.
	return w.WriteByte('\n')
}
