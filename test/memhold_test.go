package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Sizes of TestHeldStepMemory: memHolds steps of memStepBytes each wait for a reviewer.
const (
	memHolds     = 1000
	memStepBytes = 1 << 20
	// memBoundFactor bounds the server's RSS growth while the steps are held, as a multiple
	// of the bytes held. The measured growth is about 2x (Go's collector runs when the heap
	// reaches twice what is live); before held steps were kept once it was over 6x.
	memBoundFactor = 3
)

const memRules = `rules:
  - id: review-email
    when: tool == "send_email"
    action: hold
    hold: {timeout: 10m, onTimeout: allow}
`

// TestHeldStepMemory holds memHolds steps of 1 MiB each and requires the server's resident
// memory to grow by less than memBoundFactor times the bytes held: a held step costs about
// its body once, not a copy per layer that saw it, and the collector's headroom stays
// proportionate. It moves about 2 GB through the server, so it runs only with
// VIGIL_MEMTEST=1 (make memtest).
func TestHeldStepMemory(t *testing.T) {
	bin := vigilBin(t)
	if os.Getenv("VIGIL_MEMTEST") != "1" {
		t.Skip("set VIGIL_MEMTEST=1 (make memtest) to hold 1000 steps of 1 MiB")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the memory test reads /proc")
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesPath, []byte(memRules), 0o600))
	p := startVigil(t, bin, filepath.Join(dir, "vigil.db"), "--rules", rulesPath,
		"--max-holds", fmt.Sprint(memHolds), "--max-holds-per-agent", fmt.Sprint(memHolds),
		"--max-hold-bytes", fmt.Sprint(2*memHolds*memStepBytes))
	client := newClient(memHolds)
	defer client.CloseIdleConnections()

	// One step first, so the baseline counts a server that has decided something.
	require.NoError(t, postStep(context.Background(), client, p.URL, stepBody("warm", "w1", 0)))
	base, err := procStatus(p.Pid(), "VmRSS")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	answers := make([]string, memHolds)
	var wg sync.WaitGroup
	for i := range memHolds {
		wg.Go(func() { answers[i] = postHeld(ctx, client, p.URL, i) })
	}

	// Wait until every step is held: the pending count is what the console sees.
	var pending int64
	for pending < memHolds {
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			t.Fatalf("only %d of %d steps held before the deadline; answers: %v\n%s", pending, memHolds, tally(answers), p.tail())
		case <-time.After(200 * time.Millisecond):
		}
		n, err := pendingHolds(client, p.URL)
		if err != nil {
			t.Fatalf("read the pending holds: %v\n%s", err, p.tail())
		}
		pending = n
	}
	rss, err := procStatus(p.Pid(), "VmRSS")
	require.NoError(t, err)
	held := int64(memHolds * memStepBytes / 1024)
	t.Logf("RSS: %d MiB at rest, %d MiB with %d MiB held (growth %.2fx the held bytes)",
		base/1024, rss/1024, held/1024, float64(rss-base)/float64(held))
	require.Less(t, rss-base, memBoundFactor*held, "RSS grew by more than %dx the held bytes", memBoundFactor)

	// A graceful stop would store 1000 interrupted holds and steps of 1 MiB each: more
	// than this test is about.
	p.kill()
	wg.Wait()
}

// postHeld sends step i (a send_email call carrying about memStepBytes of body) and
// returns its decision and first reason code, or the error.
func postHeld(ctx context.Context, c *http.Client, base string, i int) string {
	text := strings.Repeat(fmt.Sprintf("line %07d of a long message. ", i), memStepBytes/32)
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"steps/toolCallRequest","params":{
"context":{"agent":{"id":"agent-%d","name":"Mailer","instructions":"Send mail.","version":"1","provider":{"name":"corp","url":"https://corp.example"}},
"session":{"id":"mem-%d"},"turnId":"t1","stepId":"s1","timestamp":"2026-11-22T08:00:00Z"},
"toolCallRequest":{"executionId":"x%d","toolId":"send_email","inputs":[{"name":"to","value":"dana@corp.example"},{"name":"body","value":%q}]}}}`,
		i, i, i, i, text)
	// No client timeout: the request waits for a reviewer. A connection the server's
	// accept queue dropped under the burst is tried again; an answer never is.
	hc := &http.Client{Transport: c.Transport}
	var (
		resp *http.Response
		err  error
	)
	for range 3 {
		req, rerr := http.NewRequestWithContext(ctx, http.MethodPost, base+"/aos", bytes.NewReader(body))
		if rerr != nil {
			return rerr.Error()
		}
		req.Header.Set("Content-Type", "application/json")
		if resp, err = hc.Do(req); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var r struct {
		Result *struct {
			Decision   string   `json:"decision"`
			ReasonCode []string `json:"reasonCode"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Result == nil {
		return fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	code := ""
	if len(r.Result.ReasonCode) > 0 {
		code = r.Result.ReasonCode[0]
	}
	return r.Result.Decision + " " + code
}

// tally counts equal answers, for a failure message.
func tally(answers []string) map[string]int {
	out := make(map[string]int)
	for _, a := range answers {
		out[a]++
	}
	return out
}

// pendingHolds reads the pending hold count of GET /api/stats.
func pendingHolds(c *http.Client, base string) (int64, error) {
	resp, err := c.Get(base + "/api/stats")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		PendingHolds int64 `json:"pendingHolds"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return st.PendingHolds, json.NewDecoder(resp.Body).Decode(&st)
}
