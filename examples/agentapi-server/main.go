// Command agentapi-server is a scripted Agent API agent server for trying Vigil's Agent
// API gateway without a model: it echoes messages, reads a file when asked ("read
// /some/path", a server-side plugin call), asks for approval before deleting one ("delete
// /some/path", an MCP approval request) and asks the client to send an email ("email
// someone@example.com", a client-side function call). It speaks the agentscope-runtime wire
// format: bare "data: <json>" events numbered by sequence_number, or one JSON response with
// "stream": false.
//
//	go run ./examples/agentapi-server --addr 127.0.0.1:8090
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	flag.Parse()
	log.Printf("Agent API agent server on http://%s (POST /process, GET /health)", *addr)
	srv := &http.Server{Addr: *addr, Handler: handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

func handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"healthy","service":"agentapi-server"}`))
	})
	mux.HandleFunc("POST /process", process)
	return mux
}

type request struct {
	Input []struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type string          `json:"type"`
			Text string          `json:"text"`
			Data json.RawMessage `json:"data"`
		} `json:"content"`
	} `json:"input"`
	Stream    *bool  `json:"stream"`
	SessionID string `json:"session_id"`
}

// turn collects one answer's events in the runtime's order and field layout.
type turn struct {
	seq     int
	events  []map[string]any
	output  []map[string]any
	id      string
	session string
	created int64
}

func id(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (t *turn) add(ev map[string]any) {
	ev["sequence_number"] = t.seq
	t.seq++
	t.events = append(t.events, ev)
}

func (t *turn) response(status string, output any) map[string]any {
	var completed any
	if status == "completed" {
		completed = time.Now().Unix()
	}
	return map[string]any{"object": "response", "status": status, "error": nil, "id": t.id,
		"created_at": t.created, "completed_at": completed, "output": output, "usage": nil, "session_id": t.session}
}

func message(msgID, typ, role, status string, content any) map[string]any {
	return map[string]any{"object": "message", "status": status, "error": nil, "id": msgID, "type": typ,
		"role": role, "content": content, "code": nil, "message": nil, "usage": nil, "metadata": nil}
}

// say streams an assistant message word by word.
func (t *turn) say(text string) {
	msgID := id("msg_")
	t.add(message(msgID, "message", "assistant", "in_progress", nil))
	for _, w := range strings.SplitAfter(text, " ") {
		t.add(map[string]any{"object": "content", "status": "in_progress", "error": nil, "type": "text",
			"index": 0, "delta": true, "msg_id": msgID, "text": w})
	}
	t.add(map[string]any{"object": "content", "status": "completed", "error": nil, "type": "text",
		"index": 0, "delta": false, "msg_id": msgID, "text": text})
	done := message(msgID, "message", "assistant", "completed", []any{map[string]any{"object": "content",
		"type": "text", "index": 0, "delta": nil, "msg_id": msgID, "text": text}})
	t.add(done)
	t.output = append(t.output, item(done))
}

// data adds a message with one data part: a call, its output, an approval request.
func (t *turn) data(typ, role string, data map[string]any) {
	msgID := id("msg_")
	t.add(message(msgID, typ, role, "in_progress", nil))
	t.add(map[string]any{"object": "content", "status": "completed", "error": nil, "type": "data",
		"index": 0, "delta": false, "msg_id": msgID, "data": data})
	done := message(msgID, typ, role, "completed", []any{map[string]any{"object": "content", "type": "data",
		"index": nil, "delta": false, "msg_id": nil, "data": data}})
	t.add(done)
	t.output = append(t.output, item(done))
}

// item is a completed message as the final response lists it: unnumbered.
func item(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	c["sequence_number"] = nil
	return c
}

func process(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || len(req.Input) == 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"detail":"want {\"input\": [messages…]}"}`))
		return
	}
	t := &turn{id: id("response_"), session: req.SessionID, created: time.Now().Unix()}
	if t.session == "" {
		t.session = id("session_")
	}
	t.add(t.response("created", nil))
	t.add(t.response("in_progress", nil))
	last := req.Input[len(req.Input)-1]
	text := ""
	for _, c := range last.Content {
		text += c.Text
	}
	words := strings.Fields(text)
	arg := ""
	if len(words) > 1 {
		arg = words[len(words)-1]
	}
	switch {
	case last.Type == "mcp_approval_response" && len(last.Content) > 0:
		var d struct {
			Approve bool   `json:"approve"`
			Reason  string `json:"reason"`
		}
		_ = json.Unmarshal(last.Content[0].Data, &d)
		if d.Approve {
			t.data("mcp_call", "assistant", map[string]any{"call_id": "call_rm", "name": "delete_file",
				"arguments": `{"path": "(approved)"}`, "server_label": "fs"})
			t.data("mcp_call_output", "tool", map[string]any{"call_id": "call_rm", "name": "delete_file", "output": `{"deleted": true}`})
			t.say("Deleted.")
		} else {
			t.say("I did not delete it: " + d.Reason)
		}
	case strings.HasPrefix(text, "read ") && arg != "":
		args, _ := json.Marshal(map[string]string{"path": arg})
		t.data("plugin_call", "assistant", map[string]any{"call_id": "call_read", "name": "read_file", "arguments": string(args)})
		t.data("plugin_call_output", "tool", map[string]any{"call_id": "call_read", "name": "read_file",
			"output": fmt.Sprintf("contents of %s: api_key=sk-test-1234567890abcdef", arg)})
		t.say("I read " + arg + ".")
	case strings.HasPrefix(text, "delete ") && arg != "":
		args, _ := json.Marshal(map[string]string{"path": arg})
		t.data("mcp_approval_request", "assistant", map[string]any{"id": id("apr_"), "name": "delete_file",
			"arguments": string(args), "server_label": "fs"})
	case strings.HasPrefix(text, "email ") && arg != "":
		args, _ := json.Marshal(map[string]string{"to": arg, "body": "Hello from the agent."})
		t.data("function_call", "assistant", map[string]any{"call_id": id("call_"), "name": "send_email", "arguments": string(args)})
	default:
		t.say("You said: " + text)
	}
	t.add(t.response("completed", t.output))
	if req.Stream != nil && !*req.Stream {
		final := t.events[len(t.events)-1]
		delete(final, "sequence_number")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(final)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for _, ev := range t.events {
		b, _ := json.Marshal(ev)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return
		}
		_ = rc.Flush()
	}
}
