package hook

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzJSONTree: any valid JSON is written back byte for byte, and a member inserted into
// any container comes out again leaving the same bytes.
func FuzzJSONTree(f *testing.F) {
	for _, s := range []string{realisticSettings, "{}", "[ ]", " null ", `{"a":[1, {"b" : "\u003c"}],"c":1e400}`,
		"{\r\n\t\"x\": [\r\n\t\t1\r\n\t]\r\n}", `"\\"`, `[[],[{}]]`} {
		f.Add([]byte(s))
	}
	// With comments, as a Gemini CLI settings file may have them.
	for _, s := range []string{"{ // c\n \"a\": /* x */ 1, /* y */ \"b\": [1 /*z*/, 2] // end\n}",
		"/* head */{\"s\":\"// not /* a comment\"}// tail", "{\"a\"/**/:/**/null/**/}", "[//\n]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := func(b []byte) bool {
			plain, closed := stripComments(b)
			return closed && json.Valid(plain)
		}
		if !valid(b) {
			return
		}
		doc := parseJSON(b)
		require.Equal(t, string(b), string(doc.bytes()))
		st := styleOf(doc.root)
		var containers []*jnode
		var walk func(n *jnode)
		walk = func(n *jnode) {
			if n.kind != 0 {
				containers = append(containers, n)
			}
			for _, m := range n.members {
				walk(m.val)
			}
		}
		walk(doc.root)
		for _, c := range containers {
			if len(c.members) == 0 {
				// An empty container written with spaces inside comes back as "[]".
				continue
			}
			for _, at := range []int{0, len(c.members)} {
				m := &jmember{val: newNode(jobj{{"k", "v<&>"}}, 1, st)}
				if c.kind == '{' {
					m.key, m.rawKey, m.colon = "new", encode("new"), st.colon
				}
				c.insert(at, m, 0, st)
				require.True(t, valid(doc.bytes()), "%s", doc.bytes())
				c.remove(at)
				require.Equal(t, string(b), string(doc.bytes()))
			}
		}
	})
}

// TestStripComments: comments become spaces, offsets and newlines kept; what looks like a
// comment inside a string is text.
func TestStripComments(t *testing.T) {
	tests := []struct {
		in, want string
		closed   bool
	}{
		{`{"a":1}`, `{"a":1}`, true},
		{"{// x\n}", "{    \n}", true},
		{"{/* a\nb */}", "{    \n    }", true},
		{`{"u":"http://x/*y*/"}`, `{"u":"http://x/*y*/"}`, true},
		{`{"q":"\"//"}`, `{"q":"\"//"}`, true},
		{"[1]// no newline", "[1]             ", true},
		{"{/* open", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, closed := stripComments([]byte(tt.in))
			require.Equal(t, tt.closed, closed)
			if closed {
				require.Equal(t, tt.want, string(got))
				require.Len(t, got, len(tt.in))
			}
		})
	}
}

// TestStyleIgnoresComments: new members copy the file's indentation and separators, never
// a comment that sits in them.
func TestStyleIgnoresComments(t *testing.T) {
	tests := []struct {
		in   string
		want jstyle
	}{
		{"{\n  // mine\n  \"a\": 1\n}", jstyle{nl: "\n", indent: "  ", colon: ": ", sep: " "}},
		{"{\n\t/* mine */ \"a\": 1\n}", jstyle{nl: "\n", indent: "\t", colon: ": ", sep: " "}},
		{`{"a" /* k */ : 1, /* b */ "b": 2}`, jstyle{colon: "  : ", sep: "  "}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			plain, closed := stripComments([]byte(tt.in))
			require.True(t, closed)
			require.True(t, json.Valid(plain))
			doc := parseJSON([]byte(tt.in))
			require.Equal(t, tt.in, string(doc.bytes()))
			require.Equal(t, tt.want, styleOf(doc.root))
		})
	}
}

// TestRemoveLastKeepsComment: removing the last member makes the one before it the last,
// which is written without the text between its value and the comma: a comment there is the
// user's and stays, before the closing bracket.
func TestRemoveLastKeepsComment(t *testing.T) {
	for in, want := range map[string]string{
		"{\n  \"a\": 1 /* x */ , \"hooks\": {}\n}": "{\n  \"a\": 1 /* x */ \n}",
		"[1 // one\n, 2]":                          "[1 // one\n]",
		`{"a": 1, "b": 2}`:                         `{"a": 1}`,
	} {
		t.Run(in, func(t *testing.T) {
			doc := parseJSON([]byte(in))
			doc.root.remove(len(doc.root.members) - 1)
			require.Equal(t, want, string(doc.bytes()))
		})
	}
}

// TestInsertCopiesNoComment: members install adds take their neighbours' line breaks and
// indentation, never a comment in them: the user wrote it once, where it is.
func TestInsertCopiesNoComment(t *testing.T) {
	in := "{\n  \"hooks\": { // mine\n    /* first */ \"AfterAgent\": []\n  }\n}"
	doc := parseJSON([]byte(in))
	st := styleOf(doc.root)
	hooks := doc.root.get("hooks")
	hooks.set("BeforeTool", []any{}, 1, st, false)
	hooks.set("AfterTool", []any{}, 1, st, false)
	got := string(doc.bytes())
	require.Equal(t, 1, strings.Count(got, "// mine"), "%s", got)
	require.Equal(t, 1, strings.Count(got, "/* first */"), "%s", got)
	require.Contains(t, got, "[],\n    \"BeforeTool\": [],\n    \"AfterTool\": []\n  }")
}
