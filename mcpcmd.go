package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/gateway"
	"github.com/vigil-guardian/vigil/gateway/mcp"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/auth"
)

const mcpUsage = `usage: vigil mcp wrap [--guardian URL] [--name NAME] [--on-guardian-error deny|allow] [--show-denied] -- CMD ARGS...`

// mcpWrapConfig is the configuration of `vigil mcp wrap`.
type mcpWrapConfig struct {
	Guardian        string
	Name            string
	OnGuardianError string
	// ShowDenied keeps in tools/list answers the tools a rule denies outright.
	ShowDenied bool
	APIKey     string
	Command    []string
}

// parseMCPWrap reads the flags of `vigil mcp wrap`, VIGIL_* variables first.
func parseMCPWrap(args []string, stderr io.Writer) (mcpWrapConfig, error) {
	cfg := mcpWrapConfig{}
	fset := flag.NewFlagSet("mcp wrap", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprintln(stderr, mcpUsage)
		fset.PrintDefaults()
	}
	fset.StringVar(&cfg.Guardian, "guardian", "http://127.0.0.1:7878", "the guardian's URL (VIGIL_URL)")
	fset.StringVar(&cfg.Name, "name", "", "the server's name in Vigil's sessions (VIGIL_NAME; default: the command's base name)")
	fset.StringVar(&cfg.OnGuardianError, "on-guardian-error", mcp.OnErrorDeny, "what happens to a judged message when the guardian cannot be asked: deny or allow")
	fset.BoolVar(&cfg.ShowDenied, "show-denied", false, "keep in tools/list the tools a rule denies outright (VIGIL_MCP_SHOW_DENIED; by default they are hidden)")
	// --show-denied reads the variable of serve's --mcp-show-denied: one setting for both.
	env := map[string]string{"guardian": "VIGIL_URL", "show-denied": "VIGIL_MCP_SHOW_DENIED"}
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
		}
	})
	if envErr != nil {
		return cfg, envErr
	}
	if err := fset.Parse(args); err != nil {
		return cfg, err
	}
	cfg.Command = fset.Args()
	if len(cfg.Command) == 0 {
		return cfg, errors.New("name the MCP server's command after --")
	}
	switch cfg.OnGuardianError {
	case mcp.OnErrorDeny, mcp.OnErrorAllow:
	default:
		return cfg, fmt.Errorf("-on-guardian-error: must be deny or allow, got %q", cfg.OnGuardianError)
	}
	if cfg.Name == "" {
		base := cfg.Command[0]
		if i := strings.LastIndexAny(base, `/\`); i >= 0 {
			base = base[i+1:]
		}
		cfg.Name = base
	}
	if _, _, err := gateway.ParseUpstream(cfg.Name + "=http://x"); err != nil {
		return cfg, fmt.Errorf("-name: %w", err)
	}
	cfg.APIKey = os.Getenv("VIGIL_API_KEY")
	return cfg, nil
}

// runMCP implements `vigil mcp wrap`.
func runMCP(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && isHelp(args[0]) {
		args = []string{"wrap", "-h"} // wrap is the only subcommand: its help is mcp's
	}
	if len(args) == 0 || args[0] != "wrap" {
		fmt.Fprintf(stderr, "vigil mcp: want the wrap subcommand\n%s\n", mcpUsage)
		return 2
	}
	cfg, err := parseMCPWrap(args[1:], stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "vigil mcp wrap: %v\n%s\n", err, mcpUsage)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return mcpWrap(ctx, cfg, stdin, stdout, stderr, log)
}

// mcpExitGrace is how long a server may take to exit once its input or output has ended.
const mcpExitGrace = 5 * time.Second

// mcpWrap runs the server as a child and relays between it and the client on stdin/stdout.
// The child's stderr is the client's (MCP clients log it); signals reach the child; the
// exit status is the child's.
func mcpWrap(ctx context.Context, cfg mcpWrapConfig, stdin io.Reader, stdout, stderr io.Writer, log *slog.Logger) int {
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Stderr = stderr
	serverIn, err := cmd.StdinPipe()
	if err != nil {
		fmt.Fprintf(stderr, "vigil mcp wrap: %v\n", err)
		return 1
	}
	serverOut, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "vigil mcp wrap: %v\n", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "vigil mcp wrap: start %s: %v\n", cfg.Command[0], err)
		return 1
	}
	opts := []aos.ClientOption{}
	if cfg.APIKey != "" {
		opts = append(opts, aos.WithAPIKey(cfg.APIKey))
	}
	base := strings.TrimRight(cfg.Guardian, "/")
	// The steps are marked as the MCP gateway's, as `vigil serve --mcp` marks its own, so the
	// console shows them as come through MCP from this server (guardian.GatewayHeader).
	client := aos.NewClient(base+"/aos", append(slices.Clip(opts), aos.WithHeader(guardian.GatewayHeader, "mcp/"+cfg.Name))...)
	scfg := mcp.SessionConfig{ID: "mcp-" + cfg.Name + "-" + randomID(), Upstream: cfg.Name,
		Judge: mcp.Remote(client), OnError: cfg.OnGuardianError, Logger: log}
	if !cfg.ShowDenied {
		scfg.Hides = mcp.HidesRemote(aos.NewClient(base+guardian.PreviewPath, opts...))
	}
	sess := mcp.NewSession(scfg)

	// A signal for Vigil is a signal for the server: it decides how to end.
	go func() {
		<-ctx.Done()
		if cmd.Process != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}()
	// A server that outlives its client's input by the grace period is ended.
	clientDone := func() {
		time.AfterFunc(mcpExitGrace, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
		time.AfterFunc(2*mcpExitGrace, func() { _ = cmd.Process.Kill() })
	}
	relayErr := mcp.Relay(ctx, sess, mcp.Pipes{ClientIn: stdin, ClientOut: stdout, ServerIn: serverIn,
		ServerOut: serverOut, ClientDone: clientDone}, 0)
	if relayErr != nil {
		log.Error("relay ended", "err", relayErr)
		_ = cmd.Process.Kill()
	}
	// The server's output ended: it exits, or is made to after a grace period.
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-time.After(mcpExitGrace):
		_ = cmd.Process.Kill()
		werr = <-waited
	}
	var exit *exec.ExitError
	switch {
	case errors.As(werr, &exit):
		if exit.ExitCode() >= 0 {
			return exit.ExitCode()
		}
		return 1
	case werr != nil || relayErr != nil:
		return 1
	}
	return 0
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Preview lets the MCP gateway hide from tools/list the tools a rule denies outright.
func (l lateGuardian) Preview(ctx context.Context, step *aos.Step, meta guardian.RequestMeta) guardian.Verdict {
	return (*l.g).Preview(ctx, step, meta)
}

// mcpRoutes builds the --mcp gateways; their routes need an agent key as /aos does (in
// X-Vigil-Key, since the client's Authorization belongs to the upstream).
func mcpRoutes(cfg Config, az *auth.Auth, g **guardian.Guardian, log *slog.Logger) ([]func(*http.ServeMux), error) {
	var mounts []func(*http.ServeMux)
	seen := map[string]bool{}
	for _, u := range cfg.MCP {
		name, url, err := gateway.ParseUpstream(u)
		if err != nil {
			return nil, fmt.Errorf("-mcp: %w", err)
		}
		if seen[name] {
			return nil, fmt.Errorf("-mcp: the name %q is given twice", name)
		}
		seen[name] = true
		gw, err := mcp.New(mcp.Config{Name: name, URL: url, MaxBodyBytes: cfg.MaxBodyBytes, ShowDenied: cfg.MCPShowDenied},
			mcp.Options{Decider: lateGuardian{g}, Logger: log, Wrap: az.GatewayMiddleware(mcp.Refuse), KeyOf: auth.KeyOf})
		if err != nil {
			return nil, err
		}
		log.Info("mcp gateway", "route", "/mcp/"+name, "upstream", url)
		mounts = append(mounts, gw.Register)
	}
	return mounts, nil
}
