package rulesapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/ruleenv"
	"github.com/vigil-guardian/vigil/guardian/rulesapi"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// envForStep is the wiring main uses: a stored step's request decoded as the guardian
// decodes it, its session history as the rules see it.
func envForStep(_ context.Context, rec record.StepRecord, history []record.StepRecord) (*rules.Env, error) {
	step, aerr := aos.ParseStep(rec.Request)
	if aerr != nil {
		return nil, aerr
	}
	h := ruleenv.History{SessionID: rec.SessionID, StepCount: len(history)}
	for _, p := range history {
		h.Steps = append(h.Steps, rules.HistoryStep{Method: p.Method, Kind: p.Kind, Tool: p.Tool,
			Decision: p.Decision, Text: p.Text, Seq: p.Seq, ReceivedAt: p.ReceivedAt})
	}
	return ruleenv.Build(step, h, rec.ReceivedAt), nil
}

const stepContext = `{"agent":{"id":"agent-1","name":"Helpdesk","instructions":"Help users.","version":"1.0",
"provider":{"name":"corp","url":"https://corp.example"}},"session":{"id":%q},"turnId":"t1","stepId":%q,
"timestamp":"2026-11-22T08:00:00Z","user":{"id":"u1","organization":{"id":"org1"}}}`

func toolCallParams(session, stepID, tool, to string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"context":`+stepContext+`,"toolCallRequest":{"executionId":%q,"toolId":%q,"inputs":[{"name":"to","value":%q}]}}`,
		session, stepID, "x-"+stepID, tool, to))
}

func TestWithRuleEnv(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	store := func(session, stepID, tool, to string) record.StepRecord {
		req, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "steps/toolCallRequest",
			"params": toolCallParams(session, stepID, tool, to)})
		require.NoError(t, err)
		rec := record.StepRecord{SessionID: session, Method: "steps/toolCallRequest", Kind: "toolCall",
			Tool: tool, Decision: "allow", Request: req, ReceivedAt: time.Now()}
		require.NoError(t, db.SaveStep(ctx, &rec))
		return rec
	}
	store("sA", "s1", "lookup_invoice", "")
	leak := store("sA", "s2", "send_email", "eve@evil.example")
	store("sB", "s1", "send_email", "eve@evil.example")
	store("sB", "s2", "send_email", "bob@corp.example")

	svc := rulesapi.New(rulesapi.Options{Store: db, EnvForStep: envForStep, EnvForDraft: ruleenv.FromMethodParams})
	require.NoError(t, svc.Start(ctx))
	mux := http.NewServeMux()
	svc.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	post := func(path string, body any, out any) {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		resp, err := srv.Client().Post(srv.URL+path, "application/json", bytes.NewReader(b))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}

	// Mail outside corp.example after the session looked up an invoice.
	draft := []rules.Rule{{ID: "invoice-exfil", Action: rules.ActionDeny, Enabled: true, ReasonCode: "EXFIL",
		When: `tool == "send_email" && domain(string(inputs.to)) != "corp.example" && countTool(session, "lookup_invoice") > 0`}}

	var bt rulesapi.BacktestResult
	post("/api/rules/backtest", map[string]any{"rules": draft}, &bt)
	require.Equal(t, 4, bt.Evaluated)
	require.Zero(t, bt.Skipped)
	require.Equal(t, map[string]int{"allow->deny": 1}, bt.ByChange)
	require.Equal(t, leak.Seq, bt.Examples[0].Seq)
	require.Equal(t, []string{"invoice-exfil"}, bt.Examples[0].Rules)

	var tr rulesapi.TestResult
	post("/api/rules/test", map[string]any{"rules": draft, "seq": leak.Seq}, &tr)
	require.Equal(t, rules.ActionDeny, tr.Decision)
	require.Equal(t, []string{"EXFIL"}, tr.ReasonCode)
	require.Equal(t, "allow", tr.Stored.Decision)

	// A draft step has no history, so the same mail passes.
	post("/api/rules/test", map[string]any{"rules": draft, "step": map[string]any{
		"method": "steps/toolCallRequest", "params": toolCallParams("sC", "s1", "send_email", "eve@evil.example")}}, &tr)
	require.Equal(t, rules.ActionAllow, tr.Decision)
}

// TestStepErrorsAreClean: a step the rules cannot read is answered with the AOS error's own
// message, as the agent would get it, not with the Go error chain ("ruleenv: jsonrpc
// -32602: …").
func TestStepErrorsAreClean(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	bad := record.StepRecord{SessionID: "s", Method: "steps/toolCallRequest", Decision: "allow",
		Request: json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":{"nope":1}}`)}
	require.NoError(t, db.SaveStep(ctx, &bad))

	svc := rulesapi.New(rulesapi.Options{Store: db, EnvForStep: envForStep, EnvForDraft: ruleenv.FromMethodParams})
	require.NoError(t, svc.Start(ctx))
	mux := http.NewServeMux()
	svc.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	cases := []struct {
		name, body, message string
	}{
		{"params without context", `{"rules":[],"step":{"method":"steps/toolCallRequest","params":{"nope":1}}}`,
			"step does not decode: invalid params: params.context: required"},
		{"params as an array", `{"rules":[],"step":{"method":"steps/toolCallRequest","params":[1]}}`,
			"step does not decode: invalid params: params: must be an object, not an array"},
		{"unknown method", `{"rules":[],"step":{"method":"nope/x","params":{}}}`,
			`step does not decode: "nope/x" is not an AOS method`},
		{"stored step", fmt.Sprintf(`{"rules":[],"seq":%d}`, bad.Seq),
			fmt.Sprintf("stored step %d does not decode: invalid params: params.context: required", bad.Seq)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := srv.Client().Post(srv.URL+"/api/rules/test", "application/json", bytes.NewBufferString(tc.body))
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			require.Equal(t, "invalid_request", e.Error.Code)
			require.Equal(t, tc.message, e.Error.Message)
		})
	}
}
