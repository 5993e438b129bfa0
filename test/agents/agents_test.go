//go:build agents

// Package agents runs the real coding-agent CLIs against scripted loopback fakes of their
// model APIs, with Vigil's hook installed, and checks that allow runs the command, deny
// blocks it (the model reads the reason), a held command runs once approved, a modify rule's
// rewritten command runs instead of the original, and a prompt a modify rule must change
// never reaches the model.
//
//	make test-agents
//
// needs VIGIL_BIN (the built binary) and VIGIL_AGENTS_BIN (a directory holding the claude,
// codex and gemini executables, from npm). An agent whose executable is missing is skipped.
package agents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const agentRules = `rules:
  - id: allow-touch
    when: inputs.command startsWith "touch allowed"
    action: allow
    message: creating the marker is fine
  - id: no-rm
    when: inputs.command matches "\\brm\\b"
    action: deny
    message: "rm is not allowed here"
    reasonCode: DANGEROUS_COMMAND
  - id: review-touch
    when: inputs.command startsWith "touch held"
    action: hold
    hold: {timeout: 2m, onTimeout: deny}
    message: "creating the held marker needs approval"
  - id: rename-marker
    when: inputs.command startsWith "touch original"
    action: modify
    modify:
      set: {command: '"touch rewritten.txt"'}
    message: "the marker is written under another name"
  - id: no-secret-in-prompt
    when: kind == "message" && text contains "SECRET-1234"
    action: modify
    modify: {redact: ['SECRET-[0-9]+']}
    message: "the prompt carried a key"
`

// defaultPrompt is what the developer asks; secretPrompt carries a key a rule redacts.
const (
	defaultPrompt = "run the command"
	secretPrompt  = "run the command, the deploy key is SECRET-1234"
)

// guardian is a running `vigil serve`.
type guardian struct {
	URL string
}

func startGuardian(t *testing.T) *guardian {
	t.Helper()
	bin := os.Getenv("VIGIL_BIN")
	if bin == "" {
		t.Skip("VIGIL_BIN is not set (make test-agents sets it)")
	}
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rules, []byte(agentRules), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "vigil.db"), "--rules", rules)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	urlRe := regexp.MustCompile(`listening on (http://\S+)`)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := urlRe.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return &guardian{URL: m[1]}
		}
	}
	t.Fatal("vigil serve did not print its address")
	return nil
}

// approveNext approves the next pending hold as soon as it appears.
func (g *guardian) approveNext(t *testing.T, done <-chan struct{}) <-chan error {
	errc := make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				errc <- fmt.Errorf("the agent finished before a hold appeared")
				return
			case <-tick.C:
			}
			resp, err := http.Get(g.URL + "/api/holds?status=pending")
			if err != nil {
				continue
			}
			var v struct {
				Holds []struct {
					ID string `json:"id"`
				} `json:"holds"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil || len(v.Holds) == 0 {
				continue
			}
			resp, err = http.Post(g.URL+"/api/holds/"+v.Holds[0].ID+"/approve", "application/json",
				strings.NewReader(`{"operator":"test-agents","note":"approved by the agents test"}`))
			if err != nil {
				errc <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errc <- fmt.Errorf("approve: HTTP %d", resp.StatusCode)
				return
			}
			errc <- nil
			return
		}
	}()
	return errc
}

// script is what the fake model does: ask for one shell command, then repeat what the tool
// (or the hook's refusal) said.
type script struct {
	mu      sync.Mutex
	command string
	seen    []string // every tool result the model was sent
	leaked  bool     // a request to the model carried the secret of secretPrompt
}

// watch records whether a request to the fake model carries the secret, and leaves the
// body to be read again.
func (s *script) watch(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	if bytes.Contains(b, []byte("SECRET-1234")) {
		s.mu.Lock()
		s.leaked = true
		s.mu.Unlock()
	}
}

func (s *script) sawSecret() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaked
}

func (s *script) set(cmd string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.command, s.seen, s.leaked = cmd, nil, false
}

func (s *script) results() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func agentBin(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("VIGIL_AGENTS_BIN")
	if dir == "" {
		t.Skip("VIGIL_AGENTS_BIN is not set (make test-agents sets it)")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is not installed: %v", name, err)
	}
	return p
}

// install runs `vigil hook install AGENT` into the project and home of the run.
func install(t *testing.T, g *guardian, agent string, args ...string) string {
	t.Helper()
	out, err := exec.Command(os.Getenv("VIGIL_BIN"), append([]string{"hook", "install", agent, "--guardian", g.URL}, args...)...).CombinedOutput()
	require.NoError(t, err, string(out))
	t.Logf("vigil hook install %s:\n%s", agent, out)
	return string(out)
}

type agentCase struct {
	name    string
	command string
	marker  string // the file the command creates, or the victim it deletes
	want    string // allow, deny, hold, modify, blocked (the prompt never reaches the model)
	prompt  string
}

var agentCases = []agentCase{
	{"allow runs the command", "touch allowed.txt", "allowed.txt", "allow", defaultPrompt},
	{"deny blocks it and the model reads why", "rm victim.txt", "victim.txt", "deny", defaultPrompt},
	{"hold runs once approved", "touch held.txt", "held.txt", "hold", defaultPrompt},
	{"modify runs the rewritten command", "touch original.txt", "rewritten.txt", "modify", defaultPrompt},
	// No agent lets a hook rewrite a prompt: a modify of one blocks it, with the reason.
	{"a prompt to modify is blocked", "touch prompted.txt", "prompted.txt", "blocked", secretPrompt},
}

// runCases runs each case with run (which starts the agent in dir and returns its output).
// blocked is what the agent's output says when a hook blocks the prompt.
func runCases(t *testing.T, g *guardian, s *script, dir, blocked string, run func(t *testing.T, prompt string) string) {
	for _, c := range agentCases {
		t.Run(c.name, func(t *testing.T) {
			s.set(c.command)
			marker := filepath.Join(dir, c.marker)
			_ = os.Remove(marker)
			original := filepath.Join(dir, "original.txt")
			_ = os.Remove(original)
			if c.want == "deny" {
				require.NoError(t, os.WriteFile(marker, []byte("keep me"), 0o600))
			}
			var approved <-chan error
			done := make(chan struct{})
			if c.want == "hold" {
				approved = g.approveNext(t, done)
			}
			start := time.Now()
			out := run(t, c.prompt)
			close(done)
			t.Logf("%s took %s", c.command, time.Since(start).Round(time.Millisecond))
			if approved != nil {
				require.NoError(t, <-approved)
			}
			switch c.want {
			case "blocked":
				require.False(t, s.sawSecret(), "the model must not see the prompt\n%s", out)
				require.NoFileExists(t, marker, "nothing runs\n%s", out)
				require.Contains(t, out, blocked, "the developer reads why")
			case "modify":
				require.FileExists(t, marker, "the rewritten command must run\n%s", out)
				require.NoFileExists(t, original, "the original command must not run\n%s", out)
			case "deny":
				require.FileExists(t, marker, "the denied rm must not run\n%s", out)
				require.Contains(t, strings.Join(s.results(), "\n"), "rm is not allowed here (Vigil rule no-rm)",
					"the model reads the reason\n%s", out)
			default:
				require.FileExists(t, marker, "the command must run\n%s", out)
			}
		})
	}
}
