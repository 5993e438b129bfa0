package systest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

const (
	crashAgents = 16
	// crashAnswers is how many answers each round waits for before the kill.
	crashAnswers = 2000
	crashRounds  = 3
)

// answered records every step that got an HTTP 200 answer with a decision, by session.
type answered struct {
	mu    sync.Mutex
	steps map[string][]string
	n     int
}

func (a *answered) add(session, stepID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.steps[session] = append(a.steps[session], stepID)
	a.n++
}

// TestCrashKeepsAnsweredSteps kills the server with SIGKILL while agents post steps, three
// times over, restarting on the same database each time. After every restart, every step
// that was answered before a kill is served by the API, and the database passes PRAGMA
// integrity_check, also once the last server has exited.
func TestCrashKeepsAnsweredSteps(t *testing.T) {
	bin := vigilBin(t)
	dbPath := filepath.Join(t.TempDir(), "vigil.db")
	ans := &answered{steps: make(map[string][]string)}
	client := newClient(crashAgents)
	defer client.CloseIdleConnections()
	ctx := context.Background()

	for round := range crashRounds {
		p := startVigil(t, bin, dbPath)
		if round > 0 {
			verifyAnswered(t, client, p.URL, ans)
			require.NoError(t, sqlite.IntegrityCheck(ctx, dbPath), "after kill %d", round)
		}
		before := ans.n
		cut := loadUntilKilled(t, client, p, round, ans)
		t.Logf("round %d: %d steps answered, then SIGKILL; %d agents' requests cut off", round+1, ans.n-before, cut)
	}

	p := startVigil(t, bin, dbPath)
	verifyAnswered(t, client, p.URL, ans)
	require.NoError(t, sqlite.IntegrityCheck(ctx, dbPath))
	p.stop()
	require.NoError(t, sqlite.IntegrityCheck(ctx, dbPath))

	// Offline, straight from the file: the same steps, read without the server.
	ro, err := sqlite.OpenReadOnly(ctx, dbPath)
	require.NoError(t, err)
	defer ro.Close()
	stored := make(map[string]map[string]bool)
	var lines stepSink
	_, err = ro.Export(ctx, &lines, record.ExportOptions{Steps: true})
	require.NoError(t, err)
	for _, s := range lines.steps {
		if stored[s.SessionID] == nil {
			stored[s.SessionID] = make(map[string]bool)
		}
		stored[s.SessionID][s.StepID] = true
	}
	for session, ids := range ans.steps {
		for _, id := range ids {
			require.True(t, stored[session][id], "answered step %s/%s missing from the file", session, id)
		}
	}
	t.Logf("%d answered steps across %d kills, all present; %d stored (a step committed just "+
		"before a kill may have lost its answer); integrity_check ok", ans.n, crashRounds, len(lines.steps))
}

// loadUntilKilled drives crashAgents agents against p until crashAnswers more steps were
// answered, kills p with SIGKILL while they keep sending, waits for the agents to give up,
// and returns how many of their requests failed because of the kill.
func loadUntilKilled(t *testing.T, client *http.Client, p *proc, round int, ans *answered) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		count  atomic.Int64
		failed atomic.Int64
		errs   counter
		wg     sync.WaitGroup
		killed atomic.Bool
	)
	reached := make(chan struct{})
	var once sync.Once
	for a := range crashAgents {
		wg.Go(func() {
			session := fmt.Sprintf("crash-r%d-a%d", round, a)
			for i := 0; ctx.Err() == nil; i++ {
				stepID := fmt.Sprintf("step-%d", i)
				err := postStep(ctx, client, p.URL, stepBody(session, stepID, i))
				if err != nil {
					if !killed.Load() || errors.Is(err, errRateLimited) {
						errs.add(err)
					}
					failed.Add(1)
					return // the server is gone (or something is wrong): this agent stops
				}
				ans.add(session, stepID)
				if count.Add(1) >= crashAnswers {
					once.Do(func() { close(reached) })
				}
			}
		})
	}
	select {
	case <-reached:
	case <-time.After(40 * time.Second):
		cancel()
		wg.Wait()
		t.Fatalf("round %d: only %d answers in 40s; %s\n%s", round+1, count.Load(), &errs, p.tail())
	}
	// Errors before the kill are failures of the guardian; from here on they are the kill.
	require.Zero(t, errs.count(), "requests failed before the kill: %s", &errs)
	killed.Store(true)
	p.kill()
	wg.Wait()
	require.Zero(t, errs.count(), "%s", &errs)
	return int(failed.Load())
}

// verifyAnswered requires every answered step to be served by the API at base, and every
// session's summary (written behind its steps, caught up after a kill) to count exactly the
// steps stored: read alone, which adds what is owed, and in the list, which writes it.
func verifyAnswered(t *testing.T, client *http.Client, base string, ans *answered) {
	t.Helper()
	listed := listedSteps(t, client, base)
	for session, ids := range ans.steps {
		stored := sessionStepIDs(t, client, base, session)
		for _, id := range ids {
			require.True(t, stored[id], "answered step %s/%s lost", session, id)
		}
		var sum struct {
			Steps     int64            `json:"steps"`
			Decisions map[string]int64 `json:"decisions"`
		}
		getJSONInto(t, client, base+"/api/sessions/"+url.PathEscape(session), &sum)
		require.Equal(t, int64(len(stored)), sum.Steps, "session %s: summary against stored steps", session)
		require.Equal(t, sum.Steps, sum.Decisions["allow"]+sum.Decisions["deny"]+sum.Decisions["modify"]+sum.Decisions["hold"],
			"session %s: decisions %v", session, sum.Decisions)
		require.Equal(t, int64(len(stored)), listed[session], "session %s: listed summary against stored steps", session)
	}
}

// listedSteps is every session's step count as GET /api/sessions lists it.
func listedSteps(t *testing.T, client *http.Client, base string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for before := ""; ; {
		var page struct {
			Sessions []struct {
				ID    string `json:"id"`
				Steps int64  `json:"steps"`
			} `json:"sessions"`
			Next string `json:"next"`
		}
		getJSONInto(t, client, base+"/api/sessions?limit=200&before="+url.QueryEscape(before), &page)
		for _, s := range page.Sessions {
			out[s.ID] = s.Steps
		}
		if page.Next == "" {
			return out
		}
		before = page.Next
	}
}

// getJSONInto decodes the 200 answer of a GET of u into v.
func getJSONInto(t *testing.T, client *http.Client, u string, v any) {
	t.Helper()
	resp, err := client.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, u)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v), u)
}
