package guardian_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/cluster"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/guardian/holds/holdstest"
	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/postgres"
)

// holdAllow is the rule of the reported case: a hold that lets the step through when nobody
// decides within 8 s.
var holdAllow = rules.Rule{ID: "hold-allow", When: `tool == "wire_allow"`, Action: rules.ActionHold, Enabled: true,
	Hold: &rules.HoldSpec{Timeout: rules.Duration(8 * time.Second), OnTimeout: rules.ActionAllow}}

func wireStep(session string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":{"context":` + stepCtx(session, "s1") +
		`,"toolCallRequest":{"executionId":"x","toolId":"wire_allow","inputs":[{"name":"amount","value":900}]}}}`
}

// refuseTimedOut is a holds.Store that refuses to store a hold's timeout, as the reported
// database's trigger did.
type refuseTimedOut struct{ holds.Store }

func (s refuseTimedOut) ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *record.AuditEntry) (holds.Hold, []record.Event, error) {
	if res.Status == holds.StatusTimedOut {
		return holds.Hold{}, nil, errors.New("storage: resolve hold: refused")
	}
	return s.Store.ResolveHold(ctx, id, res, audit)
}

// requireNotRecordedDeny checks the agent's answer, the stored step and the stored hold of
// a hold allowed on timeout whose timeout could not be stored: all three say deny.
func requireNotRecordedDeny(t *testing.T, r rpcResp, steps []record.StepRecord, h holds.Hold) {
	t.Helper()
	require.Equal(t, aos.Deny, r.Result.Decision, r.Result.Message)
	require.Equal(t, holds.ReasonNotRecorded, r.Result.ReasonCode[0])
	require.Contains(t, r.Result.Message, "timed out (decision on timeout: allow), but that outcome could not be recorded")

	require.Len(t, steps, 1)
	step := steps[0]
	require.Equal(t, "deny", step.Decision, "the step is stored as the agent was answered")
	require.True(t, step.Held)
	var stored rpcResp
	require.NoError(t, json.Unmarshal(step.Response, &stored))
	require.Equal(t, aos.Deny, stored.Result.Decision)
	require.Equal(t, holds.ReasonNotRecorded, stored.Result.ReasonCode[0])

	require.Equal(t, holds.StatusInterrupted, h.Status)
	require.Equal(t, "deny", h.Decision)
	require.Equal(t, step.Seq, h.Seq, "the hold links to its step")
	require.Contains(t, h.Note, "could not be stored, so its agent was denied")
}

// The reported case on one guardian: the timeout of a hold that allows on timeout cannot
// be stored. The agent is denied (never the allow), and the stored step, the hold and the
// audit log say deny; an operator can no longer approve it.
func TestHoldTimeoutNotStoredIsDeniedAndRecordedAsDenied(t *testing.T) {
	he := newHoldEnv(t, []rules.Rule{holdAllow}, func(o *holds.Options) { o.Store = refuseTimedOut{o.Store} })
	ch := he.send(wireStep("sess-wire"))
	id := he.nextHold()
	he.clock.Advance(8 * time.Second)
	r := answer(t, ch)

	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	require.Equal(t, http.StatusOK, he.get("/api/sessions/sess-wire/steps", &steps))
	ctx := context.Background()
	h, err := he.m.Get(ctx, id)
	require.NoError(t, err)
	requireNotRecordedDeny(t, r, steps.Steps, h)

	entries, err := he.m.Audit(ctx, record.AuditQuery{HoldID: id})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, record.AuditHoldInterrupted, entries[0].Type) // newest first
	require.Equal(t, "deny", entries[0].Decision)
	_, err = he.m.Approve(ctx, id, holds.Decision{Operator: "dana"})
	require.ErrorIs(t, err, holds.ErrConflict)
}

// The same on PostgreSQL, as the guardian runs as a replica (a shared store and the
// replica registry as the holds' owner), with a real trigger refusing the timeout's update.
func TestHoldTimeoutRefusedByPostgresIsDenied(t *testing.T) {
	dsn := postgresDB(t)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	db, err := postgres.Open(ctx, dsn, postgres.Options{Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	_, err = db.Pool().Exec(ctx, `
		CREATE FUNCTION refuse_timed_out() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'the timeout of hold % is refused', NEW.id; END $$;
		CREATE TRIGGER refuse_timed_out BEFORE UPDATE ON holds FOR EACH ROW
		WHEN (NEW.status = 'timedOut') EXECUTE FUNCTION refuse_timed_out();`)
	require.NoError(t, err)
	reg, err := cluster.Join(ctx, cluster.Options{Pool: db.Pool(), Holds: db, Addr: "http://127.0.0.1:42201", Logger: log})
	require.NoError(t, err)

	engine := rules.NewEngine(rules.Options{})
	require.NoError(t, engine.Load([]rules.Rule{holdAllow}))
	clock := holdstest.NewClock(time.Now())
	created := make(chan string, 4)
	m := holds.NewManager(holds.Options{Store: db, Clock: clock, Shared: true, Owner: reg, Logger: log,
		Publish: func(ev record.Event) {
			if ev.Type == record.EventHoldCreated {
				created <- holdID(t, ev.Payload)
			}
		}})
	require.NoError(t, m.Start(ctx))
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Logger: log,
		Policy: &guardian.RulesPolicy{Engine: engine}, Holds: guardian.ManagerHolds{M: m}})
	require.NoError(t, err)
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, m.Shutdown(sctx))
		srv.Close()
	})
	e := &env{t: t, srv: srv}

	// The agent's request, off the test's goroutine (which must not fail the test).
	answered := make(chan []byte, 1)
	go func() {
		var b []byte
		resp, err := http.Post(srv.URL+"/aos", "application/json", strings.NewReader(wireStep("sess-pg")))
		if err == nil {
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		answered <- b
	}()
	var id string
	select {
	case id = <-created:
	case <-time.After(20 * time.Second):
		t.Fatal("no hold was stored")
	}
	clock.Advance(8 * time.Second)
	var r rpcResp
	select {
	case b := <-answered:
		r = decode(t, b)
	case <-time.After(20 * time.Second):
		t.Fatal("the agent got no answer")
	}
	require.NotNil(t, r.Result, "an answer, not an error")

	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	require.Equal(t, http.StatusOK, e.get("/api/sessions/sess-pg/steps", &steps))
	h, err := m.Get(ctx, id)
	require.NoError(t, err)
	requireNotRecordedDeny(t, r, steps.Steps, h)
	var status, decision string
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT status, decision FROM holds WHERE id = $1`, id).Scan(&status, &decision))
	require.Equal(t, []string{holds.StatusInterrupted, "deny"}, []string{status, decision})
}

// postgresDB starts a throwaway PostgreSQL server for one test and returns a database on
// it; it skips without PostgreSQL, unless pgtest.RequireEnv says the backend must be tested.
func postgresDB(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := pgtest.Start(ctx, "")
	if errors.Is(err, pgtest.ErrNoPostgres) && os.Getenv(pgtest.RequireEnv) == "" {
		t.Skip(fmt.Sprint(err, "; ", pgtest.RequireEnv, " makes this a failure"))
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	return pgtest.Need(t, srv)
}

func holdID(t *testing.T, payload []byte) string {
	t.Helper()
	var h holds.Hold
	require.NoError(t, json.Unmarshal(payload, &h))
	return h.ID
}
