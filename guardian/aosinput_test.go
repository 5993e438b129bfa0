package guardian_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// agentCtx is a StepContext of the given agent and session, both inserted as they are
// (JSON string literals), so tests can send bytes encoding/json would never write.
func agentCtx(sessionLit, agentLit string) string {
	return `{"agent":{"id":` + agentLit + `,"name":"Bot","instructions":"Help.","version":"1.0",
"provider":{"name":"corp","url":"https://corp.example"}},"session":{"id":` + sessionLit + `},"turnId":"t1","stepId":"s1",
"timestamp":"2026-11-22T08:00:00Z"}`
}

// messageStep is a user message of agent in session.
func messageStep(session, agent string) string {
	return messageStepLit(fmt.Sprintf("%q", session), fmt.Sprintf("%q", agent))
}

func messageStepLit(sessionLit, agentLit string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"steps/message","params":{"context":` + agentCtx(sessionLit, agentLit) +
		`,"message":{"id":"m1","role":"user","content":[{"kind":"text","text":"hello"}]}}}`
}

// mcpCall is an MCP tools/call naming its session in _meta.sessionId (a JSON string
// literal), or no session when sessionLit is empty.
func mcpCall(sessionLit string) string {
	meta := ""
	if sessionLit != "" {
		meta = `,"_meta":{"sessionId":` + sessionLit + `}`
	}
	return `{"jsonrpc":"2.0","id":2,"method":"protocols/MCP","params":{"message":{"jsonrpc":"2.0","id":5,` +
		`"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/etc/hosts"}` + meta + `}}}}`
}

// a2aMessage is an A2A message naming its session in contextId (a JSON string literal).
func a2aMessage(contextLit string) string {
	return `{"jsonrpc":"2.0","id":3,"method":"protocols/A2A","params":{"message":{"role":"agent","kind":"message",` +
		`"messageId":"m1","contextId":` + contextLit + `,"parts":[{"kind":"text","text":"hi"}]}}}`
}

// requireFieldError checks a -32602 answer naming field.
func requireFieldError(t *testing.T, b []byte, field, reason string) {
	t.Helper()
	r := decode(t, b)
	require.NotNil(t, r.Error, string(b))
	require.Equal(t, aos.CodeInvalidParams, r.Error.Code, string(b))
	data, ok := r.Error.Data.(map[string]any)
	require.True(t, ok, string(b))
	require.Equal(t, field, data["field"], string(b))
	require.Contains(t, data["reason"], reason, string(b))
}

// sessionCount is how many sessions the guardian stored.
func (e *env) sessionCount() int {
	e.t.Helper()
	var page record.SessionPage
	require.Equal(e.t, http.StatusOK, e.get("/api/sessions", &page))
	return len(page.Sessions)
}

func (e *env) session(id string) record.Session {
	e.t.Helper()
	var s record.Session
	require.Equal(e.t, http.StatusOK, e.get("/api/sessions/"+id, &s))
	return s
}

func TestAOSRefusesWhatWebPagesSend(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{AllowedOrigins: []string{"wails://wails/"}})
	valid := messageStep("web-1", "agent-1")
	tests := []struct {
		name    string
		headers []string
		status  int
		header  string // the header named in error.data; "" for an accepted request
	}{
		{"agent: JSON, no Origin", nil, http.StatusOK, ""},
		{"charset utf-8", []string{"Content-Type", "application/json; charset=utf-8"}, http.StatusOK, ""},
		{"case and quotes", []string{"Content-Type", `Application/JSON;Charset="UTF-8"`}, http.StatusOK, ""},
		{"other parameters", []string{"Content-Type", "application/json; profile=aos"}, http.StatusOK, ""},
		{"no Content-Type", []string{"Content-Type", ""}, http.StatusUnsupportedMediaType, "Content-Type"},
		{"text/plain (no-cors form)", []string{"Content-Type", "text/plain;charset=UTF-8"}, http.StatusUnsupportedMediaType, "Content-Type"},
		{"form", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType, "Content-Type"},
		{"multipart", []string{"Content-Type", "multipart/form-data; boundary=x"}, http.StatusUnsupportedMediaType, "Content-Type"},
		{"json-like type", []string{"Content-Type", "application/json-patch+json"}, http.StatusUnsupportedMediaType, "Content-Type"},
		{"latin-1", []string{"Content-Type", "application/json; charset=iso-8859-1"}, http.StatusUnsupportedMediaType, "Content-Type"},
		{"foreign page, no-cors text/plain", []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, http.StatusForbidden, "Origin"},
		{"foreign page, JSON", []string{"Origin", "https://evil.example"}, http.StatusForbidden, "Origin"},
		{"sandboxed page", []string{"Origin", "null"}, http.StatusForbidden, "Origin"},
		{"same host, other scheme-less form", []string{"Origin", strings.TrimPrefix(e.srv.URL, "http://")}, http.StatusForbidden, "Origin"},
		{"same host, other port", []string{"Origin", e.srv.URL + "1"}, http.StatusForbidden, "Origin"},
		{"own origin", []string{"Origin", e.srv.URL}, http.StatusOK, ""},
		{"allowed origin", []string{"Origin", "wails://wails"}, http.StatusOK, ""},
	}
	stored := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := e.post(valid, tt.headers...)
			require.Equal(t, tt.status, status, string(b))
			r := decode(t, b)
			if tt.header == "" {
				require.Nil(t, r.Error, string(b))
				stored++
				return
			}
			require.Equal(t, "null", string(r.ID))
			require.Equal(t, aos.CodeInvalidRequest, r.Error.Code)
			require.Contains(t, r.Error.Message, tt.header+" header")
			data, ok := r.Error.Data.(map[string]any)
			require.True(t, ok, string(b))
			require.Equal(t, tt.header, data["header"])
		})
	}
	// Nothing refused was stored.
	require.Equal(t, int64(stored), e.session("web-1").Steps)
}

func TestAOSIDLimits(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{})
	long := `"` + strings.Repeat("x", 1<<20) + `"`
	tests := []struct {
		name   string
		body   string
		field  string
		reason string
	}{
		{"1 MB session id", messageStepLit(long, `"agent-1"`), "params.context.session.id", "at most 256 bytes"},
		{"1 MB agent id", messageStepLit(`"s"`, long), "params.context.agent.id", "at most 256 bytes"},
		{"1 MB MCP session id", mcpCall(long), "params.message.params._meta.sessionId", "at most 256 bytes"},
		{"1 MB A2A context id", a2aMessage(long), "params.message.contextId", "at most 256 bytes"},
		{"invalid UTF-8 session id", messageStepLit("\"s\xff\"", `"agent-1"`), "params.context.session.id", "valid UTF-8"},
		{"lone surrogate agent id", messageStepLit(`"s"`, `"a\udc00"`), "params.context.agent.id", "valid UTF-8"},
		{"invalid UTF-8 MCP session id", mcpCall("\"m\xc3\""), "params.message.params._meta.sessionId", "valid UTF-8"},
		{"lone surrogate A2A context id", a2aMessage(`"c\ud800"`), "params.message.contextId", "valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := e.post(tt.body)
			require.Equal(t, http.StatusOK, status)
			requireFieldError(t, b, tt.field, tt.reason)
		})
	}
	require.Zero(t, e.sessionCount(), "nothing refused was stored")

	t.Run("X-Vigil-Session header", func(t *testing.T) {
		for _, h := range []string{strings.Repeat("h", 257), "h\xff", ".", ".."} {
			status, b := e.post(mcpCall(""), "X-Vigil-Session", h)
			require.Equal(t, http.StatusBadRequest, status, string(b))
			r := decode(t, b)
			require.Equal(t, aos.CodeInvalidParams, r.Error.Code)
			require.Equal(t, "X-Vigil-Session", r.Error.Data.(map[string]any)["header"])
		}
		require.Zero(t, e.sessionCount())
		status, b := e.post(mcpCall(""), "X-Vigil-Session", strings.Repeat("h", 256))
		require.Equal(t, http.StatusOK, status, string(b))
		require.Equal(t, int64(1), e.session(strings.Repeat("h", 256)).Steps)
	})

	t.Run("distinct ids stay distinct", func(t *testing.T) {
		// "a\xff" once became "a\uFFFD", the session of the id that really is "a\uFFFD".
		status, b := e.post(messageStepLit(`"a\ufffd"`, `"agent-1"`))
		require.Equal(t, http.StatusOK, status)
		require.Nil(t, decode(t, b).Error, string(b))
		_, b = e.post(messageStepLit("\"a\xff\"", `"agent-1"`))
		requireFieldError(t, b, "params.context.session.id", "valid UTF-8")
		require.Equal(t, int64(1), e.session(url.PathEscape("a\uFFFD")).Steps)
	})
}

func TestSessionOwnershipOpenMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	e := newEnv(t, path, guardian.Options{}, guardian.Config{})
	ok := func(body string, headers ...string) {
		t.Helper()
		status, b := e.post(body, headers...)
		require.Equal(t, http.StatusOK, status)
		require.Nil(t, decode(t, b).Error, string(b))
	}
	ok(messageStep("sb", "agent-b"))
	ok(mcpCall(`"mcp-first"`)) // opened without an agent
	ok(messageStep("via-header", "agent-b"))

	tests := []struct {
		name    string
		body    string
		headers []string
		field   string // "" accepted
		header  bool   // the session came from X-Vigil-Session
	}{
		{"another agent into sb", messageStep("sb", "agent-a"), nil, "params.context.session.id", false},
		{"the owner again", messageStep("sb", "agent-b"), nil, "", false},
		{"MCP without agent into sb", mcpCall(`"sb"`), nil, "", false},
		{"A2A without agent into sb", a2aMessage(`"sb"`), nil, "", false},
		{"an agent claims a session opened without one", messageStep("mcp-first", "agent-a"), nil, "", false},
		{"then another agent is refused", messageStep("mcp-first", "agent-b"), nil, "params.context.session.id", false},
		{"MCP through the header", mcpCall(""), []string{"X-Vigil-Session", "via-header"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.session(sessionOfBody(t, tt.body, tt.headers))
			status, b := e.post(tt.body, tt.headers...)
			require.Equal(t, http.StatusOK, status)
			if tt.field == "" {
				require.Nil(t, decode(t, b).Error, string(b))
				return
			}
			requireFieldError(t, b, tt.field, "belongs to another agent")
			after := e.session(before.ID)
			require.Equal(t, before.Steps, after.Steps, "a refused step is not stored")
			require.Equal(t, before.AgentID, after.AgentID)
		})
	}
	require.Equal(t, "agent-b", e.session("sb").AgentID)
	require.Equal(t, "agent-a", e.session("mcp-first").AgentID)

	// Ownership survives a restart (the owner comes from the session's row).
	e.close()
	e = newEnv(t, path, guardian.Options{}, guardian.Config{})
	status, b := e.post(messageStep("sb", "agent-a"))
	require.Equal(t, http.StatusOK, status)
	requireFieldError(t, b, "params.context.session.id", "belongs to another agent")
	status, b = e.post(messageStep("sb", "agent-b"))
	require.Equal(t, http.StatusOK, status)
	require.Nil(t, decode(t, b).Error, string(b))
}

// sessionOfBody is the session a test step names: its session id, or the header.
func sessionOfBody(t *testing.T, body string, headers []string) string {
	t.Helper()
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "X-Vigil-Session" {
			return headers[i+1]
		}
	}
	s, perr := aos.ParseStep(json.RawMessage(body))
	require.Nil(t, perr)
	return s.SessionHint()
}

// teamEnv is the guardian behind team mode's middleware, as main wires it, with agent keys.
type teamEnv struct {
	*env
	az *auth.Auth
}

func newTeamEnv(t *testing.T) *teamEnv {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	az, err := auth.New(context.Background(), auth.Config{Loopback: true}, auth.Options{Store: db})
	require.NoError(t, err)
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, CheckAgent: auth.CheckAgent, KeyOf: auth.KeyOf})
	require.NoError(t, err)
	e := &env{t: t, db: db, srv: httptest.NewServer(az.Wrap(g.Handler()))}
	t.Cleanup(e.close)
	return &teamEnv{env: e, az: az}
}

func (e *teamEnv) key(agentID string) (id, secret string) {
	e.t.Helper()
	k, secret, err := e.az.CreateKey(context.Background(), auth.KeySpec{Name: "agent " + agentID, AgentID: agentID}, "test")
	require.NoError(e.t, err)
	return k.ID, secret
}

// send posts a step with an API key.
func (e *teamEnv) send(secret, body string) rpcResp {
	e.t.Helper()
	status, b := e.post(body, "Authorization", "Bearer "+secret)
	require.Equal(e.t, http.StatusOK, status, string(b))
	return decode(e.t, b)
}

func (e *teamEnv) steps(session string) []record.StepRecord {
	e.t.Helper()
	var page struct {
		Steps []record.StepRecord `json:"steps"`
	}
	require.Equal(e.t, http.StatusOK, e.get("/api/sessions/"+session+"/steps", &page))
	return page.Steps
}

func TestSessionOwnershipTwoKeys(t *testing.T) {
	e := newTeamEnv(t)
	keyA, secretA := e.key("agent-a")
	keyB, secretB := e.key("agent-b")
	_, secretAny := e.key("") // may speak as any agent

	// Agent B opens its session with its key.
	require.Nil(t, e.send(secretB, messageStep("b-sess", "agent-b")).Error)

	tests := []struct {
		name   string
		secret string
		body   string
		field  string // "" accepted
		reason string
	}{
		{"A's MCP call naming B's session", secretA, mcpCall(`"b-sess"`), "params.message.params._meta.sessionId", "another API key"},
		{"A's message into B's session", secretA, messageStep("b-sess", "agent-a"), "params.context.session.id", "another API key"},
		{"A's A2A message into B's session", secretA, a2aMessage(`"b-sess"`), "params.message.contextId", "another API key"},
		{"an unscoped key speaking as B", secretAny, messageStep("b-sess", "agent-b"), "params.context.session.id", "another API key"},
		{"B's own MCP call", secretB, mcpCall(`"b-sess"`), "", ""},
		{"B's own message", secretB, messageStep("b-sess", "agent-b"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.send(tt.secret, tt.body)
			if tt.field == "" {
				require.Nil(t, r.Error)
				return
			}
			require.NotNil(t, r.Error)
			require.Equal(t, aos.CodeInvalidParams, r.Error.Code)
			data := r.Error.Data.(map[string]any)
			require.Equal(t, tt.field, data["field"])
			require.Contains(t, data["reason"], tt.reason)
		})
	}

	// Only B's three steps were stored, each with B's key; the session is B's.
	steps := e.steps("b-sess")
	require.Len(t, steps, 3)
	for _, s := range steps {
		require.Equal(t, keyB, s.KeyID)
	}
	sess := e.session("b-sess")
	require.Equal(t, "agent-b", sess.AgentID)
	require.Equal(t, keyB, sess.KeyID)
	var raw map[string]any
	require.Equal(t, http.StatusOK, e.get(fmt.Sprintf("/api/steps/%d", steps[0].Seq), &raw))
	require.Equal(t, keyB, raw["keyId"], "the step JSON names the key")

	// A session of the unscoped key: agent A may not write into it even with that key's
	// own permission to speak as anyone, once the session has an agent.
	require.Nil(t, e.send(secretAny, messageStep("any-sess", "agent-x")).Error)
	r := e.send(secretAny, messageStep("any-sess", "agent-y"))
	require.NotNil(t, r.Error)
	require.Contains(t, r.Error.Message, "belongs to another agent")

	// MCP calls without a session from two keys on one host fall into one session per key.
	require.Nil(t, e.send(secretA, mcpCall("")).Error)
	require.Nil(t, e.send(secretB, mcpCall("")).Error)
	require.Len(t, e.steps("mcp:"+keyA+"@127.0.0.1"), 1)
	require.Len(t, e.steps("mcp:"+keyB+"@127.0.0.1"), 1)
}

// TestAOSGatewayHeader: X-Vigil-Gateway marks an MCP step as the MCP gateway's (vigil mcp
// wrap), as the answer's data shows; a malformed marking, or one on a step that is not an
// MCP message, is refused and nothing is stored. The marking leaves the session alone.
func TestAOSGatewayHeader(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{})
	tests := []struct {
		name   string
		body   string
		value  string
		status int
		reason string // in the error's message; "" for an accepted step
	}{
		{"other protocol", mcpCall(`"gw-1"`), "aap/files", http.StatusBadRequest, "want mcp/NAME"},
		{"no name", mcpCall(`"gw-1"`), "mcp/", http.StatusBadRequest, "1 to 64 characters"},
		{"long name", mcpCall(`"gw-1"`), "mcp/" + strings.Repeat("n", 65), http.StatusBadRequest, "1 to 64 characters"},
		{"bad character", mcpCall(`"gw-1"`), "mcp/a b", http.StatusBadRequest, "only letters"},
		{"bare protocol", mcpCall(`"gw-1"`), "mcp", http.StatusBadRequest, "want mcp/NAME"},
		{"not an MCP step", messageStep("gw-1", "agent-1"), "mcp/files", http.StatusOK, "only protocols/MCP steps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := e.post(tt.body, guardian.GatewayHeader, tt.value)
			require.Equal(t, tt.status, status, string(b))
			r := decode(t, b)
			require.NotNil(t, r.Error, string(b))
			require.Equal(t, aos.CodeInvalidParams, r.Error.Code)
			require.Contains(t, r.Error.Message, tt.reason)
			data := r.Error.Data.(map[string]any)
			require.Equal(t, guardian.GatewayHeader, data["header"])
			require.Contains(t, data["reason"], tt.reason)
		})
	}
	require.Zero(t, e.sessionCount(), "nothing refused was stored")

	status, b := e.post(mcpCall(`"gw-1"`), guardian.GatewayHeader, "mcp/files.v2_x-1")
	require.Equal(t, http.StatusOK, status, string(b))
	var r struct {
		Result struct {
			Data map[string]any `json:"data"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(b, &r))
	require.Equal(t, map[string]any{"protocol": "mcp", "upstream": "files.v2_x-1"}, r.Result.Data)
	require.Equal(t, int64(1), e.session("gw-1").Steps, "the step's own session")

	// Without the header an MCP step is a plain AOS one.
	_, b = e.post(mcpCall(`"gw-1"`))
	require.NotContains(t, string(b), `"protocol"`)
}

// published keeps the steps the guardian publishes to the live stream.
type published struct {
	mu   sync.Mutex
	recs []record.StepRecord
}

func (p *published) PublishStep(rec *record.StepRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recs = append(p.recs, *rec)
}

// Strings with invalid UTF-8 are read as encoding/json reads them (U+FFFD), but what the
// guardian sends back, stores and streams must be UTF-8 JSON text: a strict client, the
// console's websocket above all, cannot read anything else (RFC 8259 §8.1, RFC 6455 §5.6).
func TestInvalidUTF8NeverLeavesTheGuardian(t *testing.T) {
	pub := &published{}
	e := newEnv(t, "", guardian.Options{Publisher: pub}, guardian.Config{})
	body := "{\"jsonrpc\":\"2.0\",\"id\":\"r\xff1\",\"method\":\"steps/message\",\"params\":{\"context\":" +
		agentCtx(`"s-utf8"`, `"agent-1"`) +
		",\"message\":{\"id\":\"m1\",\"role\":\"user\",\"content\":[{\"kind\":\"text\",\"text\":\"caf\xe9 \xff\xfe ok\"}]}}}"
	status, b := e.post(body)
	require.Equal(t, http.StatusOK, status)
	require.True(t, utf8.Valid(b), "answer: %q", b)
	r := decode(t, b)
	require.Nil(t, r.Error, string(b))
	require.JSONEq(t, `"r`+"\uFFFD"+`1"`, string(r.ID))

	// An error answer echoes the id the same way.
	_, b = e.post("{\"jsonrpc\":\"2.0\",\"id\":\"e\xff\",\"method\":\"steps/nope\"}")
	require.True(t, utf8.Valid(b), "error answer: %q", b)
	require.JSONEq(t, `"e`+"\uFFFD"+`"`, string(decode(t, b).ID))

	var page struct {
		Steps []json.RawMessage `json:"steps"`
	}
	require.Equal(t, http.StatusOK, e.get("/api/sessions/s-utf8/steps", &page))
	require.Len(t, page.Steps, 1)
	var step struct {
		Seq     int64           `json:"seq"`
		Request json.RawMessage `json:"request"`
	}
	require.NoError(t, json.Unmarshal(page.Steps[0], &step))
	resp, err := http.Get(e.srv.URL + "/api/steps/" + strconv.FormatInt(step.Seq, 10))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	require.True(t, utf8.Valid(raw), "stored step: %q", raw)
	require.Contains(t, string(raw), "caf\uFFFD", "the text reads as a JSON decoder read it")

	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.Len(t, pub.recs, 1)
	live, err := json.Marshal(pub.recs[0])
	require.NoError(t, err)
	require.True(t, utf8.Valid(live), "published step: %q", live)
}
