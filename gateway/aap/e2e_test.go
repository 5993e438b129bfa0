package aap_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap"
	"github.com/vigil-guardian/vigil/gateway/aap/aaptest"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// vigilEnv is the whole of Vigil in front of the scripted upstream: rules engine, holds,
// the guardian over a real SQLite file, the gateway mounted on its mux, one HTTP server.
type vigilEnv struct {
	t        *testing.T
	srv      *httptest.Server
	upstream *aaptest.Server
	up       *httptest.Server
	held     chan string
	engine   *rules.Engine
}

func newVigil(t testing.TB, rs []rules.Rule) *vigilEnv {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	engine := rules.NewEngine(rules.Options{})
	require.NoError(t, engine.Load(rs))
	e := &vigilEnv{upstream: aaptest.New(), held: make(chan string, 16), engine: engine}
	if tt, ok := t.(*testing.T); ok {
		e.t = tt
	}
	e.up = httptest.NewServer(e.upstream)
	hm := holds.NewManager(holds.Options{
		Store: db,
		Publish: func(ev record.Event) {
			if ev.Type == record.EventHoldCreated {
				var h holds.Hold
				if json.Unmarshal(ev.Payload, &h) == nil {
					e.held <- h.ID
				}
			}
		},
		ValidateParams: guardian.ValidateParams,
		Logger:         slog.New(slog.DiscardHandler),
	})
	require.NoError(t, hm.Start(ctx))
	var g *guardian.Guardian
	gw, err := aap.New(aap.Options{Name: "demo", Upstream: e.up.URL, Decider: deciderFunc(func(ctx context.Context) *guardian.Guardian { return g }),
		MayWithhold: aap.RulesMayWithhold(engine, nil), KeepAlive: 20 * time.Millisecond})
	require.NoError(t, err)
	g, err = guardian.New(guardian.Config{}, guardian.Options{
		Store:  db,
		Policy: &guardian.RulesPolicy{Engine: engine},
		Holds:  guardian.ManagerHolds{M: hm},
		Mount:  []func(*http.ServeMux){hm.Register, func(mux *http.ServeMux) { gw.Register(mux, nil) }},
	})
	require.NoError(t, err)
	e.srv = httptest.NewServer(g.Handler())
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, hm.Shutdown(sctx))
		e.srv.Close()
		e.up.Close()
		require.NoError(t, db.Close())
	})
	return e
}

// deciderFunc reaches a guardian built after the gateway.
type deciderFunc func(ctx context.Context) *guardian.Guardian

func (f deciderFunc) DecideStep(ctx context.Context, s *aos.Step, meta guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error) {
	return f(ctx).DecideStep(ctx, s, meta)
}

func (f deciderFunc) SessionRefusal(ctx context.Context, sessionID, keyID, keyAgent string) string {
	return f(ctx).SessionRefusal(ctx, sessionID, keyID, keyAgent)
}

var e2eRules = []rules.Rule{
	{ID: "no-destruction", When: `kind == "message" && role == "user" && text contains "rm -rf"`, Action: rules.ActionDeny,
		Message: "Destructive requests are not allowed.", Enabled: true},
	{ID: "redact-keys", When: `text matches "sk-live-"`, Action: rules.ActionModify,
		Modify: &rules.ModifySpec{Redact: []string{`sk-live-[A-Za-z0-9]+`}}, Enabled: true},
	{ID: "review-deletes", When: `tool == "delete_file"`, Action: rules.ActionHold, Message: "Deleting needs a reviewer.", Enabled: true},
}

func (e *vigilEnv) post(path, body string) (int, string) {
	e.t.Helper()
	resp, b := doURL(e.t, "POST", e.srv.URL+path, body)
	return resp.StatusCode, b
}

// TestEndToEnd drives a client through Vigil (rules, holds, SQLite) to the upstream: an
// allowed tool, a held one an operator approves through the holds API, a denied message, a
// redacted answer; then reads the stored session back.
func TestEndToEnd(t *testing.T) {
	e := newVigil(t, e2eRules)
	status, body := e.post("/aap/demo/sessions", sessionBody)
	require.Equal(t, http.StatusCreated, status, body)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	sid := created.SessionID

	// Held delete: the stream stays open with keep-alives until the operator approves.
	resp, err := http.Post(e.srv.URL+"/aap/demo/sessions/"+sid+"/turns", "application/json",
		strings.NewReader(turnBody("delta", userMsg(readAndDelete))))
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var holdID string
	select {
	case holdID = <-e.held:
	case <-time.After(20 * time.Second):
		t.Fatal("no hold")
	}
	got := readUntil(t, r, ": keep-alive\n\n")
	require.NotContains(t, got, "delete_file", "the held call is not shown before it is decided")
	status, body = e.post("/api/holds/"+holdID+"/approve", `{"operator":"alice","note":"ticket 7"}`)
	require.Equal(t, http.StatusOK, status, body)
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	its := items(t, "delta", stripComments(got+string(rest)))
	require.Equal(t, []string{"read_file", "delete_file"}, names(its))
	require.Equal(t, "end_turn", its[len(its)-1].Text)

	// Denied user message: the upstream never sees it.
	before := len(e.upstream.Turns())
	status, body = e.post("/aap/demo/sessions/"+sid+"/turns", turnBody("message", userMsg("echo rm -rf /")))
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, []item{{Kind: "text", Text: "Destructive requests are not allowed."}, {Kind: "stop", Text: "refusal"}}, items(t, "message", body))
	require.Len(t, e.upstream.Turns(), before)

	// Redacted answer, buffered in delta mode because a modify rule could match it.
	status, body = e.post("/aap/demo/sessions/"+sid+"/turns", turnBody("delta", userMsg("leak it")))
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, "sk-live-0123")
	require.Len(t, texts(items(t, "delta", body), "text"), 1)

	// The stored session, read back through the console API.
	resp2, body := doURL(t, "GET", e.srv.URL+"/api/sessions/"+url.PathEscape("aap:demo:"+sid)+"/steps?limit=100", "")
	require.Equal(t, http.StatusOK, resp2.StatusCode, body)
	var page struct {
		Steps []struct {
			Method, Decision, Tool, Text, AgentID string
			Held                                  bool
			Request                               json.RawMessage
			Response                              struct {
				Result struct {
					Data map[string]any `json:"data"`
				} `json:"result"`
			}
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	var summary []string
	for _, s := range page.Steps {
		summary = append(summary, s.Method+" "+s.Tool+" "+s.Decision)
		require.Equal(t, "guarded-agent", s.AgentID)
		require.Equal(t, "aap", s.Response.Result.Data["protocol"])
		require.Equal(t, "demo", s.Response.Result.Data["upstream"])
		require.NotContains(t, string(s.Request), "sk-test-secret-value")
		if s.Tool == "delete_file" {
			require.True(t, s.Held)
		}
	}
	require.Equal(t, []string{
		"steps/message  allow",
		"steps/message  allow",
		"steps/toolCallRequest read_file allow",
		"steps/message  allow",
		"steps/toolCallRequest delete_file allow",
		"steps/message  allow",
		"steps/message  deny",
		"steps/message  allow",
		"steps/message  modify",
	}, summary)
}

func stripComments(s string) string {
	var b strings.Builder
	for _, chunk := range strings.SplitAfter(s, "\n\n") {
		if !strings.HasPrefix(chunk, ":") {
			b.WriteString(chunk)
		}
	}
	return b.String()
}
