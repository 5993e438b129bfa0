package aap_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

const heldMessage = "Deleting needs a reviewer; nobody decided."

// unjudged is the refusal a client's grant becomes when Vigil has no verdict for the call.
const unjudged = "Vigil has not allowed this tool call: a server tool runs only with Vigil's permission, " +
	"and Vigil has no verdict of its own for this call (its turn was cut short, or Vigil no longer knows the session). " +
	"Ask for the call again to have it decided."

// holdDeletes makes delete_file wait for a reviewer who never comes: the hold ends only when
// the client goes away (denied, as the guardian records an abandoned hold). holding reports
// that the hold began.
func (h *harness) holdDeletes() (holding <-chan struct{}) {
	ch := make(chan struct{}, 8)
	h.fd.rule = func(ctx context.Context, s *aos.Step) (guardian.Verdict, error) {
		if s.ToolID() == "delete_file" {
			ch <- struct{}{}
			<-ctx.Done()
			return guardian.Verdict{Decision: "deny", Message: heldMessage}, nil
		}
		return guardian.Verdict{}, nil
	}
	return ch
}

// interruptedTurn runs a turn whose delete_file is held, and disconnects while it is.
func (h *harness) interruptedTurn(id, mode string, holding <-chan struct{}) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", h.front.URL+"/aap/demo/sessions/"+id+"/turns",
		strings.NewReader(turnBody(mode, userMsg(readAndDelete))))
	require.NoError(h.t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			// Read until the disconnect cuts the stream.
			buf := make([]byte, 512)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
			}
			resp.Body.Close()
		}
	}()
	select {
	case <-holding:
	case <-time.After(10 * time.Second):
		h.t.Fatal("delete_file was not held")
	}
	cancel()
	<-done
}

// restart replaces the gateway by a new one in front of the same upstream: what the old
// one knew of its sessions is gone, as after a restart of Vigil.
func (h *harness) restart() {
	h.t.Helper()
	gw, err := aap.New(aap.Options{Name: "demo", Upstream: h.up.URL, Decider: h.fd, KeepAlive: 5 * time.Millisecond})
	require.NoError(h.t, err)
	mux := http.NewServeMux()
	gw.Register(mux, nil)
	front := httptest.NewServer(mux)
	h.t.Cleanup(front.Close)
	h.gw, h.front = gw, front
}

// A client that disconnects during a hold abandons it, and the call is denied: its own
// tool_permission on its next turn cannot run the tool. The denial the interrupted turn
// owed the upstream goes up with the next turn; when the gateway no longer knows the
// session (evicted from its cache, or Vigil restarted), a permission it has no answer of
// its own for goes up as a refusal whatever the client said.
func TestInterruptedHoldDeniesClientPermission(t *testing.T) {
	for _, mode := range modes {
		for _, c := range []struct {
			name   string
			setup  func(h *harness)
			reason string
		}{
			{"kept", func(*harness) {}, heldMessage},
			{"evicted", func(h *harness) { h.session() }, unjudged},
			{"restarted", func(h *harness) { h.restart() }, unjudged},
		} {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				h := newHarness(t, func(o *aap.Options) { o.MaxSessions = 1 })
				holding := h.holdDeletes()
				id := h.session()
				h.interruptedTurn(id, mode, holding)
				c.setup(h)

				resp, body := h.do("POST", "/sessions/"+id+"/turns",
					`{"stream":"message","messages":[{"role":"tool_permission","toolCallId":"call_delete_2","granted":true}]}`)
				require.Equal(t, http.StatusOK, resp.StatusCode, body)
				sent, turn := h.lastMessages(t)
				require.Len(t, sent, 1, "the client's permission was dropped or replaced: %s", turn)
				require.Equal(t, "tool_permission", sent[0].Role)
				require.Equal(t, "call_delete_2", sent[0].ToolCallID)
				require.False(t, sent[0].Granted)
				require.Contains(t, sent[0].Reason, c.reason)
				its := items(t, "message", body)
				require.NotContains(t, body, "deleted", "the tool did not run")
				require.Contains(t, texts(its, "text")[0], `call_delete_2="Tool use denied: `+c.reason)
			})
		}
	}
}

// A client's own permission never decides a server tool: one for a call Vigil answered in
// the turn before (here in a continuation the client did not see) is dropped, since the
// upstream has Vigil's answer, and one for a call Vigil never decided goes up as a refusal.
func TestClientPermissionsNeverDecide(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	sc := newScripted(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, field(t, b, "messages"))
		mu.Unlock()
		switch n {
		case 1:
			sse(w, "turn_start", "{}", "tool_call", `{"toolCallId":"c1","name":"srv","input":{}}`, "turn_stop", `{"stopReason":"tool_use"}`)
		case 2:
			sse(w, "turn_start", "{}", "tool_call", `{"toolCallId":"c2","name":"get_time","input":{}}`, "turn_stop", `{"stopReason":"tool_use"}`)
		default:
			sse(w, "turn_start", "{}", "turn_stop", `{"stopReason":"end_turn"}`)
		}
	}, nil)
	_, body := sc.do("POST", "/sessions/s1/turns", turnBody("delta", userMsg("hi")))
	require.Equal(t, []string{"srv", "get_time"}, names(items(t, "delta", body)))
	_, body = sc.do("POST", "/sessions/s1/turns", turnBody("delta",
		`{"role":"tool","toolCallId":"c2","content":"12:00"}`,
		`{"role":"tool_permission","toolCallId":"c1","granted":true}`,
		`{"role":"tool_permission","toolCallId":"c9","granted":true}`,
		`{"role":"tool_permission","toolCallId":"c8","granted":false,"reason":"no"}`))
	require.Equal(t, "end_turn", items(t, "delta", body)[0].Text)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 3)
	require.JSONEq(t, `[{"role":"tool_permission","toolCallId":"c1","granted":true}]`, got[1])
	require.JSONEq(t, `[{"role":"tool","toolCallId":"c2","content":"12:00"},`+
		`{"role":"tool_permission","toolCallId":"c9","granted":false,"reason":`+string(mustJSON(unjudged))+`},`+
		`{"role":"tool_permission","toolCallId":"c8","granted":false,"reason":"no"}]`, got[2])
}

// The same through the whole of Vigil: a hold the client abandons by disconnecting denies
// the call, and the client's own grant on its next turn does not run it.
func TestAbandonedHoldStaysDenied(t *testing.T) {
	e := newVigil(t, e2eRules)
	status, body := e.post("/aap/demo/sessions", sessionBody)
	require.Equal(t, http.StatusCreated, status, body)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	turns := e.srv.URL + "/aap/demo/sessions/" + created.SessionID + "/turns"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", turns, strings.NewReader(turnBody("delta", userMsg(readAndDelete))))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	select {
	case <-e.held:
	case <-time.After(20 * time.Second):
		t.Fatal("no hold")
	}
	cancel()
	resp.Body.Close()

	status, body = e.post("/aap/demo/sessions/"+created.SessionID+"/turns",
		`{"stream":"message","messages":[{"role":"tool_permission","toolCallId":"call_delete_2","granted":true}]}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NotContains(t, body, "deleted")
	require.Contains(t, body, `call_delete_2=\"Tool use denied: `)
	sent := e.upstream.Turns()
	require.Contains(t, string(sent[len(sent)-1]), `"granted":false`)
	require.NotContains(t, string(sent[len(sent)-1]), `"granted":true`)
}

// A client's own tool result for a call whose denial Vigil still owes is dropped: the
// upstream gets Vigil's answer for the call, once, and not a result of the client's beside it.
func TestInterruptedHoldDropsClientToolResult(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, func(o *aap.Options) { o.MaxSessions = 1 })
			holding := h.holdDeletes()
			id := h.session()
			h.interruptedTurn(id, mode, holding)

			resp, body := h.do("POST", "/sessions/"+id+"/turns",
				`{"stream":"message","messages":[{"role":"tool","toolCallId":"call_delete_2","content":"deleted it myself"}]}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			sent, turn := h.lastMessages(t)
			require.Len(t, sent, 1, "only Vigil's answer goes up: %s", turn)
			require.Equal(t, "tool_permission", sent[0].Role)
			require.Equal(t, "call_delete_2", sent[0].ToolCallID)
			require.False(t, sent[0].Granted)
			require.NotContains(t, turn, "deleted it myself")
		})
	}
}

// sentMessage is a message of a turn the upstream received.
type sentMessage struct {
	Role       string `json:"role"`
	ToolCallID string `json:"toolCallId"`
	Granted    bool   `json:"granted"`
	Reason     string `json:"reason"`
}

// lastMessages are the messages of the last turn the upstream received, and that turn.
func (h *harness) lastMessages(t *testing.T) ([]sentMessage, string) {
	t.Helper()
	turns := h.upstream.Turns()
	require.NotEmpty(t, turns)
	last := turns[len(turns)-1]
	var sent []sentMessage
	require.NoError(t, json.Unmarshal([]byte(field(t, last, "messages")), &sent))
	return sent, string(last)
}
