package hook

import (
	"encoding/json"
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
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
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
				require.True(t, json.Valid(doc.bytes()), "%s", doc.bytes())
				c.remove(at)
				require.Equal(t, string(b), string(doc.bytes()))
			}
		}
	})
}
