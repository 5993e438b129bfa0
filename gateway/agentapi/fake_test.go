package agentapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeAgent is an Agent API agent server scripted from the runtime's own samples
// (testdata/, captured from agentscope-runtime 1.1.5): bare "data: <json>" lines, nulls
// included, every event numbered by sequence_number.
type fakeAgent struct {
	t  testing.TB
	mu sync.Mutex
	// got are the request bodies received, in order.
	got [][]byte
	// auth are their Authorization headers.
	auth []string
	// think is how long the agent takes before it answers (a model's time), for benchmarks.
	think time.Duration
	// answer, when set, answers every /process call in place of the script, given the
	// text of the last input message: a faulty upstream writes exactly what a test needs.
	answer func(w http.ResponseWriter, text string)
}

func (f *fakeAgent) requests() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.got...)
}

func sample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// dataContent is a data content part as the runtime writes it.
type dataContent struct {
	Seq    *int64         `json:"sequence_number"`
	Object string         `json:"object"`
	Status *string        `json:"status"`
	Error  *string        `json:"error"`
	Type   string         `json:"type"`
	Index  *int           `json:"index"`
	Delta  bool           `json:"delta"`
	MsgID  *string        `json:"msg_id"`
	Data   map[string]any `json:"data"`
}

// script writes a runtime-shaped stream: the response's start, each message (its start,
// its content parts, its completion) and the completed response with every message.
type script struct {
	seq    int64
	events [][]byte
	output []json.RawMessage
	id     string
}

func (s *script) add(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	b, _ = setKey(b, "sequence_number", fmt.Append(nil, s.seq))
	s.seq++
	s.events = append(s.events, b)
}

func newScript() *script {
	s := &script{id: "response_fake-1"}
	for _, st := range []string{statusCreated, statusInProgress} {
		s.add(responseObject{Object: "response", Status: st, ID: s.id, CreatedAt: 1795471755, SessionID: ptr("sess-1")})
	}
	return s
}

// text adds an assistant message streamed in two deltas.
func (s *script) text(id, typ, role, a, b string) {
	s.add(messageObject{Object: "message", Status: statusInProgress, ID: id, Type: typ, Role: role})
	for _, d := range []string{a, b} {
		s.add(textContent{Object: "content", Status: ptr(statusInProgress), Type: "text", Delta: true, MsgID: id, Text: d})
	}
	s.add(textContent{Object: "content", Status: ptr(statusCompleted), Type: "text", MsgID: id, Text: a + b})
	c, _ := json.Marshal(textContent{Object: "content", Type: "text", MsgID: id, Text: a + b})
	s.complete(messageObject{Object: "message", Status: statusCompleted, ID: id, Type: typ, Role: role, Content: []json.RawMessage{c}})
}

// data adds a message with one data part (a call, an output, an approval request).
func (s *script) data(id, typ, role string, data map[string]any) {
	s.add(messageObject{Object: "message", Status: statusInProgress, ID: id, Type: typ, Role: role})
	s.add(dataContent{Object: "content", Status: ptr(statusCompleted), Type: "data", Index: ptr(0), MsgID: &id, Data: data})
	c, _ := json.Marshal(dataContent{Object: "content", Type: "data", Data: data})
	s.complete(messageObject{Object: "message", Status: statusCompleted, ID: id, Type: typ, Role: role, Content: []json.RawMessage{c}})
}

func (s *script) complete(m messageObject) {
	s.add(m)
	b, _ := json.Marshal(m)
	s.output = append(s.output, b)
}

func (s *script) final() []byte {
	out, _ := json.Marshal(s.output)
	b, _ := json.Marshal(responseObject{Object: "response", Status: statusCompleted, ID: s.id, CreatedAt: 1795471755,
		CompletedAt: ptr(int64(1795471755)), Output: out, SessionID: ptr("sess-1")})
	return b
}

func (s *script) sse() []byte {
	s.add(json.RawMessage(s.final()))
	var b strings.Builder
	for _, e := range s.events {
		b.WriteString("data: ")
		b.Write(e)
		b.WriteString("\n\n")
	}
	return []byte(b.String())
}

func (f *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/health" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"healthy","service":"agent"}`))
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/process" {
		http.NotFound(w, r)
		return
	}
	var body []byte
	var req struct {
		Input  []message `json:"input"`
		Stream *bool     `json:"stream"`
	}
	body, _ = readAllString(r)
	f.mu.Lock()
	f.got = append(f.got, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if f.think > 0 {
		time.Sleep(f.think)
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Input) == 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"detail":[{"type":"missing","loc":["body","input"],"msg":"Field required"}]}`))
		return
	}
	last := req.Input[len(req.Input)-1]
	text := ""
	for _, c := range last.Content {
		var cc content
		_ = json.Unmarshal(c, &cc)
		if t, ok := cc.text(); ok {
			text += t
		}
	}
	if f.answer != nil {
		f.answer(w, text)
		return
	}
	var out []byte
	s := newScript()
	switch {
	case last.Type == typeMCPApprovalResponse:
		var c struct {
			Data struct {
				Approve bool   `json:"approve"`
				Reason  string `json:"reason"`
			} `json:"data"`
		}
		_ = json.Unmarshal(last.Content[0], &c)
		if c.Data.Approve {
			s.data("msg_mcp", typeMCPCall, "assistant", map[string]any{"call_id": "apr_1", "name": "delete_file", "arguments": `{"path": "/home/dev/x"}`, "server_label": "fs"})
			s.text("msg_done", typeMessage, "assistant", "Deleted ", "/home/dev/x.")
		} else {
			s.text("msg_done", typeMessage, "assistant", "Not deleted: ", c.Data.Reason)
		}
		out = s.sse()
	case strings.Contains(text, "delete"):
		out = sample(f.t, "stream-toolcall.sse")
	case strings.Contains(text, "boom"):
		out = sample(f.t, "stream-failed.sse")
	case strings.Contains(text, "no runner"):
		out = sample(f.t, "stream-app-error.sse")
	case strings.Contains(text, "call fn"):
		s.data("msg_fn", typeFunctionCall, "assistant", map[string]any{"call_id": "call_9", "name": "send_email", "arguments": `{"to": "eve@evil.example", "body": "hi"}`})
		out = s.sse()
	case strings.Contains(text, "read file"):
		s.data("msg_pc", typePluginCall, "assistant", map[string]any{"call_id": "call_2", "name": "read_file", "arguments": `{"path": "/etc/passwd"}`})
		s.data("msg_pco", typePluginCall+"_output", "tool", map[string]any{"call_id": "call_2", "name": "read_file", "output": "root:x:0:0 password=hunter2"})
		s.text("msg_sum", typeMessage, "assistant", "The file ", "is read.")
		out = s.sse()
	case strings.Contains(text, "approve"):
		var m map[string]any
		require.NoError(f.t, json.Unmarshal(sample(f.t, "mcp_approval_request.message.json"), &m))
		s.data("msg_apr", typeMCPApprovalRequest, "assistant", map[string]any{"id": "apr_1", "arguments": `{"path": "/home/dev/x"}`, "name": "delete_file", "server_label": "fs"})
		out = s.sse()
	default:
		s.text("msg_echo", typeMessage, "assistant", "Echo: ", text)
		out = s.sse()
	}
	if req.Stream != nil && !*req.Stream {
		// Not streamed: the final response alone.
		events := strings.Split(strings.TrimSpace(string(out)), "\n\n")
		last := strings.TrimPrefix(events[len(events)-1], "data: ")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(last))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(out)
}

func readAllString(r *http.Request) ([]byte, error) {
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return []byte(b.String()), nil
		}
	}
}
