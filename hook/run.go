package hook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// Config is one hook invocation's settings; main fills it from flags and VIGIL_*.
type Config struct {
	// Guardian is the guardian's base URL, e.g. http://127.0.0.1:7878.
	Guardian string
	// APIKey is the agent key in team mode.
	APIKey string
	// Timeout is the agent's own timeout for this hook. The hook answers before it: an
	// agent that kills a slow hook runs the tool (Claude Code, Codex and Gemini CLI treat a
	// timed-out hook as a non-blocking error).
	Timeout time.Duration
	// OnGuardianError is "deny" (default) or "allow": the answer when the guardian cannot
	// be reached or refuses the request.
	OnGuardianError string
	Env             Env
	// HTTPClient, when set, replaces the default client (tests).
	HTTPClient *http.Client
	// Probe times the checks of the guardian's health while a step is unanswered; the zero
	// value takes the defaults.
	Probe Probe
}

// Margin is how long before the agent's timeout the hook gives up waiting and answers
// itself: process teardown and the agent's reading of stdout must fit in it.
const Margin = 3 * time.Second

// Run answers one hook call: payload on stdin, answer on stdout, exit code returned.
func Run(ctx context.Context, agent string, stdin io.Reader, stdout, stderr io.Writer, cfg Config) int {
	out := run(ctx, agent, stdin, cfg)
	if out.Stdout != "" {
		_, _ = io.WriteString(stdout, out.Stdout)
	}
	if out.Stderr != "" {
		_, _ = io.WriteString(stderr, strings.TrimRight(out.Stderr, "\n")+"\n")
	}
	return out.Code
}

func run(ctx context.Context, agent string, stdin io.Reader, cfg Config) Output {
	data, err := io.ReadAll(io.LimitReader(stdin, maxPayload+1))
	if err != nil {
		return blocked(fmt.Errorf("read stdin: %w", err))
	}
	call, err := Translate(agent, data, cfg.Env)
	if err != nil {
		// Exit 2 with the reason on stderr blocks the call in every agent: an unreadable
		// payload must not let a tool run unseen.
		return blocked(err)
	}
	if call.Phase == PhaseOther {
		return call.Answer(Verdict{Kind: Pass})
	}
	wait := cfg.Timeout - Margin
	if wait <= 0 {
		wait = cfg.Timeout / 2
	}
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	res, err := sendWatched(ctx, call, cfg)
	if err != nil {
		var silent *notAnsweringError
		return guardianError(call, cfg, err, ctx.Err() != nil && !errors.As(err, &silent))
	}
	return call.Answer(VerdictOf(call, res))
}

func send(ctx context.Context, call *Call, cfg Config) (*aos.Result, error) {
	var opts []aos.ClientOption
	if cfg.HTTPClient != nil {
		opts = append(opts, aos.WithHTTPClient(cfg.HTTPClient))
	}
	if cfg.APIKey != "" {
		opts = append(opts, aos.WithAPIKey(cfg.APIKey))
	}
	client := aos.NewClient(strings.TrimRight(cfg.Guardian, "/")+"/aos", opts...)
	return client.Call(ctx, call.Method, call.Params)
}

// guardianError answers when no verdict came: the guardian is down, stopped answering,
// refused the step, or a held step was not decided before the hook's own deadline.
func guardianError(call *Call, cfg Config, err error, timedOut bool) Output {
	var reason string
	var rpcErr *aos.Error
	var httpErr *aos.HTTPError
	var silent *notAnsweringError
	tooLarge := !timedOut && (errors.As(err, &rpcErr) && rpcErr.Code == aos.CodeRequestTooLarge ||
		errors.As(err, &httpErr) && httpErr.StatusCode == http.StatusRequestEntityTooLarge)
	switch {
	case timedOut:
		// The hold's own onTimeout is the guardian's to apply and it did not answer in
		// time: the hook cannot know it, so it fails closed.
		reason = fmt.Sprintf("Vigil: the review of this step did not finish within the hook's %s timeout, so it is denied. Ask the operator to decide sooner, or give held steps a hold timeout shorter than the hook's.", cfg.Timeout)
	case tooLarge && call.Phase == PhaseAfterTool:
		reason = fmt.Sprintf("Vigil: this tool output is too large for the guardian to review (%v), so it is withheld. Produce a smaller output (read a file in parts, filter a command's output), or raise the guardian's --max-body.", rootCause(err))
	case tooLarge:
		// The key is fine and the guardian is up: only the size is wrong.
		reason = fmt.Sprintf("Vigil: this step is too large for the guardian to review (%v), so it is denied. Split the work into smaller steps, or raise the guardian's --max-body.", rootCause(err))
	case errors.As(err, &silent):
		reason = fmt.Sprintf("Vigil guardian at %s took the step but is not answering: its health check (GET %s) %v. Check its log or restart it (`vigil` or `vigil serve`), or pass --on-guardian-error allow to let the agent run unguarded.", cfg.Guardian, guardian.HealthPath, silent.cause)
	case errors.As(err, &rpcErr):
		reason = fmt.Sprintf("Vigil refused the step: %s (JSON-RPC %d). Check VIGIL_API_KEY and the guardian's log.", rpcErr.Message, rpcErr.Code)
	default:
		reason = fmt.Sprintf("Vigil guardian at %s is not reachable (%v). Start it with `vigil` (desktop window) or `vigil serve`, set VIGIL_URL to where it runs, or pass --on-guardian-error allow to let the agent run unguarded.", cfg.Guardian, rootCause(err))
	}
	// A tool's output already exists: when the guardian cannot be asked there is nothing to
	// hold back. A held output whose review did not finish is another matter: a rule wanted
	// it reviewed, so it is denied as a deny verdict of a result would be. So is an output
	// too large to review, as a too-large tool call is: the guardian is up, and a rule may
	// have wanted the output withheld or redacted.
	unasked := call.Phase == PhaseAfterTool && !tooLarge
	if !timedOut && (unasked || cfg.OnGuardianError == "allow") {
		out := call.Answer(Verdict{Kind: Pass})
		out.Stderr = reason
		switch {
		case tooLarge:
			// The reason says what a deny does ("withheld", "denied"): this one goes on.
			what := "step"
			if call.Phase == PhaseAfterTool {
				what = "tool output"
			}
			out.Stderr = fmt.Sprintf("Vigil: this %s is too large for the guardian to review (%v), so it went on unreviewed (allowed: --on-guardian-error allow). Raise the guardian's --max-body to have it reviewed.", what, rootCause(err))
		case !unasked:
			out.Stderr += " (allowed: --on-guardian-error allow)"
		}
		return out
	}
	out := call.Answer(Verdict{Kind: Deny, Reason: reason})
	out.Stderr = reason
	if call.Phase == PhaseAfterTool && call.Agent == Cursor {
		// Cursor's after-hooks cannot withhold anything: say what really happened.
		if tooLarge {
			out.Stderr = fmt.Sprintf("Vigil: this tool output is too large for the guardian to review (%v). Cursor's after-hooks only observe, so the output reached the model unreviewed. Raise the guardian's --max-body.", rootCause(err))
		} else {
			out.Stderr = fmt.Sprintf("Vigil: the review of this tool output did not finish within the hook's %s timeout. Cursor's after-hooks only observe, so the output reached the model anyway.", cfg.Timeout)
		}
	}
	return out
}

func blocked(err error) Output {
	return Output{Stderr: "vigil hook: " + err.Error(), Code: 2}
}

// rootCause is the innermost error ("connection refused"), which says more to a developer
// than the whole chain of the request.
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
