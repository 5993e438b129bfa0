package aos

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// example returns testdata/<name>.json.
func example(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	require.NoError(t, err)
	return b
}

// deleted marks a member to remove in mutate.
type deletedT struct{}

var deleted = deletedT{}

// mutate loads an example, sets (or deletes) the value at a dotted path such as
// "params.message.content[0].text", and returns the request.
func mutate(t testing.TB, name, path string, value any) []byte {
	t.Helper()
	var root any
	require.NoError(t, json.Unmarshal(example(t, name), &root))
	if path == "" {
		b, err := json.Marshal(value)
		require.NoError(t, err)
		return b
	}
	segs := splitPath(path)
	cur := root
	for i, seg := range segs {
		last := i == len(segs)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if _, del := value.(deletedT); del {
					delete(c, seg.key)
				} else {
					c[seg.key] = value
				}
				break
			}
			cur = c[seg.key]
			if seg.key == "" {
				t.Fatalf("bad path %q", path)
			}
		case []any:
			require.Less(t, seg.idx, len(c), "path %s", path)
			if last {
				c[seg.idx] = value
				break
			}
			cur = c[seg.idx]
		default:
			t.Fatalf("path %s: %T at segment %d", path, cur, i)
		}
		if cur == nil && !last {
			t.Fatalf("path %s: nothing at segment %d", path, i)
		}
	}
	b, err := json.Marshal(root)
	require.NoError(t, err)
	return b
}

type seg struct {
	key string
	idx int
}

func splitPath(p string) []seg {
	var out []seg
	for _, part := range strings.Split(p, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			out = append(out, seg{key: name})
		}
		for rest != "" {
			n, after, _ := strings.Cut(rest, "]")
			i, _ := strconv.Atoi(n)
			out = append(out, seg{idx: i})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}

// requireErr checks a JSON-RPC error's code and, for field errors, the path and reason.
func requireErr(t testing.TB, e *Error, code int, field, reason string) {
	t.Helper()
	require.NotNil(t, e, "expected error %d at %q", code, field)
	require.Equal(t, code, e.Code, "message: %s", e.Message)
	if field == "" && reason == "" {
		return
	}
	fe, ok := e.Data.(FieldError)
	require.True(t, ok, "data is %T: %v", e.Data, e.Data)
	require.Equal(t, field, fe.Field, "message: %s", e.Message)
	require.Contains(t, fe.Reason, reason)
	require.Contains(t, e.Message, fe.Reason)
	if field != "" {
		require.Contains(t, e.Message, field+": ")
	}
}

// parse is ParseStep that fails the test on error.
func parse(t testing.TB, msg []byte) *Step {
	t.Helper()
	s, e := ParseStep(msg)
	require.Nil(t, e, "%v", e)
	require.NotNil(t, s)
	return s
}

// exampleNames lists every single-request example under testdata.
func exampleNames(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		n := strings.TrimSuffix(filepath.Base(f), ".json")
		if n != "batch" {
			names = append(names, n)
		}
	}
	require.NotEmpty(t, names)
	return names
}
