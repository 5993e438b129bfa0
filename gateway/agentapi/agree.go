package agentapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

// segment is what the gateway reads of a content event to tell what it shows a client:
// which part of the message (index), whether it adds to that part (delta) or stands for it.
type segment struct {
	Type  string          `json:"type"`
	Index *int            `json:"index"`
	Delta *bool           `json:"delta"`
	Text  *string         `json:"text"`
	Data  json.RawMessage `json:"data"`
	URL   *string         `json:"image_url"`
}

var segmentMembers = []string{"type", "index", "delta", "text", "data", "image_url"}

func (*segment) members() []string { return segmentMembers }

// agrees reports whether the events held back for a message (its start and its content
// segments) show a client nothing but what the completed message, which was judged, says.
// A message is judged whole, once complete, but a streaming client reads its segments: an
// upstream whose segments say something else ("rm -rf /" in the deltas of a message
// completed as "ls") would otherwise have the judged text allowed and the other shown.
// Text segments may add up to a prefix of the judged text (the protocol's own example
// streams "Hello", ", ", "world" for "Hello, world!"); a data segment's strings may be
// prefixes of the judged ones (a call's arguments as they are generated) and its other
// members must equal them. Anything the gateway cannot place disagrees.
func agrees(events [][]byte, parts []content) bool {
	shown := map[int]string{}
	for _, e := range events {
		var h head
		if decodeExact(e, &h) != nil {
			return false
		}
		switch h.Object {
		case "message":
			// Its start: it carries no content in the runtime's stream.
			var m message
			if decodeExact(e, &m) != nil || len(m.Content) > 0 {
				return false
			}
			continue
		case "content":
		default:
			return false
		}
		var s segment
		if decodeExact(e, &s) != nil {
			return false
		}
		i := 0
		switch {
		case s.Index != nil:
			i = *s.Index
		case len(parts) != 1:
			return false // no index, and more than one part it could be
		}
		if i < 0 || i >= len(parts) || s.Type != parts[i].Type {
			return false
		}
		p := parts[i]
		delta := s.Delta != nil && *s.Delta
		switch s.Type {
		case "text":
			if delta {
				shown[i] += deref(s.Text)
			} else {
				shown[i] = deref(s.Text)
			}
			if !strings.HasPrefix(deref(p.Text), shown[i]) {
				return false
			}
		case "data":
			if delta || !dataWithin(s.Data, p.Data) {
				return false
			}
		default:
			if delta || deref(s.URL) != deref(p.URL) || !jsonEqual(s.Data, p.Data) {
				return false
			}
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// dataWithin reports whether a data segment shows no more than the judged data: each of
// its members is the judged one's, or a prefix of it where both are strings.
func dataWithin(seg, judged json.RawMessage) bool {
	if len(seg) == 0 || isNull(seg) {
		return true
	}
	sv, serr := decodeAny(seg)
	jv, jerr := decodeAny(judged)
	s, sok := sv.(map[string]any)
	j, jok := jv.(map[string]any)
	if serr != nil || jerr != nil || !sok || !jok {
		return false
	}
	for k, sv := range s {
		jv, ok := j[k]
		if !ok {
			return false
		}
		ss, sok := sv.(string)
		js, jok := jv.(string)
		if sok && jok {
			if !strings.HasPrefix(js, ss) {
				return false
			}
			continue
		}
		if !reflect.DeepEqual(sv, jv) {
			return false
		}
	}
	return true
}

// jsonEqual reports whether a and b are the same JSON value (absent and null alike).
func jsonEqual(a, b json.RawMessage) bool {
	an, bn := len(a) == 0 || isNull(a), len(b) == 0 || isNull(b)
	if an || bn {
		return an == bn
	}
	if bytes.Equal(a, b) {
		return true
	}
	av, aerr := decodeAny(a)
	bv, berr := decodeAny(b)
	return aerr == nil && berr == nil && reflect.DeepEqual(av, bv)
}

// decodeAny reads a JSON value keeping numbers as written: two numbers that differ only
// past float64's precision are not the same value.
func decodeAny(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
