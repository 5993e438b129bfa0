package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
)

const (
	probePre  = `{"session_id":"s","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"git push"},"tool_use_id":"t1"}`
	probePost = `{"session_id":"s","cwd":"/p","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_response":{"stdout":"a"},"tool_use_id":"t1"}`
)

// fakeGuardian serves aos on /aos and health on the health check.
func fakeGuardian(t *testing.T, aos, health http.HandlerFunc) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /aos", aos)
	mux.HandleFunc("GET "+guardian.HealthPath, health)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// hang never answers: it returns once the hook hangs up.
func hang(w http.ResponseWriter, r *http.Request) {
	// Read first: the server notices the hook hanging up only once the body is read.
	_, _ = io.ReadAll(r.Body)
	<-r.Context().Done()
}

// readStep reads the step of r: once it is read, the server notices the hook hanging up.
func readStep(t *testing.T, r *http.Request) []byte {
	body, err := io.ReadAll(r.Body)
	assertNoError(t, err)
	return body
}

// answerStep answers the step (its body) with res.
func answerStep(t *testing.T, w http.ResponseWriter, body []byte, res string) {
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	if !assertNoError(t, json.Unmarshal(body, &req)) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, res)
}

// assertNoError is require.NoError for a handler's goroutine, where FailNow must not run.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("guardian: %v", err)
		return false
	}
	return true
}

// TestHungGuardian: a guardian that takes the step and never answers is given up as soon
// as its health check fails, long before the hook's timeout, and answered as a guardian
// error: denied, or allowed with --on-guardian-error allow; a tool output passes, as with
// a guardian that cannot be reached.
func TestHungGuardian(t *testing.T) {
	healths := []struct {
		name   string
		health http.HandlerFunc
		// wantWhy is what the reason says of the health check.
		wantWhy string
	}{
		{"health hangs", hang, "did not answer within 100ms"},
		{"health 503", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"unavailable","reason":"the database did not answer"}`)
		}, "answered HTTP 503: the database did not answer"},
		{"health hangs up", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if assertNoError(t, err) {
				_ = conn.Close()
			}
		}, "failed: EOF"},
	}
	tests := []struct {
		name, payload, onErr string
		// wantDecision is Claude Code's permissionDecision; "" for no answer (the step goes on).
		wantDecision string
		wantStderr   string
	}{
		{"denied", probePre, "deny", "deny", "is not answering"},
		{"allowed with --on-guardian-error allow", probePre, "allow", "", "(allowed: --on-guardian-error allow)"},
		{"tool output passes", probePost, "deny", "", "is not answering"},
	}
	for _, h := range healths {
		srv := fakeGuardian(t, hang, h.health)
		for _, tt := range tests {
			t.Run(h.name+"/"+tt.name, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				cfg := Config{Guardian: srv.URL, Timeout: time.Minute, OnGuardianError: tt.onErr,
					Probe: Probe{Grace: time.Millisecond, Timeout: 100 * time.Millisecond, Interval: time.Millisecond}}
				// Long before the hook's own deadline: a hook still waiting by then answers as
				// timed out, which the checks below tell apart.
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				code := Run(ctx, ClaudeCode, strings.NewReader(tt.payload), &stdout, &stderr, cfg)
				require.Zero(t, code)
				require.Contains(t, stderr.String(), "Vigil guardian at "+srv.URL+" took the step but is not answering")
				require.Contains(t, stderr.String(), "its health check (GET /api/health) "+h.wantWhy+".")
				require.Contains(t, stderr.String(), tt.wantStderr)
				require.NotContains(t, stderr.String(), "within the hook's", "not the hook's timeout")
				if tt.wantDecision == "" {
					require.Empty(t, stdout.String())
					return
				}
				require.Contains(t, stdout.String(), `"permissionDecision":"`+tt.wantDecision+`"`)
				require.Contains(t, stdout.String(), "is not answering")
			})
		}
	}
}

// TestHeldStepWithHealthyGuardian: a step held while the guardian's health check passes
// (or cannot tell: a proxy without the route; or fails once between passes: a slow
// database read) keeps the hook waiting for the real answer.
func TestHeldStepWithHealthyGuardian(t *testing.T) {
	tests := []struct {
		name string
		// status answers the check-th check (from 0).
		status func(check int) int
	}{
		{"health ok", func(int) int { return http.StatusOK }},
		{"health not routed", func(int) int { return http.StatusNotFound }},
		{"one failed check at a time", func(check int) int {
			if check%2 == 0 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := make(chan struct{}, 16)
			held := func(w http.ResponseWriter, r *http.Request) {
				body := readStep(t, r)
				// Decided by the operator only after the hook has checked three times.
				for range 3 {
					select {
					case <-checks:
					case <-r.Context().Done():
						t.Error("the hook gave up a held step of a healthy guardian")
						return
					}
				}
				answerStep(t, w, body, `{"decision":"allow","message":"approved by alice","data":{"ruleId":"review-push"}}`)
			}
			var mu sync.Mutex
			n := 0
			health := func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				status := tt.status(n)
				n++
				mu.Unlock()
				w.WriteHeader(status)
				select {
				case checks <- struct{}{}:
				default:
				}
			}
			srv := fakeGuardian(t, held, health)
			var stdout, stderr bytes.Buffer
			// A hook still waiting by then has missed the answer.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			code := Run(ctx, ClaudeCode, strings.NewReader(probePre), &stdout, &stderr, Config{
				Guardian: srv.URL, Timeout: time.Minute,
				Probe: Probe{Grace: time.Millisecond, Timeout: 10 * time.Second, Interval: time.Millisecond}})
			require.Zero(t, code)
			require.Empty(t, stderr.String())
			require.JSONEq(t, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow",
				"permissionDecisionReason":"approved by alice (Vigil rule review-push)"}}`, stdout.String())
		})
	}
}

// TestAnswerDuringHealthCheck: an answer that arrives while a check is under way is the one
// used, even with --on-guardian-error allow and a check that would fail.
func TestAnswerDuringHealthCheck(t *testing.T) {
	checking := make(chan struct{}, 1)
	health := func(w http.ResponseWriter, r *http.Request) {
		select {
		case checking <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}
	step := func(w http.ResponseWriter, r *http.Request) {
		body := readStep(t, r)
		select {
		case <-checking:
		case <-r.Context().Done():
			t.Error("the hook gave up before the check")
			return
		}
		answerStep(t, w, body, `{"decision":"deny","message":"no pushes today","data":{"ruleId":"review-push"}}`)
	}
	srv := fakeGuardian(t, step, health)
	var stdout, stderr bytes.Buffer
	// A hook still waiting by then has missed the answer.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	code := Run(ctx, ClaudeCode, strings.NewReader(probePre), &stdout, &stderr, Config{
		Guardian: srv.URL, Timeout: time.Minute, OnGuardianError: "allow",
		Probe: Probe{Grace: time.Millisecond, Timeout: time.Minute, Interval: time.Millisecond}})
	require.Zero(t, code)
	require.Empty(t, stderr.String())
	require.JSONEq(t, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny",
		"permissionDecisionReason":"no pushes today (Vigil rule review-push)"}}`, stdout.String())
}
