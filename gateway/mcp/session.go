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

// errReusedID refuses a request whose id names a request of the same session still in
// flight: MCP forbids reusing a request id within a session, and two requests under one id
// would share one entry (and one answer), the second judged without counting against the
// bound.
const errReusedID = "the request id is already used by a request in flight in this session (MCP request ids must not be reused)"

// codeInvalidRequest is JSON-RPC's error code for a request that is not a valid one.
const codeInvalidRequest = -32600

// DefaultMaxToolBytes bounds the tool definitions one session keeps for the rules.
const DefaultMaxToolBytes = 4 << 20

// toolOverhead is what a kept tool costs beyond its name and definition (its map entry),
// so that many tiny definitions are bounded as well.
const toolOverhead = 64

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
	// MaxPending bounds the requests in flight each way, and so the verdicts awaited at
	// once each way (default 1024).
	MaxPending int
	// MaxToolBytes bounds the tool definitions the session keeps from tools/list for the
	// rules (default DefaultMaxToolBytes); a list over it reaches the client as an error.
	MaxToolBytes int
	// Hides, when not nil, reports which tools a rule would deny whatever their arguments;
	// they are left out of tools/list answers, so the model never tries them.
	Hides HidesFunc
	// Logger receives what went wrong asking the guardian, which the client is not told
	// (nil: slog.Default()).
	Logger *slog.Logger
}

type pendingReq struct {
	method, tool string
	// page: a tools/list request naming a cursor, whose answer continues the list before.
	page bool
	// answering: the server's answer is being judged; another answer to the same request
	// meanwhile is withheld (the client reads the first that reaches it).
	answering bool
}

// Session is the protocol state of one MCP session: who the client and the server are, the
// server's tool definitions, and the requests in flight each way. Safe for concurrent use.
type Session struct {
	cfg SessionConfig

	mu         sync.Mutex
	clientInfo json.RawMessage
	serverInfo json.RawMessage
	tools      map[string]json.RawMessage
	toolBytes  int                   // what tools costs against MaxToolBytes
	fromClient map[string]pendingReq // client requests awaiting the server's answer
	fromServer map[string]string     // server requests awaiting the client's answer
	// serverJudging counts the server's requests awaiting a verdict: unlike the client's,
	// they need not be remembered (fromServer stops growing at its bound), so the map
	// does not bound them.
	serverJudging int
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
	if cfg.MaxToolBytes <= 0 {
		cfg.MaxToolBytes = DefaultMaxToolBytes
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
	a, judge := s.admitClient(msg)
	if judge == nil {
		return a
	}
	return judge(ctx, notify)
}

// admitClient is what handling a message from the client does before any verdict: read it,
// refuse a request the session cannot take, note a request in flight. It never waits.
// judge, when not nil, is the rest (the verdict, which may wait for a reviewer) and a is
// then unset: a relay runs it on a goroutine of its own, so it holds at most one per
// request in flight (MaxPending), whatever the client sends.
func (s *Session) admitClient(msg []byte) (a Action, judge func(context.Context, func([]byte)) Action) {
	m, ok := parse(msg)
	if !ok {
		return pass(msg), nil
	}
	if m.isResponse() {
		s.mu.Lock()
		delete(s.fromServer, string(m.ID))
		s.mu.Unlock()
		return pass(msg), nil
	}
	if !m.isRequest() {
		if m.Method == "notifications/cancelled" {
			s.cancelled(m.Params)
		}
		return pass(msg), nil
	}
	// Read as the server reads them (members), so the tool is the one the server calls.
	var name string
	var clientInfo, progressToken, cursor json.RawMessage
	if f, ok := members(m.Params); ok {
		_ = json.Unmarshal(f["name"], &name)
		clientInfo = f["clientInfo"]
		cursor = f["cursor"]
		if meta, ok := members(f["_meta"]); ok {
			progressToken = meta["progressToken"]
		}
	}
	judged := judgedClientMethods[m.Method]
	s.mu.Lock()
	if m.Method == "initialize" && len(clientInfo) > 0 {
		s.clientInfo = clientInfo
	}
	if _, inFlight := s.fromClient[string(m.ID)]; inFlight {
		s.mu.Unlock()
		return Action{Reply: errorResponse(m.ID, codeInvalidRequest, errReusedID)}, nil
	}
	if len(s.fromClient) >= s.cfg.MaxPending {
		s.mu.Unlock()
		if judged {
			return Action{Reply: s.refusal(&m, errTooMany.Error())}, nil
		}
		return pass(msg), nil
	}
	s.fromClient[string(m.ID)] = pendingReq{method: m.Method, tool: name,
		page: m.Method == "tools/list" && len(cursor) > 0 && !isNull(cursor)}
	s.mu.Unlock()
	if !judged {
		return pass(msg), nil
	}
	return Action{}, func(ctx context.Context, notify func([]byte)) Action {
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
}

// FromServer handles a message from the server.
func (s *Session) FromServer(ctx context.Context, msg []byte) Action {
	a, judge := s.admitServer(ctx, msg)
	if judge == nil {
		return a
	}
	return judge(ctx)
}

// admitServer is admitClient for a message from the server: judge, when not nil, is the
// verdict on the answer to a judged request or on a judged request of the server's, and
// a relay holds at most MaxPending of each at once. What needs no verdict is handled at
// once, with ctx (a tools/list answer asks which tools to hide).
func (s *Session) admitServer(ctx context.Context, msg []byte) (a Action, judge func(context.Context) Action) {
	m, ok := parse(msg)
	if !ok {
		return pass(msg), nil
	}
	switch {
	case m.isResponse():
		id := string(m.ID)
		s.mu.Lock()
		p, ok := s.fromClient[id]
		switch {
		case !ok:
			s.mu.Unlock()
			return Action{Forward: msg, Answers: m.ID}, nil
		case p.answering:
			// A second answer while the first is judged: passed on, it could reach the
			// client first, unjudged. (Debug: the server decides how many it sends.)
			s.mu.Unlock()
			s.cfg.Logger.Debug("the MCP server answered a request twice; withholding the second answer",
				"session", s.id(), "request", id)
			return Action{Answers: m.ID}, nil
		}
		if !judgedClientMethods[p.method] || len(m.Result) == 0 {
			delete(s.fromClient, id)
			s.mu.Unlock()
			a := s.fromServerResponse(ctx, msg, &m, p)
			a.Answers = m.ID
			return a, nil
		}
		p.answering = true
		s.fromClient[id] = p
		s.mu.Unlock()
		return Action{}, func(ctx context.Context) Action {
			a := s.fromServerResponse(ctx, msg, &m, p)
			s.mu.Lock()
			delete(s.fromClient, id)
			s.mu.Unlock()
			a.Answers = m.ID
			return a
		}
	case m.isRequest():
		judged := judgedServerMethods[m.Method]
		s.mu.Lock()
		if len(s.fromServer) < s.cfg.MaxPending {
			s.fromServer[string(m.ID)] = m.Method
		}
		if judged && s.serverJudging >= s.cfg.MaxPending {
			s.mu.Unlock()
			// Refused, not passed: it reaches the client only judged.
			return Action{Reply: errorResponse(m.ID, codeDenied, deniedText(errTooMany.Error()))}, nil
		}
		if judged {
			s.serverJudging++
		}
		s.mu.Unlock()
		if !judged {
			return pass(msg), nil
		}
		return Action{}, func(ctx context.Context) Action {
			defer func() {
				s.mu.Lock()
				s.serverJudging--
				s.mu.Unlock()
			}()
			out := s.judge(ctx, msg, "", false)
			switch out.Decision {
			case "deny":
				return Action{Reply: errorResponse(m.ID, codeDenied, deniedText(out.Message))}
			case "modify":
				if len(out.Modified) > 0 {
					return Action{Forward: out.Modified, Changed: true}
				}
			}
			return pass(msg)
		}
	}
	return pass(msg), nil
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
		if !s.learnTools(m.Result, p.page) {
			// Kept in part, the rules would judge some calls without the definition they
			// read (a destructiveHint, say): the client gets no list rather than one Vigil
			// cannot judge calls from.
			s.cfg.Logger.Warn("the MCP server's tool definitions exceed the bound; the tools/list answer is refused",
				"session", s.id(), "limit", s.cfg.MaxToolBytes)
			return Action{Forward: errorResponse(m.ID, codeUpstream, fmt.Sprintf(
				"the MCP server's tool definitions exceed %d bytes, more than Vigil keeps for its rules", s.cfg.MaxToolBytes)), Changed: true}
		}
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

// cancelled ends the time in flight of the request a client's notifications/cancelled
// names: the server need not answer it any more (MCP asks it not to), and the client
// ignores an answer that comes anyway. One whose answer is being judged stays until its
// verdict.
func (s *Session) cancelled(params json.RawMessage) {
	f, ok := members(params)
	if !ok || len(f["requestId"]) == 0 {
		return
	}
	id := string(f["requestId"])
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.fromClient[id]; ok && !p.answering {
		delete(s.fromClient, id)
	}
}

// forget ends the request id's time in flight.
func (s *Session) forget(id json.RawMessage) {
	if len(id) == 0 {
		return
	}
	s.mu.Lock()
	delete(s.fromClient, string(id))
	s.mu.Unlock()
}

// learnTools keeps each tool's definition (with its annotations) for the rules. A list
// replaces the one before (a tool the server no longer lists is gone), and a page (page:
// asked for with a cursor) adds to the list it continues. ok is false when the definitions
// would exceed MaxToolBytes: a list is then not kept (the session keeps the one before),
// and a page is kept as far as it fits.
func (s *Session) learnTools(result json.RawMessage, page bool) (ok bool) {
	r, ok := members(result)
	if !ok {
		return true
	}
	var tools []json.RawMessage
	if json.Unmarshal(r["tools"], &tools) != nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kept, size := map[string]json.RawMessage{}, 0
	if page {
		kept, size = s.tools, s.toolBytes
		defer func() { s.toolBytes = size }()
	}
	for _, t := range tools {
		name := nameOf(t)
		if name == "" {
			continue
		}
		cost := len(name) + len(t) + toolOverhead
		old, had := kept[name]
		if had {
			cost -= len(name) + len(old) + toolOverhead
		}
		if size+cost > s.cfg.MaxToolBytes {
			return false
		}
		kept[name] = t
		size += cost
	}
	if !page {
		s.tools, s.toolBytes = kept, size
	}
	return true
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

// id is the Vigil session id, for the log.
func (s *Session) id() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.ID
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
