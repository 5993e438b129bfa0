package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/pgtest"
)

// startPostgres starts a throwaway PostgreSQL for this test and returns a fresh database's
// URL; without PostgreSQL installed the test skips (fails under VIGIL_REQUIRE_POSTGRES).
func startPostgres(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := pgtest.Start(ctx, "")
	if errors.Is(err, pgtest.ErrNoPostgres) && os.Getenv(pgtest.RequireEnv) == "" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	dsn, err := srv.CreateDB(ctx, "replicas")
	require.NoError(t, err)
	return dsn
}

// toolStep is a steps/toolCallRequest of session calling tool (stepBody's realistic step).
func toolStep(session, stepID, tool string) []byte {
	return bytes.Replace(stepBody(session, stepID, 0), []byte(`"toolId":"search_web"`), fmt.Appendf(nil, `"toolId":%q`, tool), 1)
}

// decide posts a step and returns the decision of its answer.
func decide(ctx context.Context, c *http.Client, base string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/aos", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	var r struct {
		Result *struct {
			Decision string `json:"decision"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Result == nil || r.Result.Decision == "" {
		return "", fmt.Errorf("answer without a decision: %.200s", b)
	}
	return r.Result.Decision, nil
}

// apiCall sends a JSON request to the console API and decodes the answer into out.
func apiCall(t *testing.T, c *http.Client, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Vigil-Operator", "dana")
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), "%s %s: %s", method, url, b)
	}
	return resp.StatusCode
}

type liveFrame struct {
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	Payload struct {
		StepID    string `json:"stepId"`
		SessionID string `json:"sessionId"`
	} `json:"payload"`
}

// liveClient records every stored event a websocket client of /api/live receives.
type liveClient struct {
	mu     sync.Mutex
	frames []liveFrame
	steps  map[string]int64 // step id → seq
	err    error
	conn   *websocket.Conn
}

func dialLive(t *testing.T, base string, after int64) *liveClient {
	t.Helper()
	u := "ws" + strings.TrimPrefix(base, "http") + "/api/live"
	if after >= 0 {
		u += fmt.Sprintf("?after=%d", after)
	}
	conn, resp, err := websocket.DefaultDialer.Dial(u, nil)
	require.NoError(t, err)
	resp.Body.Close()
	l := &liveClient{steps: map[string]int64{}, conn: conn}
	t.Cleanup(func() { _ = conn.Close() })
	go func() {
		for {
			_, b, err := conn.ReadMessage()
			if err != nil {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				return
			}
			var f liveFrame
			if json.Unmarshal(b, &f) != nil || f.Seq == 0 {
				continue // stats ticks
			}
			l.mu.Lock()
			l.frames = append(l.frames, f)
			if f.Type == "step" {
				l.steps[f.Payload.StepID] = f.Seq
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// waitSteps waits until the client has seen every step id in ids.
func (l *liveClient) waitSteps(t *testing.T, ids []string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		l.mu.Lock()
		missing := 0
		for _, id := range ids {
			if _, ok := l.steps[id]; !ok {
				missing++
			}
		}
		err := l.err
		l.mu.Unlock()
		if missing == 0 {
			return
		}
		require.NoError(t, err, "live connection ended with %d steps missing", missing)
		if time.Now().After(deadline) {
			t.Fatalf("live client: %d of %d steps missing after %s", missing, len(ids), d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// requireOrdered checks the client got its events in strictly increasing seq order.
func (l *liveClient) requireOrdered(t *testing.T) []int64 {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	seqs := make([]int64, len(l.frames))
	for i, f := range l.frames {
		seqs[i] = f.Seq
		if i > 0 {
			require.Greater(t, f.Seq, l.frames[i-1].Seq, "event %d out of order", i)
		}
	}
	return seqs
}

// eventually polls cond every few milliseconds until it holds, and returns how long it took.
func eventually(t *testing.T, d time.Duration, msg string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", msg, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

type holdView struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionId"`
	Status    string `json:"status"`
	Decision  string `json:"decision"`
	DecidedBy string `json:"decidedBy"`
	Note      string `json:"note"`
}

func pendingHold(t *testing.T, c *http.Client, base, session string) (holdView, bool) {
	var page struct {
		Holds []holdView `json:"holds"`
	}
	apiCall(t, c, http.MethodGet, base+"/api/holds?status=pending", nil, &page)
	for _, h := range page.Holds {
		if h.SessionID == session {
			return h, true
		}
	}
	return holdView{}, false
}

// TestReplicasOnPostgres runs three `vigil serve` replicas on one PostgreSQL database, as
// behind a load balancer: agents spread over all three; a hold on one approved on another;
// a rule change and a session block made on one seen by all; a live client on one seeing
// every replica's steps in seq order, and ?after= replay on another; then one replica is
// SIGKILLed under load: every answered step stays, and its pending hold is ended by a
// survivor.
func TestReplicasOnPostgres(t *testing.T) {
	bin := vigilBin(t)
	dsn := startPostgres(t)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(`rules:
  - id: hold-wire
    when: 'tool == "wire_money"'
    action: hold
    message: 'wire transfers need review'
`), 0o600))
	flags := []string{"--rules", rulesFile, "--replica-heartbeat", "100ms", "--replica-dead-after", "1s",
		"--hold-timeout", "2m", "--agent-rate", "0"}
	reps := make([]*proc, 3)
	for i := range reps {
		reps[i] = startVigil(t, bin, dsn, flags...)
	}
	c := newClient(32)
	defer c.CloseIdleConnections()
	ctx := context.Background()
	live := dialLive(t, reps[0].URL, -1)
	var answered []string

	require.True(t, t.Run("agents spread over all three", func(t *testing.T) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := &counter{}
		for a := range 6 {
			wg.Go(func() {
				base := reps[a%3].URL
				for i := range 30 {
					id := fmt.Sprintf("spread-%d-%d", a, i)
					d, err := decide(ctx, c, base, toolStep(fmt.Sprintf("spread-%d", a), id, "search_web"))
					if err != nil {
						errs.add(err)
						continue
					}
					if d == "allow" {
						mu.Lock()
						answered = append(answered, id)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		require.Zero(t, errs.count(), errs.String())
		require.Len(t, answered, 180)
		live.waitSteps(t, answered, 10*time.Second)
		live.requireOrdered(t)
	}))

	require.True(t, t.Run("live replay with after on another replica", func(t *testing.T) {
		live.mu.Lock()
		first := live.frames[0].Seq
		live.mu.Unlock()
		replay := dialLive(t, reps[1].URL, first-1)
		replay.waitSteps(t, answered, 10*time.Second)
		replay.requireOrdered(t)
		replay.mu.Lock()
		defer replay.mu.Unlock()
		live.mu.Lock()
		defer live.mu.Unlock()
		for _, id := range answered {
			require.Equal(t, live.steps[id], replay.steps[id], "step %s has one seq everywhere", id)
		}
	}))

	require.True(t, t.Run("hold on one replica approved on another", func(t *testing.T) {
		var lat []time.Duration
		for r := range 5 {
			session := fmt.Sprintf("wire-%d", r)
			owner, decider, third := reps[r%3], reps[(r+1)%3], reps[(r+2)%3]
			type answer struct {
				d   string
				err error
				at  time.Time
			}
			got := make(chan answer, 1)
			go func() {
				d, err := decide(ctx, c, owner.URL, toolStep(session, session+"-1", "wire_money"))
				got <- answer{d, err, time.Now()}
			}()
			var h holdView
			eventually(t, 10*time.Second, "hold visible on another replica", func() bool {
				var ok bool
				h, ok = pendingHold(t, c, decider.URL, session)
				return ok
			})
			start := time.Now()
			require.Equal(t, http.StatusOK, apiCall(t, c, http.MethodPost, decider.URL+"/api/holds/"+h.ID+"/approve",
				map[string]string{"operator": "bob"}, nil))
			a := <-got
			require.NoError(t, a.err)
			require.Equal(t, "allow", a.d)
			lat = append(lat, a.at.Sub(start))
			// The second decision, on a third replica, conflicts.
			var conflict struct {
				Hold *holdView `json:"hold"`
			}
			require.Equal(t, http.StatusConflict, apiCall(t, c, http.MethodPost, third.URL+"/api/holds/"+h.ID+"/deny",
				map[string]string{"operator": "carol"}, &conflict))
			require.NotNil(t, conflict.Hold)
			require.Equal(t, "bob", conflict.Hold.DecidedBy)
		}
		slices.Sort(lat)
		t.Logf("approval on another replica → agent answered: min %s, median %s, max %s", lat[0], lat[len(lat)/2], lat[len(lat)-1])
		// Timing is for the benchmarks (docs/replicas.md); this bound only catches a decision
		// that waits for something slower than the forwarding path and its heartbeat poll
		// (a busy 2-core machine gave medians up to 160 ms).
		require.Less(t, lat[len(lat)/2], 2*time.Second, "median time from approval to answer")
	}))

	require.True(t, t.Run("rule change and session block reach every replica", func(t *testing.T) {
		require.Equal(t, http.StatusCreated, apiCall(t, c, http.MethodPost, reps[0].URL+"/api/rules",
			map[string]string{"id": "deny-shred", "when": `tool == "shred_files"`, "action": "deny", "message": "no shredding"}, nil))
		start := time.Now()
		var took []time.Duration
		for i, p := range reps {
			n := 0
			eventually(t, 5*time.Second, "rule change on replica", func() bool {
				n++
				d, err := decide(ctx, c, p.URL, toolStep("rules-"+fmt.Sprint(i), fmt.Sprintf("shred-%d-%d", i, n), "shred_files"))
				require.NoError(t, err)
				return d == "deny"
			})
			took = append(took, time.Since(start))
		}
		t.Logf("rule created on replica 0 → denying on replicas 0, 1, 2 after %v", took)

		session := "to-block"
		for i, p := range reps {
			d, err := decide(ctx, c, p.URL, toolStep(session, fmt.Sprintf("pre-block-%d", i), "search_web"))
			require.NoError(t, err)
			require.Equal(t, "allow", d)
		}
		require.Equal(t, http.StatusOK, apiCall(t, c, http.MethodPost, reps[1].URL+"/api/sessions/"+session+"/block",
			map[string]string{"operator": "bob"}, nil))
		start = time.Now()
		took = took[:0]
		for i, p := range reps {
			n := 0
			eventually(t, 5*time.Second, "block on replica", func() bool {
				n++
				d, err := decide(ctx, c, p.URL, toolStep(session, fmt.Sprintf("blocked-%d-%d", i, n), "search_web"))
				require.NoError(t, err)
				return d == "deny"
			})
			took = append(took, time.Since(start))
		}
		t.Logf("session blocked on replica 1 → denied on replicas 0, 1, 2 after %v", took)
	}))

	require.True(t, t.Run("session history across replicas", func(t *testing.T) {
		// The fourth read of a session is denied by a rule counting its earlier reads. Its
		// steps go round-robin over the replicas: the first replica decides the fourth step
		// from the history it cached at the first, which the other two replicas' steps reach
		// only over the bus. Each step waits until every replica's live stream carried the
		// one before (a replica's history follows a step before its live hub sends it):
		// this checks coherence, not the window docs/replicas.md describes.
		// Probe sessions, one per replica, with three reads each before the rule exists.
		for i, p := range reps {
			for j := range 3 {
				d, err := decide(ctx, c, p.URL, toolStep(fmt.Sprintf("hist-probe-%d", i), fmt.Sprintf("probe-%d-%d", i, j), "read_file"))
				require.NoError(t, err)
				require.Equal(t, "allow", d)
			}
		}
		require.Equal(t, http.StatusCreated, apiCall(t, c, http.MethodPost, reps[0].URL+"/api/rules",
			map[string]string{"id": "fourth-read", "when": `tool == "read_file" && countTool(session, "read_file") >= 3`,
				"action": "deny", "message": "three reads are enough"}, nil))
		lives := []*liveClient{live, dialLive(t, reps[1].URL, -1), dialLive(t, reps[2].URL, -1)}
		for i, p := range reps {
			n := 0
			eventually(t, 5*time.Second, "rule on replica", func() bool {
				n++
				d, err := decide(ctx, c, p.URL, toolStep(fmt.Sprintf("hist-probe-%d", i), fmt.Sprintf("probe-%d-x%d", i, n), "read_file"))
				require.NoError(t, err)
				return d == "deny" // every replica runs the rule
			})
		}
		var got []string
		for k := range 4 {
			id := fmt.Sprintf("hist-%d", k)
			d, err := decide(ctx, c, reps[k%3].URL, toolStep("hist", id, "read_file"))
			require.NoError(t, err)
			got = append(got, d)
			for _, l := range lives {
				l.waitSteps(t, []string{id}, 10*time.Second)
			}
		}
		require.Equal(t, []string{"allow", "allow", "allow", "deny"}, got)
	}))

	require.True(t, t.Run("SIGKILL of one replica under load", func(t *testing.T) {
		victim := reps[2]
		// A step held on the victim: its agent waits there.
		heldErr := make(chan error, 1)
		go func() {
			_, err := decide(ctx, c, victim.URL, toolStep("wire-victim", "wire-victim-1", "wire_money"))
			heldErr <- err
		}()
		var h holdView
		eventually(t, 10*time.Second, "victim's hold", func() bool {
			var ok bool
			h, ok = pendingHold(t, c, reps[0].URL, "wire-victim")
			return ok
		})

		var mu sync.Mutex
		var load []string
		var n atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for a := range 9 {
			wg.Go(func() {
				base := reps[a%3].URL
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("load-%d-%d", a, i)
					d, err := decide(ctx, c, base, toolStep(fmt.Sprintf("load-%d", a), id, "search_web"))
					if err != nil {
						if a%3 == 2 {
							return // the victim is gone
						}
						continue
					}
					if d == "allow" {
						mu.Lock()
						load = append(load, id)
						mu.Unlock()
						n.Add(1)
					}
				}
			})
		}
		eventually(t, 30*time.Second, "load before the kill", func() bool { return n.Load() >= 300 })
		victim.kill()
		killedAt := time.Now()
		eventually(t, 30*time.Second, "load after the kill", func() bool { return n.Load() >= 450 })
		close(stop)
		wg.Wait()
		require.Error(t, <-heldErr, "the held agent's connection died with its replica")

		// Every answered step is stored, whichever replica answered it.
		bySession := map[string][]string{}
		mu.Lock()
		for _, id := range load {
			s := id[:strings.LastIndexByte(id, '-')]
			bySession[s] = append(bySession[s], id)
		}
		total := len(load)
		mu.Unlock()
		sessions := make([]string, 0, len(bySession))
		for s := range bySession {
			sessions = append(sessions, s)
		}
		sort.Strings(sessions)
		for _, s := range sessions {
			stored := sessionStepIDs(t, c, reps[0].URL, s)
			for _, id := range bySession[s] {
				require.True(t, stored[id], "answered step %s is stored", id)
			}
		}
		t.Logf("%d steps answered across the kill, all stored", total)

		// A survivor ends the dead replica's hold: interrupted, never approved.
		eventually(t, 15*time.Second, "the dead replica's hold ended", func() bool {
			var got holdView
			apiCall(t, c, http.MethodGet, reps[1].URL+"/api/holds/"+h.ID, nil, &got)
			h = got
			return got.Status != "pending"
		})
		require.Equal(t, "interrupted", h.Status)
		require.Equal(t, "deny", h.Decision)
		require.Contains(t, h.Note, "stopped")
		t.Logf("dead replica's hold ended within %s of the kill (--replica-dead-after 1s): %q", time.Since(killedAt).Round(time.Millisecond), h.Note)

		// The live client on replica 0 saw every answered step of every replica, in order.
		mu.Lock()
		all := append(slices.Clone(answered), load...)
		mu.Unlock()
		live.waitSteps(t, all, 10*time.Second)
		live.requireOrdered(t)
	}))

	require.True(t, t.Run("graceful shutdown denies its own holds", func(t *testing.T) {
		got := make(chan string, 1)
		go func() {
			d, err := decide(ctx, c, reps[1].URL, toolStep("wire-stop", "wire-stop-1", "wire_money"))
			if err != nil {
				d = err.Error()
			}
			got <- d
		}()
		var h holdView
		eventually(t, 10*time.Second, "hold on the replica to stop", func() bool {
			var ok bool
			h, ok = pendingHold(t, c, reps[0].URL, "wire-stop")
			return ok
		})
		reps[1].stop()
		require.Equal(t, "deny", <-got)
		apiCall(t, c, http.MethodGet, reps[0].URL+"/api/holds/"+h.ID, nil, &h)
		require.Equal(t, "interrupted", h.Status)
		require.Equal(t, "deny", h.Decision)
	}))
	reps[0].stop()
}
