package guardian

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
)

// The hand-written answer is byte for byte what encoding/json writes, for random texts
// (HTML characters, escapes, U+2028, invalid UTF-8) and ids; what it does not handle it
// leaves to encoding/json.
func TestAppendResultMatchesEncodingJSON(t *testing.T) {
	texts := []string{"", "ok", "Denied by policy.", `a "quoted" \ back`, "<b>&amp;</b>", "line\nbreak\ttab",
		"\u2028\u2029", "caf\u00e9 \U0001F600", "bad \xff\xfe utf8", "\x00\x1f ctl"}
	ids := []string{`1`, `-3.5e2`, `"req-1"`, `null`, `"a<b"`, `"caf\u00e9"`, `"x\"y"`, `"\u00e9"`}
	r := rand.New(rand.NewPCG(5, 6))
	pick := func() string { return texts[r.IntN(len(texts))] }
	fast := 0
	for range 3000 {
		res := aos.Result{Decision: aos.Decision(pick()), Reasoning: pick(), Message: pick()}
		for range r.IntN(3) {
			res.ReasonCode = append(res.ReasonCode, pick())
		}
		switch r.IntN(4) {
		case 1:
			res.Data = map[string]any{"ruleId": pick()}
		case 2:
			res.Data = map[string]any{"ruleId": pick(), "other": 1}
		case 3:
			res.ModifiedRequest = json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"m","params":{}}`)
		}
		id := json.RawMessage(ids[r.IntN(len(ids))])
		want, err := json.Marshal(aos.Response{JSONRPC: "2.0", ID: id, Result: res})
		require.NoError(t, err)
		got, ok := appendResult(nil, id, res)
		if !ok {
			require.True(t, res.ModifiedRequest != nil || len(res.Data) > 1 || !plainID(id), "%+v %s", res, id)
			continue
		}
		require.Equal(t, string(want), string(got))
		fast++
	}
	require.Greater(t, fast, 500, "the usual answer takes the hand-written path")
}
