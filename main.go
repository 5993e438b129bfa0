// Command vigil is a guardian for AI agents: an AOS endpoint that decides every step with
// rules, stores it, and shows it live to operators in a console (desktop window or browser).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/gateway"
	"github.com/vigil-guardian/vigil/gateway/agentapi"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/guardian/observe/webhooks"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/postgres"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

// Config is every setting of a running guardian, filled from flags and VIGIL_* variables.
type Config struct {
	Addr         string
	DB           string
	RulesFile    string
	RulesMode    string
	LogLevel     string
	LogFormat    string
	MaxBodyBytes int64
	HoldTimeout  time.Duration
	MaxHolds     int
	// MaxHoldBytes bounds the summed request sizes of pending holds; MaxHoldsPerAgent is
	// one agent's share of MaxHolds (0: a quarter), and the same share of MaxHoldBytes.
	MaxHoldBytes     int64
	MaxHoldsPerAgent int
	// SessionCacheBytes bounds the memory of the session histories kept for the rules.
	SessionCacheBytes int64
	// ReplicaHeartbeat is how often a replica on PostgreSQL reports itself alive;
	// ReplicaDeadAfter how long one may stay silent before another ends its pending holds.
	ReplicaHeartbeat, ReplicaDeadAfter time.Duration
	// DefaultDecision is answered when no rule matches.
	DefaultDecision string
	// OnRuleError is the decision when an enforced rule fails at run time (fail closed).
	OnRuleError string
	// RuleBudget is the time one rule may take on one step; 0 turns the time limit off.
	RuleBudget time.Duration
	// Team mode and transport security.
	Insecure      bool
	TLSCert       string
	TLSKey        string
	AgentRate     float64
	AgentBurst    int
	SecureCookies bool
	// Retention of stored steps.
	RetainAge      time.Duration
	RetainSize     int64
	RetainInterval time.Duration
	// PublicURL is the address operators reach the console at through a reverse proxy.
	PublicURL string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the client.
	TrustedProxies []netip.Prefix
	// AgentAPI are the Agent API upstreams served at /agentapi/NAME/ (NAME=URL each);
	// AgentAPIApprovals says who answers their MCP approval requests: vigil or client.
	AgentAPI          []string
	AgentAPIApprovals string
	// MCP are the MCP Streamable HTTP upstreams served at /mcp/NAME (NAME=URL each);
	// MCPShowDenied keeps tools a rule denies outright in their tools/list answers.
	MCP           []string
	MCPShowDenied bool
	// HTTP timeouts (0: none) and connection bounds (MaxConns 0: from the open-file limit).
	ReadTimeout   time.Duration
	WriteTimeout  time.Duration
	IdleTimeout   time.Duration
	MaxConnsPerIP int
	MaxConns      int
	// MaxLiveClients bounds the live stream's connections; MaxLivePerClient one operator's
	// (or, without accounts, one address's).
	MaxLiveClients   int
	MaxLivePerClient int
	// AAP lists the AAP gateways' upstreams as NAME=URL, served at /aap/NAME/.
	AAP aapSpecs
	// Observability: a metrics listener without authentication, OpenTelemetry traces
	// (Traces is set by -otel-traces or the standard OTEL_* variables), webhooks.
	MetricsAddr    string
	Traces         bool
	TracesProtocol string
	TracesContent  bool
	Webhooks       []webhooks.Target
	WebhookSecret  string
	// webhookSpecs are the --webhook and VIGIL_WEBHOOK values as given; checkConfig parses
	// them into Webhooks.
	webhookSpecs []webhookSpec
}

// webhookSpec is one webhook value and whether its variable gave it.
type webhookSpec struct {
	value   string
	fromEnv bool
}

func main() {
	// The guardian's live heap is small (tens of MB) but every step allocates: collecting
	// less often buys a quarter more throughput for a few tens of MB. GOGC still overrides.
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	// Help and the version are answered before the desktop window takes the flags as its own.
	if cmd == "" && len(args) > 0 {
		switch {
		case isHelp(args[0]):
			cmd, args = "help", args[1:]
		case isVersion(args[0]):
			cmd, args = "version", args[1:]
		}
	}
	if cmd == "" {
		return runDesktop(args, stdout, stderr)
	}
	f, ok := command(cmd)
	if !ok {
		fmt.Fprintf(stderr, "vigil: unknown command %q\n\n", cmd)
		usage(stderr)
		return 2
	}
	return f(args, stdout, stderr)
}

// command returns the function that runs the named command. `vigil help CMD` finds commands
// here too, so a command added to it has its help there at once.
func command(name string) (func(args []string, stdout, stderr io.Writer) int, bool) {
	switch name {
	case "serve":
		return runServe, true
	case "rules":
		return runRules, true
	case "export":
		return runExport, true
	case "backup":
		return runBackup, true
	case "migrate":
		return runMigrate, true
	case "keys":
		return runKeys, true
	case "users":
		return runUsers, true
	case "hook":
		return func(args []string, stdout, stderr io.Writer) int { return runHook(args, os.Stdin, stdout, stderr) }, true
	case "completion":
		return runCompletion, true
	case "mcp":
		return func(args []string, stdout, stderr io.Writer) int { return runMCP(args, os.Stdin, stdout, stderr) }, true
	case "version":
		return runVersion, true
	case "help":
		return runHelp, true
	}
	return nil, false
}

// runVersion implements `vigil version` (also `vigil --version` and `vigil -v`).
func runVersion(args []string, stdout, stderr io.Writer) int {
	const use = "usage: vigil version   print the version (also vigil --version, vigil -v)\n"
	switch {
	case len(args) == 0:
		fmt.Fprintf(stdout, "vigil %s\n", version)
		return 0
	case isHelp(args[0]):
		fmt.Fprint(stdout, use)
		return 0
	}
	fmt.Fprintf(stderr, "vigil version: unexpected argument %q\n%s", args[0], use)
	return 2
}

// runHelp implements `vigil help [COMMAND [SUBCOMMAND]]`: the commands, or one command's help
// exactly as `vigil COMMAND [SUBCOMMAND] --help` prints it.
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) || args[0] == "help" {
		usage(stdout)
		return 0
	}
	f, ok := command(args[0])
	if !ok {
		fmt.Fprintf(stderr, "vigil help: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return f(append(slices.Clone(args[1:]), "--help"), stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Vigil watches over AI agents: an AOS guardian with an operator console.

Usage:
  vigil [flags]                 desktop window + guardian (falls back to serve without a display)
  vigil serve [flags]           headless guardian + console over HTTP
  vigil rules check FILE...     compile rules files; exit 1 on any error
  vigil rules test FILE...      run the test cases in rules files; exit 1 on any failure
  vigil keys create|list|revoke agent API keys
  vigil users add|list|remove|passwd operator accounts
  vigil hook AGENT [flags]      a coding agent's hook: payload on stdin, answer on stdout
                                (AGENT: claude-code, codex, gemini, cursor)
  vigil hook install AGENT [--project DIR | --user] [--uninstall]
                                add Vigil's hook to the agent's settings
  vigil mcp wrap [--guardian URL] [--name NAME] -- CMD ARGS...
                                run an MCP stdio server behind Vigil (what an MCP client launches)
  vigil export [flags]          steps and audit as JSON Lines (safe while serving)
  vigil backup [flags] DEST     verified consistent copy of the database (safe while serving)
  vigil migrate --from FILE --to postgres://…
                                copy a SQLite installation into an empty PostgreSQL database
  vigil completion bash|zsh|fish  shell completion script (see docs/operations.md)
  vigil version                 print the version (also --version, -v)
  vigil help [COMMAND]          this text (also -h, --help), or COMMAND's help

Run 'vigil COMMAND -h' or 'vigil help COMMAND' for a command's flags ('vigil serve -h' for
the guardian's; the desktop window takes the same). Every flag also reads VIGIL_<FLAG>
(e.g. VIGIL_ADDR).

Exit codes: 0 success, 1 failure (a rule test failed, the server could not start or
stopped with an error), 2 bad usage (unknown command or flag, or a flag value out of
range). 'vigil hook' exits as the coding agent expects (see docs/coding-agents.md).
`)
}

// isVersion reports whether arg asks for the version.
func isVersion(arg string) bool {
	switch arg {
	case "-v", "-version", "--version":
		return true
	}
	return false
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

// parseConfig reads flags, with VIGIL_* environment variables as defaults.
func parseConfig(name string, args []string, stderr io.Writer) (Config, error) {
	cfg := Config{}
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.StringVar(&cfg.Addr, "addr", "127.0.0.1:7878", "listen address (loopback by default)")
	fset.StringVar(&cfg.DB, "db", defaultDBPath(), "SQLite database file, or a postgres:// URL (shared by replicas)")
	fset.StringVar(&cfg.RulesFile, "rules", "", "rules file (YAML or JSON) loaded at start and on SIGHUP")
	fset.StringVar(&cfg.RulesMode, "rules-mode", "merge", "how the rules file meets stored rules: merge (file wins for its ids) or replace")
	fset.StringVar(&cfg.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fset.StringVar(&cfg.LogFormat, "log-format", "text", "log format: text or json")
	fset.Int64Var(&cfg.MaxBodyBytes, "max-body", 10<<20, "largest accepted /aos request body in bytes")
	fset.DurationVar(&cfg.HoldTimeout, "hold-timeout", rules.DefaultHoldTimeout, "how long a held step waits for an operator when its rule names no timeout (and a paused session's steps)")
	fset.IntVar(&cfg.MaxHolds, "max-holds", 1000, "most holds pending at once; further holds fail closed")
	cfg.MaxHoldBytes = 256 << 20
	fset.Var((*byteSize)(&cfg.MaxHoldBytes), "max-hold-bytes", "most bytes of held requests pending at once (e.g. 256MiB); further holds fail closed")
	cfg.SessionCacheBytes = 512 << 20 // guardian.DefaultSessionCacheBytes
	fset.Var((*byteSize)(&cfg.SessionCacheBytes), "session-cache-bytes", "memory for the recent history of active sessions (e.g. 512MiB); beyond it the least recently used sessions are reloaded from the database on their next step")
	fset.DurationVar(&cfg.ReplicaHeartbeat, "replica-heartbeat", time.Second, "PostgreSQL replicas: how often this replica reports itself alive")
	fset.DurationVar(&cfg.ReplicaDeadAfter, "replica-dead-after", 10*time.Second, "PostgreSQL replicas: how long a replica may miss heartbeats before another ends its pending holds as interrupted (at least 3 heartbeats)")
	fset.IntVar(&cfg.MaxHoldsPerAgent, "max-holds-per-agent", 0, "most holds one agent (or session without an agent id) may have pending, and its share of -max-hold-bytes; 0 = a quarter of -max-holds")
	fset.BoolVar(&cfg.Insecure, "insecure", false, "serve a non-loopback address without operator accounts and agent keys (not recommended)")
	fset.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate file (PEM); with -tls-key serves HTTPS")
	fset.StringVar(&cfg.TLSKey, "tls-key", "", "TLS private key file (PEM)")
	fset.Float64Var(&cfg.AgentRate, "agent-rate", 0, "requests per second allowed per agent API key (per client address without keys); 0 = unlimited")
	fset.IntVar(&cfg.AgentBurst, "agent-burst", 0, "requests allowed at once above -agent-rate (default: the rate)")
	fset.DurationVar(&cfg.RetainAge, "retain-age", 0, "delete steps older than this (e.g. 720h); 0 keeps them")
	fset.Var((*byteSize)(&cfg.RetainSize), "retain-size", "keep the database's used size under this (e.g. 2GB) by deleting the oldest steps; 0 sets no bound")
	fset.DurationVar(&cfg.RetainInterval, "retain-interval", 5*time.Minute, "time between retention passes")
	fset.StringVar(&cfg.PublicURL, "public-url", "", "the console's public address behind a reverse proxy (accepted as origin and host)")
	fset.Func("trusted-proxies", "reverse proxies (CIDR or address, comma-separated) whose X-Forwarded-For names the client", func(v string) error {
		p, err := auth.ParseTrustedProxies(v)
		cfg.TrustedProxies = p
		return err
	})
	fset.Func("agentapi", "Agent API upstream NAME=URL served at /agentapi/NAME/process (repeatable; VIGIL_AGENTAPI: comma-separated)", func(v string) error {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u == "" {
				continue
			}
			if _, _, err := gateway.ParseUpstream(u); err != nil {
				return err
			}
			cfg.AgentAPI = append(cfg.AgentAPI, u)
		}
		return nil
	})
	fset.Func("mcp", "MCP server NAME=URL (its Streamable HTTP endpoint) served at /mcp/NAME (repeatable; VIGIL_MCP: comma-separated)", func(v string) error {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u == "" {
				continue
			}
			if _, _, err := gateway.ParseUpstream(u); err != nil {
				return err
			}
			cfg.MCP = append(cfg.MCP, u)
		}
		return nil
	})
	fset.BoolVar(&cfg.MCPShowDenied, "mcp-show-denied", false, "keep in an MCP server's tools/list the tools a rule denies outright (by default they are hidden)")
	fset.StringVar(&cfg.AgentAPIApprovals, "agentapi-approvals", agentapi.ApprovalsVigil, "who answers an Agent API upstream's MCP approval requests: vigil (rules and holds decide) or client (what Vigil allows goes to the client with Vigil's verdict)")
	fset.DurationVar(&cfg.ReadTimeout, "read-timeout", time.Minute, "longest time to read one request, body included; 0 = no bound")
	fset.DurationVar(&cfg.WriteTimeout, "write-timeout", time.Minute, "longest time to answer one request (a held step's wait comes on top); 0 = no bound")
	fset.DurationVar(&cfg.IdleTimeout, "idle-timeout", time.Minute, "close a keep-alive connection idle this long; 0 = -read-timeout")
	fset.IntVar(&cfg.MaxConnsPerIP, "max-conns-per-ip", 64, "most connections held from one client address (loopback and trusted proxies exempt); 0 = unlimited")
	fset.IntVar(&cfg.MaxConns, "max-conns", 0, "most connections held in all (0: three quarters of the open-file limit, at most 10000)")
	fset.IntVar(&cfg.MaxLiveClients, "max-live-clients", 256, "most live-stream (/api/live) connections at once; more are refused with 503")
	fset.IntVar(&cfg.MaxLivePerClient, "max-live-per-client", 16, "most live-stream connections of one signed-in operator (or one client address without accounts); more are refused with 429")
	fset.BoolVar(&cfg.SecureCookies, "secure-cookies", false, "mark session cookies Secure on plain HTTP (behind a TLS-terminating proxy)")
	fset.StringVar(&cfg.DefaultDecision, "default-decision", "allow", "decision when no rule matches: allow or deny")
	fset.StringVar(&cfg.OnRuleError, "on-rule-error", "deny", "decision when an enforced rule fails at run time: deny or allow")
	fset.DurationVar(&cfg.RuleBudget, "rule-budget", 100*time.Millisecond, "time one rule may take on one step; past it the rule fails (see -on-rule-error); 0 = no time limit")
	fset.Var(&cfg.AAP, "aap", "AAP v3 gateway NAME=URL: serve the AAP agent server at URL under /aap/NAME/, deciding every message and tool call (repeatable; VIGIL_AAP comma-separated)")
	fset.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "also serve GET /metrics here, without authentication, for scrapers (e.g. 127.0.0.1:9464); /metrics on -addr needs a console session")
	fset.BoolVar(&cfg.Traces, "otel-traces", false, "export traces over OTLP (also on when OTEL_EXPORTER_OTLP_ENDPOINT is set or OTEL_TRACES_EXPORTER=otlp)")
	fset.BoolVar(&cfg.TracesContent, "otel-content", false, "put step content (requests, tool arguments, answers) into exported spans")
	// The values are only collected here: an error returned to the flag package would be
	// printed with the whole usage, and a variable's message would echo the URL, whose path
	// is often the secret. checkConfig parses them and reports one line.
	argsParsed := false
	fset.Func("webhook", "POST holds and denials to this URL (repeatable); options after #: events=hold.created,hold.resolved,step.denied|deny|all, format=json|slack, name=NAME", func(v string) error {
		for _, spec := range strings.Fields(v) {
			cfg.webhookSpecs = append(cfg.webhookSpecs, webhookSpec{value: spec, fromEnv: !argsParsed})
		}
		return nil
	})
	fset.StringVar(&cfg.WebhookSecret, "webhook-secret", "", "sign webhook deliveries with HMAC-SHA256 under this secret (X-Vigil-Signature); prefer VIGIL_WEBHOOK_SECRET")
	// Environment first, so flags on the command line win. fromEnv remembers which
	// variable set a flag, so that a bad value is reported under the name it was given.
	var envErr error
	fromEnv := map[string]string{}
	fset.VisitAll(func(f *flag.Flag) {
		key := envKey(f.Name)
		if v, ok := os.LookupEnv(key); ok {
			fromEnv[f.Name] = key
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %w", key, v, err)
			}
		}
	})
	cfg.AAP.fromEnv = true
	argsParsed = true
	// -h is answered before a bad variable is reported: help, and the completion scripts
	// that read it, work whatever the environment holds. A bad value is one line (the
	// caller prints the error), not the error, the whole usage and the error again.
	fset.SetOutput(io.Discard)
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fset.SetOutput(stderr)
			fset.Usage()
		} else if strings.HasPrefix(err.Error(), "flag provided but not defined") {
			err = fmt.Errorf("%w (%s -h lists the flags)", err, strings.TrimSpace("vigil "+strings.TrimPrefix(name, "vigil")))
		}
		return cfg, err
	}
	fset.SetOutput(stderr)
	if envErr != nil {
		return cfg, envErr
	}
	if fset.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fset.Arg(0))
	}
	onCommandLine := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	src := flagSource{fromEnv: fromEnv, onCommandLine: onCommandLine}
	on, protocol := otelTraces(os.LookupEnv)
	cfg.Traces, cfg.TracesProtocol = cfg.Traces || on, protocol
	return cfg, checkConfig(&cfg, src)
}

// envKey is the variable that sets a flag: VIGIL_ and its name, dashes made underscores.
func envKey(flagName string) string {
	return "VIGIL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagSource says where a flag's value came from: the command line, its VIGIL_* variable, or
// neither (the default).
type flagSource struct {
	fromEnv       map[string]string
	onCommandLine map[string]bool
}

// name is how an error names the flag: as its variable when that set the value, so an
// operator looks in the environment (a unit file, a container) rather than the command line.
func (s flagSource) name(flagName string) string {
	if key, ok := s.fromEnv[flagName]; ok && !s.onCommandLine[flagName] {
		return key
	}
	return "-" + flagName
}

// given reports whether the flag or its variable was set.
func (s flagSource) given(flagName string) bool {
	_, env := s.fromEnv[flagName]
	return env || s.onCommandLine[flagName]
}

// logLevels are the values of --log-level. Case is ignored, as slog ignored it before the
// names were checked.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
}

// checkConfig refuses the values a flag gives no meaning. The packages the values go to
// replace zero or negative ones with their defaults, and a logger falls back to info: left
// to them, a typo would start a guardian that quietly differs from what was asked, where
// bad usage is promised exit code 2 and a message. Where 0 documents a meaning (off, no
// bound, the automatic value) it stays valid.
func checkConfig(cfg *Config, src flagSource) error {
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return errors.New("-tls-cert and -tls-key go together")
	}
	for _, spec := range cfg.webhookSpecs {
		t, err := webhooks.ParseTarget(spec.value)
		if err != nil {
			// Named as given: the variable and the flag both add targets.
			name := "-webhook"
			if spec.fromEnv {
				name = envKey("webhook")
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		cfg.Webhooks = append(cfg.Webhooks, t)
	}
	cfg.webhookSpecs = nil
	// A flag that only tunes another must not be set alone: the operator meant something
	// (a burst limit, signed deliveries, replicas' liveness) that would silently not
	// happen. The replica flags are refused when given at all on SQLite, whatever their
	// value: no replica there reads them.
	onPostgres := postgres.IsURL(cfg.DB)
	// Named as the database was given: "-db postgres://…", or VIGIL_DB=postgres://… when
	// the variable named the SQLite file.
	withPostgres := "-db postgres://…"
	if name := src.name("db"); !strings.HasPrefix(name, "-") {
		withPostgres = name + "=postgres://…"
	}
	companions := []struct {
		flag, needs string
		alone       bool
	}{
		{"agent-burst", src.name("agent-rate"), cfg.AgentBurst > 0 && cfg.AgentRate == 0},
		{"webhook-secret", src.name("webhook"), cfg.WebhookSecret != "" && len(cfg.Webhooks) == 0},
		{"replica-heartbeat", withPostgres, src.given("replica-heartbeat") && !onPostgres},
		{"replica-dead-after", withPostgres, src.given("replica-dead-after") && !onPostgres},
	}
	for _, c := range companions {
		if c.alone {
			return fmt.Errorf("%s: has no effect without %s", src.name(c.flag), c.needs)
		}
	}
	_, levelOK := logLevels[strings.ToLower(cfg.LogLevel)]
	// The dead-after default follows a slower heartbeat, as the registry does; only a value
	// someone chose below three heartbeats is refused.
	deadAfterOK := cfg.ReplicaDeadAfter > 0 &&
		(cfg.ReplicaDeadAfter >= 3*cfg.ReplicaHeartbeat || !src.given("replica-dead-after"))
	q := strconv.Quote
	checks := []struct {
		flag string
		ok   bool
		must string // what the value must be, after "must"
		got  string
	}{
		{"addr", validHostPort(cfg.Addr), "be HOST:PORT (port 0 picks a free one)", q(cfg.Addr)},
		{"db", cfg.DB != "", "name a SQLite file or a postgres:// URL", q(cfg.DB)},
		{"rules-mode", cfg.RulesMode == "merge" || cfg.RulesMode == "replace", "be merge or replace", q(cfg.RulesMode)},
		{"log-level", levelOK, "be debug, info, warn or error", q(cfg.LogLevel)},
		{"log-format", cfg.LogFormat == "text" || cfg.LogFormat == "json", "be text or json", q(cfg.LogFormat)},
		{"max-body", cfg.MaxBodyBytes >= 1, "be at least 1 (bytes)", fmt.Sprint(cfg.MaxBodyBytes)},
		{"hold-timeout", cfg.HoldTimeout > 0, "be positive (e.g. 2m)", cfg.HoldTimeout.String()},
		{"max-holds", cfg.MaxHolds >= 1, "be at least 1", fmt.Sprint(cfg.MaxHolds)},
		{"max-hold-bytes", cfg.MaxHoldBytes >= 1, "be at least 1 byte (e.g. 256MiB)", fmt.Sprint(cfg.MaxHoldBytes)},
		{"max-holds-per-agent", cfg.MaxHoldsPerAgent >= 0 && cfg.MaxHoldsPerAgent <= cfg.MaxHolds,
			fmt.Sprintf("be between 0 (a quarter of -max-holds) and -max-holds (%d)", cfg.MaxHolds), fmt.Sprint(cfg.MaxHoldsPerAgent)},
		{"session-cache-bytes", cfg.SessionCacheBytes >= 1, "be at least 1 byte (e.g. 512MiB)", fmt.Sprint(cfg.SessionCacheBytes)},
		{"replica-heartbeat", cfg.ReplicaHeartbeat > 0, "be positive (e.g. 1s)", cfg.ReplicaHeartbeat.String()},
		{"replica-dead-after", deadAfterOK,
			fmt.Sprintf("be at least three heartbeats (3 × -replica-heartbeat = %s)", 3*cfg.ReplicaHeartbeat), cfg.ReplicaDeadAfter.String()},
		{"default-decision", cfg.DefaultDecision == "allow" || cfg.DefaultDecision == "deny", "be allow or deny", q(cfg.DefaultDecision)},
		{"on-rule-error", cfg.OnRuleError == "allow" || cfg.OnRuleError == "deny", "be allow or deny", q(cfg.OnRuleError)},
		{"rule-budget", cfg.RuleBudget >= 0, "not be negative (0: no time limit)", cfg.RuleBudget.String()},
		{"agent-rate", cfg.AgentRate >= 0 && !math.IsInf(cfg.AgentRate, 0), // NaN fails >= 0
			"be a number of requests per second, 0 or more (0: unlimited)", fmt.Sprint(cfg.AgentRate)},
		{"agent-burst", cfg.AgentBurst >= 0, "not be negative (0: the rate)", fmt.Sprint(cfg.AgentBurst)},
		{"retain-age", cfg.RetainAge >= 0, "not be negative (0 keeps steps of any age)", cfg.RetainAge.String()},
		{"retain-interval", cfg.RetainInterval > 0, "be positive (e.g. 5m)", cfg.RetainInterval.String()},
		{"public-url", cfg.PublicURL == "" || validPublicURL(cfg.PublicURL),
			"be an absolute http(s) URL such as https://vigil.example.com", q(cfg.PublicURL)},
		{"agentapi-approvals", cfg.AgentAPIApprovals == agentapi.ApprovalsVigil || cfg.AgentAPIApprovals == agentapi.ApprovalsClient,
			"be vigil or client", q(cfg.AgentAPIApprovals)},
		{"read-timeout", cfg.ReadTimeout >= 0, "not be negative (0: none)", cfg.ReadTimeout.String()},
		{"write-timeout", cfg.WriteTimeout >= 0, "not be negative (0: none)", cfg.WriteTimeout.String()},
		{"idle-timeout", cfg.IdleTimeout >= 0, "not be negative (0: as -read-timeout)", cfg.IdleTimeout.String()},
		{"max-conns-per-ip", cfg.MaxConnsPerIP >= 0, "not be negative (0: unlimited)", fmt.Sprint(cfg.MaxConnsPerIP)},
		{"max-conns", cfg.MaxConns >= 0, "not be negative (0: from the open-file limit)", fmt.Sprint(cfg.MaxConns)},
		{"max-live-clients", cfg.MaxLiveClients >= 1, "be at least 1", fmt.Sprint(cfg.MaxLiveClients)},
		{"max-live-per-client", cfg.MaxLivePerClient >= 1, "be at least 1", fmt.Sprint(cfg.MaxLivePerClient)},
		{"metrics-addr", cfg.MetricsAddr == "" || validHostPort(cfg.MetricsAddr), "be HOST:PORT, or empty for none", q(cfg.MetricsAddr)},
	}
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("%s: must %s, got %s", src.name(c.flag), c.must, c.got)
		}
	}
	cfg.LogLevel = strings.ToLower(cfg.LogLevel)
	return nil
}

// validHostPort reports whether addr is a listen address with a port. Checked here so a
// malformed one is bad usage, not a failed start with a message about something else.
func validHostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port != ""
}

func defaultDBPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "vigil.db"
	}
	return filepath.Join(dir, "vigil", "vigil.db")
}

// newLogger builds the logger of a Config that checkConfig accepted. A Config built without
// it (tests) gets info for an empty level, the zero slog.Level.
func newLogger(cfg Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: logLevels[strings.ToLower(cfg.LogLevel)]}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func runServe(args []string, stdout, stderr io.Writer) int {
	return launch("serve", args, stdout, stderr, "", func(ctx context.Context, srv *server, _ *slog.Logger) error {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				srv.ReloadRules(ctx)
			}
		}
	})
}

// launch parses the flags, starts the guardian, runs body until it returns (the signal
// context ends, or the desktop window closes), then shuts the guardian down cleanly.
func launch(name string, args []string, stdout, stderr io.Writer, banner string,
	body func(ctx context.Context, srv *server, log *slog.Logger) error) int {
	prefix := "vigil " + name
	if name == "vigil" {
		prefix = "vigil"
	}
	cfg, err := parseConfig(name, args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return 2
	}
	log := newLogger(cfg, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := startServer(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return 1
	}
	fmt.Fprintf(stdout, "Vigil guardian listening on %s (AOS endpoint /aos)%s\n", srv.URL, banner)
	code := 0
	if err := body(ctx, srv, log); err != nil {
		log.Error(name, "err", err)
		code = 1
	}
	log.Info("shutting down")
	if err := srv.Shutdown(10 * time.Second); err != nil {
		log.Error("shutdown", "err", err)
		code = 1
	}
	return code
}
