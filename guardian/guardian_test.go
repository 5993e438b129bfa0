package guardian_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// env is a guardian over a real SQLite file behind a real HTTP server.
type env struct {
	t    *testing.T
	path string
	db   *sqlite.DB
	srv  *httptest.Server
}

func newEnv(t *testing.T, path string, opts guardian.Options, cfg guardian.Config) *env {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "vigil.db")
	}
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	require.NoError(t, err)
	opts.Store = db
	g, err := guardian.New(cfg, opts)
	require.NoError(t, err)
	e := &env{t: t, path: path, db: db, srv: httptest.NewServer(g.Handler())}
	t.Cleanup(e.close)
	return e
}

func (e *env) close() {
	if e.srv != nil {
		e.srv.Close()
		e.srv = nil
		require.NoError(e.t, e.db.Close())
	}
}

// post sends a raw body to /aos and returns the status and body.
func (e *env) post(body string, headers ...string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/aos", strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp.StatusCode, b
}

func (e *env) get(path string, out any) int {
	e.t.Helper()
	resp, err := http.Get(e.srv.URL + path)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(e.t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

type rpcResp struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  *aos.Result     `json:"result"`
	Error   *aos.Error      `json:"error"`
}

func decode(t *testing.T, b []byte) rpcResp {
	t.Helper()
	var r rpcResp
	require.NoError(t, json.Unmarshal(b, &r), string(b))
	require.Equal(t, "2.0", r.JSONRPC)
	require.True(t, (r.Result == nil) != (r.Error == nil), "exactly one of result and error: %s", b)
	return r
}

const ctxTmpl = `{"agent":{"id":"agent-1","name":"Helpdesk","instructions":"Help users.","version":"1.0",
"provider":{"name":"corp","url":"https://corp.example"}},"session":{"id":%q},"turnId":"t1","stepId":%q,
"timestamp":"2026-11-22T08:00:00Z","user":{"id":"u1","organization":{"id":"org1"}}}`

func stepCtx(session, step string) string { return fmt.Sprintf(ctxTmpl, session, step) }

// sessionSteps is one whole session: every step method AOS defines.
func sessionSteps(session string) []string {
	c := func(step string) string { return stepCtx(session, step) }
	return []string{
		`{"jsonrpc":"2.0","id":1,"method":"steps/agentTrigger","params":{"context":` + c("s1") + `,"trigger":{"type":"autonomous","event":{"type":"email","id":"e1"},"content":[{"kind":"text","text":"New ticket arrived"}]}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"steps/message","params":{"context":` + c("s2") + `,"message":{"id":"m1","role":"user","content":[{"kind":"text","text":"Where is my invoice?"}]}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"steps/knowledgeRetrieval","params":{"context":` + c("s3") + `,"knowledgeStep":{"query":"invoice","results":[{"id":"doc1","content":"Invoices are emailed monthly."}]}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"steps/memoryContextRetrieval","params":{"context":` + c("s4") + `,"memory":["user prefers email"]}}`,
		`{"jsonrpc":"2.0","id":5,"method":"steps/toolCallRequest","params":{"context":` + c("s5") + `,"toolCallRequest":{"executionId":"x1","toolId":"lookup_invoice","inputs":[{"name":"customer","value":"8812"}]}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"steps/toolCallResult","params":{"context":` + c("s6") + `,"executionId":"x1","result":{"outputs":[{"kind":"text","text":"INV-1 sent"}],"isError":false}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"steps/memoryStore","params":{"context":` + c("s7") + `,"memory":["asked about invoice"]}}`,
		`{"jsonrpc":"2.0","id":8,"method":"steps/message","params":{"context":` + c("s8") + `,"message":{"id":"m2","role":"agent","content":[{"kind":"text","text":"It was sent on the 1st."}]},"citations":[{"kind":"site","url":"https://corp.example/billing"}]}}`,
	}
}

func TestSessionRoundTrip(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{Version: "1.2.3"})
	for i, body := range sessionSteps("sess-A") {
		status, b := e.post(body)
		require.Equal(t, http.StatusOK, status, string(b))
		r := decode(t, b)
		require.Nil(t, r.Error, string(b))
		require.Equal(t, fmt.Sprint(i+1), string(r.ID))
		require.Equal(t, aos.Allow, r.Result.Decision)
		require.NotEmpty(t, r.Result.Message)
	}

	var page record.SessionPage
	require.Equal(t, http.StatusOK, e.get("/api/sessions", &page))
	require.Len(t, page.Sessions, 1)
	s := page.Sessions[0]
	require.Equal(t, "sess-A", s.ID)
	require.Equal(t, "agent-1", s.AgentID)
	require.Equal(t, "u1", s.UserID)
	require.EqualValues(t, 8, s.Steps)
	require.EqualValues(t, 8, s.Decisions["allow"])

	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	require.Equal(t, http.StatusOK, e.get("/api/sessions/sess-A/steps", &steps))
	require.Len(t, steps.Steps, 8)
	wantMethods := []string{aos.MethodAgentTrigger, aos.MethodMessage, aos.MethodKnowledgeRetrieval,
		aos.MethodMemoryContextRetrieval, aos.MethodToolCallRequest, aos.MethodToolCallResult, aos.MethodMemoryStore, aos.MethodMessage}
	for i, st := range steps.Steps {
		require.Equal(t, wantMethods[i], st.Method)
		require.Equal(t, "sess-A", st.SessionID)
		require.Equal(t, "t1", st.TurnID)
		require.Equal(t, fmt.Sprintf("s%d", i+1), st.StepID)
		require.Equal(t, "allow", st.Decision)
		if i > 0 {
			require.Greater(t, st.Seq, steps.Steps[i-1].Seq)
		}
	}
	require.Equal(t, "lookup_invoice", steps.Steps[4].Tool)

	var one record.StepRecord
	require.Equal(t, http.StatusOK, e.get(fmt.Sprintf("/api/steps/%d", steps.Steps[4].Seq), &one))
	require.JSONEq(t, sessionSteps("sess-A")[4], string(one.Request))
	resp := decode(t, one.Response)
	require.Equal(t, aos.Allow, resp.Result.Decision)

	var apiErr apijson.ErrorBody
	require.Equal(t, http.StatusNotFound, e.get("/api/sessions/nope", &apiErr))
	require.Equal(t, "not_found", apiErr.Error.Code)
	require.Equal(t, http.StatusNotFound, e.get("/api/steps/999999", &apiErr))
	require.Equal(t, http.StatusBadRequest, e.get("/api/steps/abc", &apiErr))
	require.Contains(t, apiErr.Error.Message, "seq")
	require.Equal(t, http.StatusBadRequest, e.get("/api/sessions?limit=0", &apiErr))
	require.Contains(t, apiErr.Error.Message, "limit")
	require.Equal(t, http.StatusBadRequest, e.get("/api/sessions?before=garbage!", &apiErr))
	require.Contains(t, apiErr.Error.Message, "before")
	// A search longer than SQLite's LIKE pattern limit was a 500; any over 1 KiB is refused.
	require.Equal(t, http.StatusBadRequest, e.get("/api/sessions?q="+strings.Repeat("x", 100_000), &apiErr))
	require.Equal(t, "invalid_argument", apiErr.Error.Code)
	require.Contains(t, apiErr.Error.Message, "q: at most 1024 bytes")
	require.Equal(t, http.StatusOK, e.get("/api/sessions?q="+strings.Repeat("x", 1024), nil))
}

func TestRestartKeepsSessions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	e := newEnv(t, path, guardian.Options{}, guardian.Config{})
	for _, body := range sessionSteps("sess-R") {
		status, _ := e.post(body)
		require.Equal(t, http.StatusOK, status)
	}
	e.close()

	e2 := newEnv(t, path, guardian.Options{}, guardian.Config{})
	var s record.Session
	require.Equal(t, http.StatusOK, e2.get("/api/sessions/sess-R", &s))
	require.EqualValues(t, 8, s.Steps)
	// The session continues where it stopped: history is reloaded, counts keep growing.
	status, _ := e2.post(sessionSteps("sess-R")[1])
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, http.StatusOK, e2.get("/api/sessions/sess-R", &s))
	require.EqualValues(t, 9, s.Steps)
}

func TestJSONRPCEdgeCases(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{MaxBodyBytes: 64 << 10, MaxBatch: 10})
	valid := sessionSteps("sess-E")[1]
	notification := strings.Replace(valid, `"id":2,`, ``, 1)

	tests := []struct {
		name    string
		body    string
		status  int
		code    int    // expected error code; 0 = success
		id      string // expected raw id
		message string // substring of the error message
	}{
		{name: "parse error", body: `{"jsonrpc":"2.0",`, status: 200, code: aos.CodeParseError, id: "null"},
		// Broken JSON is answered even without an id, and an id in it is not trusted.
		{name: "parse error after the fields", body: `{"jsonrpc":"2.0","method":"ping","params":{}} x`, status: 200, code: aos.CodeParseError, id: "null"},
		{name: "parse error with an id", body: `{"jsonrpc":"2.0","id":5,"method":"ping",}`, status: 200, code: aos.CodeParseError, id: "null"},
		{name: "not an object", body: `42`, status: 200, code: aos.CodeInvalidRequest, id: "null"},
		{name: "empty batch", body: `[]`, status: 200, code: aos.CodeInvalidRequest, id: "null"},
		{name: "wrong version", body: `{"jsonrpc":"1.0","id":7,"method":"ping"}`, status: 200, code: aos.CodeInvalidRequest, id: "7"},
		{name: "unknown method", body: `{"jsonrpc":"2.0","id":"abc","method":"steps/knowledge","params":{}}`, status: 200, code: aos.CodeMethodNotFound, id: `"abc"`},
		{name: "missing field", body: `{"jsonrpc":"2.0","id":9,"method":"steps/message","params":{"context":` + stepCtx("x", "y") + `,"message":{"id":"m","role":"user","content":[{"kind":"text"}]}}}`,
			status: 200, code: aos.CodeInvalidParams, id: "9", message: "params.message.content[0].text"},
		{name: "large integer id echoed", body: strings.Replace(valid, `"id":2`, `"id":123456789012345678901234567890`, 1), status: 200, id: "123456789012345678901234567890"},
		{name: "string id echoed", body: strings.Replace(valid, `"id":2`, `"id":"req-é"`, 1), status: 200, id: `"req-é"`},
		{name: "ping", body: `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"timestamp":"2026-11-22T08:00:00Z"}}`, status: 200, id: "1"},
		{name: "too large", body: `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"metadata":{"x":"` + strings.Repeat("a", 70<<10) + `"}}}`,
			status: 413, code: aos.CodeRequestTooLarge, id: "null", message: "too large"},
		{name: "batch too long", body: "[" + strings.TrimSuffix(strings.Repeat(valid+",", 11), ",") + "]", status: 200, code: aos.CodeInvalidRequest, id: "null", message: "batch"},
		{name: "deep nesting", body: `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"metadata":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000) + `}}`,
			status: 200, id: "1", code: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, b := e.post(tc.body)
			require.Equal(t, tc.status, status, string(b))
			r := decode(t, b)
			require.Equal(t, tc.id, string(r.ID))
			switch tc.code {
			case 0:
				require.Nil(t, r.Error, string(b))
			case -1: // any error, as long as it is one
				require.NotNil(t, r.Error, string(b))
			default:
				require.NotNil(t, r.Error, string(b))
				require.Equal(t, tc.code, r.Error.Code, string(b))
				require.Contains(t, r.Error.Message, tc.message)
			}
		})
	}

	t.Run("notification is stored without a response body", func(t *testing.T) {
		status, b := e.post(strings.Replace(notification, `"stepId":"s2"`, `"stepId":"notif"`, 1))
		require.Equal(t, http.StatusNoContent, status)
		require.Empty(t, b)
		var steps struct {
			Steps []record.StepRecord `json:"steps"`
		}
		require.Equal(t, http.StatusOK, e.get("/api/sessions/sess-E/steps", &steps))
		found := false
		for _, s := range steps.Steps {
			found = found || s.StepID == "notif"
		}
		require.True(t, found, "the notification was stored")
	})

	t.Run("batch answers in order and skips notifications", func(t *testing.T) {
		bad := `{"jsonrpc":"2.0","id":"bad","method":"nope"}`
		status, b := e.post("[" + valid + "," + notification + "," + bad + `,1]`)
		require.Equal(t, http.StatusOK, status)
		var rs []rpcResp
		require.NoError(t, json.Unmarshal(b, &rs), string(b))
		require.Len(t, rs, 3)
		require.Equal(t, "2", string(rs[0].ID))
		require.Nil(t, rs[0].Error)
		require.Equal(t, `"bad"`, string(rs[1].ID))
		require.Equal(t, aos.CodeMethodNotFound, rs[1].Error.Code)
		require.Equal(t, "null", string(rs[2].ID))
		require.Equal(t, aos.CodeInvalidRequest, rs[2].Error.Code)
	})

	t.Run("batch of notifications has no body", func(t *testing.T) {
		status, b := e.post("[" + notification + "," + notification + "]")
		require.Equal(t, http.StatusNoContent, status)
		require.Empty(t, b)
	})

	t.Run("GET is refused", func(t *testing.T) {
		resp, err := http.Get(e.srv.URL + "/aos")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
		require.Equal(t, "POST", resp.Header.Get("Allow"))
	})

	t.Run("server still serves after hostile input", func(t *testing.T) {
		status, b := e.post(valid)
		require.Equal(t, http.StatusOK, status)
		require.Nil(t, decode(t, b).Error)
	})
}

func TestPingReportsVersion(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	e := newEnv(t, "", guardian.Options{Now: func() time.Time { return now }}, guardian.Config{Version: "9.9.9"})
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"timestamp":"2026-11-22T08:00:00Z"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","timestamp":"2026-11-22T08:00:00Z"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
	} {
		status, b := e.post(body)
		require.Equal(t, http.StatusOK, status)
		var r struct {
			Result aos.PingResult `json:"result"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		require.Equal(t, aos.PingResult{Status: "connected", Version: "9.9.9", Timestamp: "2026-11-22T08:00:00Z"}, r.Result)
	}
}

func TestContextFreeStepsAreAttributed(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{})
	mcp := `{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/etc/passwd"}}}}`
	status, b := e.post(mcp)
	require.Equal(t, http.StatusOK, status, string(b))
	status, b = e.post(mcp, "X-Vigil-Session", "my-mcp-session")
	require.Equal(t, http.StatusOK, status, string(b))

	var s record.Session
	require.Equal(t, http.StatusOK, e.get("/api/sessions/mcp@127.0.0.1", &s))
	require.EqualValues(t, 1, s.Steps)
	require.Equal(t, http.StatusOK, e.get("/api/sessions/my-mcp-session", &s))
	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	require.Equal(t, http.StatusOK, e.get("/api/sessions/my-mcp-session/steps", &steps))
	require.Equal(t, "mcp", steps.Steps[0].Kind)
	require.Equal(t, "read_file", steps.Steps[0].Tool)
}

// A native A2A message names its sender in context.from: the stored step and its session
// name that agent rather than nobody.
func TestA2AStepsNameTheSender(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{})
	a2a := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"context":{"from":{"name":"planner"},"to":"researcher"},` +
		`"payload":{"message":{"role":"agent","messageId":"m1","contextId":"ctx-9","parts":[{"kind":"text","text":"find sources"}]}}}}`
	status, b := e.post(a2a)
	require.Equal(t, http.StatusOK, status, string(b))

	var s record.Session
	require.Equal(t, http.StatusOK, e.get("/api/sessions/ctx-9", &s))
	require.Equal(t, "planner", s.AgentName)
	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	require.Equal(t, http.StatusOK, e.get("/api/sessions/ctx-9/steps", &steps))
	require.Len(t, steps.Steps, 1)
	require.Equal(t, "planner", steps.Steps[0].AgentName)
	require.Empty(t, steps.Steps[0].AgentID, "from is a name the agent gave, not an authenticated id")
}

// fixedPolicy answers the same verdict to every step and records what it saw.
type fixedPolicy struct {
	v    guardian.Verdict
	mu   sync.Mutex
	seen []int
}

func (p *fixedPolicy) Decide(_ context.Context, _ *aos.Step, h *guardian.History, _ time.Time) guardian.Verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, h.StepCount)
	return p.v
}

func (p *fixedPolicy) history() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

func TestPolicyVerdictsReachTheAgent(t *testing.T) {
	t.Run("deny with reason codes", func(t *testing.T) {
		p := &fixedPolicy{v: guardian.Verdict{Decision: "deny", RuleID: "no-email", Message: "No email.", ReasonCodes: []string{"EXTERNAL_EMAIL"},
			Matches: []record.RuleMatch{{RuleID: "no-email", Action: "deny", Mode: "enforce", ReasonCode: "EXTERNAL_EMAIL"}}}}
		e := newEnv(t, "", guardian.Options{Policy: p}, guardian.Config{})
		_, b := e.post(sessionSteps("sess-P")[4])
		r := decode(t, b)
		require.Equal(t, aos.Deny, r.Result.Decision)
		require.Equal(t, []string{"EXTERNAL_EMAIL"}, r.Result.ReasonCode)
		require.Equal(t, "No email.", r.Result.Message)
		_, _ = e.post(sessionSteps("sess-P")[5])
		require.Equal(t, []int{0, 1}, p.history(), "the policy sees the session's history grow")
		var steps struct {
			Steps []record.StepRecord `json:"steps"`
		}
		e.get("/api/sessions/sess-P/steps", &steps)
		require.Equal(t, "deny", steps.Steps[0].Decision)
		require.Equal(t, "no-email", steps.Steps[0].MatchedRules[0].RuleID)
	})
	t.Run("modify returns the whole request", func(t *testing.T) {
		params := json.RawMessage(`{"context":` + stepCtx("sess-M", "s5") + `,"toolCallRequest":{"executionId":"x1","toolId":"lookup_invoice","inputs":[{"name":"customer","value":"[REDACTED]"}]}}`)
		p := &fixedPolicy{v: guardian.Verdict{Decision: "modify", Message: "Redacted.", ModifiedParams: params}}
		e := newEnv(t, "", guardian.Options{Policy: p}, guardian.Config{})
		_, b := e.post(sessionSteps("sess-M")[4])
		r := decode(t, b)
		require.Equal(t, aos.Modify, r.Result.Decision)
		var mr aos.Request
		require.NoError(t, json.Unmarshal(r.Result.ModifiedRequest, &mr))
		require.Equal(t, "2.0", mr.JSONRPC)
		require.Equal(t, "5", string(mr.ID))
		require.Equal(t, aos.MethodToolCallRequest, mr.Method)
		require.JSONEq(t, string(params), string(mr.Params))
		_, perr := aos.ParseStep(r.Result.ModifiedRequest)
		require.Nil(t, perr, "the modified request passes the guardian's own validation")
	})
	t.Run("an invalid modification fails closed", func(t *testing.T) {
		p := &fixedPolicy{v: guardian.Verdict{Decision: "modify", ModifiedParams: json.RawMessage(`{"toolCallRequest":{}}`)}}
		e := newEnv(t, "", guardian.Options{Policy: p}, guardian.Config{})
		_, b := e.post(sessionSteps("sess-I")[4])
		r := decode(t, b)
		require.Equal(t, aos.Deny, r.Result.Decision)
		require.Empty(t, r.Result.ModifiedRequest)
		var steps struct {
			Steps []record.StepRecord `json:"steps"`
		}
		e.get("/api/sessions/sess-I/steps", &steps)
		require.Equal(t, "deny", steps.Steps[0].Decision, "the record says what the agent was told")
	})
}

// queueHolds is a HoldService whose decisions the test sends through a channel.
type queueHolds struct {
	control atomic.Value // string
	got     chan guardian.HoldRequest
	answer  chan guardian.HoldOutcome
}

func (q *queueHolds) Control(string) string {
	c, _ := q.control.Load().(string)
	return c
}
func (q *queueHolds) AttachStep(context.Context, string, int64) error { return nil }

func (q *queueHolds) Hold(ctx context.Context, req guardian.HoldRequest) (guardian.HoldOutcome, error) {
	q.got <- req
	select {
	case a := <-q.answer:
		a.HoldID = "hold-1"
		return a, nil
	case <-ctx.Done():
		return guardian.HoldOutcome{}, ctx.Err()
	}
}

func TestHoldKeepsTheRequestOpen(t *testing.T) {
	q := &queueHolds{got: make(chan guardian.HoldRequest, 1), answer: make(chan guardian.HoldOutcome)}
	p := &fixedPolicy{v: guardian.Verdict{Decision: guardian.DecisionHold, RuleID: "big-transfer", HoldTimeout: time.Minute, HoldOnTimeout: "deny"}}
	e := newEnv(t, "", guardian.Options{Policy: p, Holds: q}, guardian.Config{})

	done := make(chan []byte, 1)
	go func() {
		_, b := e.post(sessionSteps("sess-H")[4])
		done <- b
	}()
	req := <-q.got
	require.Equal(t, "sess-H", req.SessionID)
	require.Equal(t, "big-transfer", req.Verdict.RuleID)
	select {
	case <-done:
		t.Fatal("the agent was answered before the operator decided")
	default:
	}
	q.answer <- guardian.HoldOutcome{Decision: "allow", Message: "Approved by dana."}
	r := decode(t, <-done)
	require.Equal(t, aos.Allow, r.Result.Decision)
	require.Equal(t, "Approved by dana.", r.Result.Message)

	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	e.get("/api/sessions/sess-H/steps", &steps)
	require.True(t, steps.Steps[0].Held)
	require.Equal(t, "allow", steps.Steps[0].Decision)
}

// A hold a survivor ended while this replica had lost the database comes back with the
// step already stored there: the agent gets its answer, and the step is not stored twice.
func TestHeldStepStoredElsewhereIsNotStoredAgain(t *testing.T) {
	q := &queueHolds{got: make(chan guardian.HoldRequest, 1), answer: make(chan guardian.HoldOutcome, 1)}
	p := &fixedPolicy{v: guardian.Verdict{Decision: guardian.DecisionHold, RuleID: "big-transfer", HoldTimeout: time.Minute, HoldOnTimeout: "deny"}}
	e := newEnv(t, "", guardian.Options{Policy: p, Holds: q}, guardian.Config{})
	q.answer <- guardian.HoldOutcome{Decision: "deny", Message: "The guardian is restarting.", StoredSeq: 77}
	_, b := e.post(sessionSteps("sess-S")[4])
	require.Equal(t, aos.Deny, decode(t, b).Result.Decision)
	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	e.get("/api/sessions/sess-S/steps", &steps)
	require.Empty(t, steps.Steps, "the survivor's record is the step's")
}

func TestSessionControls(t *testing.T) {
	q := &queueHolds{got: make(chan guardian.HoldRequest, 1), answer: make(chan guardian.HoldOutcome, 1)}
	q.control.Store("blocked")
	e := newEnv(t, "", guardian.Options{Holds: q}, guardian.Config{})
	_, b := e.post(sessionSteps("sess-B")[1])
	r := decode(t, b)
	require.Equal(t, aos.Deny, r.Result.Decision)
	require.Equal(t, []string{"SESSION_BLOCKED"}, r.Result.ReasonCode)

	q.control.Store("paused")
	q.answer <- guardian.HoldOutcome{Decision: "deny", Message: "Denied by reviewer."}
	_, b = e.post(sessionSteps("sess-B")[2])
	require.Equal(t, "session-paused", (<-q.got).Verdict.RuleID)
	r = decode(t, b)
	require.Equal(t, aos.Deny, r.Result.Decision)
	require.Equal(t, "Denied by reviewer.", r.Result.Message)
}

func TestConcurrentAgents(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{})
	const agents, each = 16, 20
	errs := make(chan error, agents)
	for a := range agents {
		go func() {
			for i := range each {
				body := strings.Replace(sessionSteps(fmt.Sprintf("c-%d", a))[1], `"stepId":"s2"`, fmt.Sprintf(`"stepId":"x%d"`, i), 1)
				resp, err := http.Post(e.srv.URL+"/aos", "application/json", bytes.NewBufferString(body))
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
					return
				}
			}
			errs <- nil
		}()
	}
	for range agents {
		require.NoError(t, <-errs)
	}
	var page record.SessionPage
	e.get("/api/sessions?limit=100", &page)
	require.Len(t, page.Sessions, agents)
	for _, s := range page.Sessions {
		require.EqualValues(t, each, s.Steps)
	}
}

// A long session: the rules see exactly the newest HistorySize steps and the true count.
func TestHistoryWindow(t *testing.T) {
	p := &historyPolicy{}
	e := newEnv(t, "", guardian.Options{Policy: p}, guardian.Config{HistorySize: 5})
	for i := range 23 {
		body := strings.Replace(sessionSteps("sess-long")[1], `"stepId":"s2"`, fmt.Sprintf(`"stepId":"h%d"`, i), 1)
		status, _ := e.post(body)
		require.Equal(t, http.StatusOK, status)
		count, ids := p.last()
		require.Equal(t, i, count)
		require.Len(t, ids, min(i, 5))
		for j, seq := range ids {
			if j > 0 {
				require.Greater(t, seq, ids[j-1], "oldest first")
			}
		}
	}
}

type historyPolicy struct {
	mu    sync.Mutex
	count int
	seqs  []int64
}

func (p *historyPolicy) Decide(_ context.Context, _ *aos.Step, h *guardian.History, _ time.Time) guardian.Verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count = h.StepCount
	p.seqs = p.seqs[:0]
	for _, s := range h.Steps {
		p.seqs = append(p.seqs, s.Seq)
	}
	return guardian.Verdict{Decision: "allow"}
}

func (p *historyPolicy) last() (int, []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count, slices.Clone(p.seqs)
}
