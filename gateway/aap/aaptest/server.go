// Package aaptest is a scripted AAP v3 agent server, written from the wire of a server built
// with the protocol's TypeScript SDK (v0.8.0): the same SSE framing and event order, the same
// error bodies and quirks (malformed JSON and unknown tool permissions answer 500 text/plain;
// a tool run after a granted permission sends no tool_result event; a refused permission
// becomes the result "Tool use denied: <reason>"). It runs no model: what the agent does
// follows from the user's message (see Server). Tests use it as the upstream of the AAP
// gateway, and examples/aap-server serves it.
package aaptest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Meta is the server's GET /meta answer, byte for byte the captured one.
const Meta = `{"version":3,"agents":[{"name":"guarded-agent","title":"Guarded Agent","description":"Scripted agent with one trusted and one untrusted tool","version":"0.1.0","options":[{"name":"apiKey","type":"secret","default":""}],"capabilities":{"stream":{"delta":{},"message":{},"none":{}},"application":{"tools":{}},"history":{"compacted":{},"full":{}}},"tools":[{"name":"read_file","description":"Read a file (trusted)","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}},{"name":"delete_file","description":"Delete a file (untrusted; needs permission)","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}}]}]}`

// Server is the scripted agent. What it does depends on the user's message:
//
//   - "hello…": says "Hi there." (a turn without tools);
//   - "read and delete PATH": thinks, says "Reading the file.", calls read_file (trusted by
//     the usual client), says "Now deleting it.", calls delete_file (untrusted), and reports
//     the tool results once it may go on: the captured session;
//   - "what time…": calls the client tool get_time and reports its result;
//   - "leak…": says a text with an API key in it;
//   - "echo TEXT": says "You said: TEXT";
//   - anything else: "I did not understand."
type Server struct {
	mu       sync.Mutex
	next     int
	sessions map[string]*sess
	order    []string
	// Received records every turn request body, in order (tests check what reached the
	// agent).
	Received []json.RawMessage
	// AlwaysTrusted names server tools run without permission whatever the session says:
	// an upstream that ignores the client's trust settings. Set it before serving.
	AlwaysTrusted map[string]bool
	// Think is how long the agent works on each turn before it answers: a stand-in for a
	// model's latency in benchmarks. Set it before serving.
	Think time.Duration
}

type toolRef struct {
	Name  string `json:"name"`
	Trust bool   `json:"trust,omitempty"`
}

type agentConfig struct {
	Name    string            `json:"name,omitempty"`
	Tools   []toolRef         `json:"tools,omitempty"`
	Options map[string]string `json:"options,omitempty"`
}

type sess struct {
	id      string
	agent   agentConfig
	tools   []json.RawMessage
	history []json.RawMessage
	// script is the rest of what the agent does; pending the calls it waits on.
	script  []action
	pending map[string]bool
	results []string
	calls   int
	made    map[string]action // tool calls by id
}

type action struct {
	kind  string // think, say, call, report
	parts []string
	tool  string
	input map[string]any
}

// New returns an empty server.
func New() *Server { return &Server{sessions: map[string]*sess{}} }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /meta", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, json.RawMessage(Meta)) })
	mux.HandleFunc("POST /sessions", s.create)
	mux.HandleFunc("GET /sessions", s.list)
	mux.HandleFunc("GET /sessions/{id}", s.get)
	mux.HandleFunc("DELETE /sessions/{id}", s.remove)
	mux.HandleFunc("GET /sessions/{id}/history", s.historyOf)
	mux.HandleFunc("POST /sessions/{id}/turns", s.turn)
	mux.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// internalError is the SDK server's answer to a body it cannot handle.
func internalError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.Header().Set("Content-Length", "21")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = w.Write([]byte("Internal Server Error"))
}

func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, map[string]string{"error": "Session not found"})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Agent    agentConfig       `json:"agent"`
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		internalError(w)
		return
	}
	s.mu.Lock()
	s.next++
	id := "sess_" + strconv.Itoa(s.next)
	s.sessions[id] = &sess{id: id, agent: body.Agent, tools: body.Tools, history: body.Messages,
		pending: map[string]bool{}, made: map[string]action{}}
	s.order = append(s.order, id)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]string{"sessionId": id})
}

// sessionInfo is GET /sessions/:id, its members in the captured order.
type sessionInfo struct {
	SessionID string            `json:"sessionId"`
	Agent     agentConfig       `json:"agent"`
	Tools     []json.RawMessage `json:"tools,omitempty"`
}

func (ss *sess) info() sessionInfo {
	a := ss.agent
	if len(a.Options) > 0 {
		// Every option of the captured agent is a secret.
		masked := map[string]string{}
		for k := range a.Options {
			masked[k] = "***"
		}
		a.Options = masked
	}
	return sessionInfo{SessionID: ss.id, Agent: a, Tools: ss.tools}
}

func (s *Server) list(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []sessionInfo{}
	for _, id := range s.order {
		if ss, ok := s.sessions[id]; ok {
			out = append(out, ss.info())
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[r.PathValue("id")]
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, ss.info())
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	if _, ok := s.sessions[id]; !ok {
		notFound(w)
		return
	}
	delete(s.sessions, id)
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) historyOf(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[r.PathValue("id")]
	if !ok {
		notFound(w)
		return
	}
	typ := r.URL.Query().Get("type")
	if typ == "" {
		typ = "full"
	}
	if typ != "full" && typ != "compacted" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `type must be "compacted" or "full"`})
		return
	}
	h := ss.history
	if h == nil {
		h = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"history": map[string]any{typ: h}})
}

// Sessions returns the ids of the live sessions.
func (s *Server) Sessions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Turns returns a copy of every turn body received so far.
func (s *Server) Turns() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.Received...)
}

func script(text string) []action {
	say := func(parts ...string) action { return action{kind: "say", parts: parts} }
	switch {
	case strings.HasPrefix(text, "hello"):
		return []action{say("Hi there.")}
	case strings.HasPrefix(text, "read and delete "):
		path := strings.TrimPrefix(text, "read and delete ")
		return []action{
			{kind: "think", parts: []string{"I should read the file first."}},
			say("Reading ", "the file."),
			{kind: "call", tool: "read_file", input: map[string]any{"path": path}},
			say("Now deleting it."),
			{kind: "call", tool: "delete_file", input: map[string]any{"path": path}},
			{kind: "report"},
		}
	case strings.HasPrefix(text, "what time"):
		return []action{{kind: "call", tool: "get_time", input: map[string]any{"tz": "UTC"}}, {kind: "report"}}
	case strings.HasPrefix(text, "leak"):
		return []action{say("The key is ", "sk-live-0123456789abcdefABCDEF", ".")}
	case strings.HasPrefix(text, "echo "):
		return []action{say("You said: " + strings.TrimPrefix(text, "echo "))}
	}
	return []action{say("I did not understand.")}
}

func userText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

func runTool(name string, input map[string]any) string {
	path, _ := input["path"].(string)
	var v any
	switch name {
	case "read_file":
		v = map[string]string{"path": path, "text": "hello from " + path}
	case "delete_file":
		v = map[string]string{"deleted": path}
	default:
		v = map[string]string{"error": "unknown tool " + name}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// out writes a turn's answer in its stream mode.
type out struct {
	w    http.ResponseWriter
	mode string
	// none mode: the agent messages so far.
	msgs   []any
	blocks []any
}

func (o *out) event(name string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(o.w, "event: %s\ndata: %s\n\n", name, b)
	if f, ok := o.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (o *out) endMessage() {
	if len(o.blocks) > 0 {
		o.msgs = append(o.msgs, map[string]any{"role": "assistant", "content": o.blocks})
		o.blocks = nil
	}
}

func (o *out) think(t string) {
	switch o.mode {
	case "delta":
		o.event("thinking_delta", map[string]string{"delta": t})
	case "message":
		o.event("thinking", map[string]string{"thinking": t})
	default:
		o.blocks = append(o.blocks, map[string]string{"type": "thinking", "thinking": t})
	}
}

func (o *out) say(parts []string) {
	switch o.mode {
	case "delta":
		for _, p := range parts {
			o.event("text_delta", map[string]string{"delta": p})
		}
	case "message":
		o.event("text", map[string]string{"text": strings.Join(parts, "")})
	default:
		o.blocks = append(o.blocks, map[string]string{"type": "text", "text": strings.Join(parts, "")})
	}
}

func (o *out) call(id, name string, input map[string]any) {
	if o.mode == "none" {
		o.blocks = append(o.blocks, map[string]any{"type": "tool_use", "toolCallId": id, "name": name, "input": input})
		return
	}
	o.event("tool_call", struct {
		ToolCallID string         `json:"toolCallId"`
		Name       string         `json:"name"`
		Input      map[string]any `json:"input"`
	}{id, name, input})
}

func (o *out) result(id, content string) {
	if o.mode == "none" {
		o.endMessage()
		o.msgs = append(o.msgs, map[string]any{"role": "tool", "toolCallId": id, "content": content})
		return
	}
	o.event("tool_result", struct {
		ToolCallID string `json:"toolCallId"`
		Content    string `json:"content"`
	}{id, content})
}

func (s *Server) turn(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Agent    *agentConfig      `json:"agent"`
		Stream   string            `json:"stream"`
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	raw, err := readAll(r)
	if err != nil || json.Unmarshal(raw, &body) != nil {
		internalError(w)
		return
	}
	if s.Think > 0 {
		time.Sleep(s.Think)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Received = append(s.Received, raw)
	ss, ok := s.sessions[r.PathValue("id")]
	if !ok {
		notFound(w)
		return
	}
	if body.Agent != nil {
		if body.Agent.Tools != nil {
			ss.agent.Tools = body.Agent.Tools
		}
		for k, v := range body.Agent.Options {
			if ss.agent.Options == nil {
				ss.agent.Options = map[string]string{}
			}
			ss.agent.Options[k] = v
		}
	}
	if body.Tools != nil {
		ss.tools = body.Tools
	}
	for _, m := range body.Messages {
		var msg struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"toolCallId"`
			Granted    bool            `json:"granted"`
			Reason     string          `json:"reason"`
		}
		if json.Unmarshal(m, &msg) != nil {
			internalError(w)
			return
		}
		switch msg.Role {
		case "user":
			ss.history = append(ss.history, m)
			ss.script, ss.results, ss.pending = script(userText(msg.Content)), nil, map[string]bool{}
		case "tool":
			if !ss.pending[msg.ToolCallID] {
				internalError(w)
				return
			}
			delete(ss.pending, msg.ToolCallID)
			ss.history = append(ss.history, m)
			ss.results = append(ss.results, msg.ToolCallID+"="+strconv.Quote(userText(msg.Content)))
		case "tool_permission":
			if !ss.pending[msg.ToolCallID] {
				internalError(w)
				return
			}
			delete(ss.pending, msg.ToolCallID)
			res := "Tool use denied: " + msg.Reason
			if msg.Granted {
				call := ss.made[msg.ToolCallID]
				res = runTool(call.tool, call.input)
			}
			ss.results = append(ss.results, msg.ToolCallID+"="+strconv.Quote(res))
		default:
			internalError(w)
			return
		}
	}
	mode := body.Stream
	if mode == "" {
		mode = "none"
	}
	o := &out{w: w, mode: mode}
	if mode != "none" {
		w.Header().Set("cache-control", "no-cache")
		w.Header().Set("connection", "keep-alive")
		w.Header().Set("content-type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		o.event("turn_start", struct{}{})
	}
	stop := "end_turn"
	if len(ss.pending) > 0 {
		stop = "tool_use"
	}
	for stop == "end_turn" && len(ss.script) > 0 {
		a := ss.script[0]
		ss.script = ss.script[1:]
		switch a.kind {
		case "think":
			o.think(a.parts[0])
		case "say":
			o.say(a.parts)
			ss.history = append(ss.history, mustJSON(map[string]any{"role": "assistant", "content": strings.Join(a.parts, "")}))
		case "report":
			text := "Done. Tool results: " + strings.Join(ss.results, "; ")
			o.say([]string{text})
			ss.history = append(ss.history, mustJSON(map[string]any{"role": "assistant", "content": text}))
		case "call":
			ss.calls++
			short, _, _ := strings.Cut(a.tool, "_")
			id := fmt.Sprintf("call_%s_%d", short, ss.calls)
			ss.made[id] = a
			o.call(id, a.tool, a.input)
			if trust, server := ss.serverTool(a.tool); server && trust || s.AlwaysTrusted[a.tool] {
				res := runTool(a.tool, a.input)
				o.result(id, res)
				// The captured agent reports a trusted tool's result twice: from its
				// tool_result and again from the history.
				ss.results = append(ss.results, id+"="+strconv.Quote(res), id+"="+strconv.Quote(res))
				continue
			}
			ss.pending[id] = true
			stop = "tool_use"
		}
	}
	if mode == "none" {
		o.endMessage()
		msgs := o.msgs
		if msgs == nil {
			msgs = []any{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"stopReason": stop, "messages": msgs})
		return
	}
	o.event("turn_stop", map[string]string{"stopReason": stop})
}

// serverTool reports whether name is a server tool enabled for the session, and whether
// it is trusted.
func (ss *sess) serverTool(name string) (trust, ok bool) {
	for _, t := range ss.agent.Tools {
		if t.Name == name {
			return t.Trust, true
		}
	}
	return false, false
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func readAll(r *http.Request) ([]byte, error) { return io.ReadAll(r.Body) }
