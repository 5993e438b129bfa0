package guardian_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// A held step is stored once it is decided. When the guardian dies with it pending, the
// next start ends the hold as interrupted and stores the step as it arrived, held and
// denied, with no response (its agent got none): the hold's session then exists, the step
// is in it and in search, and the hold links to it.
func TestInterruptedHoldKeepsItsStep(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	start := func(t *testing.T) (*sqlite.DB, *holds.Manager, *guardian.Guardian, chan string) {
		db, err := sqlite.Open(ctx, path, sqlite.Options{})
		require.NoError(t, err)
		engine := rules.NewEngine(rules.Options{})
		require.NoError(t, engine.Load([]rules.Rule{reviewEmail}))
		created := make(chan string, 4)
		m := holds.NewManager(holds.Options{Store: db, Logger: slog.New(slog.DiscardHandler),
			Publish: func(ev record.Event) {
				var h holds.Hold
				if ev.Type == record.EventHoldCreated && json.Unmarshal(ev.Payload, &h) == nil {
					created <- h.ID
				}
			}})
		require.NoError(t, m.Start(ctx))
		g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db,
			Policy: &guardian.RulesPolicy{Engine: engine}, Holds: guardian.ManagerHolds{M: m}})
		require.NoError(t, err)
		return db, m, g, created
	}

	db, m, g, created := start(t)
	srv := httptest.NewServer(g.Handler())
	e := &env{t: t, path: path, db: db, srv: srv}
	sent := emailStep("s-crash", "step-1", "Quarterly numbers attached.")
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		_, _ = e.post(sent)
	}()
	var id string
	select {
	case id = <-created:
	case <-time.After(20 * time.Second):
		t.Fatal("no hold was stored")
	}
	// The process dies with the hold pending: the database goes first, so nothing the
	// dying process does afterwards reaches it.
	require.NoError(t, db.Close())
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_ = m.Shutdown(sctx)
	<-answered
	srv.Close()

	db, m, g, _ = start(t)
	defer func() { require.NoError(t, db.Close()) }()
	interrupted := m.Interrupted()
	require.Len(t, interrupted, 1)
	require.Equal(t, id, interrupted[0].ID)
	require.Empty(t, m.Interrupted(), "handed over once")
	require.NoError(t, g.RecordInterrupted(ctx, interrupted))

	steps, err := db.Steps(ctx, record.StepQuery{SessionID: "s-crash"})
	require.NoError(t, err)
	require.Len(t, steps, 1)
	step := steps[0]
	require.True(t, step.Held)
	require.Equal(t, "deny", step.Decision)
	require.Equal(t, "send_email", step.Tool)
	require.Equal(t, "agent-1", step.AgentID)
	require.JSONEq(t, sent, string(step.Request))
	require.JSONEq(t, `null`, string(step.Response), "its agent got no answer")
	require.Contains(t, step.Text, "Quarterly numbers")
	require.True(t, step.ReceivedAt.Equal(interrupted[0].CreatedAt), "the step arrived when it was held")
	require.Equal(t, []record.RuleMatch{{RuleID: "review-email", Action: "hold", Mode: "enforce"}}, step.MatchedRules)

	h, err := db.GetHold(ctx, id)
	require.NoError(t, err)
	require.Equal(t, record.HoldInterrupted, h.Status)
	require.Empty(t, h.Decision, "the hold still records that nobody decided")
	require.Equal(t, step.Seq, h.Seq)
	s, err := db.Session(ctx, "s-crash")
	require.NoError(t, err)
	require.Equal(t, int64(1), s.Steps)
}
