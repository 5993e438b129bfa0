package aap_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// scripted is an upstream whose turns a test writes: GET /sessions/{id} answers a session
// of agent "a" with one server tool, "srv", and the options in sessionOptions (JSON); /meta
// declares "model" a text option (its values are recorded, every other option's masked).
type scripted struct {
	t              *testing.T
	front          string
	fd             *fakeDecider
	sessionOptions atomic.Value
	creates, turns atomic.Int64
}

func newScripted(t *testing.T, turn func(n int64, w http.ResponseWriter, r *http.Request), mod func(*aap.Options)) *scripted {
	t.Helper()
	sc := &scripted{t: t, fd: &fakeDecider{}}
	sc.sessionOptions.Store("{}")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /meta", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"agents":[{"name":"a","options":[{"name":"model","type":"text","default":""}]}]}`)
	})
	mux.HandleFunc("POST /sessions", func(w http.ResponseWriter, r *http.Request) {
		sc.creates.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"sessionId":"s1"}`)
	})
	mux.HandleFunc("GET /sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"sessionId":%q,"agent":{"name":"a","tools":[{"name":"srv"}],"options":%s},"tools":[]}`,
			r.PathValue("id"), sc.sessionOptions.Load())
	})
	mux.HandleFunc("POST /sessions/{id}/turns", func(w http.ResponseWriter, r *http.Request) {
		turn(sc.turns.Add(1), w, r)
	})
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	opts := aap.Options{Name: "demo", Upstream: up.URL, Decider: sc.fd, KeepAlive: time.Hour}
	if mod != nil {
		mod(&opts)
	}
	gw, err := aap.New(opts)
	require.NoError(t, err)
	m := http.NewServeMux()
	gw.Register(m, nil)
	front := httptest.NewServer(m)
	t.Cleanup(front.Close)
	sc.front = front.URL + "/aap/demo"
	return sc
}

func (sc *scripted) do(method, path, body string) (*http.Response, string) {
	sc.t.Helper()
	return doURL(sc.t, method, sc.front+path, body)
}

// agentSteps are the decided assistant messages' texts.
func (sc *scripted) agentSteps() []decided {
	var out []decided
	for _, d := range sc.fd.decided() {
		if d.step.Message != nil && d.step.Message.Message.Role == aos.RoleAgent {
			out = append(out, d)
		}
	}
	return out
}

func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 0; i+1 < len(events); i += 2 {
		_, _ = io.WriteString(w, "event: "+events[i]+"\ndata: "+events[i+1]+"\n\n")
	}
}

func emptyDeltas(n int) []string {
	evs := []string{"turn_start", "{}"}
	for range n {
		evs = append(evs, "text_delta", `{"delta":""}`)
	}
	return append(evs, "turn_stop", `{"stopReason":"end_turn"}`)
}

// A buffered message holds its deltas as they came as well as its text: empty deltas add
// nothing to the text but are charged what holding them costs (the 12 bytes of
// {"delta":""} and one of length), so the buffer stops at MaxUpstreamBytes.
func TestDeltaBufferChargesHeldEvents(t *testing.T) {
	const limit = 4096
	perDelta := len(`{"delta":""}`) + 1
	fits := limit / perDelta // 315 × 13 = 4095 bytes
	for _, tc := range []struct {
		deltas int
		want   string
	}{{fits, "end_turn"}, {fits + 1, "error"}} {
		t.Run(fmt.Sprint(tc.deltas), func(t *testing.T) {
			sc := newScripted(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
				sse(w, emptyDeltas(tc.deltas)...)
			}, func(o *aap.Options) { o.MaxUpstreamBytes = limit })
			resp, body := sc.do("POST", "/sessions/s1/turns", turnBody("delta", userMsg("hi")))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			events, _ := parseSSE(t, body)
			shown := 0
			for _, ev := range events {
				if ev.name == "text_delta" {
					shown++
				}
			}
			if tc.want == "error" {
				// Nothing of it was shown, so nothing of it is recorded.
				require.Equal(t, []item{{Kind: "stop", Text: "error"}}, items(t, "delta", body))
				require.Zero(t, shown)
				require.Empty(t, sc.agentSteps())
				return
			}
			require.Equal(t, []item{{Kind: "text"}, {Kind: "stop", Text: "end_turn"}}, items(t, "delta", body))
			require.Equal(t, tc.deltas, shown, "the held deltas are replayed as they came")
			require.Len(t, sc.agentSteps(), 1)
		})
	}
}

// Not buffered, a message's text is still kept whole for its record, and bounded like a
// buffered one: the deltas that fit are shown, the shown text is recorded (not
// enforceable), and the turn ends with an error.
func TestStreamedMessageBounded(t *testing.T) {
	const limit = 1000
	chunk := strings.Repeat("x", 300)
	sc := newScripted(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		evs := []string{"turn_start", "{}"}
		for range 10 {
			evs = append(evs, "text_delta", `{"delta":"`+chunk+`"}`)
		}
		sse(w, append(evs, "turn_stop", `{"stopReason":"end_turn"}`)...)
	}, func(o *aap.Options) {
		o.MaxUpstreamBytes = limit
		o.MayWithhold = func() bool { return false }
	})
	_, body := sc.do("POST", "/sessions/s1/turns", turnBody("delta", userMsg("hi")))
	shown := strings.Repeat(chunk, 3)
	require.Equal(t, []item{{Kind: "text", Text: shown}, {Kind: "stop", Text: "error"}}, items(t, "delta", body))
	steps := sc.agentSteps()
	require.Len(t, steps, 1)
	require.Equal(t, shown, steps[0].step.Text(), "the record holds exactly what the client saw")
	require.NotNil(t, steps[0].meta.Enforceable)
	require.False(t, *steps[0].meta.Enforceable)
}

// In none mode the messages of every round wait for the end of the turn; together they
// are bounded like one upstream answer, and a message that cannot fit is not decided.
func TestNoneModeMessagesBounded(t *testing.T) {
	const limit = 64 << 10
	text := strings.Repeat("y", 20<<10)
	sc := newScripted(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
		// Each round asks for the server tool, which the gateway grants and continues.
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"stopReason":"tool_use","messages":[{"role":"assistant","content":[{"type":"text","text":%q},{"type":"tool_use","toolCallId":"c%d","name":"srv","input":{}}]}]}`, text, n)
	}, func(o *aap.Options) { o.MaxUpstreamBytes = limit })
	resp, body := sc.do("POST", "/sessions/s1/turns", turnBody("none", userMsg("hi")))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var answer struct {
		StopReason string            `json:"stopReason"`
		Messages   []json.RawMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &answer))
	require.Equal(t, "error", answer.StopReason)
	// Three messages of just over 20 KiB fit in 64 KiB; the fourth round's does not.
	require.Len(t, answer.Messages, 3)
	size := 0
	for _, m := range answer.Messages {
		size += len(m)
	}
	require.LessOrEqual(t, size, limit)
	require.Greater(t, size+len(answer.Messages[0]), limit)
	require.EqualValues(t, 4, sc.turns.Load(), "the fourth answer ended the turn")
	require.Len(t, sc.agentSteps(), 3, "the message that could not fit was not decided")
}

// What the gateway owes the upstream for a round's tool calls is bounded: past
// MaxUpstreamBytes the turn ends with an error and nothing goes up.
func TestOwedAnswersBounded(t *testing.T) {
	const limit, calls = 2048, 100
	sc := newScripted(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
		evs := []string{"turn_start", "{}"}
		for i := range calls {
			evs = append(evs, "tool_call", fmt.Sprintf(`{"toolCallId":"c%03d","name":"srv","input":{}}`, i))
		}
		sse(w, append(evs, "turn_stop", `{"stopReason":"tool_use"}`)...)
	}, func(o *aap.Options) { o.MaxUpstreamBytes = limit })
	_, body := sc.do("POST", "/sessions/s1/turns", turnBody("delta", userMsg("hi")))
	its := items(t, "delta", body)
	// Each granted call is owed its id and {"granted":true,"role":"tool_permission","toolCallId":"cNNN"}.
	per := len("c000") + len(`{"granted":true,"role":"tool_permission","toolCallId":"c000"}`)
	require.Len(t, names(its), limit/per, "the calls whose permissions fit are shown")
	require.Equal(t, item{Kind: "stop", Text: "error"}, its[len(its)-1])
	require.EqualValues(t, 1, sc.turns.Load(), "no continuation carries the owed permissions")
}

// AAP merges a turn's options into the session's by key, so names accumulate; the
// session's options (every step carries them) are bounded by name count and bytes, and a
// request past either is refused with a 400 naming the bound before the upstream sees it.
func TestOptionsBounded(t *testing.T) {
	okTurn := func(n int64, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"stopReason":"end_turn","messages":[]}`)
	}
	opt := func(k, v string) string {
		return `{"agent":{"options":{"` + k + `":"` + v + `"}},"messages":[` + userMsg("hi") + `]}`
	}
	lastOptions := func(sc *scripted) map[string]any {
		steps := sc.fd.decided()
		opts, _ := steps[len(steps)-1].step.Context.Agent.Metadata["options"].(map[string]any)
		return opts
	}

	t.Run("names", func(t *testing.T) {
		sc := newScripted(t, okTurn, func(o *aap.Options) { o.MaxOptions = 3 })
		for i := range 3 {
			resp, body := sc.do("POST", "/sessions/s1/turns", opt(fmt.Sprint("k", i), "v"))
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
		}
		resp, body := sc.do("POST", "/sessions/s1/turns", opt("k3", "v"))
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, body, "agent.options: a session has at most 3 options")
		require.EqualValues(t, 3, sc.turns.Load(), "the refused turn did not go up")
		// A name the session has already is replaced, not added.
		resp, body = sc.do("POST", "/sessions/s1/turns", opt("k0", "w"))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, map[string]any{"k0": "***", "k1": "***", "k2": "***"}, lastOptions(sc))
	})

	t.Run("bytes", func(t *testing.T) {
		sc := newScripted(t, okTurn, nil)
		// "model" is declared text, so its value is recorded: 5 + 16379 bytes fit 16 KiB.
		resp, body := sc.do("POST", "/sessions/s1/turns", opt("model", strings.Repeat("m", 16<<10-5)))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		// Another name adds its bytes and its masked value's three.
		resp, body = sc.do("POST", "/sessions/s1/turns", opt("k", "secret"))
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, body, "are at most 16384 bytes")
		require.EqualValues(t, 1, sc.turns.Load())
		resp, body = sc.do("POST", "/sessions/s1/turns", opt("model", "small"))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, map[string]any{"model": "small"}, lastOptions(sc))
	})

	t.Run("create", func(t *testing.T) {
		sc := newScripted(t, okTurn, func(o *aap.Options) { o.MaxOptions = 1 })
		resp, body := sc.do("POST", "/sessions", `{"agent":{"name":"a","options":{"x":"1","y":"2"}}}`)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, body, "agent.options: a session has at most 1 options")
		require.Zero(t, sc.creates.Load(), "the upstream created no session")
	})

	t.Run("learned from the upstream", func(t *testing.T) {
		sc := newScripted(t, okTurn, func(o *aap.Options) { o.MaxOptions = 1 })
		sc.sessionOptions.Store(`{"x":"***","y":"***"}`)
		resp, _ := sc.do("POST", "/sessions/s1/turns", turnBody("none", userMsg("hi")))
		require.Equal(t, http.StatusBadGateway, resp.StatusCode)
		require.Zero(t, sc.turns.Load())
		require.Empty(t, sc.fd.decided())
	})
}

// A session keeps its tools' names for as long as the gateway caches it: the lists are
// bounded, on a turn, on a new session and in the upstream's record of a session.
func TestToolListsBounded(t *testing.T) {
	okTurn := func(n int64, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"stopReason":"end_turn","messages":[]}`)
	}
	tools := func(n, size int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":"t%0*d"}`, size-1, i)
		}
		return "[" + b.String() + "]"
	}
	tests := []struct {
		name, path, body, want string
	}{
		{"client tools on a turn", "/sessions/s1/turns", `{"tools":` + tools(513, 8) + `,"messages":[` + userMsg("hi") + `]}`,
			"tools: at most 512 tools, got 513"},
		{"a long client tool name", "/sessions/s1/turns", `{"tools":` + tools(1, 300) + `,"messages":[` + userMsg("hi") + `]}`,
			"tools[0].name: at most 256 bytes, got 300"},
		{"server tools on a new session", "/sessions", `{"agent":{"name":"a","tools":` + tools(513, 8) + `}}`,
			"agent.tools: at most 512 tools, got 513"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := newScripted(t, okTurn, nil)
			resp, body := sc.do("POST", tt.path, tt.body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			require.Contains(t, body, tt.want)
			require.Zero(t, sc.turns.Load()+sc.creates.Load(), "nothing went up")
		})
	}
	t.Run("at the bound", func(t *testing.T) {
		sc := newScripted(t, okTurn, nil)
		resp, body := sc.do("POST", "/sessions/s1/turns", `{"tools":`+tools(512, 256)+`,"messages":[`+userMsg("hi")+`]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
	})
}
