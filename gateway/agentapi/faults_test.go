package agentapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// Faulty upstreams and case-variant keys, scripted from the runtime's samples
// (testdata/stream-*.sse): the gateway must judge exactly what the peer reads, and fail
// closed on what it cannot read.

const zebraRules = `
rules:
  - id: no-zebra
    when: method == "steps/message" && text contains "zebra"
    action: deny
    message: No stripes.
  - id: no-pizza
    when: method == "steps/message" && role == "user" && text contains "pizza"
    action: deny
    message: No pizza.
  - id: no-secret-output
    when: method == "steps/toolCallResult" && text contains "zebra"
    action: deny
  - id: no-mail
    when: tool == "send_email"
    action: deny
    message: No mail.
`

// Runtime-shaped events (the fields and order of testdata/stream-toolcall.sse) for one
// response response_f and its message msg_z.
const (
	evCreated    = `{"sequence_number":0,"object":"response","status":"created","error":null,"id":"response_f","created_at":1795471755,"completed_at":null,"output":null,"usage":null,"session_id":"sess-1"}`
	evInProgress = `{"sequence_number":1,"object":"response","status":"in_progress","error":null,"id":"response_f","created_at":1795471755,"completed_at":null,"output":null,"usage":null,"session_id":"sess-1"}`
	evMsgStart   = `{"sequence_number":2,"object":"message","status":"in_progress","error":null,"id":"msg_z","type":"message","role":"assistant","content":null,"code":null,"message":null,"usage":null,"metadata":null}`
)

// evText is a completed text content event of msg_z whose part carries fields.
func evText(seq int, fields string) string {
	return fmt.Sprintf(`{"sequence_number":%d,"object":"content","status":"completed","error":null,"type":"text","index":0,"delta":false,"msg_id":"msg_z",%s}`, seq, fields)
}

// evMsgDone is msg_z completed with content (a JSON array, or null); extra members go
// after its role.
func evMsgDone(seq int, extra, content string) string {
	return fmt.Sprintf(`{"sequence_number":%d,"object":"message","status":"completed","error":null,"id":"msg_z","type":"message","role":"assistant",%s"content":%s,"code":null,"message":null,"usage":null,"metadata":null}`, seq, extra, content)
}

// textPart is a content part of a completed message carrying fields.
func textPart(fields string) string {
	return `[{"sequence_number":null,"object":"content","status":null,"error":null,"type":"text","index":0,"delta":null,"msg_id":"msg_z",` + fields + `}]`
}

// evFinal is the completed response with output (a JSON array).
func evFinal(seq int, output string) string {
	return fmt.Sprintf(`{"sequence_number":%d,"object":"response","status":"completed","error":null,"id":"response_f","created_at":1795471755,"completed_at":1795471755,"output":%s,"usage":null,"session_id":"sess-1"}`, seq, output)
}

// sseAnswer answers with the events as the runtime streams them: bare data lines.
func sseAnswer(evs ...string) func(http.ResponseWriter, string) {
	return func(w http.ResponseWriter, _ string) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range evs {
			_, _ = io.WriteString(w, "data: "+e+"\n\n")
		}
	}
}

// jsonAnswer answers a non-streamed request with body.
func jsonAnswer(body string) func(http.ResponseWriter, string) {
	return func(w http.ResponseWriter, _ string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

// streamBytes posts a streamed request and returns the raw answer.
func (s *stack) streamBytes(body string) string {
	s.t.Helper()
	resp := s.post(context.Background(), body)
	defer resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return string(b)
}

// requireFailedEnd checks a raw SSE answer is well-formed events numbered without gaps
// whose last is a failed response with code and a message starting with msg.
func requireFailedEnd(t *testing.T, raw, code, msg string) {
	t.Helper()
	evs, _ := events(t, strings.NewReader(raw))
	requireNumbered(t, evs)
	f := final(t, evs)
	require.Equal(t, "failed", f["status"], raw)
	e := f["error"].(map[string]any)
	require.Equal(t, code, e["code"])
	require.True(t, strings.HasPrefix(e["message"].(string), msg), e["message"])
}

func TestCaseVariantKeysInRequestAreRefused(t *testing.T) {
	s := newStack(t, zebraRules, Config{})
	msg := func(fields string) string {
		return `{"stream":false,"session_id":"echo","input":[{` + fields + `}]}`
	}
	tests := []struct{ name, body, want string }{
		{"content", msg(`"role":"user","type":"message","content":[{"type":"text","text":"order pizza"}],"Content":[{"type":"text","text":"hi"}]`),
			`invalid request: input[0].Content: differs from "content" only in letter case`},
		{"content alone", msg(`"role":"user","type":"message","Content":[{"type":"text","text":"hi"}]`),
			`invalid request: input[0].Content: differs from "content" only in letter case`},
		{"text", msg(`"role":"user","type":"message","content":[{"type":"text","text":"order pizza","Text":"hi"}]`),
			`invalid request: input[0].content[0].Text: differs from "text" only in letter case`},
		{"role", msg(`"role":"user","Role":"assistant","type":"message","content":[{"type":"text","text":"order pizza"}]`),
			`invalid request: input[0].Role: differs from "role" only in letter case`},
		{"type", msg(`"role":"user","type":"message","TYPE":"heartbeat","content":[{"type":"text","text":"order pizza"}]`),
			`invalid request: input[0].TYPE: differs from "type" only in letter case`},
		{"unicode fold", msg(`"type":"function_call_output","content":[{"type":"data","data":{"call_id":"c1","output":"ok","\u017ferver_label":"x"}}]`),
			`invalid request: input[0].content[0].data.ſerver_label: differs from "server_label" only in letter case`},
		{"tool output", msg(`"type":"function_call_output","content":[{"type":"data","data":{"call_id":"c1","output":"zebra secret","Output":"ok"}}]`),
			`invalid request: input[0].content[0].data.Output: differs from "output" only in letter case`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, body := range []string{tt.body, strings.Replace(tt.body, `"stream":false`, `"stream":true`, 1)} {
				resp := s.post(context.Background(), body)
				var f responseObject
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
				resp.Body.Close()
				require.Equal(t, http.StatusBadRequest, resp.StatusCode)
				require.Equal(t, codeInvalidRequest, f.Error.Code)
				require.True(t, strings.HasPrefix(f.Error.Message, tt.want), f.Error.Message)
			}
		})
	}
	require.Empty(t, s.agent.requests())
	n, err := s.db.Steps(context.Background(), record.StepQuery{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, n)
}

func TestCaseVariantKeysFromUpstreamFailClosed(t *testing.T) {
	variant := `"text":"zebra secret","Text":"ok"`
	tests := []struct {
		name string
		evs  []string
	}{
		{"content event and message", []string{evCreated, evInProgress, evMsgStart, evText(3, variant),
			evMsgDone(4, "", textPart(variant)), evFinal(5, "["+evMsgDone(4, "", textPart(variant))+"]")}},
		{"completed message only", []string{evCreated, evInProgress, evMsgStart, evText(3, `"text":"ok"`),
			evMsgDone(4, "", textPart(`"Text":"ok","text":"zebra secret"`)), evFinal(5, "[]")}},
		{"role", []string{evCreated, evInProgress, evMsgDone(2, `"Role":"user",`, textPart(`"text":"zebra secret"`)), evFinal(3, "[]")}},
		{"object", []string{evCreated, evInProgress, evMsgStart, strings.Replace(evText(3, `"text":"zebra secret"`), `"object":"content"`, `"object":"content","OBJECT":"heartbeat"`, 1),
			evMsgDone(4, "", textPart(`"text":"zebra"`)), evFinal(5, "[]")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, zebraRules, Config{})
			s.agent.answer = sseAnswer(tt.evs...)
			raw := s.streamBytes(userRequest("hello", true))
			require.NotContains(t, raw, "zebra")
			requireFailedEnd(t, raw, codeUpstreamBad, "the upstream sent an event Vigil cannot read")
		})
	}
	t.Run("not streamed", func(t *testing.T) {
		s := newStack(t, zebraRules, Config{})
		s.agent.answer = jsonAnswer(evFinal(0, "["+evMsgDone(0, "", textPart(variant))+"]"))
		resp := s.post(context.Background(), userRequest("hello", false))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, string(b))
		require.NotContains(t, string(b), "zebra")
		require.Contains(t, string(b), codeUpstreamBad)
	})
}

func TestUnreadableUpstreamEventsFailClosed(t *testing.T) {
	done := evMsgDone(4, "", textPart(`"text":"zebra secret"`))
	tests := []struct {
		name string
		evs  []string
	}{
		{"NaN", []string{evCreated, evInProgress, evMsgStart, evText(3, `"text":"zebra secret"`),
			strings.Replace(done, `"usage":null`, `"usage":{"score":NaN}`, 1), evFinal(5, "[]")}},
		{"not JSON", []string{evCreated, evInProgress, `{not json "zebra secret"`, evFinal(3, "[]")}},
		{"null", []string{evCreated, evInProgress, `null`, evFinal(3, "[]")}},
		{"not an object", []string{evCreated, evInProgress, `["zebra secret"]`, evFinal(3, "[]")}},
		{"no known object", []string{evCreated, evInProgress, `{"sequence_number":2,"object":"note","text":"zebra secret"}`, evFinal(3, "[]")}},
		{"content before its message", []string{evCreated, evInProgress, evText(2, `"text":"zebra secret"`), evMsgStart, evText(4, `"text":"zebra secret"`), done, evFinal(6, "[]")}},
		{"text not a string", []string{evCreated, evInProgress, evMsgStart, evText(3, `"text":["zebra secret"]`), done, evFinal(5, "[]")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, zebraRules, Config{})
			s.agent.answer = sseAnswer(tt.evs...)
			raw := s.streamBytes(userRequest("hello", true))
			require.NotContains(t, raw, "zebra")
			requireFailedEnd(t, raw, codeUpstreamBad, "the upstream sent an event Vigil cannot read")
		})
	}
}

func TestUnreadableUpstreamResponseFailsClosed(t *testing.T) {
	item := evMsgDone(0, "", textPart(`"text":"zebra secret"`))
	tests := []struct{ name, body string }{
		{"not a response", `{"status":"completed","output":[` + item + `]}`},
		{"object in other case", strings.Replace(evFinal(0, "["+item+"]"), `"object":"response"`, `"object":"Response"`, 1)},
		{"NaN", strings.Replace(evFinal(0, "["+item+"]"), `"usage":null,"session_id"`, `"usage":{"score":NaN},"session_id"`, 1)},
		{"not JSON", `{"object":"response","output":[` + item},
		{"output item not a message", evFinal(0, `["zebra secret"]`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, zebraRules, Config{})
			s.agent.answer = jsonAnswer(tt.body)
			resp := s.post(context.Background(), userRequest("hello", false))
			defer resp.Body.Close()
			var f responseObject
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
			require.Equal(t, http.StatusBadGateway, resp.StatusCode)
			require.Equal(t, codeUpstreamBad, f.Error.Code)
			require.Equal(t, "the upstream's response could not be read", f.Error.Message)
		})
	}
	t.Run("an application error passes on", func(t *testing.T) {
		s := newStack(t, zebraRules, Config{})
		s.agent.answer = jsonAnswer(`{"error": "No runner"}`)
		resp := s.post(context.Background(), userRequest("hello", false))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, `{"error": "No runner"}`, string(b))
	})
}

func TestMessagesWithoutContentAreJudged(t *testing.T) {
	const rules = zebraRules + `
  - id: say-something
    when: method == "steps/message" && role == "user" && text == "" && session.id endsWith "mute"
    action: deny
    message: Say something.
`
	for _, c := range []string{`"content":null,`, `"content":[],`, ``} {
		t.Run("input "+c, func(t *testing.T) {
			s := newStack(t, rules, Config{})
			body := func(session string, stream bool) string {
				return fmt.Sprintf(`{"stream":%v,"session_id":%q,"input":[{"role":"user",%s"type":"message"}]}`, stream, session, c)
			}
			// Judged like any message: a rule on its (empty) text applies…
			evs := s.stream(body("mute", true))
			require.Equal(t, "rejected", final(t, evs)["status"])
			require.Equal(t, []string{"Say something."}, texts(final(t, evs)["output"]))
			// …and when none does it goes up as the client sent it.
			resp := s.post(context.Background(), body("sess-1", false))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			require.Len(t, s.agent.requests(), 1)
			require.Equal(t, body("sess-1", false), string(s.agent.requests()[0]))
			recs := s.steps()
			require.NotEmpty(t, recs)
			require.Equal(t, "allow", recs[len(recs)-1].Decision)
		})
	}
	for _, c := range []string{`[]`, `null`} {
		t.Run("upstream "+c, func(t *testing.T) {
			s := newStack(t, zebraRules, Config{})
			done := evMsgDone(3, "", c)
			s.agent.answer = sseAnswer(evCreated, evInProgress, evMsgStart, done, evFinal(4, "["+done+"]"))
			evs := s.stream(userRequest("hello", true))
			f := final(t, evs)
			require.Equal(t, "completed", f["status"])
			require.Equal(t, []string{"response", "response", "message", "message", "response"}, objects(evs))
			require.Len(t, f["output"], 1)
			recs := s.steps()
			require.Len(t, recs, 2)
			for _, r := range recs {
				require.Equal(t, "allow", r.Decision)
			}

			s.agent.answer = jsonAnswer(evFinal(0, "["+done+"]"))
			resp := s.post(context.Background(), userRequest("hello", false))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			require.JSONEq(t, evFinal(0, "["+done+"]"), string(b))
		})
	}
}

func TestBrokenStreamEndsWithAFailedEvent(t *testing.T) {
	partial := `{"sequence_number":3,"object":"content","status":"in_progress","error":null,"type":"text","index":0,"delta":true,"msg_id":"msg_z","text":"par`
	head := "data: " + evCreated + "\n\ndata: " + evInProgress + "\n\ndata: " + evMsgStart + "\n\n"
	tests := []struct {
		name  string
		write func(w http.ResponseWriter)
		want  string
	}{
		{"ends in the middle of an event", func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, head+"data: "+partial)
		}, "the upstream's stream broke off in the middle of an event"},
		{"ends after an event's line, before its blank line", func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, head+"data: "+evText(3, `"text":"partial"`)+"\n")
		}, "the upstream's stream broke off in the middle of an event"},
		{"connection lost", func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, head+"data: "+partial)
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}, "the upstream's stream broke off"},
		{"ends without its final response", func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, head)
		}, "the upstream's stream ended before its final response"},
	}
	for _, tt := range tests {
		for _, rules := range []string{"", zebraRules} {
			t.Run(fmt.Sprintf("%s/rules=%v", tt.name, rules != ""), func(t *testing.T) {
				s := newStack(t, rules, Config{})
				s.agent.answer = func(w http.ResponseWriter, _ string) {
					w.Header().Set("Content-Type", "text/event-stream")
					tt.write(w)
				}
				raw := s.streamBytes(userRequest("hello", true))
				require.NotContains(t, raw, `"text":"par`)
				require.NotContains(t, raw, "EOF")
				requireFailedEnd(t, raw, codeUpstreamBad, tt.want)
			})
		}
	}
}

func TestOversizedUpstreamAnswersFailInPlainWords(t *testing.T) {
	big := strings.Repeat("a", 8<<20)
	tests := []struct {
		name string
		cfg  Config
		evs  []string
		want string
	}{
		{"one event", Config{}, []string{evCreated, evInProgress, evMsgStart, evText(3, `"text":"`+big+`"`)},
			"an upstream event exceeds 8 MiB"},
		{"small limit", Config{MaxEventBytes: 4 << 10}, []string{evCreated, evInProgress, evMsgStart, evText(3, `"text":"`+big[:5<<10]+`"`)},
			"an upstream event exceeds 4 KiB"},
		{"held back", Config{MaxEventBytes: 4 << 10}, []string{evCreated, evInProgress, evMsgStart,
			evText(3, `"text":"`+big[:3<<10]+`"`), evText(4, `"text":"`+big[:3<<10]+`"`)},
			"the upstream's messages held back for a verdict exceed 4 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, zebraRules, tt.cfg)
			s.agent.answer = sseAnswer(tt.evs...)
			raw := s.streamBytes(userRequest("hello", true))
			require.NotContains(t, raw, "bufio")
			require.NotContains(t, raw, "aaaa")
			requireFailedEnd(t, raw, codeUpstreamBad, tt.want)
			require.Equal(t, tt.want, lastError(t, raw))
		})
	}
}

// The messages a client was given are kept until the final response, to judge its output:
// a stream of them is bounded as a non-streamed answer is.
func TestStreamedMessagesAreBounded(t *testing.T) {
	s := newStack(t, zebraRules, Config{MaxResponseBytes: 4 << 10})
	evs := []string{evCreated, evInProgress}
	for i := range 4 {
		id := fmt.Sprintf("msg_%d", i)
		evs = append(evs, strings.ReplaceAll(evMsgDone(2+i, "", textPart(`"text":"`+strings.Repeat("a", 1500)+`"`)), "msg_z", id))
	}
	s.agent.answer = sseAnswer(append(evs, evFinal(6, "[]"))...)
	raw := s.streamBytes(userRequest("hello", true))
	requireFailedEnd(t, raw, codeUpstreamBad, "the upstream's streamed messages exceed 4 KiB")
	got, _ := events(t, strings.NewReader(raw))
	delivered := 0
	for _, e := range got {
		if e["object"] == "message" && e["status"] == "completed" {
			delivered++
		}
	}
	require.Equal(t, 2, delivered, "two messages fit in 4 KiB; the third ends the turn")
}

func lastError(t *testing.T, raw string) string {
	t.Helper()
	evs, _ := events(t, strings.NewReader(raw))
	return final(t, evs)["error"].(map[string]any)["message"].(string)
}

func TestFinalOutputIsWhatWasJudged(t *testing.T) {
	item := func(id, text string) string {
		return strings.ReplaceAll(evMsgDone(0, "", textPart(`"text":"`+text+`"`)), "msg_z", id)
	}
	s := newStack(t, zebraRules, Config{})
	// The client is streamed msg_z saying "ok"; the final response claims it said something
	// else, and lists messages that were never streamed.
	s.agent.answer = sseAnswer(evCreated, evInProgress, evMsgStart, evText(3, `"text":"ok"`),
		evMsgDone(4, "", textPart(`"text":"ok"`)),
		evFinal(5, "["+item("msg_z", "zebra secret")+","+item("msg_y", "zebra too")+","+item("msg_w", "fine")+"]"))
	raw := s.streamBytes(userRequest("hello", true))
	require.NotContains(t, raw, "zebra")
	evs, _ := events(t, strings.NewReader(raw))
	requireNumbered(t, evs)
	f := final(t, evs)
	require.Equal(t, "completed", f["status"])
	require.Equal(t, []string{"Withheld by Vigil: No stripes.", "Withheld by Vigil: No stripes.", "fine"}, texts(f["output"]))
}

func TestUpstreamMessagesAreJudgedWhateverTheirRoleOrType(t *testing.T) {
	user := strings.Replace(evMsgDone(2, "", textPart(`"text":"zebra secret"`)), `"role":"assistant"`, `"role":"user"`, 1)
	untyped := strings.Replace(evMsgDone(2, "", textPart(`"text":"zebra secret"`)), `"type":"message",`, ``, 1)
	for name, ev := range map[string]string{"role user": user, "no type": untyped} {
		t.Run(name, func(t *testing.T) {
			s := newStack(t, zebraRules, Config{})
			s.agent.answer = sseAnswer(evCreated, evInProgress, ev, evFinal(3, "["+ev+"]"))
			raw := s.streamBytes(userRequest("hello", true))
			require.NotContains(t, raw, "zebra")
			evs, _ := events(t, strings.NewReader(raw))
			require.Equal(t, []string{"Withheld by Vigil: No stripes."}, texts(final(t, evs)["output"]))
		})
	}
	t.Run("changed type", func(t *testing.T) {
		// Started as a type nothing judges (streamed at once), completed as a function call.
		s := newStack(t, zebraRules, Config{})
		start := strings.Replace(evMsgStart, `"type":"message"`, `"type":"heartbeat"`, 1)
		call := strings.Replace(evMsgDone(3, "", `[{"object":"content","type":"data","data":{"call_id":"c1","name":"send_email","arguments":"{}"}}]`),
			`"type":"message"`, `"type":"function_call"`, 1)
		s.agent.answer = sseAnswer(evCreated, evInProgress, start, call, evFinal(4, "[]"))
		raw := s.streamBytes(userRequest("hello", true))
		require.NotContains(t, raw, "send_email")
		requireFailedEnd(t, raw, codeUpstreamBad, "the upstream sent an event Vigil cannot read")
	})
}
