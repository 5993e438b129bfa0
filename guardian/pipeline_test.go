package guardian_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

func newPipeline(t *testing.T, opts guardian.Options) (*guardian.Guardian, *sqlite.DB) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	opts.Store = db
	g, err := guardian.New(guardian.Config{}, opts)
	require.NoError(t, err)
	return g, db
}

func parse(t *testing.T, raw string) *aos.Step {
	t.Helper()
	step, perr := aos.ParseStep([]byte(raw))
	require.Nil(t, perr)
	return step
}

// The verdict a front end applies, and the stored record naming the gateway it came
// through, for each decision.
func TestDecideStepForGateways(t *testing.T) {
	no := false
	modified := json.RawMessage(`{"context":` + stepCtx("gw", "s1") + `,"toolCallRequest":{"executionId":"x1","toolId":"lookup_invoice","inputs":[{"name":"customer","value":"[redacted]"}]}}`)
	tests := []struct {
		name     string
		verdict  guardian.Verdict
		meta     guardian.RequestMeta
		decision string
		data     map[string]any
	}{
		{"allow", guardian.Verdict{Decision: "allow"}, guardian.RequestMeta{Protocol: guardian.ProtocolAgentAPI, Upstream: "support"},
			"allow", map[string]any{"protocol": "agentapi", "upstream": "support"}},
		{"deny", guardian.Verdict{Decision: "deny", RuleID: "no-invoices", Message: "No."}, guardian.RequestMeta{Protocol: guardian.ProtocolAgentAPI, Upstream: "support"},
			"deny", map[string]any{"protocol": "agentapi", "upstream": "support", "ruleId": "no-invoices"}},
		{"modify", guardian.Verdict{Decision: "modify", RuleID: "redact", ModifiedParams: modified}, guardian.RequestMeta{Protocol: guardian.ProtocolAgentAPI, Upstream: "support"},
			"modify", map[string]any{"protocol": "agentapi", "upstream": "support", "ruleId": "redact"}},
		{"not enforceable", guardian.Verdict{Decision: "deny", RuleID: "no-invoices"}, guardian.RequestMeta{Protocol: guardian.ProtocolAgentAPI, Upstream: "support", Enforceable: &no},
			"deny", map[string]any{"protocol": "agentapi", "upstream": "support", "ruleId": "no-invoices", "enforced": false}},
		{"a hold nobody can apply is not queued", guardian.Verdict{Decision: guardian.DecisionHold, RuleID: "review"}, guardian.RequestMeta{Protocol: guardian.ProtocolAgentAPI, Upstream: "support", Enforceable: &no},
			"deny", map[string]any{"protocol": "agentapi", "upstream": "support", "ruleId": "review", "enforced": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No answers: a hold reaching the queue would block the test.
			q := &queueHolds{got: make(chan guardian.HoldRequest, 1), answer: make(chan guardian.HoldOutcome)}
			g, db := newPipeline(t, guardian.Options{Policy: &fixedPolicy{v: tt.verdict}, Holds: q})
			step := parse(t, `{"jsonrpc":"2.0","id":"t1","method":"steps/toolCallRequest","params":{"context":`+stepCtx("gw", "s1")+`,"toolCallRequest":{"executionId":"x1","toolId":"lookup_invoice","inputs":[{"name":"customer","value":"8812"}]}}}`)
			v, rec, err := g.DecideStep(context.Background(), step, tt.meta)
			require.NoError(t, err)
			require.Equal(t, tt.decision, v.Decision)
			require.Equal(t, tt.decision, rec.Decision)
			require.False(t, v.Held)
			if tt.decision == "modify" {
				require.JSONEq(t, string(modified), string(v.ModifiedParams))
				require.Contains(t, string(v.ModifiedRequest), `"[redacted]"`)
			}
			stored, err := db.Step(context.Background(), rec.Seq)
			require.NoError(t, err)
			var resp struct {
				ID     json.RawMessage `json:"id"`
				Result aos.Result      `json:"result"`
			}
			require.NoError(t, json.Unmarshal(stored.Response, &resp))
			require.Equal(t, `"t1"`, string(resp.ID))
			require.Equal(t, tt.data, resp.Result.Data)
		})
	}
}

// A held gateway step waits for the operator and reports the hold in its verdict.
func TestDecideStepHold(t *testing.T) {
	q := &queueHolds{got: make(chan guardian.HoldRequest, 1), answer: make(chan guardian.HoldOutcome, 1)}
	g, _ := newPipeline(t, guardian.Options{Policy: &fixedPolicy{v: guardian.Verdict{Decision: guardian.DecisionHold, HoldTimeout: time.Minute}}, Holds: q})
	q.answer <- guardian.HoldOutcome{Decision: "allow", Message: "Approved."}
	step := parse(t, sessionSteps("gw-hold")[4])
	v, rec, err := g.DecideStep(context.Background(), step, guardian.RequestMeta{Protocol: guardian.ProtocolAgentAPI})
	require.NoError(t, err)
	require.Equal(t, "allow", v.Decision)
	require.True(t, v.Held)
	require.Equal(t, "hold-1", v.HoldID)
	require.True(t, rec.Held)
}

func TestDecideStepRefusesPing(t *testing.T) {
	g, _ := newPipeline(t, guardian.Options{})
	_, _, err := g.DecideStep(context.Background(), parse(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`), guardian.RequestMeta{})
	require.Error(t, err)
}

// An MCP step names its session's client and server (the gateway's _meta.clientInfo and
// serverInfo): the stored step carries them, and the console API's session shows them.
func TestMCPStepNamesClientAndServer(t *testing.T) {
	g, db := newPipeline(t, guardian.Options{})
	long := string(make([]byte, 300)) + "é"
	step := func(meta string) *aos.Step {
		return parse(t, `{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"message":{"jsonrpc":"2.0","id":3,`+
			`"method":"tools/call","params":{"name":"echo","arguments":{}}},"_meta":{"sessionId":"mcp-x-1"`+meta+`}}}`)
	}
	ctx := context.Background()
	_, rec, err := g.DecideStep(ctx, step(`,"clientInfo":{"name":"claude-code","version":"2.1.0"},"serverInfo":{"name":"mcp-servers/everything","version":"2.0.0","title":"Everything"}`),
		guardian.RequestMeta{Protocol: guardian.ProtocolMCP})
	require.NoError(t, err)
	require.Equal(t, &record.Peer{Name: "claude-code", Version: "2.1.0"}, rec.Client)
	require.Equal(t, &record.Peer{Name: "mcp-servers/everything", Version: "2.0.0"}, rec.Server)
	// Not an Implementation, or none: no peer; a huge name is cut.
	_, rec, err = g.DecideStep(ctx, step(`,"clientInfo":"claude","serverInfo":{"name":"`+long[:0]+`x`+`","version":7}`), guardian.RequestMeta{})
	require.NoError(t, err)
	require.Nil(t, rec.Client)
	require.Equal(t, &record.Peer{Name: "x"}, rec.Server)
	b, _ := json.Marshal(long)
	_, rec, err = g.DecideStep(ctx, step(`,"clientInfo":{"name":`+string(b)+`}`), guardian.RequestMeta{})
	require.NoError(t, err)
	require.Len(t, rec.Client.Name, 200)

	s, err := db.Session(ctx, "mcp-x-1")
	require.NoError(t, err)
	require.Equal(t, "x", s.Server.Name)
	require.Len(t, s.Client.Name, 200)

	h := g.Handler()
	for _, path := range []string{"/api/sessions/mcp-x-1", "/api/sessions"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, w.Code)
		require.Contains(t, w.Body.String(), `"server":{"name":"x"}`, path)
	}
}
