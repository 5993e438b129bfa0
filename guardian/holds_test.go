package guardian_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/guardian/holds/holdstest"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// holdEnv is the whole held-step path: the rules engine, a holds.Manager and the guardian
// over one real SQLite file, behind a real HTTP server.
type holdEnv struct {
	*env
	m       *holds.Manager
	engine  *rules.Engine
	clock   *holdstest.Clock
	created chan string // ids of stored holds, in order
}

func newHoldEnv(t *testing.T, rs []rules.Rule, opts ...func(*holds.Options)) *holdEnv {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	engine := rules.NewEngine(rules.Options{})
	require.NoError(t, engine.Load(rs))
	he := &holdEnv{engine: engine, clock: holdstest.NewClock(time.Now()), created: make(chan string, 16)}
	var rulesMu sync.Mutex
	o := holds.Options{
		Store: db,
		Clock: he.clock,
		Publish: func(ev record.Event) {
			if ev.Type == record.EventHoldCreated {
				var h holds.Hold
				if json.Unmarshal(ev.Payload, &h) == nil {
					he.created <- h.ID
				}
			}
		},
		Remember: func(_ context.Context, r rules.Rule, _ string) error {
			rulesMu.Lock()
			defer rulesMu.Unlock()
			return engine.Load(append(engine.Rules(), r))
		},
		ValidateParams: guardian.ValidateParams,
		Logger:         slog.New(slog.DiscardHandler),
	}
	for _, f := range opts {
		f(&o)
	}
	he.m = holds.NewManager(o)
	require.NoError(t, he.m.Start(ctx))
	g, err := guardian.New(guardian.Config{}, guardian.Options{
		Store:  db,
		Policy: &guardian.RulesPolicy{Engine: engine},
		Holds:  guardian.ManagerHolds{M: he.m},
	})
	require.NoError(t, err)
	he.env = &env{t: t, path: path, db: db, srv: httptest.NewServer(g.Handler())}
	t.Cleanup(func() {
		// Waiting agents are answered first, so the server's close does not wait for them.
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, he.m.Shutdown(sctx))
		he.close()
	})
	return he
}

// nextHold waits for the next stored hold.
func (he *holdEnv) nextHold() string {
	he.t.Helper()
	select {
	case id := <-he.created:
		return id
	case <-time.After(20 * time.Second):
		he.t.Fatal("no hold was stored")
		return ""
	}
}

// send posts a step in the background; its answer arrives on the channel.
func (he *holdEnv) send(body string) <-chan rpcResp {
	ch := make(chan rpcResp, 1)
	go func() {
		_, b := he.post(body)
		var r rpcResp
		_ = json.Unmarshal(b, &r)
		ch <- r
	}()
	return ch
}

func answer(t *testing.T, ch <-chan rpcResp) rpcResp {
	t.Helper()
	select {
	case r := <-ch:
		require.NotNil(t, r.Result, "an answer with a result")
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the agent got no answer")
		return rpcResp{}
	}
}

func emailStep(session, stepID, body string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":{"context":` + stepCtx(session, stepID) +
		`,"toolCallRequest":{"executionId":"x","toolId":"send_email","inputs":[{"name":"body","value":` +
		fmt.Sprintf("%q", body) + `}]}}}`
}

// emailBody is the body input of a request's (or modified request's) send_email call.
func emailBody(t *testing.T, req json.RawMessage) string {
	t.Helper()
	step, perr := aos.ParseStep(req)
	require.Nil(t, perr, string(req))
	return step.Inputs()["body"].(string)
}

var (
	redactEmail = rules.Rule{ID: "redact-email", When: `tool == "send_email"`, Action: rules.ActionModify,
		Enabled: true, Modify: &rules.ModifySpec{Redact: []string{"email"}}}
	reviewEmail = rules.Rule{ID: "review-email", When: `tool == "send_email"`, Action: rules.ActionHold,
		Enabled: true, Hold: &rules.HoldSpec{Timeout: rules.Duration(time.Minute), OnTimeout: rules.ActionAllow}}
)

// TestApprovalKeepsTheRulesModifications: a modify rule (redact emails) matched together
// with a hold. However the step is let through — approved, approved and remembered (and
// then the next step passing by the remembered rule), approved while its session is
// paused, edited and approved, or allowed on timeout — the agent gets modify with the
// redaction applied, and the stored step, hold and audit entry show the params it got.
func TestApprovalKeepsTheRulesModifications(t *testing.T) {
	const sent = "Write to dana@corp.example about the invoice."
	const want = "Write to [REDACTED:email] about the invoice."
	for _, tc := range []struct {
		name   string
		rules  []rules.Rule
		pause  bool
		decide func(he *holdEnv, id string) (holds.Hold, error)
		want   string // the body the agent may send
		status string
		audit  string
	}{
		{
			name: "approve", rules: []rules.Rule{redactEmail, reviewEmail},
			decide: func(he *holdEnv, id string) (holds.Hold, error) {
				return he.m.Approve(context.Background(), id, holds.Decision{Operator: "dana"})
			},
			want: want, status: holds.StatusApproved, audit: record.AuditHoldApproved,
		},
		{
			name: "approve and remember", rules: []rules.Rule{redactEmail, reviewEmail},
			decide: func(he *holdEnv, id string) (holds.Hold, error) {
				return he.m.Approve(context.Background(), id, holds.Decision{Operator: "dana",
					Remember: &holds.RememberSpec{Scope: holds.ScopeTool}})
			},
			want: want, status: holds.StatusApproved, audit: record.AuditHoldApproved,
		},
		{
			name: "pause then approve", rules: []rules.Rule{redactEmail}, pause: true,
			decide: func(he *holdEnv, id string) (holds.Hold, error) {
				return he.m.Approve(context.Background(), id, holds.Decision{Operator: "dana"})
			},
			want: want, status: holds.StatusApproved, audit: record.AuditHoldApproved,
		},
		{
			name: "edit and approve", rules: []rules.Rule{redactEmail, reviewEmail},
			decide: func(he *holdEnv, id string) (holds.Hold, error) {
				params := `{"context":` + stepCtx("sess-mod", "s1") + `,"toolCallRequest":{"executionId":"x","toolId":"send_email",` +
					`"inputs":[{"name":"body","value":"Edited: write to eve@corp.example instead."}]}}`
				return he.m.Modify(context.Background(), id, holds.Decision{Operator: "dana"}, json.RawMessage(params))
			},
			want: "Edited: write to [REDACTED:email] instead.", status: holds.StatusModified, audit: record.AuditHoldModified,
		},
		{
			name: "allow on timeout", rules: []rules.Rule{redactEmail, reviewEmail},
			decide: func(he *holdEnv, id string) (holds.Hold, error) {
				he.clock.Advance(time.Minute)
				return holds.Hold{}, nil
			},
			want: want, status: holds.StatusTimedOut, audit: record.AuditHoldTimedOut,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			he := newHoldEnv(t, tc.rules)
			ctx := context.Background()
			if tc.pause {
				require.NoError(t, he.m.SetControl(ctx, "sess-mod", record.ControlPause, "ops", ""))
			}
			ch := he.send(emailStep("sess-mod", "s1", sent))
			id := he.nextHold()
			_, err := tc.decide(he, id)
			require.NoError(t, err)

			r := answer(t, ch)
			require.Equal(t, aos.Modify, r.Result.Decision, r.Result.Message)
			require.Equal(t, tc.want, emailBody(t, r.Result.ModifiedRequest))

			// The stored step's answer, the hold and its audit entry show what the agent got.
			var steps struct {
				Steps []record.StepRecord `json:"steps"`
			}
			he.get("/api/sessions/sess-mod/steps", &steps)
			require.Len(t, steps.Steps, 1)
			require.Equal(t, "modify", steps.Steps[0].Decision)
			require.True(t, steps.Steps[0].Held)
			var stored rpcResp
			require.NoError(t, json.Unmarshal(steps.Steps[0].Response, &stored))
			require.Equal(t, tc.want, emailBody(t, stored.Result.ModifiedRequest))

			h, err := he.m.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, tc.status, h.Status)
			require.Equal(t, "modify", h.Decision)
			require.Contains(t, string(h.Params), tc.want)
			require.NotContains(t, string(h.Params), "@corp.example")
			entries, err := he.m.Audit(ctx, record.AuditQuery{HoldID: id, Type: tc.audit})
			require.NoError(t, err)
			require.Len(t, entries, 1)
			require.Equal(t, "modify", entries[0].Decision)
			if tc.status != holds.StatusTimedOut {
				require.Contains(t, string(entries[0].Diff), "[REDACTED:email]", "the audit shows the change")
			}

			if tc.name == "approve and remember" {
				// The next such step passes by the remembered approval, still redacted.
				r := answer(t, he.send(emailStep("sess-mod", "s2", sent)))
				require.Equal(t, aos.Modify, r.Result.Decision, r.Result.Message)
				require.Equal(t, want, emailBody(t, r.Result.ModifiedRequest))
				require.Contains(t, r.Result.Message, "remembered approval")
			}
		})
	}
}

// TestEditThatCannotTakeTheModificationIsRefused: an operator's edit the rules' modification
// cannot apply to is refused (400 params), and the hold keeps waiting.
func TestEditThatCannotTakeTheModificationIsRefused(t *testing.T) {
	setTo := rules.Rule{ID: "set-cc", When: `tool == "send_email"`, Action: rules.ActionModify, Enabled: true,
		Modify: &rules.ModifySpec{Set: map[string]string{"cc": `"audit@corp.example"`}}}
	he := newHoldEnv(t, []rules.Rule{setTo, reviewEmail})
	ch := he.send(emailStep("sess-edit", "s1", "hello"))
	id := he.nextHold()
	// A message step: its params have no tool inputs to set.
	_, err := he.m.Modify(context.Background(), id, holds.Decision{Operator: "dana"},
		json.RawMessage(`{"context":`+stepCtx("sess-edit", "s1")+`,"message":{"id":"m","role":"agent","content":[{"kind":"text","text":"hi"}]}}`))
	var fe *holds.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "params", fe.Field)

	_, err = he.m.Approve(context.Background(), id, holds.Decision{Operator: "dana"})
	require.NoError(t, err)
	r := answer(t, ch)
	require.Equal(t, aos.Modify, r.Result.Decision)
	require.Contains(t, string(r.Result.ModifiedRequest), `"audit@corp.example"`)
}

// TestFullQueueDeniesWithItsOwnCode: past a limit of the review queue a step that needs a
// review is denied at once, saying the queue is full, with HOLD_QUEUE_FULL first.
func TestFullQueueDeniesWithItsOwnCode(t *testing.T) {
	he := newHoldEnv(t, []rules.Rule{reviewEmail}, func(o *holds.Options) { o.MaxPending, o.MaxPendingPerAgent = 4, 1 })
	waiting := he.send(emailStep("sess-q1", "s1", "first"))
	he.nextHold()

	// The same agent again (another session): its share is taken.
	r := answer(t, he.send(emailStep("sess-q2", "s1", "second")))
	require.Equal(t, aos.Deny, r.Result.Decision)
	require.Equal(t, holds.ReasonQueueFull, r.Result.ReasonCode[0])
	require.Contains(t, r.Result.Message, "review queue is full (this agent has 1 steps waiting for review (at most 1 per agent))")
	select {
	case <-waiting:
		t.Fatal("the first step was answered")
	default:
	}
}

// TestShutdownDeniesHeldStepsAsRetryable: a shutdown never approves a held step (here one
// whose hold allows on timeout): the agent gets deny with GUARDIAN_RESTARTING first.
func TestShutdownDeniesHeldStepsAsRetryable(t *testing.T) {
	he := newHoldEnv(t, []rules.Rule{redactEmail, reviewEmail})
	ch := he.send(emailStep("sess-stop", "s1", "bye"))
	id := he.nextHold()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, he.m.Shutdown(ctx))
	r := answer(t, ch)
	require.Equal(t, aos.Deny, r.Result.Decision)
	require.Equal(t, holds.ReasonRestarting, r.Result.ReasonCode[0])
	require.True(t, strings.Contains(r.Result.Message, "restarting"), r.Result.Message)
	h, err := he.m.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, holds.StatusInterrupted, h.Status)

	// A step that would be held after the shutdown began gets the same retryable answer.
	r = answer(t, he.send(emailStep("sess-stop", "s2", "again")))
	require.Equal(t, aos.Deny, r.Result.Decision)
	require.Equal(t, holds.ReasonRestarting, r.Result.ReasonCode[0])
}

// A stored hold's request gives back the inputs the waiting step had; a bad one none.
func TestHoldInputs(t *testing.T) {
	in := guardian.HoldInputs(json.RawMessage(emailStep("s1", "st1", "hello")))
	require.Equal(t, "hello", in["body"])
	require.Nil(t, guardian.HoldInputs(json.RawMessage(`{"jsonrpc":"2.0"}`)))
}
