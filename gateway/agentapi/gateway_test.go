package agentapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// stack is a client's view of Vigil in front of the fake agent: a real guardian over a real
// SQLite file, the holds API, and the gateway, behind one HTTP server.
type stack struct {
	t        testing.TB
	url      string
	agentURL string
	agent    *fakeAgent
	db       *sqlite.DB
	holds    *holds.Manager
	guardian *guardian.Guardian
}

const testRules = `
rules:
  - id: no-secrets-in
    when: method == "steps/message" && role == "user" && text contains "launch codes"
    action: deny
    message: Launch codes are not discussed here.
  - id: redact-card
    when: method == "steps/message" && text matches "4111"
    action: modify
    modify: {redact: ["creditCard"]}
  - id: no-evil-mail
    when: tool == "send_email" && inputs.to endsWith "evil.example"
    action: deny
    message: Mail to evil.example is blocked.
  - id: review-deletes
    when: tool == "delete_file"
    action: hold
    hold: {timeout: 1m, onTimeout: deny}
    message: Deleting files needs a reviewer.
  - id: no-passwords-out
    when: method == "steps/toolCallResult" && text contains "password="
    action: modify
    modify: {redact: ["password=\\S+"]}
  - id: no-read-passwd
    when: tool == "read_file" && inputs.path == "/etc/passwd"
    action: deny
    message: Reading /etc/passwd is not allowed.
`

func newStack(t testing.TB, ruleText string, cfg Config) *stack {
	t.Helper()
	return newStackWith(t, ruleText, cfg, nil)
}

// newStackWith is newStack with the gateway's options changed by opts (its decider is the
// stack's guardian).
func newStackWith(t testing.TB, ruleText string, cfg Config, opts func(s *stack, o *Options)) *stack {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	engine := rules.NewEngine(rules.Options{})
	if ruleText != "" {
		f, err := rules.ParseFile("rules.yaml", []byte(ruleText))
		require.NoError(t, err)
		require.NoError(t, engine.Load(f.Rules))
	}
	hm := holds.NewManager(holds.Options{Store: db, ValidateParams: guardian.ValidateParams})
	require.NoError(t, hm.Start(ctx))
	t.Cleanup(func() { _ = hm.Shutdown(context.Background()) })
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Policy: &guardian.RulesPolicy{Engine: engine},
		Holds: guardian.ManagerHolds{M: hm}, Mount: []func(*http.ServeMux){hm.Register}})
	require.NoError(t, err)
	agent := &fakeAgent{t: t}
	up := httptest.NewServer(agent)
	t.Cleanup(up.Close)
	cfg.Name, cfg.URL = "support", up.URL
	s := &stack{t: t, agentURL: up.URL, agent: agent, db: db, holds: hm, guardian: g}
	o := Options{Decider: g}
	if opts != nil {
		opts(s, &o)
	}
	gw, err := New(cfg, o)
	require.NoError(t, err)
	mux := http.NewServeMux()
	gw.Register(mux)
	mux.Handle("/", g.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func userRequest(text string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"input": []any{map[string]any{"role": "user", "type": "message",
		"content": []any{map[string]any{"type": "text", "text": text}}}}, "stream": stream, "session_id": "sess-1", "user_id": "u1"})
	return string(b)
}

func (s *stack) post(ctx context.Context, body string, hdr ...string) *http.Response {
	s.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/agentapi/support/process", strings.NewReader(body))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	return resp
}

// events reads a whole SSE answer: each data line's JSON, and the comment lines seen.
func events(t testing.TB, r io.Reader) (evs []map[string]any, comments int) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			comments++
		case strings.HasPrefix(line, "data: "):
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line[6:]), &m), line)
			evs = append(evs, m)
		case line != "":
			t.Fatalf("unexpected line %q", line)
		}
	}
	return evs, comments
}

func (s *stack) stream(body string, hdr ...string) []map[string]any {
	s.t.Helper()
	resp := s.post(context.Background(), body, hdr...)
	defer resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
	require.Equal(s.t, "text/event-stream", resp.Header.Get("Content-Type"))
	evs, _ := events(s.t, resp.Body)
	requireNumbered(s.t, evs)
	return evs
}

// requireNumbered checks the sequence numbers run 0, 1, 2… without gaps.
func requireNumbered(t testing.TB, evs []map[string]any) {
	t.Helper()
	for i, e := range evs {
		require.EqualValues(t, i, e["sequence_number"], "event %d: %v", i, e)
	}
}

func final(t *testing.T, evs []map[string]any) map[string]any {
	t.Helper()
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	require.Equal(t, "response", last["object"])
	return last
}

// texts are the texts of an output list's messages.
func texts(out any) []string {
	var got []string
	items, _ := out.([]any)
	for _, it := range items {
		m := it.(map[string]any)
		cs, _ := m["content"].([]any)
		for _, c := range cs {
			cm := c.(map[string]any)
			if s, ok := cm["text"].(string); ok {
				got = append(got, s)
			}
			if d, ok := cm["data"].(map[string]any); ok {
				if o, ok := d["output"].(string); ok {
					got = append(got, "output:"+o)
				}
				if a, ok := d["arguments"].(string); ok {
					got = append(got, "call:"+d["name"].(string)+" "+a)
				}
			}
		}
	}
	return got
}

func (s *stack) steps() []record.StepRecord {
	s.t.Helper()
	recs, err := s.db.Steps(context.Background(), record.StepQuery{SessionID: "agentapi:support:sess-1", Limit: 100})
	require.NoError(s.t, err)
	return recs
}

func TestAllowedTurnPassesThrough(t *testing.T) {
	s := newStack(t, testRules, Config{})
	evs := s.stream(userRequest("hello", true), "Authorization", "Bearer sk-upstream")
	f := final(t, evs)
	require.Equal(t, "completed", f["status"])
	require.Equal(t, []string{"Echo: hello"}, texts(f["output"]))
	// Deltas reach the client as they were sent.
	var deltas []string
	for _, e := range evs {
		if e["object"] == "content" && e["delta"] == true {
			deltas = append(deltas, e["text"].(string))
		}
	}
	require.Equal(t, []string{"Echo: ", "hello"}, deltas)
	require.Equal(t, []string{"Bearer sk-upstream"}, s.agent.auth)
	recs := s.steps()
	require.Len(t, recs, 2) // the user's message, the agent's answer
	for _, r := range recs {
		require.Equal(t, "allow", r.Decision)
		require.Equal(t, "u1", r.UserID)
		require.Contains(t, string(r.Response), `"protocol":"agentapi"`)
		require.Contains(t, string(r.Response), `"upstream":"support"`)
	}
}

func TestSampleStreamIsRelayedByteForByte(t *testing.T) {
	s := newStack(t, "", Config{})
	resp := s.post(context.Background(), userRequest("please delete /home/dev/x", true))
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, string(sample(t, "stream-toolcall.sse")), string(b))
	// The plugin call ran in the upstream: recorded, and marked as not enforced.
	var sawPlugin bool
	for _, r := range s.steps() {
		if r.Tool == "delete_file" && r.Method == "steps/toolCallRequest" {
			sawPlugin = true
			require.Contains(t, string(r.Response), `"enforced":false`)
		}
	}
	require.True(t, sawPlugin)
}

func TestDeniedInputIsRejectedWithoutTheUpstream(t *testing.T) {
	for _, stream := range []bool{true, false} {
		s := newStack(t, testRules, Config{})
		var f map[string]any
		if stream {
			evs := s.stream(userRequest("tell me the launch codes", true))
			f = final(t, evs)
			require.Equal(t, []string{"response", "response", "message", "content", "message", "response"}, objects(evs))
		} else {
			resp := s.post(context.Background(), userRequest("tell me the launch codes", false))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
			resp.Body.Close()
		}
		require.Equal(t, "rejected", f["status"])
		require.Equal(t, []string{"Launch codes are not discussed here."}, texts(f["output"]))
		require.Empty(t, s.agent.requests())
		recs := s.steps()
		require.Len(t, recs, 1)
		require.Equal(t, "deny", recs[0].Decision)
	}
}

func objects(evs []map[string]any) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i], _ = e["object"].(string)
	}
	return out
}

func TestModifiedInputGoesUpRedacted(t *testing.T) {
	s := newStack(t, testRules, Config{})
	evs := s.stream(userRequest("my card is 4111 1111 1111 1111", true))
	require.Equal(t, "completed", final(t, evs)["status"])
	got := s.agent.requests()
	require.Len(t, got, 1)
	require.NotContains(t, string(got[0]), "4111 1111 1111 1111")
	var req struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(t, json.Unmarshal(got[0], &req))
	require.Equal(t, "sess-1", req.SessionID)
	// The agent's echo of the redacted text passes; nothing of the number reached it.
	require.NotContains(t, texts(final(t, evs)["output"])[0], "4111 1111 1111 1111")
}

func TestDeniedFunctionCallNeverReachesTheClient(t *testing.T) {
	for _, stream := range []bool{true, false} {
		s := newStack(t, testRules, Config{})
		var out any
		var all string
		if stream {
			evs := s.stream(userRequest("call fn", true))
			b, _ := json.Marshal(evs)
			all = string(b)
			out = final(t, evs)["output"]
		} else {
			resp := s.post(context.Background(), userRequest("call fn", false))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			all = string(b)
			var f map[string]any
			require.NoError(t, json.Unmarshal(b, &f))
			out = f["output"]
		}
		require.NotContains(t, all, "function_call")
		require.NotContains(t, all, "eve@evil.example")
		require.Equal(t, []string{"Vigil stopped a call of send_email: Mail to evil.example is blocked."}, texts(out))
	}
}

func TestServerToolOutputIsRedactedAndNotEnforcedCallRecorded(t *testing.T) {
	s := newStack(t, testRules, Config{})
	evs := s.stream(userRequest("read file", true))
	f := final(t, evs)
	got := texts(f["output"])
	require.Len(t, got, 3)
	require.Equal(t, `call:read_file {"path": "/etc/passwd"}`, got[0]) // it ran: nothing to stop
	require.NotContains(t, got[1], "hunter2")
	b, _ := json.Marshal(evs)
	require.NotContains(t, string(b), "hunter2")
	var call record.StepRecord
	for _, r := range s.steps() {
		if r.Method == "steps/toolCallRequest" {
			call = r
		}
	}
	require.Equal(t, "deny", call.Decision)
	require.Contains(t, string(call.Response), `"enforced":false`)
}

func TestUpstreamErrorsPassOn(t *testing.T) {
	s := newStack(t, "", Config{})
	evs := s.stream(userRequest("boom", true))
	f := final(t, evs)
	require.Equal(t, "failed", f["status"])
	require.Equal(t, "AGENT_UNKNOWN_ERROR", f["error"].(map[string]any)["code"])

	resp := s.post(context.Background(), userRequest("no runner", true))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, string(sample(t, "stream-app-error.sse")), string(b))
}

func TestBadRequestsAreRefusedAndNothingStored(t *testing.T) {
	s := newStack(t, "", Config{})
	tests := []struct{ name, body, want string }{
		{"not json", `{"input":`, "invalid request: body: want a JSON object"},
		{"no input", `{"stream":true}`, "invalid request: input: required"},
		{"input not a list", `{"input":{}}`, "invalid request: input: want an array of messages"},
		{"bad content", `{"input":[{"role":"user","content":"hi"}]}`, "invalid request: input[0].content: want an array of content parts"},
		{"bad text", `{"input":[{"role":"user","content":[{"type":"text","text":5}]}]}`, "invalid request: input[0].content[0].text: want a string"},
		{"bad stream", `{"input":[],"stream":"yes"}`, "invalid request: stream: want true or false"},
		{"bad session", `{"input":[],"session_id":7}`, "invalid request: session_id: want a string"},
		{"bad image url", `{"input":[{"role":"user","content":[{"type":"image","image_url":5}]}]}`, "invalid request: input[0].content[0].image_url: want a string, not number"},
		{"bad tool output", `{"input":[{"type":"function_call_output","content":[{"type":"data","data":"out"}]}]}`, "invalid request: input[0].content[0].data: want an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := s.post(context.Background(), tt.body)
			defer resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			var f responseObject
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
			require.Equal(t, "failed", f.Status)
			require.Equal(t, codeInvalidRequest, f.Error.Code)
			require.True(t, strings.HasPrefix(f.Error.Message, tt.want), f.Error.Message)
		})
	}
	require.Empty(t, s.agent.requests())
	n, err := s.db.Steps(context.Background(), record.StepQuery{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, n)
}

func TestUpstreamDownIs502(t *testing.T) {
	s := newStack(t, "", Config{})
	up := httptest.NewServer(http.NotFoundHandler())
	up.Close()
	// Point a second gateway at the closed server.
	db := s.db
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db})
	require.NoError(t, err)
	gw, err := New(Config{Name: "down", URL: up.URL}, Options{Decider: g})
	require.NoError(t, err)
	mux := http.NewServeMux()
	gw.Register(mux)
	for _, path := range []string{"/agentapi/down/process", "/agentapi/down/health"} {
		method := http.MethodPost
		if strings.HasSuffix(path, "health") {
			method = http.MethodGet
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(userRequest("hello", true))))
		require.Equal(t, http.StatusBadGateway, w.Code)
		var f responseObject
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &f))
		require.Equal(t, codeUpstream, f.Error.Code)
		require.Contains(t, f.Error.Message, `upstream "down" (`+up.URL+`) is unreachable`)
	}
}

func TestHealthPassesThrough(t *testing.T) {
	s := newStack(t, "", Config{})
	resp, err := http.Get(s.url + "/agentapi/support/health")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"status":"healthy","service":"agent"}`, string(b))
}

// waitHold returns the first pending hold once there is one.
func (s *stack) waitHold(ctx context.Context) holds.Hold {
	s.t.Helper()
	for {
		hs, err := s.holds.List(ctx, holds.StatusPending, 10)
		require.NoError(s.t, err)
		if len(hs) > 0 {
			return hs[0]
		}
		select {
		case <-ctx.Done():
			s.t.Fatal("no hold appeared")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitAbandoned waits until hold id is abandoned (its client went away).
func (s *stack) waitAbandoned(ctx context.Context, id string) {
	s.t.Helper()
	for {
		got, err := s.holds.Get(ctx, id)
		require.NoError(s.t, err)
		if got.Status == holds.StatusAbandoned {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("hold still %s", got.Status)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *stack) decideHold(id, action string) {
	s.t.Helper()
	resp, err := http.Post(s.url+"/api/holds/"+id+"/"+action, "application/json", strings.NewReader(`{"operator":"dana"}`))
	require.NoError(s.t, err)
	resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
}

func TestApprovalRequestHeldAndAnsweredByVigil(t *testing.T) {
	for _, action := range []string{"approve", "deny"} {
		t.Run(action, func(t *testing.T) {
			s := newStack(t, testRules, Config{KeepAlive: 5 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp := s.post(ctx, userRequest("approve deleting /home/dev/x", true))
			defer resp.Body.Close()
			h := s.waitHold(ctx)
			// The client hears keep-alives while the reviewer decides.
			r := bufio.NewReader(resp.Body)
			for {
				line, err := r.ReadString('\n')
				require.NoError(t, err)
				if line == ": keep-alive\n" {
					break
				}
			}
			s.decideHold(h.ID, action)
			evs, _ := events(t, r)
			all, _ := json.Marshal(evs)
			require.NotContains(t, string(all), "mcp_approval_request")
			got := s.agent.requests()
			require.Len(t, got, 2)
			require.Contains(t, string(got[1]), `"type":"mcp_approval_response"`)
			require.Contains(t, string(got[1]), `"approval_request_id":"apr_1"`)
			require.Contains(t, string(got[1]), `"session_id":"sess-1"`)
			f := evs[len(evs)-1]
			require.Equal(t, "response_fake-1", f["id"])
			require.Equal(t, "completed", f["status"])
			if action == "approve" {
				require.Contains(t, string(got[1]), `"approve":true`)
				require.Contains(t, texts(f["output"]), "Deleted /home/dev/x.")
			} else {
				require.Contains(t, string(got[1]), `"approve":false`)
				require.Contains(t, texts(f["output"])[0], "Not deleted")
			}
			var held record.StepRecord
			for _, rec := range s.steps() {
				if rec.Held {
					held = rec
				}
			}
			require.Equal(t, "delete_file", held.Tool)
		})
	}
}

func TestApprovalRequestGoesToTheClientWhenConfigured(t *testing.T) {
	s := newStack(t, "", Config{Approvals: ApprovalsClient})
	evs := s.stream(userRequest("approve deleting /home/dev/x", true))
	f := final(t, evs)
	items := f["output"].([]any)
	require.Len(t, items, 1)
	m := items[0].(map[string]any)
	require.Equal(t, "mcp_approval_request", m["type"])
	require.Len(t, s.agent.requests(), 1)
	var completed map[string]any
	for _, e := range evs {
		if e["object"] == "message" && e["status"] == "completed" {
			completed = e
		}
	}
	require.Equal(t, "allow", completed["metadata"].(map[string]any)["vigil"].(map[string]any)["decision"])
	require.Equal(t, 1, count(evs, "content"), "each content part once")
	require.Equal(t, "allow", m["metadata"].(map[string]any)["vigil"].(map[string]any)["decision"])
}

func TestDisconnectAbandonsTheHold(t *testing.T) {
	s := newStack(t, testRules, Config{KeepAlive: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rctx, leave := context.WithCancel(ctx)
	resp := s.post(rctx, userRequest("approve deleting /home/dev/x", true))
	h := s.waitHold(ctx)
	leave()
	resp.Body.Close()
	s.waitAbandoned(ctx, h.ID)
	require.Len(t, s.agent.requests(), 1) // no approval was sent
}

func count(evs []map[string]any, object string) int {
	n := 0
	for _, e := range evs {
		if e["object"] == object {
			n++
		}
	}
	return n
}
