// Package mcp is Vigil's gateway for the Model Context Protocol: a relay between an MCP
// client and server (over stdio, or as a Streamable HTTP reverse proxy) that turns the
// messages that matter (tools/call and its result, resources/read, prompts/get, the
// server's sampling and elicitation requests) into AOS protocols/MCP steps, has the
// guardian decide them, and applies each verdict in MCP's own terms. Everything else passes
// byte for byte.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Outcome is a verdict as the relay applies it.
type Outcome struct {
	// Decision is allow, deny or modify (a hold is decided before the outcome is known).
	Decision string
	Message  string
	// Modified is the modified MCP message when Decision is modify.
	Modified json.RawMessage
}

// JudgeFunc asks the guardian for a verdict on one protocols/MCP step; params are the AOS
// params (the wrapped layout: message and _meta). It blocks while the step is held.
type JudgeFunc func(ctx context.Context, params []byte) (Outcome, error)

// Error policies when the guardian cannot be asked.
const (
	OnErrorDeny  = "deny"
	OnErrorAllow = "allow"
)

// errTooMany refuses a call when too many are in flight in one session.
var errTooMany = errors.New("too many requests in flight in this session")

// SessionConfig configures one MCP session.
type SessionConfig struct {
	// ID is the Vigil session id of the MCP session.
	ID string
	// Upstream names the server (the NAME of --mcp NAME=URL, or mcp wrap --name).
	Upstream string
	Judge    JudgeFunc
	// OnError is OnErrorDeny (default) or OnErrorAllow.
	OnError string
	// ProgressEvery is how often a waiting tools/call that carries a progress token gets a
	// progress notification (default 10s).
	ProgressEvery time.Duration
	// MaxPending bounds the requests in flight each way (default 1024).
	MaxPending int
	// Hides, when not nil, reports which tools a rule would deny whatever their arguments;
	// they are left out of tools/list answers, so the model never tries them.
	Hides HidesFunc
	// Logger receives what went wrong asking the guardian, which the client is not told
	// (nil: slog.Default()).
	Logger *slog.Logger
}

type pendingReq struct {
	method, tool string
}

// Session is the protocol state of one MCP session: who the client and the server are, the
// server's tool definitions, and the requests in flight each way. Safe for concurrent use.
type Session struct {
	cfg SessionConfig

	mu         sync.Mutex
	clientInfo json.RawMessage
	serverInfo json.RawMessage
	tools      map[string]json.RawMessage
	fromClient map[string]pendingReq // client requests awaiting the server's answer
	fromServer map[string]string     // server requests awaiting the client's answer
}

// NewSession starts the state of one MCP session.
func NewSession(cfg SessionConfig) *Session {
	if cfg.OnError == "" {
		cfg.OnError = OnErrorDeny
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Session{cfg: cfg, tools: map[string]json.RawMessage{},
		fromClient: map[string]pendingReq{}, fromServer: map[string]string{}}
}

// SetID names the Vigil session (the HTTP proxy learns the MCP session id only from the
// answer to initialize).
func (s *Session) SetID(id string) {
	s.mu.Lock()
	s.cfg.ID = id
	s.mu.Unlock()
}

// Info returns the client's and the server's self-descriptions (clientInfo, serverInfo).
func (s *Session) Info() (client, server json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientInfo, s.serverInfo
}

// message is the part of a JSON-RPC message the relay reads.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

func (m *message) isRequest() bool  { return m.Method != "" && len(m.ID) > 0 && !isNull(m.ID) }
func (m *message) isResponse() bool { return m.Method == "" && len(m.ID) > 0 }

func isNull(b []byte) bool {
	return len(bytes.TrimSpace(b)) == 0 || string(bytes.TrimSpace(b)) == "null"
}

// parse reads one message; ok is false for anything that is not a single JSON-RPC object
// (a batch, garbage), which the relay passes on untouched.
func parse(b []byte) (message, bool) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return message{}, false
	}
	f, ok := members(t)
	if !ok {
		return message{}, false
	}
	var m message
	if json.Unmarshal(f["jsonrpc"], &m.JSONRPC) != nil || m.JSONRPC != "2.0" {
		return message{}, false
	}
	if raw, ok := f["method"]; ok && json.Unmarshal(raw, &m.Method) != nil {
		return message{}, false
	}
	m.ID, m.Params, m.Result, m.Error = f["id"], f["params"], f["result"], f["error"]
	return m, true
}

// members reads a JSON object's members by their exact names, the last of a repeated name
// winning, as JavaScript's JSON.parse (the TypeScript SDK, most MCP clients and servers)
// reads them. encoding/json matches struct fields whatever the case of the name, so a
// server's "ID" beside its "id" had Vigil take a result for the answer to another request
// than the client did, and pass it unjudged.
func members(b []byte) (map[string]json.RawMessage, bool) {
	var f map[string]json.RawMessage
	if json.Unmarshal(b, &f) != nil || f == nil {
		return nil, false
	}
	return f, true
}

// nameOf is the "name" member of an object (a tool call's params, a tool's definition).
func nameOf(b []byte) string {
	var name string
	if f, ok := members(b); ok {
		_ = json.Unmarshal(f["name"], &name)
	}
	return name
}

// judgedClientMethods are the client requests that are steps.
var judgedClientMethods = map[string]bool{"tools/call": true, "resources/read": true, "prompts/get": true}

// judgedServerMethods are the server requests that are steps.
var judgedServerMethods = map[string]bool{"sampling/createMessage": true, "elicitation/create": true}

// MayBlock reports whether handling msg from the client (fromClient) or the server may
// wait for the guardian, so a relay handles it off its reading goroutine.
func (s *Session) MayBlock(msg []byte, fromClient bool) bool {
	m, ok := parse(msg)
	if !ok {
		return false
	}
	if fromClient {
		return judgedClientMethods[m.Method]
	}
	if m.isRequest() {
		return judgedServerMethods[m.Method]
	}
	if m.isResponse() {
		s.mu.Lock()
		p, ok := s.fromClient[string(m.ID)]
		s.mu.Unlock()
		return ok && judgedClientMethods[p.method]
	}
	return false
}

// Action is what the relay does with one message: Forward continues in the message's
// direction (nil: withheld), Reply goes back to its sender (nil: nothing). Changed is false
// when Forward is the message exactly as received. Answers is the id of the client's
// request that a server's message answers (nil for anything else), so a relay knows when a
// request it waits on has its answer.
type Action struct {
	Forward []byte
	Reply   []byte
	Changed bool
	Answers json.RawMessage
}

func pass(b []byte) Action { return Action{Forward: b} }

// FromClient handles a message from the client. notify, when not nil, sends a message to
// the client meanwhile (progress while a call waits for review).
func (s *Session) FromClient(ctx context.Context, msg []byte, notify func([]byte)) Action {
	m, ok := parse(msg)
	if !ok {
		return pass(msg)
	}
	if m.isResponse() {
		s.mu.Lock()
		delete(s.fromServer, string(m.ID))
		s.mu.Unlock()
		return pass(msg)
	}
	if !m.isRequest() {
		return pass(msg)
	}
	// Read as the server reads them (members), so the tool is the one the server calls.
	var name string
	var clientInfo, progressToken json.RawMessage
	if f, ok := members(m.Params); ok {
		_ = json.Unmarshal(f["name"], &name)
		clientInfo = f["clientInfo"]
		if meta, ok := members(f["_meta"]); ok {
			progressToken = meta["progressToken"]
		}
	}
	s.mu.Lock()
	if m.Method == "initialize" && len(clientInfo) > 0 {
		s.clientInfo = clientInfo
	}
	if len(s.fromClient) >= s.cfg.MaxPending {
		s.mu.Unlock()
		if judgedClientMethods[m.Method] {
			return Action{Reply: s.refusal(&m, errTooMany.Error())}
		}
		return pass(msg)
	}
	s.fromClient[string(m.ID)] = pendingReq{method: m.Method, tool: name}
	s.mu.Unlock()
	if !judgedClientMethods[m.Method] {
		return pass(msg)
	}
	var stop func()
	if notify != nil && len(progressToken) > 0 && !isNull(progressToken) {
		stop = s.progress(progressToken, notify)
	}
	out := s.judge(ctx, msg, name, false)
	if stop != nil {
		stop()
	}
	switch out.Decision {
	case "deny":
		s.forget(m.ID)
		return Action{Reply: s.refusal(&m, out.Message)}
	case "modify":
		if len(out.Modified) > 0 {
			return Action{Forward: out.Modified, Changed: true}
		}
	}
	return pass(msg)
}

// FromServer handles a message from the server.
func (s *Session) FromServer(ctx context.Context, msg []byte) Action {
	m, ok := parse(msg)
	if !ok {
		return pass(msg)
	}
	switch {
	case m.isResponse():
		s.mu.Lock()
		p, ok := s.fromClient[string(m.ID)]
		delete(s.fromClient, string(m.ID))
		s.mu.Unlock()
		a := pass(msg)
		if ok {
			a = s.fromServerResponse(ctx, msg, &m, p)
		}
		a.Answers = m.ID
		return a
	case m.isRequest():
		s.mu.Lock()
		if len(s.fromServer) < s.cfg.MaxPending {
			s.fromServer[string(m.ID)] = m.Method
		}
		s.mu.Unlock()
		if !judgedServerMethods[m.Method] {
			return pass(msg)
		}
		out := s.judge(ctx, msg, "", false)
		switch out.Decision {
		case "deny":
			return Action{Reply: errorResponse(m.ID, codeDenied, deniedText(out.Message))}
		case "modify":
			if len(out.Modified) > 0 {
				return Action{Forward: out.Modified, Changed: true}
			}
		}
	}
	return pass(msg)
}

// fromServerResponse handles the server's answer m (msg) to the client's request p.
func (s *Session) fromServerResponse(ctx context.Context, msg []byte, m *message, p pendingReq) Action {
	switch p.method {
	case "initialize":
		if r, ok := members(m.Result); ok && len(r["serverInfo"]) > 0 {
			s.mu.Lock()
			s.serverInfo = r["serverInfo"]
			s.mu.Unlock()
		}
		return pass(msg)
	case "tools/list":
		s.learnTools(m.Result)
		if s.cfg.Hides != nil {
			if out, changed := s.hideDenied(ctx, m); changed {
				return Action{Forward: out, Changed: true}
			}
		}
		return pass(msg)
	}
	if !judgedClientMethods[p.method] || len(m.Result) == 0 {
		return pass(msg)
	}
	out := s.judge(ctx, msg, p.tool, true)
	switch out.Decision {
	case "deny":
		return Action{Forward: s.refusal(&message{ID: m.ID, Method: p.method}, out.Message), Changed: true}
	case "modify":
		if len(out.Modified) > 0 {
			return Action{Forward: out.Modified, Changed: true}
		}
	}
	return pass(msg)
}

func (s *Session) forget(id json.RawMessage) {
	s.mu.Lock()
	delete(s.fromClient, string(id))
	s.mu.Unlock()
}

// learnTools keeps each tool's definition (with its annotations) for the rules.
func (s *Session) learnTools(result json.RawMessage) {
	r, ok := members(result)
	if !ok {
		return
	}
	var tools []json.RawMessage
	if json.Unmarshal(r["tools"], &tools) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tools {
		if name := nameOf(t); name != "" {
			// Bounded by what one tools/list answer holds; a new list replaces old entries.
			if len(s.tools) < 4096 {
				s.tools[name] = t
			} else if _, ok := s.tools[name]; ok {
				s.tools[name] = t
			}
		}
	}
}

// codeDenied is the JSON-RPC error code of a request Vigil refused outside tools/call (a
// server error code in the range JSON-RPC reserves for implementations).
const codeDenied = -32001

func deniedText(msg string) string {
	if msg == "" {
		msg = "denied by policy."
	}
	return "Denied by Vigil: " + msg
}

// refusal is the answer to a refused request: a tool result with isError for tools/call
// (what MCP clients show the model), a JSON-RPC error otherwise.
func (s *Session) refusal(m *message, msg string) []byte {
	if m.Method == "tools/call" {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{
			"content": []any{map[string]any{"type": "text", "text": deniedText(msg)}}, "isError": true}})
		return b
	}
	return errorResponse(m.ID, codeDenied, deniedText(msg))
}

func errorResponse(id json.RawMessage, code int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	return b
}

// hideBudget bounds how long one tools/list answer waits for Hides: past it the remaining
// tools are listed (their calls are judged anyway).
const hideBudget = 10 * time.Second

// hideDenied returns the tools/list answer m without the tools Hides names.
func (s *Session) hideDenied(ctx context.Context, m *message) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(ctx, hideBudget)
	defer cancel()
	r, ok := members(m.Result)
	if !ok {
		return nil, false
	}
	var tools []json.RawMessage
	if json.Unmarshal(r["tools"], &tools) != nil {
		return nil, false
	}
	// One question for the whole list: asked[i] is the tool params[i] is about.
	var params [][]byte
	var asked []int
	for i, t := range tools {
		if name := nameOf(t); name != "" {
			call, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "tools/call",
				"params": map[string]any{"name": name, "arguments": map[string]any{}}})
			if p, err := s.stepParams(call, name, false); err == nil {
				params = append(params, p)
				asked = append(asked, i)
			}
		}
	}
	hidden := make([]bool, len(tools))
	if len(params) > 0 {
		for k, h := range s.cfg.Hides(ctx, params) {
			if k < len(asked) {
				hidden[asked[k]] = h
			}
		}
	}
	kept := make([]json.RawMessage, 0, len(tools))
	for i, t := range tools {
		if !hidden[i] {
			kept = append(kept, t)
		}
	}
	if len(kept) == len(tools) {
		return nil, false
	}
	r["tools"], _ = json.Marshal(kept)
	res, err := json.Marshal(r)
	if err != nil {
		return nil, false
	}
	out, err := json.Marshal(message{JSONRPC: "2.0", ID: m.ID, Result: res})
	if err != nil {
		return nil, false
	}
	return out, true
}

// judge asks the guardian about one message, applying the error policy.
func (s *Session) judge(ctx context.Context, msg []byte, tool string, response bool) Outcome {
	params, err := s.stepParams(msg, tool, response)
	if err != nil {
		return s.failed(fmt.Errorf("encode step: %w", err))
	}
	out, err := s.cfg.Judge(ctx, params)
	if err != nil {
		return s.failed(err)
	}
	return out
}

// stepParams are the AOS protocols/MCP params of msg: the message and, in _meta, what
// the gateway knows (session, client, server, the tool's definition, the tool a result
// answers).
func (s *Session) stepParams(msg []byte, tool string, response bool) ([]byte, error) {
	s.mu.Lock()
	meta := map[string]any{"upstream": s.cfg.Upstream}
	if s.cfg.ID != "" {
		meta["sessionId"] = s.cfg.ID
	}
	if len(s.clientInfo) > 0 {
		meta["clientInfo"] = s.clientInfo
	}
	if len(s.serverInfo) > 0 {
		meta["serverInfo"] = s.serverInfo
	}
	if tool != "" {
		if def, ok := s.tools[tool]; ok {
			meta["toolDef"] = def
		}
		if response {
			meta["tool"] = tool
		}
	}
	s.mu.Unlock()
	return json.Marshal(struct {
		Message json.RawMessage `json:"message"`
		Meta    map[string]any  `json:"_meta"`
	}{json.RawMessage(bytes.TrimSpace(msg)), meta})
}

// failed applies the error policy when the guardian could not be asked. What went wrong
// (addresses, transport and storage errors) goes to the log: the client, and the model
// behind it, only learn that Vigil failed closed.
func (s *Session) failed(err error) Outcome {
	s.mu.Lock()
	id := s.cfg.ID
	s.mu.Unlock()
	if s.cfg.OnError == OnErrorAllow {
		s.cfg.Logger.Warn("the guardian could not be asked; letting the message through (on error: allow)",
			"session", id, "err", err)
		return Outcome{Decision: "allow"}
	}
	s.cfg.Logger.Warn("the guardian could not be asked; failing closed",
		"session", id, "err", err)
	return Outcome{Decision: "deny", Message: "the guardian could not be asked; failing closed."}
}

// progress sends a progress notification every ProgressEvery until stopped, so a client
// that resets its timeout on progress keeps waiting for a reviewer.
func (s *Session) progress(token json.RawMessage, notify func([]byte)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.cfg.ProgressEvery)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-t.C:
				b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress",
					"params": map[string]any{"progressToken": token, "progress": n,
						"message": "Waiting for review by Vigil"}})
				notify(b)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// OutcomeOf turns a decision, message and the guardian's modified AOS request into an
// Outcome: the modified MCP message is the request's params.message.
func OutcomeOf(decision, msg string, modifiedRequest json.RawMessage) (Outcome, error) {
	out := Outcome{Decision: decision, Message: msg}
	if decision != "modify" {
		return out, nil
	}
	var r struct {
		Params struct {
			Message json.RawMessage `json:"message"`
		} `json:"params"`
	}
	if err := json.Unmarshal(modifiedRequest, &r); err != nil || len(r.Params.Message) == 0 {
		return Outcome{}, fmt.Errorf("mcp: the modified request carries no MCP message")
	}
	out.Modified = r.Params.Message
	return out, nil
}
