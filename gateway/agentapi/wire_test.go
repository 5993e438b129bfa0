package agentapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// namesOf returns the JSON member names of the fields of struct type t, from their tags.
func namesOf(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case name == "":
			names = append(names, f.Name)
		default:
			names = append(names, name)
		}
	}
	return names
}

// Each struct read by decodeExact lists its members by hand; a field added or renamed
// without its list would let a case variant of it through.
func TestMembersMatchTags(t *testing.T) {
	for _, v := range []exactObject{&head{}, &message{}, &content{}, &callData{}, &outputList{}, &appErrorBody{}, &approvalData{}} {
		typ := reflect.TypeOf(v).Elem()
		require.Equal(t, namesOf(typ), v.members(), typ.Name())
	}
}

func TestCheckCase(t *testing.T) {
	names := contentMembers
	tests := []struct{ name, obj, want string }{
		{"exact", `{"type":"text","text":"hi","data":null}`, ""},
		{"other names", `{"Index":0,"msg_id":"m","Status":"x"}`, ""},
		{"variant", `{"text":"a","Text":"b"}`, "Text"},
		{"upper", `{"TEXT":"b"}`, "TEXT"},
		{"escaped", `{"text":"a","\u0054ext":"b"}`, "Text"},
		{"mixed", `{"image_url":"x","imagE_url":"y"}`, "imagE_url"},
		{"nested is not this object's", `{"data":{"Text":"x","Type":[{"TYPE":1}]},"text":"a"}`, ""},
		{"strings with structure", `{"text":"} ,\"Text\": {[","data":["]","{"], "Type" : 1}`, "Type"},
		{"whitespace", " {\n\t\"text\" :\r\n \"a\" ,\n \"Data\":true }", "Data"},
		{"scalars", `{"a":1.5e3,"b":true,"c":null,"d":-2,"IMAGE_URL":"x"}`, "IMAGE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkCase([]byte(tt.obj), names)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			var fe *fieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.want, fe.path)
		})
	}
	// Unicode folds as encoding/json's: ſ is s, the Kelvin sign is k.
	var fe *fieldError
	require.ErrorAs(t, checkCase([]byte(`{"\u017ferver_label":"x"}`), callDataMembers), &fe)
	require.Equal(t, "ſerver_label", fe.path)
	require.ErrorAs(t, checkCase([]byte(`{"\u212aind":"x"}`), []string{"kind"}), &fe)
	require.Equal(t, "\u212aind", fe.path)
	for _, obj := range []string{`[]`, `"text"`, `null`, ``, `  5`} {
		require.ErrorIs(t, checkCase([]byte(obj), names), errNotObject, obj)
	}
}

// FuzzCheckCase compares the hand scan with encoding/json's own reading of the names.
func FuzzCheckCase(f *testing.F) {
	for _, s := range []string{`{"text":"a","Text":"b"}`, `{"data":{"Text":1},"TyPe":"x"}`,
		`{"a":"\"}","\u0074EXT":[1,{"b":"]"}]}`, `{}`, `{"x":[[[]]],"y":{}}`} {
		f.Add(s)
	}
	names := contentMembers
	f.Fuzz(func(t *testing.T, obj string) {
		if !json.Valid([]byte(obj)) || !strings.HasPrefix(strings.TrimLeft(obj, " \t\r\n"), "{") {
			return
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(obj)))
		_, _ = dec.Token()
		want := ""
		for dec.More() && want == "" {
			kt, _ := dec.Token()
			k := kt.(string)
			for _, n := range names {
				if k != n && strings.EqualFold(k, n) {
					want = k
				}
			}
			var skip json.RawMessage
			require.NoError(t, dec.Decode(&skip))
		}
		err := checkCase([]byte(obj), names)
		if want == "" {
			require.NoError(t, err)
			return
		}
		var fe *fieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, want, fe.path)
	})
}

func TestSetKey(t *testing.T) {
	tests := []struct{ name, obj, key, val, want string }{
		{"replace", `{"a":1,"sequence_number":7,"b":"x"}`, "sequence_number", "2", `{"a":1,"sequence_number":2,"b":"x"}`},
		{"replace object", `{"a":{"b":[1,{"c":"}"}]},"z":0}`, "a", "null", `{"a":null,"z":0}`},
		{"replace last, spaced", "{\"a\" : 1 ,\n \"b\" :\t\"x\"\n}", "b", `"y"`, "{\"a\" : 1 ,\n \"b\" :\t\"y\"\n}"},
		{"escaped name", `{"te\u0078t":"a"}`, "text", `"b"`, `{"te\u0078t":"b"}`},
		{"nested is not top level", `{"data":{"output":"x"}}`, "output", `"y"`, `{"data":{"output":"x"},"output":"y"}`},
		{"append", `{"a":1}`, "b", "2", `{"a":1,"b":2}`},
		{"append to empty", `{ }`, "b", "2", `{"b":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := setKey([]byte(tt.obj), tt.key, []byte(tt.val))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
	for _, obj := range []string{`[1]`, `"x"`, ``, `{"a"`, `{"a":}`, `{"a":1 "b":2}`, `{"a":"x}`} {
		_, err := setKey([]byte(obj), "b", []byte("1"))
		require.Error(t, err, obj)
	}
}

// FuzzSetKey compares setKey with a json.Decoder reading of the members it keeps.
func FuzzSetKey(f *testing.F) {
	for _, s := range []string{`{"a":1,"sequence_number":7}`, `{"x":{"sequence_number":1},"y":[ "]" ]}`, `{}`,
		`{"sequence_number" : null , "s":"\"sequence_number\":"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		if !json.Valid([]byte(obj)) || !strings.HasPrefix(strings.TrimLeft(obj, " \t\r\n"), "{") {
			return
		}
		got, err := setKey([]byte(obj), "sequence_number", []byte("42"))
		require.NoError(t, err)
		require.True(t, json.Valid(got), string(got))
		// Every member is kept in order with its value, sequence_number's set (the last
		// duplicate is what a reader sees; setKey sets the first, as before).
		members := func(b []byte) (names []string, vals []string) {
			dec := json.NewDecoder(bytes.NewReader(b))
			_, _ = dec.Token()
			for dec.More() {
				kt, _ := dec.Token()
				var v json.RawMessage
				require.NoError(t, dec.Decode(&v))
				names = append(names, kt.(string))
				vals = append(vals, string(v))
			}
			return names, vals
		}
		wantN, wantV := members([]byte(obj))
		gotN, gotV := members(got)
		i := slices.Index(wantN, "sequence_number")
		if i < 0 {
			wantN, wantV = append(wantN, "sequence_number"), append(wantV, "42")
		} else {
			wantV[i] = "42"
		}
		require.Equal(t, wantN, gotN)
		for j := range wantV {
			var a, b any
			require.NoError(t, json.Unmarshal([]byte(wantV[j]), &a))
			require.NoError(t, json.Unmarshal([]byte(gotV[j]), &b))
			require.Equal(t, a, b)
		}
	})
}
