package aos

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParseStep feeds arbitrary bodies through the endpoint's decoding path. It must never
// panic, must agree with encoding/json on what is valid JSON (SplitBody for a batch,
// ParseStep for a single object), and every step it accepts must
// survive re-encoding (what the guardian accepts, Go code can send back, e.g. modified).
// Seeds: testdata/fuzz/FuzzParseStep (the examples and edge cases).
func FuzzParseStep(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, batch, e := SplitBody(body)
		valid := json.Valid(body)
		if e != nil && e.Code == CodeParseError && valid {
			t.Fatalf("SplitBody: parse error on valid JSON: %v", e.Data)
		}
		if e == nil && !batch {
			// A single object's syntax is ParseStep's to check.
			_, pe := ParseStep(msgs[0])
			if parseErr := pe != nil && pe.Code == CodeParseError; parseErr == valid {
				t.Fatalf("valid JSON %v, but ParseStep's parse error %v", valid, pe)
			}
			if !valid {
				return
			}
		}
		if e == nil && !valid {
			t.Fatalf("SplitBody accepted invalid JSON")
		}
		for _, m := range msgs {
			id := IDOf(m)
			if !json.Valid(id) {
				t.Fatalf("IDOf returned invalid JSON %q", id)
			}
			s, e := ParseStep(m)
			if e != nil {
				if e.Code == 0 || e.Message == "" {
					t.Fatalf("empty error %#v", e)
				}
				if _, err := json.Marshal(e); err != nil {
					t.Fatalf("error does not encode: %v", err)
				}
				continue
			}
			if s.ID != nil && string(s.ID) != string(id) {
				t.Fatalf("ID %s but IDOf %s", s.ID, id)
			}
			_ = s.Text()
			_ = s.SessionHint()
			_ = s.ToolID()
			_ = s.Inputs()
			_ = s.Role()
			_ = s.Reasoning()
			_ = s.IsError()
			params, err := json.Marshal(typedParams(s))
			if err != nil {
				t.Fatalf("params do not encode: %v", err)
			}
			if _, err := NewModifiedRequest(s, params); err != nil {
				t.Fatalf("re-encoded params rejected: %v\nrequest: %s\nparams: %s", err, m, params)
			}
		}
	})
}

// FuzzAnyValue checks the decoder against encoding/json on arbitrary values: the same
// verdict on validity and the same decoded value (strings, escapes, invalid UTF-8, numbers).
func FuzzAnyValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,-2.5e3,true,null,"x\u00e9\ud83d\ude00"]}`, `"\ud800"`, "\"\xff\"", `1e400`, `[]`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want any
		stdErr := json.Unmarshal(data, &want)
		d := newDecoder(data, "", 0, CodeInvalidParams)
		d.skip()
		d.end()
		if d.err != nil {
			if stdErr == nil {
				t.Fatalf("rejected valid JSON: %v", d.err.Data)
			}
			return
		}
		if d.limit != nil {
			return
		}
		d.pos, d.nf, d.nd = 0, 0, 0
		got := d.anyValue()
		if d.err != nil {
			if stdErr == nil {
				t.Fatalf("decode failed where encoding/json did not: %v", d.err)
			}
			return
		}
		if stdErr != nil {
			t.Fatalf("decoded what encoding/json rejects (%v): %#v", stdErr, got)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("decoded %#v, encoding/json %#v", got, want)
		}
	})
}
