package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/hook"
)

// defaultHookTimeout is the agent's timeout the installer writes: longer than the guardian's
// default hold timeout (2m, --hold-timeout), so a hold's own onTimeout decides before the hook gives up.
const defaultHookTimeout = 10 * time.Minute

// hookConfig is the settings of `vigil hook` and `vigil hook install`.
type hookConfig struct {
	Guardian        string
	guardianSet     bool
	APIKey          string
	Timeout         time.Duration
	OnGuardianError string
	// Install only.
	Project   string
	User      bool
	Uninstall bool
}

const hookUsage = `usage: vigil hook claude-code|codex|gemini|cursor [--guardian URL] [--timeout D] [--on-guardian-error deny|allow]
       vigil hook install claude-code|codex|gemini|cursor [--project DIR | --user] [--uninstall] [--guardian URL] [--timeout D]`

// parseHookConfig reads the flags of the hook commands, VIGIL_* variables first.
func parseHookConfig(name string, args []string, install bool, stderr io.Writer) (hookConfig, []string, error) {
	cfg := hookConfig{}
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprintln(stderr, hookUsage)
		fset.PrintDefaults()
	}
	fset.StringVar(&cfg.Guardian, "guardian", "http://127.0.0.1:7878", "the guardian's URL (VIGIL_URL)")
	fset.DurationVar(&cfg.Timeout, "timeout", time.Minute, "the agent's timeout for this hook; the hook answers just before it (install writes 10m)")
	fset.StringVar(&cfg.OnGuardianError, "on-guardian-error", "deny", "answer when the guardian is unreachable, not answering, or refuses the step: deny or allow")
	if install {
		cfg.Timeout = defaultHookTimeout
		fset.StringVar(&cfg.Project, "project", "", "install into this project's settings (e.g. DIR/.claude/settings.json)")
		fset.BoolVar(&cfg.User, "user", false, "install into your user settings (the default)")
		fset.BoolVar(&cfg.Uninstall, "uninstall", false, "remove Vigil's hooks instead")
	}
	// The guardian's URL is VIGIL_URL, as for every client; the rest follow VIGIL_<FLAG>.
	env := map[string]string{"guardian": "VIGIL_URL"}
	var envErr error
	fset.VisitAll(func(f *flag.Flag) {
		key, ok := env[f.Name]
		if !ok {
			key = "VIGIL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		}
		if v, ok := os.LookupEnv(key); ok && v != "" {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %w", key, v, err)
			}
			if f.Name == "guardian" {
				cfg.guardianSet = true
			}
		}
	})
	if envErr != nil {
		return cfg, nil, envErr
	}
	// Flags may come before or after the agent name.
	var rest []string
	for {
		if err := fset.Parse(args); err != nil {
			return cfg, nil, err
		}
		if fset.NArg() == 0 {
			break
		}
		rest = append(rest, fset.Arg(0))
		args = fset.Args()[1:]
	}
	fset.Visit(func(f *flag.Flag) {
		if f.Name == "guardian" {
			cfg.guardianSet = true
		}
	})
	cfg.APIKey = os.Getenv("VIGIL_API_KEY")
	switch cfg.OnGuardianError {
	case "deny", "allow":
	default:
		return cfg, nil, fmt.Errorf("-on-guardian-error: must be deny or allow, got %q", cfg.OnGuardianError)
	}
	if cfg.Timeout <= 0 {
		return cfg, nil, fmt.Errorf("-timeout: must be positive, got %s", cfg.Timeout)
	}
	if cfg.Project != "" && cfg.User {
		return cfg, nil, errors.New("--project and --user exclude each other")
	}
	return cfg, rest, nil
}

// runHook implements `vigil hook AGENT` (one hook call: payload on stdin, answer on stdout)
// and `vigil hook install AGENT`.
func runHook(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "install" {
		return runHookInstall(args[1:], stdout, stderr)
	}
	cfg, rest, err := parseHookConfig("hook", args, false, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && (len(rest) != 1 || !slices.Contains(hook.Agents, rest[0])) {
		err = fmt.Errorf("name one agent: %s", strings.Join(hook.Agents, ", "))
	}
	if err != nil {
		fmt.Fprintf(stderr, "vigil hook: %v\n%s\n", err, hookUsage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return hook.Run(ctx, rest[0], stdin, stdout, stderr, hook.Config{
		Guardian:        cfg.Guardian,
		APIKey:          cfg.APIKey,
		Timeout:         cfg.Timeout,
		OnGuardianError: cfg.OnGuardianError,
		Env:             hook.Env{User: loginName(), Now: time.Now},
	})
}

// loginName is the developer's login name for context.user: $USER, which cron, some
// containers and IDE launchers leave unset, then the account of the process, then
// $LOGNAME.
func loginName() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("LOGNAME")
}

func runHookInstall(args []string, stdout, stderr io.Writer) int {
	cfg, rest, err := parseHookConfig("hook install", args, true, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && (len(rest) != 1 || !slices.Contains(hook.Agents, rest[0])) {
		err = fmt.Errorf("name one agent: %s", strings.Join(hook.Agents, ", "))
	}
	if err != nil {
		fmt.Fprintf(stderr, "vigil hook install: %v\n%s\n", err, hookUsage)
		return 2
	}
	agent := rest[0]
	dir := cfg.Project
	if dir == "" {
		if dir, err = os.UserHomeDir(); err != nil {
			fmt.Fprintf(stderr, "vigil hook install: %v\n", err)
			return 1
		}
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "vigil hook install: find the vigil binary: %v\n", err)
		return 1
	}
	// The absolute path, so the agent finds this binary whatever its PATH.
	words := []string{hook.QuoteArg(exe), "hook", agent, "--timeout", cfg.Timeout.String()}
	if cfg.guardianSet {
		words = append(words, "--guardian", hook.QuoteArg(cfg.Guardian))
	}
	if cfg.OnGuardianError != "deny" {
		words = append(words, "--on-guardian-error", cfg.OnGuardianError)
	}
	opts := hook.InstallOptions{Agent: agent, Dir: dir, Command: strings.Join(words, " "),
		Timeout: cfg.Timeout, Uninstall: cfg.Uninstall}
	if agent == hook.Codex {
		// Codex reads the user's hooks and its trust of every hook from CODEX_HOME.
		if opts.CodexHome, err = codexHome(); err != nil {
			fmt.Fprintf(stderr, "vigil hook install: %v\n", err)
			return 1
		}
		if cfg.Project == "" {
			opts.Dir = ""
		}
	}
	res, err := hook.Install(opts)
	if err != nil {
		fmt.Fprintf(stderr, "vigil hook install: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", res.Path)
	for _, c := range res.Changes {
		fmt.Fprintf(stdout, "  %s\n", c)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "vigil hook install: warning: %s\n", w)
	}
	if cfg.Uninstall {
		return 0
	}
	if agent == hook.Codex && cfg.Project != "" && !hook.CodexProjectTrusted(opts.CodexHome, cfg.Project) {
		fmt.Fprintf(stdout, "Codex loads a project's hooks only once you trust the project: Codex asks the first time it runs in %s.\n", cfg.Project)
	}
	fmt.Fprintf(stdout, "Start Vigil (`vigil`, or `vigil serve`), then use %s as usual: every prompt, tool call and result shows in the console.\n", agent)
	return 0
}

// codexHome is where Codex keeps the user's config: CODEX_HOME, by default ~/.codex.
func codexHome() (string, error) {
	if h := os.Getenv("CODEX_HOME"); h != "" {
		return filepath.Abs(h)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the Codex home: %w", err)
	}
	return filepath.Join(home, ".codex"), nil
}
