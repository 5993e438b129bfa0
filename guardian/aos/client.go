package aos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Client sends an agent's steps to a guardian and returns its decisions:
//
//	c := aos.NewClient("http://127.0.0.1:7878/aos", aos.WithAPIKey(key))
//	res, err := c.ToolCallRequest(ctx, sc, aos.ToolCallRequest{ExecutionID: "e1", ToolID: "send_email", Inputs: in}, "")
//	if err == nil && res.Decision == aos.Deny { /* do not call the tool */ }
//
// A Client is safe for concurrent use. A step the guardian holds for an operator keeps the
// call open until it is decided: give ctx a deadline that allows for that.
type Client struct {
	url    string
	hc     *http.Client
	header http.Header
	now    func() time.Time
	nextID atomic.Int64
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient sets the HTTP client (transport, proxy, TLS, timeouts). The default has no
// overall timeout; the context of each call bounds it.
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) { c.hc = hc }
}

// WithAPIKey sends key as a bearer token in the Authorization header.
func WithAPIKey(key string) ClientOption {
	return func(c *Client) { c.header.Set("Authorization", "Bearer "+key) }
}

// WithHeader adds a header to every request (for example X-Vigil-Session).
func WithHeader(key, value string) ClientOption {
	return func(c *Client) { c.header.Add(key, value) }
}

// maxResponseBytes bounds a guardian's answer; a modified request is the largest.
const maxResponseBytes = 64 << 20

// NewClient returns a client for the guardian's AOS endpoint, e.g.
// http://127.0.0.1:7878/aos.
func NewClient(url string, opts ...ClientOption) *Client {
	c := &Client{url: url, hc: &http.Client{}, header: http.Header{}, now: time.Now}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Call sends one request and returns the guardian's result. A JSON-RPC error answer is
// returned as *Error (use errors.As); transport failures as other errors.
func (c *Client) Call(ctx context.Context, method string, params any) (*Result, error) {
	var res Result
	if err := c.call(ctx, method, params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Ping checks that the guardian is alive.
func (c *Client) Ping(ctx context.Context) (*PingResult, error) {
	var res PingResult
	params := PingParams{Timestamp: c.now().UTC().Format(time.RFC3339Nano)}
	if err := c.call(ctx, MethodPing, params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// AgentTrigger sends steps/agentTrigger.
func (c *Client) AgentTrigger(ctx context.Context, sc StepContext, trigger AgentTrigger) (*Result, error) {
	return c.Call(ctx, MethodAgentTrigger, AgentTriggerParams{Context: c.stamp(sc), Trigger: trigger})
}

// KnowledgeRetrieval sends steps/knowledgeRetrieval.
func (c *Client) KnowledgeRetrieval(ctx context.Context, sc StepContext, step KnowledgeRetrievalStepParams, reasoning string) (*Result, error) {
	return c.Call(ctx, MethodKnowledgeRetrieval, KnowledgeRetrievalParams{Context: c.stamp(sc), KnowledgeStep: step, Reasoning: reasoning})
}

// MemoryStore sends steps/memoryStore.
func (c *Client) MemoryStore(ctx context.Context, sc StepContext, memory []string, reasoning string) (*Result, error) {
	return c.Call(ctx, MethodMemoryStore, MemoryParams{Context: c.stamp(sc), Memory: nonNil(memory), Reasoning: reasoning})
}

// MemoryContextRetrieval sends steps/memoryContextRetrieval.
func (c *Client) MemoryContextRetrieval(ctx context.Context, sc StepContext, memory []string, reasoning string) (*Result, error) {
	return c.Call(ctx, MethodMemoryContextRetrieval, MemoryParams{Context: c.stamp(sc), Memory: nonNil(memory), Reasoning: reasoning})
}

// Message sends steps/message: a user prompt before the agent sees it, or the agent's answer
// before the user does.
func (c *Client) Message(ctx context.Context, sc StepContext, msg Message, citations []Source, reasoning string) (*Result, error) {
	return c.Call(ctx, MethodMessage, MessageParams{Context: c.stamp(sc), Message: msg, Citations: citations, Reasoning: reasoning})
}

// ToolCallRequest sends steps/toolCallRequest before the tool is called.
func (c *Client) ToolCallRequest(ctx context.Context, sc StepContext, req ToolCallRequest, reasoning string) (*Result, error) {
	if req.Inputs == nil {
		req.Inputs = []ToolArgumentValue{}
	}
	return c.Call(ctx, MethodToolCallRequest, ToolCallRequestParams{Context: c.stamp(sc), ToolCallRequest: req, Reasoning: reasoning})
}

// ToolCallResult sends steps/toolCallResult before the result goes back to the model.
func (c *Client) ToolCallResult(ctx context.Context, sc StepContext, executionID string, result ToolCallResult) (*Result, error) {
	return c.Call(ctx, MethodToolCallResult, ToolCallResultParams{Context: c.stamp(sc), ExecutionID: executionID, Result: result})
}

// MCP sends protocols/MCP with message (an MCP JSON-RPC message: a json.RawMessage, a map
// or a struct) in params.message.
func (c *Client) MCP(ctx context.Context, message any, reasoning string) (*Result, error) {
	return c.Call(ctx, MethodMCP, wrapped{message, reasoning})
}

// A2A sends protocols/A2A with message (an A2A message or JSON-RPC request) in
// params.message.
func (c *Client) A2A(ctx context.Context, message any, reasoning string) (*Result, error) {
	return c.Call(ctx, MethodA2A, wrapped{message, reasoning})
}

type wrapped struct {
	Message   any    `json:"message"`
	Reasoning string `json:"reasoning,omitempty"`
}

// stamp fills in the timestamp of a context that has none.
func (c *Client) stamp(sc StepContext) StepContext {
	if sc.Timestamp == "" {
		sc.Timestamp = c.now().UTC().Format(time.RFC3339Nano)
	}
	return sc
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

func (c *Client) call(ctx context.Context, method string, params, out any) error {
	var raw json.RawMessage
	if params != nil {
		b, err := Marshal(params)
		if err != nil {
			return fmt.Errorf("aos: encode %s params: %w", method, err)
		}
		raw = b
	}
	id := json.RawMessage(strconv.FormatInt(c.nextID.Add(1), 10))
	body, err := Marshal(Request{JSONRPC: "2.0", ID: id, Method: method, Params: raw})
	if err != nil {
		return fmt.Errorf("aos: encode %s request: %w", method, err)
	}
	data, status, err := c.post(ctx, body)
	if err != nil {
		return fmt.Errorf("aos: %s: %w", method, err)
	}
	var rr rpcAnswer
	if err := json.Unmarshal(data, &rr); err != nil {
		return fmt.Errorf("aos: %s: %w", method, notJSONRPC(status, data))
	}
	if rr.Error != nil {
		return rr.Error
	}
	if status != http.StatusOK {
		return fmt.Errorf("aos: %s: %w", method, &HTTPError{StatusCode: status})
	}
	if !bytes.Equal(rr.ID, id) {
		return fmt.Errorf("aos: %s: response id %s does not match request id %s", method, rr.ID, id)
	}
	return rr.decode(method, out)
}

// Marshal is json.Marshal without HTML escaping. json.Marshal sends each <, > and & as a
// 6-byte \u003c: a tool output full of HTML could grow past the guardian's --max-body
// (which counts the bytes sent) though the step itself is well under it, and an id "<&>"
// would not come back byte for byte. The client, the guardian's answers and the MarshalJSON
// methods of the parts (TextPart, ToolCallResult, …) use it: an encoder copies what they
// return as it is, escapes included.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// rpcAnswer is one JSON-RPC response as read.
type rpcAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
}

func (rr *rpcAnswer) decode(method string, out any) error {
	if len(rr.Result) == 0 || string(rr.Result) == "null" {
		return fmt.Errorf("aos: %s: response has neither result nor error", method)
	}
	if err := json.Unmarshal(rr.Result, out); err != nil {
		return fmt.Errorf("aos: %s: decode result: %w", method, err)
	}
	return nil
}

// post sends body and returns the answer's body (at most maxResponseBytes) and status.
func (c *Client) post(ctx context.Context, body []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	for k, vs := range c.header {
		req.Header[k] = append([]string(nil), vs...)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("read response: %w", err)
	}
	return data, resp.StatusCode, nil
}

// BatchAnswer is the answer to one request of a batch: its Result, or Err (a JSON-RPC
// error answer as *Error).
type BatchAnswer struct {
	Result *Result
	Err    error
}

// CallBatch sends one JSON-RPC batch, a request of method per element of params, and
// returns an answer per element, in the order of params. err reports a batch that failed
// as a whole (transport, an error answer for the whole batch).
func (c *Client) CallBatch(ctx context.Context, method string, params []any) ([]BatchAnswer, error) {
	if len(params) == 0 {
		return nil, nil
	}
	reqs := make([]Request, len(params))
	at := make(map[string]int, len(params))
	for i, p := range params {
		raw, err := Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("aos: encode %s params: %w", method, err)
		}
		id := strconv.FormatInt(c.nextID.Add(1), 10)
		reqs[i] = Request{JSONRPC: "2.0", ID: json.RawMessage(id), Method: method, Params: raw}
		at[id] = i
	}
	body, err := Marshal(reqs)
	if err != nil {
		return nil, fmt.Errorf("aos: encode %s batch: %w", method, err)
	}
	data, status, err := c.post(ctx, body)
	if err != nil {
		return nil, fmt.Errorf("aos: %s batch: %w", method, err)
	}
	var answers []rpcAnswer
	if err := json.Unmarshal(data, &answers); err != nil {
		var whole rpcAnswer
		if json.Unmarshal(data, &whole) == nil && whole.Error != nil {
			return nil, whole.Error
		}
		return nil, fmt.Errorf("aos: %s batch: %w", method, notJSONRPC(status, data))
	}
	out := make([]BatchAnswer, len(params))
	for i := range out {
		out[i].Err = fmt.Errorf("aos: %s: no answer in the batch", method)
	}
	for _, a := range answers {
		i, ok := at[string(a.ID)]
		if !ok {
			continue
		}
		switch {
		case a.Error != nil:
			out[i] = BatchAnswer{Err: a.Error}
		default:
			var res Result
			if err := a.decode(method, &res); err != nil {
				out[i] = BatchAnswer{Err: err}
			} else {
				out[i] = BatchAnswer{Result: &res}
			}
		}
	}
	return out, nil
}

// HTTPError is an answer without a JSON-RPC error: a body that is not JSON-RPC (a proxy's
// error page) or a result under a status other than 200. Read the status with errors.As:
// a proxy's 413 says the request was too large as the guardian's -32001 does.
type HTTPError struct {
	StatusCode int
	// Body is the start of a body that was not JSON-RPC (nil when it was).
	Body []byte
}

func (e *HTTPError) Error() string {
	if e.Body == nil {
		return fmt.Sprintf("HTTP %d", e.StatusCode)
	}
	return fmt.Sprintf("HTTP %d: not a JSON-RPC response: %q", e.StatusCode, e.Body)
}

func notJSONRPC(status int, body []byte) error {
	const max = 200
	if len(body) > max {
		body = body[:max]
	}
	return &HTTPError{StatusCode: status, Body: append([]byte{}, body...)}
}

// Allowed reports an allow decision.
func (r *Result) Allowed() bool { return r.Decision == Allow }

// ModifiedParams returns the params of the modified request of a modify decision (ERRATA
// 10), to use in place of the params sent. Unmarshal them into the params type of the
// method, e.g. ToolCallRequestParams.
func (r *Result) ModifiedParams() (json.RawMessage, error) {
	if r.Decision != Modify || len(r.ModifiedRequest) == 0 {
		return nil, errors.New("aos: the decision carries no modified request")
	}
	var req Request
	if err := json.Unmarshal(r.ModifiedRequest, &req); err != nil {
		return nil, fmt.Errorf("aos: modified request: %w", err)
	}
	if len(req.Params) == 0 {
		return nil, errors.New("aos: modified request has no params")
	}
	return req.Params, nil
}
