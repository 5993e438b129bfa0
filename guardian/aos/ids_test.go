package aos

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const rawMarker = "\x60RAW-ID\x60"

// withRaw loads an example, sets the value at path (by default the marker string), and puts
// raw (a JSON string literal, possibly with bytes encoding/json would never write) in the
// marker's place.
func withRaw(t *testing.T, example, path string, value any, raw string) []byte {
	t.Helper()
	const marker = rawMarker
	if value == nil {
		value = marker
	}
	b := mutate(t, example, path, value)
	quoted := []byte(`"` + marker + `"`)
	require.Equal(t, 1, bytes.Count(b, quoted), "marker at %s", path)
	return bytes.Replace(b, quoted, []byte(raw), 1)
}

// idValues are id values as JSON string literals: the accepted ones decode to want.
var idValues = []struct {
	name   string
	raw    string
	want   string // for accepted values
	reason string // for refused values
}{
	{"256 bytes", `"` + strings.Repeat("a", 256) + `"`, strings.Repeat("a", 256), ""},
	{"257 bytes", `"` + strings.Repeat("a", 257) + `"`, "", "must be at most 256 bytes, not 257"},
	{"1 MB", `"` + strings.Repeat("a", 1<<20) + `"`, "", "must be at most 256 bytes, not 1048576"},
	{"128 two-byte characters", `"` + strings.Repeat("é", 128) + `"`, strings.Repeat("é", 128), ""},
	{"129 two-byte characters", `"` + strings.Repeat("é", 129) + `"`, "", "must be at most 256 bytes, not 258"},
	{"escapes count decoded", `"` + strings.Repeat(`\u0061`, 256) + `"`, strings.Repeat("a", 256), ""},
	{"escapes decoded too long", `"` + strings.Repeat(`\u0061`, 257) + `"`, "", "not 257"},
	{"surrogate pair", `"\ud83d\ude00-id"`, "\U0001F600-id", ""},
	{"replacement character itself", `"a\ufffdb"`, "a\uFFFDb", ""},
	{"raw U+FFFD", "\"a\uFFFDb\"", "a\uFFFDb", ""},
	{"invalid byte", "\"a\xffb\"", "", idNotUTF8},
	{"truncated sequence", "\"a\xe2\x82\"", "", idNotUTF8},
	{"lone high surrogate", `"a\ud83d"`, "", idNotUTF8},
	{"high surrogate then a letter", `"\ud83d\u0041"`, "", idNotUTF8},
	{"lone low surrogate", `"\ude00x"`, "", idNotUTF8},
	{"invalid byte among escapes", "\"\\n\xff\"", "", idNotUTF8},
}

func TestIDLimits(t *testing.T) {
	meta := map[string]any{"sessionId": rawMarker}
	fields := []struct {
		example, path string
		get           func(*Step) string
		// set and value, when set, put the marker there (the example lacks the member).
		set   string
		value any
	}{
		{"message", "params.context.session.id", func(s *Step) string { return s.Context.Session.ID }, "", nil},
		{"message", "params.context.agent.id", func(s *Step) string { return s.Context.Agent.ID }, "", nil},
		{"message", "params.context.agent.name", func(s *Step) string { return s.Context.Agent.Name }, "", nil},
		{"message", "params.context.turnId", func(s *Step) string { return s.Context.TurnID }, "", nil},
		{"message", "params.context.stepId", func(s *Step) string { return s.Context.StepID }, "", nil},
		{"message", "params.context.user.id", func(s *Step) string { return s.Context.User.ID }, "", nil},
		{"toolCallRequest", "params.toolCallRequest.toolId", func(s *Step) string { return s.ToolID() }, "", nil},
		{"MCP", "params.message.params._meta.sessionId", (*Step).SessionHint, "", nil},
		{"MCP", "params.message.params.name", (*Step).ToolID, "", nil},
		{"MCP-inline", "params.params._meta.sessionId", (*Step).SessionHint, "params.params._meta", meta},
		{"MCP-inline", "params.params.name", (*Step).ToolID, "", nil},
		{"MCP-result", "params.message.result._meta.sessionId", (*Step).SessionHint, "params.message.result._meta", meta},
		{"A2A", "params.message.params.message.contextId", (*Step).SessionHint, "", nil},
		{"A2A-native", "params.payload.message.contextId", (*Step).SessionHint, "", nil},
		{"A2A-inline", "params.params.message.contextId", (*Step).SessionHint, "", nil},
	}
	for _, f := range fields {
		for _, v := range idValues {
			t.Run(f.example+" "+f.path+" "+v.name, func(t *testing.T) {
				set := f.path
				if f.set != "" {
					set = f.set
				}
				msg := withRaw(t, f.example, set, f.value, v.raw)
				s, e := ParseStep(msg)
				if v.reason != "" {
					require.Nil(t, s)
					requireErr(t, e, CodeInvalidParams, f.path, v.reason)
					return
				}
				require.Nil(t, e, "%v", e)
				require.Equal(t, v.want, f.get(s))
				if strings.HasSuffix(f.path, "session.id") || strings.HasSuffix(f.path, "sessionId") || strings.HasSuffix(f.path, "contextId") {
					require.Equal(t, f.path, s.SessionField())
				}
			})
		}
	}
}

func TestIDLimitsAOSParamsMeta(t *testing.T) {
	// The MCP session id may also sit in the AOS params' own _meta.
	body := func(id string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"_meta":{"sessionId":` + id +
			`},"message":{"jsonrpc":"2.0","method":"tools/list"}}}`)
	}
	s := parse(t, body(`"m3"`))
	require.Equal(t, "m3", s.SessionHint())
	require.Equal(t, "params._meta.sessionId", s.SessionField())

	_, e := ParseStep(body("\"m\xff\""))
	requireErr(t, e, CodeInvalidParams, "params._meta.sessionId", idNotUTF8)
	_, e = ParseStep(body(`"` + strings.Repeat("m", 300) + `"`))
	requireErr(t, e, CodeInvalidParams, "params._meta.sessionId", "not 300")

	// A repeated member is read as decoding reads it: the last one.
	s = parse(t, []byte(`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"_meta":{"sessionId":"a\ud83d","sessionId":"b\ufffd"},"message":{"jsonrpc":"2.0","method":"tools/list"}}}`))
	require.Equal(t, "b\uFFFD", s.SessionHint())
	_, e = ParseStep([]byte(`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"_meta":{"sessionId":"b\ufffd","sessionId":"a\ud83d"},"message":{"jsonrpc":"2.0","method":"tools/list"}}}`))
	requireErr(t, e, CodeInvalidParams, "params._meta.sessionId", idNotUTF8)
}

// A session id "." or ".." is refused wherever it sits: the console could never open it
// (a browser resolves such a path segment, also written %2E%2E).
func TestSessionIDDotsRefused(t *testing.T) {
	for _, id := range []string{".", ".."} {
		for _, c := range []struct {
			body  []byte
			field string
		}{
			{mutate(t, "agentTrigger", "params.context.session.id", id), "params.context.session.id"},
			{[]byte(`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"_meta":{"sessionId":"` + id + `"},"message":{"jsonrpc":"2.0","method":"tools/list"}}}`),
				"params._meta.sessionId"},
		} {
			_, e := ParseStep(c.body)
			requireErr(t, e, CodeInvalidParams, c.field, sessionDots)
		}
	}
	for _, id := range []string{"...", ".a", "a.."} {
		s := parse(t, []byte(`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"_meta":{"sessionId":"`+id+`"},"message":{"jsonrpc":"2.0","method":"tools/list"}}}`))
		require.Equal(t, id, s.SessionHint())
	}
}

func TestSessionField(t *testing.T) {
	tests := []struct{ example, field string }{
		{"message", "params.context.session.id"},
		{"toolCallResult", "params.context.session.id"},
		{"MCP", "params.message.params._meta.sessionId"},
		{"MCP-inline", ""},
		{"A2A", "params.message.params.message.contextId"},
		{"A2A-native", "params.payload.message.contextId"},
		{"A2A-inline", "params.params.message.contextId"},
		{"ping", ""},
	}
	for _, tc := range tests {
		t.Run(tc.example, func(t *testing.T) {
			s := parse(t, example(t, tc.example))
			require.Equal(t, tc.field, s.SessionField())
			require.Equal(t, tc.field == "", s.SessionHint() == "")
		})
	}
}
