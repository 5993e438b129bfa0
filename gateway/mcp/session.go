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
	"strconv"
	"strings"
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

// JSON-RPC's error codes for a message that is not JSON (codeParseError), not a valid
// request (codeInvalidRequest), names a method the receiver does not offer
// (codeMethodNotFound) or has invalid params (codeInvalidParams).
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
)

// errNoTasks refuses MCP tasks (protocol 2025-11-25): a task-augmented request answers with
// a task handle, and the tool's real result comes later from tasks/result, which Vigil does
// not judge as the tool's result; so tasks are not offered through Vigil at all.
const errNoTasks = "Vigil does not relay MCP tasks: their results could reach the client unjudged; call the tool without a task"

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
	// seq tells this request from a later one under the same id.
	seq uint64
	// cancel, while the request waits for its verdict, abandons it (the client cancelled).
	cancel context.CancelFunc
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
	fromClient map[string]pendingReq // client requests awaiting the server's answer, by idKey
	fromServer map[string]string     // server requests awaiting the client's answer, by idKey
	seq        uint64                // numbers the client's requests (pendingReq.seq)
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
// (a batch, garbage).
func parse(b []byte) (message, bool) {
	m, e := read(b)
	return m, e == nil
}

// readError is why a message cannot be read, as the JSON-RPC error its sender gets.
type readError struct {
	code int
	msg  string
	// id is the message's id when it could be read (null otherwise).
	id json.RawMessage
}

func (e *readError) reply() []byte { return errorResponse(e.id, e.code, e.msg) }

// read reads one message: a JSON-RPC 2.0 object. What it cannot read is never relayed: a
// peer may read it (JavaScript's JSON.parse takes nesting deeper than Go's 10000 levels,
// the TypeScript SDK's HTTP transport skips a byte order mark), and it could then be a
// call or a result no rule saw.
func read(b []byte) (message, *readError) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		if err := json.Unmarshal(t, new(json.RawMessage)); err != nil || len(t) == 0 {
			return message{}, parseError(err)
		}
		return message{}, &readError{code: codeInvalidRequest, msg: "Invalid Request: a JSON-RPC message is an object"}
	}
	f, err := membersErr(t)
	if err != nil {
		return message{}, parseError(err)
	}
	var m message
	id := f["id"]
	if len(id) == 0 {
		id = nil
	}
	if json.Unmarshal(f["jsonrpc"], &m.JSONRPC) != nil || m.JSONRPC != "2.0" {
		return message{}, &readError{code: codeInvalidRequest, id: id, msg: `Invalid Request: "jsonrpc" must be "2.0"`}
	}
	if raw, ok := f["method"]; ok && json.Unmarshal(raw, &m.Method) != nil {
		return message{}, &readError{code: codeInvalidRequest, id: id, msg: `Invalid Request: "method" must be a string`}
	}
	m.ID, m.Params, m.Result, m.Error = f["id"], f["params"], f["result"], f["error"]
	return m, nil
}

func parseError(err error) *readError {
	msg := "Parse error: the message is not JSON Vigil can read"
	if err != nil {
		msg += " (" + err.Error() + ")"
	}
	return &readError{code: codeParseError, msg: msg}
}

// idKey is the value of a JSON-RPC id, which the in-flight maps are keyed by: the server
// answers with the id as it read it (6.0 and 6e0 come back as 6, "\u0037" as "7"), so
// keyed by the text, an answer missed its request and passed unjudged while the request
// stayed in flight for good. Numbers are compared as JavaScript compares them (as float64,
// -0 as 0), strings by their decoded value; anything else by its compact text.
func idKey(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return ""
	}
	switch c := t[0]; {
	case c == '"':
		var str string
		if json.Unmarshal(t, &str) == nil {
			return "s" + str
		}
	case c == '-' || c >= '0' && c <= '9':
		if f, err := strconv.ParseFloat(string(t), 64); err == nil || errors.Is(err, strconv.ErrRange) {
			if f == 0 {
				f = 0 // -0 reads as 0
			}
			return "n" + strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, t) == nil {
		return "j" + b.String()
	}
	return "j" + string(t)
}

// members reads a JSON object's members by their exact names, the last of a repeated name
// winning, as JavaScript's JSON.parse (the TypeScript SDK, most MCP clients and servers)
// reads them. encoding/json matches struct fields whatever the case of the name, so a
// server's "ID" beside its "id" had Vigil take a result for the answer to another request
// than the client did, and pass it unjudged.
func members(b []byte) (map[string]json.RawMessage, bool) {
	f, err := membersErr(b)
	return f, err == nil
}

func membersErr(b []byte) (map[string]json.RawMessage, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, errors.New("not an object")
	}
	return f, nil
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
		p, ok := s.fromClient[idKey(m.ID)]
		s.mu.Unlock()
		return ok && judgedClientMethods[p.method]
	}
	return false
}

// Action is what the relay does with one message: Forward continues in the message's
// direction (nil: withheld), Reply goes back to its sender (nil: nothing). Changed is false
// when Forward is the message exactly as received. Answers is the id of the client's
// request that a server's message answers (nil for anything else), so a relay knows when a
// request it waits on has its answer. Invalid is set when Reply refuses a message Vigil
// cannot read (HTTP answers it 400).
type Action struct {
	Forward []byte
	Reply   []byte
	Changed bool
	Answers json.RawMessage
	Invalid bool
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

// refusedTasks is the error for a client request that uses MCP tasks (see errNoTasks), or
// nil. params.task makes any request task-augmented.
func refusedTasks(m *message, f map[string]json.RawMessage) []byte {
	switch {
	case strings.HasPrefix(m.Method, "tasks/"):
		return errorResponse(m.ID, codeMethodNotFound, "Method not found: "+errNoTasks)
	case len(f["task"]) > 0 && !isNull(f["task"]):
		return errorResponse(m.ID, codeInvalidParams, "Invalid params: params.task: "+errNoTasks)
	}
	return nil
}

// admitClient is what handling a message from the client does before any verdict: read it,
// refuse a request the session cannot take, note a request in flight. It never waits.
// judge, when not nil, is the rest (the verdict, which may wait for a reviewer) and a is
// then unset: a relay runs it on a goroutine of its own, so it holds at most one per
// request in flight (MaxPending), whatever the client sends.
func (s *Session) admitClient(msg []byte) (a Action, judge func(context.Context, func([]byte)) Action) {
	if t := bytes.TrimSpace(msg); len(t) > 0 && t[0] == '[' {
		return s.admitBatch(t), nil
	}
	m, rerr := read(msg)
	if rerr != nil {
		// Not passed: the server might read what Vigil cannot (see read).
		return Action{Reply: rerr.reply(), Invalid: true}, nil
	}
	key := idKey(m.ID)
	if m.isResponse() {
		s.mu.Lock()
		delete(s.fromServer, key)
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
	f, _ := members(m.Params)
	if f != nil {
		_ = json.Unmarshal(f["name"], &name)
		clientInfo = f["clientInfo"]
		cursor = f["cursor"]
		if meta, ok := members(f["_meta"]); ok {
			progressToken = meta["progressToken"]
		}
	}
	if r := refusedTasks(&m, f); r != nil {
		return Action{Reply: r}, nil
	}
	judged := judgedClientMethods[m.Method]
	s.mu.Lock()
	if m.Method == "initialize" && len(clientInfo) > 0 {
		s.clientInfo = clientInfo
	}
	if _, inFlight := s.fromClient[key]; inFlight {
		s.mu.Unlock()
		return Action{Reply: errorResponse(m.ID, codeInvalidRequest, errReusedID)}, nil
	}
	if len(s.fromClient) >= s.cfg.MaxPending {
		s.mu.Unlock()
		// Any request: one not in flight would have its answer dropped (admitServer).
		return Action{Reply: s.refusal(&m, errTooMany.Error())}, nil
	}
	s.seq++
	seq := s.seq
	s.fromClient[key] = pendingReq{method: m.Method, tool: name, seq: seq,
		page: m.Method == "tools/list" && len(cursor) > 0 && !isNull(cursor)}
	s.mu.Unlock()
	if !judged {
		return pass(msg), nil
	}
	return Action{}, func(ctx context.Context, notify func([]byte)) Action {
		// The client's notifications/cancelled ends ctx (cancelled), abandoning a hold.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if !s.watch(key, seq, cancel) {
			return Action{Reply: s.refusal(&m, errCancelled)}
		}
		var stop func()
		if notify != nil && len(progressToken) > 0 && !isNull(progressToken) {
			stop = s.progress(progressToken, notify)
		}
		out := s.judge(ctx, msg, name, false)
		if stop != nil {
			stop()
		}
		if ctx.Err() != nil {
			// Cancelled, or the client went away: whatever came of the verdict (an error
			// policy's allow above all), the call does not go on.
			s.settle(key, seq)
			return Action{Reply: s.refusal(&m, errCancelled)}
		}
		switch out.Decision {
		case "deny":
			s.settle(key, seq)
			return Action{Reply: s.refusal(&m, out.Message)}
		case "modify":
			if len(out.Modified) > 0 {
				return Action{Forward: out.Modified, Changed: true}
			}
		}
		return pass(msg)
	}
}

// errCancelled answers a judged request the client cancelled (or left) before its verdict;
// the client ignores it, but an HTTP request still gets an answer.
const errCancelled = "the request was cancelled before its verdict; it was not sent to the server."

// watch makes cancel the way to abandon request key (seq) while it waits for its verdict;
// false when the client cancelled it already.
func (s *Session) watch(key string, seq uint64, cancel context.CancelFunc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.fromClient[key]
	if !ok || p.seq != seq {
		return false
	}
	p.cancel = cancel
	s.fromClient[key] = p
	return true
}

// settle ends the time in flight of request key, when it is still the request seq.
func (s *Session) settle(key string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.fromClient[key]; ok && p.seq == seq {
		delete(s.fromClient, key)
	}
}

// admitBatch refuses a JSON-RPC batch. MCP removed batches in protocol 2025-06-18 and no
// current client sends one; relaying one safely would mean judging each member and
// splitting and joining the server's answers on every transport (a batch's answer is an
// array, over stdio a line, over HTTP a body or an event), for no client that needs it.
// A batch that is not JSON gets the parse error.
func (s *Session) admitBatch(t []byte) Action {
	var batch []json.RawMessage
	if err := json.Unmarshal(t, &batch); err != nil {
		return Action{Reply: parseError(err).reply(), Invalid: true}
	}
	return Action{Reply: errorResponse(nil, codeInvalidRequest, errBatch), Invalid: true}
}

// errBatch refuses a JSON-RPC batch (see admitBatch).
const errBatch = "Invalid Request: Vigil does not relay JSON-RPC batches (MCP has none since protocol 2025-06-18); send the messages one by one"

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
// once, with ctx (a tools/list answer asks which tools to hide). Nothing reaches the client
// that Vigil has not read: a message it cannot read (a batch too: servers of current
// protocol versions never send one) and an answer to no request in flight (an id the
// client never sent, a request answered or cancelled already, an event replayed on a
// resumed stream) are dropped and logged, since they could carry a result no rule saw.
// ctx ends when the client goes away: a verdict then awaited is abandoned, and its message
// dropped.
func (s *Session) admitServer(ctx context.Context, msg []byte) (a Action, judge func(context.Context) Action) {
	m, rerr := read(msg)
	if rerr != nil {
		s.cfg.Logger.Warn("the MCP server sent a message Vigil cannot read; dropping it",
			"session", s.id(), "err", rerr.msg)
		return Action{}, nil
	}
	switch {
	case m.isResponse():
		id := idKey(m.ID)
		s.mu.Lock()
		p, ok := s.fromClient[id]
		switch {
		case !ok:
			s.mu.Unlock()
			s.cfg.Logger.Info("the MCP server answered a request that is not in flight; dropping the answer",
				"session", s.id(), "request", string(m.ID))
			return Action{}, nil
		case p.answering:
			// A second answer while the first is judged: passed on, it could reach the
			// client first, unjudged. (Debug: the server decides how many it sends.)
			s.mu.Unlock()
			s.cfg.Logger.Debug("the MCP server answered a request twice; withholding the second answer",
				"session", s.id(), "request", string(m.ID))
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
			if ctx.Err() != nil {
				return Action{Answers: m.ID} // the client is gone: nothing goes to it
			}
			a.Answers = m.ID
			return a
		}
	case m.isRequest():
		judged := judgedServerMethods[m.Method]
		s.mu.Lock()
		if len(s.fromServer) < s.cfg.MaxPending {
			s.fromServer[idKey(m.ID)] = m.Method
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
			if ctx.Err() != nil {
				return Action{} // the client is gone: the hold is abandoned, nothing relayed
			}
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
		r, ok := members(m.Result)
		if ok && len(r["serverInfo"]) > 0 {
			s.mu.Lock()
			s.serverInfo = r["serverInfo"]
			s.mu.Unlock()
		}
		if out, changed := withoutTasks(m, r); changed {
			return Action{Forward: out, Changed: true}
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

// withoutTasks returns the initialize answer m (its result's members r) without the
// server's tasks capability, so that clients do not use tasks (errNoTasks); changed is
// false when it had none.
func withoutTasks(m *message, r map[string]json.RawMessage) (out []byte, changed bool) {
	caps, ok := members(r["capabilities"])
	if !ok {
		return nil, false
	}
	if _, has := caps["tasks"]; !has {
		return nil, false
	}
	delete(caps, "tasks")
	var err error
	if r["capabilities"], err = json.Marshal(caps); err != nil {
		return nil, false
	}
	res, err := json.Marshal(r)
	if err != nil {
		return nil, false
	}
	out, err = json.Marshal(message{JSONRPC: "2.0", ID: m.ID, Result: res})
	return out, err == nil
}

// cancelled ends the time in flight of the request a client's notifications/cancelled
// names: the server need not answer it any more (MCP asks it not to), and the client
// ignores an answer that comes anyway. One waiting for its verdict is abandoned (a hold
// too), so it never reaches the server. One whose answer is being judged stays until its
// verdict.
func (s *Session) cancelled(params json.RawMessage) {
	f, ok := members(params)
	if !ok || len(f["requestId"]) == 0 {
		return
	}
	id := idKey(f["requestId"])
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.fromClient[id]; ok && !p.answering {
		delete(s.fromClient, id)
		if p.cancel != nil {
			p.cancel()
		}
	}
}

// forget ends the request id's time in flight.
func (s *Session) forget(id json.RawMessage) {
	if len(id) == 0 {
		return
	}
	s.mu.Lock()
	delete(s.fromClient, idKey(id))
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
		if ctx.Err() != nil {
			// The client cancelled or left: not the guardian's failure, and no error policy
			// applies (callers relay nothing once ctx is done).
			return Outcome{Decision: "deny", Message: errCancelled}
		}
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
