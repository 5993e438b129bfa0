package jsonpatch

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// applyPatch applies ops (add, remove, replace) to doc, as RFC 6902 specifies, so the
// tests check that a diff really turns before into after.
func applyPatch(t *testing.T, doc any, ops []Op) any {
	t.Helper()
	for _, op := range ops {
		var v any
		if op.Value != nil {
			require.NoError(t, json.Unmarshal(op.Value, &v))
		}
		doc = applyAt(t, doc, splitPointer(op.Path), op.Op, v)
	}
	return doc
}

func splitPointer(p string) []string {
	if p == "" {
		return nil
	}
	var out []string
	cur := ""
	for i := 1; i < len(p); i++ {
		switch {
		case p[i] == '/':
			out = append(out, cur)
			cur = ""
		case p[i] == '~' && i+1 < len(p) && p[i+1] == '0':
			cur += "~"
			i++
		case p[i] == '~' && i+1 < len(p) && p[i+1] == '1':
			cur += "/"
			i++
		default:
			cur += string(p[i])
		}
	}
	return append(out, cur)
}

func applyAt(t *testing.T, doc any, path []string, op string, v any) any {
	t.Helper()
	if len(path) == 0 {
		require.Equal(t, "replace", op)
		return v
	}
	switch d := doc.(type) {
	case map[string]any:
		k := path[0]
		if len(path) > 1 {
			d[k] = applyAt(t, d[k], path[1:], op, v)
			return d
		}
		switch op {
		case "remove":
			require.Contains(t, d, k)
			delete(d, k)
		case "add":
			d[k] = v
		case "replace":
			require.Contains(t, d, k)
			d[k] = v
		}
		return d
	case []any:
		var i int
		require.NoError(t, json.Unmarshal([]byte(path[0]), &i))
		if len(path) > 1 {
			d[i] = applyAt(t, d[i], path[1:], op, v)
			return d
		}
		switch op {
		case "remove":
			return append(d[:i:i], d[i+1:]...)
		case "add":
			require.Equal(t, len(d), i, "adds append")
			return append(d, v)
		case "replace":
			d[i] = v
		}
		return d
	}
	t.Fatalf("path %v into %T", path, doc)
	return nil
}

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after string
		want          string
	}{
		{"equal", `{"a":1,"b":[1,{"c":2}]}`, `{"b":[1,{"c":2}],"a":1}`, `[]`},
		{"number spelling", `{"a":1,"b":100}`, `{"a":1.0,"b":1e2}`, `[]`},
		{"replace leaf", `{"to":"x@evil.example","n":1}`, `{"to":"x@corp.example","n":1}`,
			`[{"op":"replace","path":"/to","value":"x@corp.example","old":"x@evil.example"}]`},
		{"add and remove keys sorted", `{"b":1,"d":2}`, `{"a":0,"b":1,"c":3}`,
			`[{"op":"add","path":"/a","value":0},{"op":"add","path":"/c","value":3},{"op":"remove","path":"/d","old":2}]`},
		{"nested", `{"args":{"cc":["a","b"],"to":"x"}}`, `{"args":{"cc":["a"],"to":"x"}}`,
			`[{"op":"remove","path":"/args/cc/1","old":"b"}]`},
		{"array grows", `[1]`, `[2,3,4]`,
			`[{"op":"replace","path":"/0","value":2,"old":1},{"op":"add","path":"/1","value":3},{"op":"add","path":"/2","value":4}]`},
		{"array shrinks from the end", `[1,2,3]`, `[1]`,
			`[{"op":"remove","path":"/2","old":3},{"op":"remove","path":"/1","old":2}]`},
		{"type change", `{"a":{"b":1}}`, `{"a":[1]}`, `[{"op":"replace","path":"/a","value":[1],"old":{"b":1}}]`},
		{"to null", `{"a":1}`, `{"a":null}`, `[{"op":"replace","path":"/a","value":null,"old":1}]`},
		{"escaped keys", `{"a/b":1,"c~d":1}`, `{"a/b":2,"c~d":2}`,
			`[{"op":"replace","path":"/a~1b","value":2,"old":1},{"op":"replace","path":"/c~0d","value":2,"old":1}]`},
		{"whole document", ``, `{"a":1}`, `[{"op":"replace","path":"","value":{"a":1},"old":null}]`},
		{"big numbers", `{"a":12345678901234567890123}`, `{"a":12345678901234567890124}`,
			`[{"op":"replace","path":"/a","value":12345678901234567890124,"old":12345678901234567890123}]`},
		{"huge exponent", `{"a":1e999999999,"b":2e-999999999}`, `{"a":1e999999999,"b":2e-999999999}`, `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := Diff(json.RawMessage(tc.before), json.RawMessage(tc.after))
			require.NoError(t, err)
			got, err := json.Marshal(ops)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(got))

			if tc.name == "number spelling" || tc.name == "huge exponent" {
				return // float64 decoding cannot represent these documents faithfully
			}
			var before, after any
			if tc.before != "" {
				require.NoError(t, json.Unmarshal([]byte(tc.before), &before))
			}
			require.NoError(t, json.Unmarshal([]byte(tc.after), &after))
			require.Equal(t, after, applyPatch(t, before, ops))
		})
	}
	_, err := Diff(json.RawMessage(`{`), json.RawMessage(`{}`))
	require.Error(t, err)
	_, err = Diff(json.RawMessage(`{}`), json.RawMessage(`{} {}`))
	require.Error(t, err)
}
