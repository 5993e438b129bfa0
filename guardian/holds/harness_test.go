package holds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/guardian/holds/holdstest"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// wait bounds every wait of these tests: long enough for a slow -race run, short enough
// that a hang fails instead of stalling the suite.
const wait = 20 * time.Second

var start = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// recorder collects published events and lets tests wait for one.
type recorder struct {
	mu      sync.Mutex
	events  []record.Event
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) publish(ev record.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// waitN waits until n events satisfy match, and returns them in publish order.
func (r *recorder) waitN(t testing.TB, n int, match func(record.Event) bool) []record.Event {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		var got []record.Event
		for _, ev := range r.events {
			if match(ev) {
				got = append(got, ev)
			}
		}
		changed := r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d events (have %d)", n, len(got))
		}
	}
}

func (r *recorder) all() []record.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record.Event(nil), r.events...)
}

func ofType(typ string) func(record.Event) bool {
	return func(ev record.Event) bool { return ev.Type == typ }
}

// env is a Manager over a real SQLite file, a controllable clock and a real HTTP server.
type env struct {
	t      testing.TB
	path   string
	db     *sqlite.DB
	clock  *holdstest.Clock
	rec    *recorder
	m      *holds.Manager
	srv    *httptest.Server
	ctx    context.Context
	rulesM sync.Mutex
	rules  []rules.Rule
	// rememberedBy is the operator each remembered rule was saved in the name of.
	rememberedBy []string
}

type envOption func(*holds.Options)

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	return newEnvAt(t, filepath.Join(t.TempDir(), "vigil.db"), opts...)
}

func newEnvAt(t testing.TB, path string, opts ...envOption) *env {
	t.Helper()
	e := &env{t: t, path: path, clock: holdstest.NewClock(start), rec: newRecorder(), ctx: context.Background()}
	db, err := sqlite.Open(e.ctx, path, sqlite.Options{})
	require.NoError(t, err)
	e.db = db
	o := holds.Options{
		Store: db, Clock: e.clock, Publish: e.rec.publish,
		Remember: func(_ context.Context, r rules.Rule, operator string) error {
			e.rulesM.Lock()
			defer e.rulesM.Unlock()
			e.rules = append(e.rules, r)
			e.rememberedBy = append(e.rememberedBy, operator)
			return nil
		},
		ValidateParams: func(method string, params json.RawMessage) error {
			var p struct {
				ToolCallRequest *struct {
					ToolID string `json:"toolId"`
				} `json:"toolCallRequest"`
			}
			if err := json.Unmarshal(params, &p); err != nil {
				return err
			}
			if method == "steps/toolCallRequest" && (p.ToolCallRequest == nil || p.ToolCallRequest.ToolID == "") {
				return fmt.Errorf("toolCallRequest.toolId is required")
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, f := range opts {
		f(&o)
	}
	e.m = holds.NewManager(o)
	require.NoError(t, e.m.Start(e.ctx))
	mux := http.NewServeMux()
	e.m.Register(mux)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.close)
	return e
}

// close stops the server and the Manager (timing out anything still held) and the store.
func (e *env) close() {
	if e.srv == nil {
		return
	}
	e.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(e.t, e.m.Shutdown(ctx))
	require.NoError(e.t, e.db.Close())
	e.srv = nil
}

func (e *env) remembered() []rules.Rule {
	e.rulesM.Lock()
	defer e.rulesM.Unlock()
	return append([]rules.Rule(nil), e.rules...)
}

type holdResult struct {
	out holds.Outcome
	err error
}

// held starts an agent's held step and returns where its outcome will arrive.
func (e *env) held(ctx context.Context, req holds.Request) <-chan holdResult {
	ch := make(chan holdResult, 1)
	go func() {
		out, err := e.m.Hold(ctx, req)
		ch <- holdResult{out, err}
	}()
	return ch
}

// toolRequest builds a held tool call of session sid.
func toolRequest(sid string, amount int) holds.Request {
	params := fmt.Sprintf(`{"toolCallRequest":{"toolId":"transfer_funds","inputs":{"amount":%d,"to":"ACCT-1"}}}`, amount)
	return holds.Request{
		SessionID: sid, AgentID: "agent-1", Method: "steps/toolCallRequest", Kind: "toolCall",
		Tool: "transfer_funds", RuleID: "big-transfer", Message: "Large transfer",
		Request: json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":` + params + `}`),
		Inputs:  func() map[string]any { return map[string]any{"amount": float64(amount), "to": "ACCT-1"} },
		Timeout: 2 * time.Minute, OnTimeout: rules.ActionDeny,
	}
}

// createdHold waits for the n-th hold.created event of session sid and returns its hold.
func (e *env) createdHold(sid string) holds.Hold {
	e.t.Helper()
	evs := e.rec.waitN(e.t, 1, func(ev record.Event) bool {
		return ev.Type == record.EventHoldCreated && ev.SessionID == sid
	})
	var h holds.Hold
	require.NoError(e.t, json.Unmarshal(evs[0].Payload, &h))
	return h
}

// requireWaiting checks that the agent's call has not returned.
func requireWaiting(t *testing.T, ch <-chan holdResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("hold returned early: %+v %v", r.out, r.err)
	default:
	}
}

func receive(t *testing.T, ch <-chan holdResult) holdResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(wait):
		t.Fatal("hold did not return")
		return holdResult{}
	}
}

// call makes a JSON request to the test server and decodes the answer into out (if not nil).
func (e *env) call(method, path string, body any, out any) int {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	require.NoError(e.t, err)
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	require.Equal(e.t, "application/json", resp.Header.Get("Content-Type"), string(raw))
	if out != nil {
		require.NoError(e.t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode
}

type apiErr struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
	Hold *holds.Hold `json:"hold"`
}

func (e *env) audit(q record.AuditQuery) []record.AuditEntry {
	e.t.Helper()
	entries, err := e.m.Audit(e.ctx, q)
	require.NoError(e.t, err)
	return entries
}

func holdID(t testing.TB, payload []byte) string {
	t.Helper()
	var h holds.Hold
	require.NoError(t, json.Unmarshal(payload, &h))
	return h.ID
}
