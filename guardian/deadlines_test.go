package guardian_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// TestHeldStepOutlivesServerTimeouts: a step held for longer than the server's read and
// write timeouts is still answered, and its context is not cancelled by the read deadline.
func TestHeldStepOutlivesServerTimeouts(t *testing.T) {
	const timeout = 100 * time.Millisecond
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	q := &queueHolds{got: make(chan guardian.HoldRequest, 1), answer: make(chan guardian.HoldOutcome)}
	p := &fixedPolicy{v: guardian.Verdict{Decision: guardian.DecisionHold, RuleID: "r", HoldTimeout: time.Minute, HoldOnTimeout: "deny"}}
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Policy: p, Holds: q})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(guardian.WithLongWaits(g.Handler(), timeout))
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = timeout, timeout
	srv.Start()
	t.Cleanup(srv.Close)

	done := make(chan []byte, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/aos", "application/json", strings.NewReader(sessionSteps("sess-T")[4]))
		if err != nil {
			done <- []byte(err.Error())
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- b
	}()
	<-q.got
	// The operator takes several times the server's timeouts to decide.
	time.Sleep(5 * timeout)
	q.answer <- guardian.HoldOutcome{Decision: "allow", Message: "Approved."}
	r := decode(t, <-done)
	require.Equal(t, aos.Allow, r.Result.Decision)
}
