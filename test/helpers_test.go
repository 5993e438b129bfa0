package systest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// vigilBin returns the binary under test, skipping the test when none is named.
func vigilBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("VIGIL_BIN")
	if bin == "" {
		t.Skip("set VIGIL_BIN to a built vigil binary to run the system tests")
	}
	abs, err := filepath.Abs(bin)
	require.NoError(t, err)
	st, err := os.Stat(abs)
	require.NoError(t, err, "VIGIL_BIN")
	require.False(t, st.IsDir(), "VIGIL_BIN is a directory")
	return abs
}

// proc is one running `vigil serve`.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	URL    string
	logs   string
	exited chan struct{}
	err    error // from Wait, set before exited closes
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startVigil runs `vigil serve` on a loopback port chosen by the system over dbPath, with
// extra flags, and waits until it prints its URL. The process is killed at the end of the
// test if still running.
func startVigil(t *testing.T, bin, dbPath string, extra ...string) *proc {
	t.Helper()
	args := []string{"serve", "--addr", "127.0.0.1:0", "--db", dbPath, "--log-level", "warn"}
	args = append(args, extra...)
	args = append(args, strings.Fields(os.Getenv("VIGIL_SYSTEST_ARGS"))...)
	cmd := exec.Command(bin, args...)
	// The developer's own VIGIL_* settings must not change the server under test.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VIGIL_") && !strings.HasPrefix(kv, "GOTRACEBACK=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// SIGQUIT then prints every goroutine (see goroutines).
	cmd.Env = append(cmd.Env, "GOTRACEBACK=all")
	logs, err := os.CreateTemp(t.TempDir(), "vigil-*.log")
	require.NoError(t, err)
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{t: t, cmd: cmd, logs: logs.Name(), exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logs.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})

	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case p.URL = <-found:
	case <-p.exited:
		t.Fatalf("vigil serve exited before listening: %v\n%s", p.err, p.tail())
	case <-time.After(30 * time.Second):
		t.Fatalf("vigil serve did not start within 30s\n%s", p.tail())
	}
	return p
}

// Pid is the server's process id.
func (p *proc) Pid() int { return p.cmd.Process.Pid }

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
}

// stop asks for a graceful shutdown (SIGTERM) and requires a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("vigil serve did not exit within 30s of SIGTERM\n%s", p.tail())
	}
	require.NoError(p.t, p.err, "exit status\n%s", p.tail())
}

// goroutines ends the process with SIGQUIT, on which the Go runtime prints the stack of
// every goroutine, and returns those stacks, one string per goroutine. It is the only view
// of the server's goroutines from outside, and it costs the process.
func (p *proc) goroutines() []string {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGQUIT))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatal("vigil serve did not exit within 30s of SIGQUIT")
	}
	b, err := os.ReadFile(p.logs)
	require.NoError(p.t, err)
	var stacks []string
	for block := range strings.SplitSeq(string(b), "\n\n") {
		if i := strings.Index(block, "goroutine "); i >= 0 && strings.Contains(block[i:], " [") {
			stacks = append(stacks, block[i:])
		}
	}
	require.NotEmpty(p.t, stacks, "no goroutine dump in the log\n%s", p.tail())
	return stacks
}

// tail is the end of the server's log, for failure messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.logs)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// newClient is an HTTP client for n concurrent agents, keeping their connections alive.
func newClient(n int) *http.Client {
	tr := &http.Transport{MaxIdleConns: 2 * n, MaxIdleConnsPerHost: 2 * n, IdleConnTimeout: time.Minute}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// stepBody is a realistic steps/toolCallRequest (about 1.5 KB) with a unique step id.
func stepBody(session, stepID string, i int) []byte {
	tools := []string{"search_web", "read_file", "send_email", "transfer_funds"}
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"steps/toolCallRequest","params":{
"context":{"agent":{"id":"agent-billing","name":"Billing assistant","instructions":"You help customers of corp.example with invoices, refunds and account questions. Never disclose other customers' data. Escalate disputes over 1000 EUR to a human.","version":"2.3.1","provider":{"name":"corp.example","url":"https://corp.example"},"model":{"id":"model-large","name":"Large model","provider":{"name":"model-co"}},
"tools":[{"id":"search_web","name":"search_web","type":"function_call","arguments":[{"name":"query","type":"string","required":true}],"outputs":null}]},
"session":{"id":%q},"turnId":"turn-%d","stepId":%q,"timestamp":"2026-11-22T08:00:00Z",
"user":{"id":"user-42","name":"Dana","email":"dana@corp.example","organization":{"id":"org-1","name":"Corp"}}},
"toolCallRequest":{"executionId":"exec-%d","toolId":%q,"inputs":[{"name":"query","value":"outstanding invoices for customer 8812 in October"},{"name":"to","value":"dana@corp.example"},{"name":"amount","value":%d}]},
"reasoning":"The user asked about their open invoices; I will look them up before answering."}}`,
		i, session, i/4, stepID, i, tools[i%len(tools)], (i*37)%2000)
}

// errRateLimited marks an answer of the server's per-agent rate limit: the test's load is
// above the configured rate, not a failure of the guardian.
var errRateLimited = errors.New("rate limited (HTTP 429): run the system tests with the per-agent rate limit off, via VIGIL_SYSTEST_ARGS")

// postStep sends one step and returns nil only for HTTP 200 with a decision in the result.
func postStep(ctx context.Context, c *http.Client, base string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/aos", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return errRateLimited
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	var r struct {
		Result *struct {
			Decision string `json:"decision"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	if r.Result == nil || r.Result.Decision == "" {
		return fmt.Errorf("answer without a decision: %.200s", b)
	}
	return nil
}

// sessionStepIDs reads every step id of a session through GET /api/sessions/{id}/steps.
func sessionStepIDs(t *testing.T, c *http.Client, base, session string) map[string]bool {
	t.Helper()
	ids := make(map[string]bool)
	after := int64(0)
	for {
		u := fmt.Sprintf("%s/api/sessions/%s/steps?after=%d&limit=1000", base, url.PathEscape(session), after)
		resp, err := c.Get(u)
		require.NoError(t, err)
		var page struct {
			Steps []struct {
				Seq    int64  `json:"seq"`
				StepID string `json:"stepId"`
			} `json:"steps"`
			Next *int64 `json:"next"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, u)
		for _, s := range page.Steps {
			ids[s.StepID] = true
		}
		if page.Next == nil || len(page.Steps) == 0 {
			return ids
		}
		after = *page.Next
	}
}

// procStatus reads a field of /proc/PID/status in kB (VmRSS, VmHWM) or as a count (Threads).
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// openFDs counts the process's open file descriptors.
func openFDs(pid int) (int, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(entries), err
}

// counter is a mutex-guarded tally of error messages, for reports.
type counter struct {
	mu    sync.Mutex
	n     int
	first map[string]int
}

func (c *counter) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.first == nil {
		c.first = make(map[string]int)
	}
	msg := err.Error()
	if len(c.first) < 5 || c.first[msg] > 0 {
		c.first[msg]++
	}
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d errors, e.g. %v", c.n, c.first)
}

// stepSink is an io.Writer for storage.Export: it decodes each JSON line's session and step
// ids as the lines arrive, without keeping the text.
type stepSink struct {
	partial []byte
	steps   []stepKey
}

type stepKey struct {
	SessionID string `json:"sessionId"`
	StepID    string `json:"stepId"`
}

func (s *stepSink) Write(b []byte) (int, error) {
	s.partial = append(s.partial, b...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		var k stepKey
		if err := json.Unmarshal(s.partial[:i], &k); err != nil {
			return 0, fmt.Errorf("export line: %w", err)
		}
		s.steps = append(s.steps, k)
		s.partial = s.partial[i+1:]
	}
}
