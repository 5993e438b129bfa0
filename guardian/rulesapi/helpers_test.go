package rulesapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fixture is a service over a real SQLite file, served by a real HTTP server.
type fixture struct {
	t   *testing.T
	db  *sqlite.DB
	svc *Service
	srv *httptest.Server

	mu     sync.Mutex
	events []record.Event
}

func newFixture(t *testing.T, edit ...func(*Options)) *fixture {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return newFixtureOn(t, db, edit...)
}

// newFixtureOn builds a started service on db.
func newFixtureOn(t *testing.T, db *sqlite.DB, edit ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, db: db}
	opts := Options{
		Store:           db,
		Publish:         f.publish,
		EnvForStep:      fakeEnvForStep,
		EnvForDraft:     fakeEnvForDraft,
		ModifiedRequest: fakeModifiedRequest,
		Now:             func() time.Time { return t0 },
	}
	for _, e := range edit {
		e(&opts)
	}
	f.svc = New(opts)
	require.NoError(t, f.svc.Start(context.Background()))
	mux := http.NewServeMux()
	f.svc.Register(mux)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) publish(ev record.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
}

func (f *fixture) published() []record.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]record.Event(nil), f.events...)
}

// do sends a request; a string body is sent as is, anything else as JSON.
func (f *fixture) do(method, path string, body any) (int, []byte) {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		js, err := json.Marshal(b)
		require.NoError(f.t, err)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	require.NoError(f.t, err)
	req.Header.Set("X-Vigil-Operator", "dana")
	resp, err := f.srv.Client().Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	return resp.StatusCode, out
}

// call sends a request, requires the status and decodes the answer into out (when not nil).
func (f *fixture) call(method, path string, body any, status int, out any) []byte {
	f.t.Helper()
	code, b := f.do(method, path, body)
	require.Equal(f.t, status, code, "%s %s: %s", method, path, b)
	if out != nil {
		require.NoError(f.t, json.Unmarshal(b, out), "%s", b)
	}
	return b
}

// callIn is call for a subtest: it reports to t, so a failing case fails alone.
func (f *fixture) callIn(t *testing.T, method, path string, body any, status int, out any) {
	t.Helper()
	code, b := f.do(method, path, body)
	require.Equal(t, status, code, "%s %s: %s", method, path, b)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), "%s", b)
	}
}

// apiErr decodes an error answer.
type apiErr struct {
	Error struct {
		Code    string             `json:"code"`
		Message string             `json:"message"`
		Details []rules.Diagnostic `json:"details"`
	} `json:"error"`
}

// ruleJSON is a rule as the API answers it.
type ruleJSON struct {
	rules.Rule
	Expired bool            `json:"expired"`
	Stats   rules.RuleStats `json:"stats"`
}

func (r *ruleJSON) UnmarshalJSON(b []byte) error {
	var extra struct {
		Expired bool            `json:"expired"`
		Stats   rules.RuleStats `json:"stats"`
	}
	if err := json.Unmarshal(b, &extra); err != nil {
		return err
	}
	if err := json.Unmarshal(b, &r.Rule); err != nil {
		return err
	}
	r.Expired, r.Stats = extra.Expired, extra.Stats
	return nil
}

func denyTool(id, tool string) rules.Rule {
	return rules.Rule{ID: id, Name: "no " + tool, When: fmt.Sprintf("tool == %q", tool),
		Action: rules.ActionDeny, Mode: rules.ModeEnforce, Enabled: true, ReasonCode: "NO_" + tool,
		Message: "{{tool}} is not allowed"}
}

// fakeParams is the params shape the fake env builders read.
type fakeParams struct {
	Tool   string         `json:"tool"`
	Inputs map[string]any `json:"inputs"`
	Text   string         `json:"text"`
}

func fakeEnvForDraft(method string, params json.RawMessage) (*rules.Env, error) {
	var p fakeParams
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
	}
	return &rules.Env{Method: method, Kind: "toolCall", Tool: p.Tool, Inputs: p.Inputs, Text: p.Text}, nil
}

func fakeEnvForStep(_ context.Context, rec record.StepRecord, history []record.StepRecord) (*rules.Env, error) {
	method, params := requestParams(rec)
	env, err := fakeEnvForDraft(method, params)
	if err != nil {
		return nil, err
	}
	env.Session = rules.Session{ID: rec.SessionID, StepCount: len(history)}
	for _, h := range history {
		env.Session.Steps = append(env.Session.Steps, rules.HistoryStep{Method: h.Method, Kind: h.Kind,
			Tool: h.Tool, Decision: h.Decision, Text: h.Text, Seq: h.Seq, ReceivedAt: h.ReceivedAt})
	}
	return env, nil
}

func fakeModifiedRequest(method string, params json.RawMessage, v rules.Verdict) (json.RawMessage, error) {
	var doc any
	if err := json.Unmarshal(params, &doc); err != nil {
		return nil, err
	}
	out, _ := v.Modify.Apply(doc, nil)
	return json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": out})
}

// saveStep stores a tool-call step with the given decision.
func saveStep(t *testing.T, db *sqlite.DB, sid, tool, decision string, held bool) record.StepRecord {
	t.Helper()
	params, err := json.Marshal(fakeParams{Tool: tool, Inputs: map[string]any{"to": "x@example.com"}})
	require.NoError(t, err)
	req, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "steps/toolCallRequest", "params": json.RawMessage(params)})
	require.NoError(t, err)
	rec := record.StepRecord{SessionID: sid, Method: "steps/toolCallRequest", Kind: "toolCall",
		Tool: tool, Decision: decision, Held: held, ReceivedAt: t0, Request: req}
	require.NoError(t, db.SaveStep(context.Background(), &rec))
	return rec
}

// toolEnv is the environment of a tool call step.
func toolEnv(tool string) *rules.Env {
	return &rules.Env{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: tool, Now: t0}
}
