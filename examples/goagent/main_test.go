package main

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

	"github.com/vigil-guardian/vigil/guardian/aos"
)

// guardian is a stand-in that validates each step with the aos decoder and decides with
// decide.
func guardian(t *testing.T, decide func(*aos.Step) aos.Result) (*httptest.Server, *[]*aos.Step) {
	var mu sync.Mutex
	var steps []*aos.Step
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		msgs, _, perr := aos.SplitBody(body)
		require.Nil(t, perr)
		s, perr := aos.ParseStep(msgs[0])
		require.Nil(t, perr, "the example sends valid steps")
		var result any
		if s.Kind == aos.KindPing {
			result = aos.PingResult{Status: "connected", Version: "test", Timestamp: time.Now().UTC().Format(time.RFC3339)}
		} else {
			mu.Lock()
			steps = append(steps, s)
			mu.Unlock()
			result = decide(s)
		}
		require.NoError(t, json.NewEncoder(w).Encode(aos.Response{JSONRPC: "2.0", ID: s.ID, Result: result}))
	}))
	t.Cleanup(srv.Close)
	return srv, &steps
}

func run(t *testing.T, url string) string {
	var out strings.Builder
	a := &agent{client: aos.NewClient(url), out: &out, timeout: 10 * time.Second, session: "test-session"}
	require.NoError(t, a.run(context.Background()))
	return out.String()
}

func TestSessionAllowed(t *testing.T) {
	srv, steps := guardian(t, func(s *aos.Step) aos.Result {
		return aos.Result{Decision: aos.Allow, Message: "No rule matched."}
	})
	out := run(t, srv.URL)
	var kinds []aos.Kind
	for _, s := range *steps {
		kinds = append(kinds, s.Kind)
		require.Equal(t, "test-session", s.SessionHint())
	}
	require.Equal(t, []aos.Kind{aos.KindMessage, aos.KindKnowledge, aos.KindToolCall, aos.KindToolResult, aos.KindMessage}, kinds)
	require.Equal(t, "refund_payment", (*steps)[2].ToolID())
	require.Equal(t, 89.9, (*steps)[2].Inputs()["amount"])
	require.Contains(t, out, "tool call request      allow  No rule matched.")
	require.Contains(t, out, "agent: I've refunded 89.90 EUR for order A-10023.")
}

func TestSessionDeniedAndModified(t *testing.T) {
	srv, steps := guardian(t, func(s *aos.Step) aos.Result {
		switch s.Kind {
		case aos.KindToolCall:
			return aos.Result{Decision: aos.Deny, Message: "Refunds need approval."}
		case aos.KindMessage:
			if s.Role() == aos.RoleAgent {
				p := *s.Message
				p.Message.Content = []aos.Part{aos.TextPart{Text: "A colleague will contact you."}}
				b, err := json.Marshal(p)
				require.NoError(t, err)
				mr, err := aos.NewModifiedRequest(s, b)
				require.NoError(t, err)
				return aos.Result{Decision: aos.Modify, Message: "Rephrased.", ModifiedRequest: mr}
			}
		}
		return aos.Result{Decision: aos.Allow, Message: "ok"}
	})
	out := run(t, srv.URL)
	require.Len(t, *steps, 4, "no tool result after a denied call")
	require.Contains(t, out, "tool call request      deny   Refunds need approval.")
	require.Contains(t, out, "agent: A colleague will contact you.")
}
