package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	neturl "net/url"
	"slices"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/guardian/compare"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/guardian/live"
	"github.com/vigil-guardian/vigil/guardian/ruleenv"
	"github.com/vigil-guardian/vigil/guardian/rulesapi"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
	"github.com/vigil-guardian/vigil/storage/postgres"
	"github.com/vigil-guardian/vigil/ui"
)

// server is a running guardian: its listener, HTTP server and everything it owns.
type server struct {
	URL     string
	http    *http.Server
	db      storage.Backend
	log     *slog.Logger
	cancel  context.CancelFunc
	done    chan struct{}
	closers []func()
	holds   *holds.Manager
	rules   *rulesapi.Service
	obs     *observability
	repl    *replication
}

// ReloadRules reads the rules file again (SIGHUP).
func (s *server) ReloadRules(ctx context.Context) {
	n, err := s.rules.Reload(ctx, "sighup")
	if err != nil {
		s.log.Error("reload rules file", "err", err)
		return
	}
	s.log.Info("rules file reloaded", "changed", n)
}

// desktopOrigins are the webview's own origins, accepted for the live stream and the open
// console should a page be served from Wails' asset server.
var desktopOrigins = []string{"wails://wails", "http://wails.localhost", "wails://wails.localhost"}

// liveIdentity is whom a live connection counts against: the signed-in operator, or the
// client's address when the console is open.
func liveIdentity(r *http.Request) string {
	if name, ok := auth.OperatorFrom(r); ok {
		return "operator:" + name
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

// guardianHistory is how many earlier steps of a session rules see, live, in backtests and
// in edit checks: the window `vigil rules test` and rules.Compile use, so a rule file's
// tests pass or fail as the live guardian decides.
const guardianHistory = rules.DefaultMaxHistory

// startServer opens the database, loads rules, and starts serving on cfg.Addr. The URL it
// reports carries the real port when cfg.Addr asks for port 0.
func startServer(ctx context.Context, cfg Config, log *slog.Logger) (*server, error) {
	db, err := openStore(ctx, cfg.DB, log)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", redactDSN(cfg.DB), err)
	}
	if !postgres.IsURL(cfg.DB) {
		// SQLite decides when the file is opened whether it may be written, for as long as
		// it is open (and so for its write-ahead log and WAL index, which every write goes
		// through): a guardian on a file it can only read would journal steps that never
		// reach the tables, and no later moment would mend it. (A PostgreSQL replica starts
		// on a read-only server, which a failover may make writable, and its health check
		// answers 503 meanwhile.)
		if err := db.CheckWritable(ctx); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open database %s: %w", redactDSN(cfg.DB), err)
		}
	}
	origins, publicHost, err := publicOrigins(cfg.PublicURL)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	// Committed events reach the live hub (and, between replicas, every replica) through
	// the bus.
	repl, err := newReplication(ctx, db, log)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	// Team mode. The hub it publishes audit events to is created below, before any request.
	var hub *live.Hub
	az, err := auth.New(ctx, auth.Config{
		Loopback:       auth.IsLoopback(cfg.Addr),
		Insecure:       cfg.Insecure,
		AgentRate:      cfg.AgentRate,
		AgentBurst:     cfg.AgentBurst,
		SecureCookies:  cfg.SecureCookies,
		AllowedOrigins: origins,
		TrustedProxies: cfg.TrustedProxies,
	}, auth.Options{Store: db, Logger: log, Publish: repl.bus.Publish})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("team mode: %w", err)
	}
	configured, err := az.Configured(ctx)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("team mode: %w", err)
	}
	if err := auth.CheckBind(cfg.Addr, configured, cfg.Insecure); err != nil {
		_ = db.Close()
		return nil, err
	}
	if cfg.Insecure && !configured && !auth.IsLoopback(cfg.Addr) {
		log.Warn("serving without authentication on a non-loopback address (--insecure)", "addr", cfg.Addr)
	}
	var tlsConfig *tls.Config
	if cfg.TLSCert != "" {
		// Loaded here so a bad certificate stops the start with a clear error.
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("load TLS certificate: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	tcp, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	maxConns := cmp.Or(cfg.MaxConns, autoMaxConns(openFileLimit()))
	ln := newConnLimiter(tcp, cfg.MaxConnsPerIP, maxConns, func(ip netip.Addr) bool {
		return ip.IsLoopback() || az.TrustedProxy(ip)
	}, log)
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
	}
	url := scheme + "://" + ln.Addr().String()

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &server{URL: url, db: db, log: log, cancel: cancel, done: make(chan struct{}), repl: repl}

	hub = live.NewHub(live.Options{
		Source: db,
		// The desktop window loads the console from the guardian itself; these cover the
		// webview's own origins should a page be served from Wails' asset server.
		AllowedOrigins: origins,
		Logger:         log,
		Authorize:      az.AuthorizeRequest,
		AuthEpoch:      az.Epoch,
		SignInsChanged: az.SignInsChanged,
		// Live connections are capped per signed-in operator, else per client address.
		MaxClients:            cfg.MaxLiveClients,
		MaxClientsPerIdentity: cfg.MaxLivePerClient,
		Identify:              liveIdentity,
	})
	if !repl.bus.Shared() {
		repl.bus.Subscribe(hub) // replicas subscribe it in repl.run, after their own state
	}
	hubDone := make(chan struct{})
	go func() {
		defer close(hubDone)
		hub.Run(runCtx)
	}()
	s.closers = append(s.closers, func() { s.cancel(); <-hubDone })
	// Steps and holds reach the live hub through the fan-out that feeds metrics, traces
	// and webhooks.
	obs, err := startObservability(runCtx, cfg, log, repl.bus, db, cmp.Or(strings.TrimRight(cfg.PublicURL, "/"), url))
	if err != nil {
		cancel()
		<-hubDone
		_ = ln.Close()
		_ = db.Close()
		return nil, err
	}
	s.closers = append(s.closers, obs.Close)
	s.obs = obs
	authDone := make(chan struct{})
	go func() {
		defer close(authDone)
		az.Run(runCtx)
	}()
	s.closers = append(s.closers, func() { s.cancel(); <-authDone })

	budget := cfg.RuleBudget
	if budget == 0 {
		budget = -1 // rules.Options: negative is no time limit, 0 the default
	}
	engine := rules.NewEngine(rules.Options{
		DefaultDecision: rules.Action(cfg.DefaultDecision),
		OnErrorEnforce:  rules.Action(cfg.OnRuleError),
		Budget:          budget,
		// One default for every hold: the rules' holds without a timeout wait what the
		// holds of a paused session wait (holds.Options.DefaultTimeout below).
		HoldTimeout: cfg.HoldTimeout,
		// Rule run-time errors are logged, at most a line per rule per minute; drafts and
		// backtests compile without it (rulesapi's draftOptions).
		Logger: log,
	})
	rs := rulesapi.New(rulesapi.Options{
		Store:           db,
		Engine:          engine,
		Publish:         repl.bus.Publish,
		EnvForStep:      guardian.EnvForStored,
		EnvForDraft:     ruleenv.FromMethodParams,
		ModifiedRequest: guardian.DraftModifiedRequest,
		RulesFile:       cfg.RulesFile,
		HistorySize:     guardianHistory,
		Logger:          log,
		OperatorFrom: func(r *http.Request) string {
			if name, ok := auth.OperatorFrom(r); ok {
				return name
			}
			if op := strings.TrimSpace(r.Header.Get("X-Vigil-Operator")); op != "" {
				return op
			}
			return "api"
		},
	})
	fail := func(err error) (*server, error) {
		cancel()
		<-hubDone
		obs.Close()
		repl.close()
		_ = ln.Close()
		_ = db.Close()
		return nil, err
	}
	// The file is imported before the stored rules are loaded, so a replace import can
	// repair a database whose stored rules no longer compile.
	if cfg.RulesFile != "" {
		n, err := rs.ImportFile(ctx, cfg.RulesFile, cfg.RulesMode, "rules-file")
		if err != nil {
			return fail(fmt.Errorf("load rules file: %w", err))
		}
		log.Info("rules file loaded", "file", cfg.RulesFile, "mode", cfg.RulesMode, "changed", n)
	}
	if err := rs.Start(ctx); err != nil {
		return fail(fmt.Errorf("load stored rules: %w", err))
	}
	s.rules = rs

	policy := &guardian.RulesPolicy{Engine: engine, Log: log}
	holdOpts := holds.Options{
		Store:          db,
		Publish:        obs.fan.Publish,
		ValidateParams: guardian.ValidateParams,
		CheckEdit:      guardian.EditChecker{Policy: policy, Store: db, HistorySize: guardianHistory}.Check,
		Remember: func(ctx context.Context, r rules.Rule, operator string) error {
			return rs.Upsert(ctx, r, operator)
		},
		OperatorFrom:       auth.OperatorFrom,
		MaxPending:         cfg.MaxHolds,
		MaxPendingBytes:    cfg.MaxHoldBytes,
		MaxPendingPerAgent: cfg.MaxHoldsPerAgent,
		DefaultTimeout:     cfg.HoldTimeout,
		Logger:             log,
	}
	holdOpts.InputsFrom = guardian.HoldInputs
	if err := repl.join(ctx, cfg, db, url, obs.fan.Publish, &holdOpts); err != nil {
		return fail(err)
	}
	hm := holds.NewManager(holdOpts)
	// Holds left pending by a previous run are marked interrupted before any new traffic.
	if err := hm.Start(ctx); err != nil {
		return fail(fmt.Errorf("resolve holds left pending: %w", err))
	}
	s.holds = hm
	limitDone := make(chan struct{})
	go func() {
		defer close(limitDone)
		limitHeldMemory(runCtx, hm.PendingBytes)
	}()
	s.closers = append(s.closers, func() { s.cancel(); <-limitDone })
	obs.watch(engine, hm, hub, db)

	var g *guardian.Guardian
	gateways, err := agentAPIRoutes(cfg, az, &g, db, log)
	if err != nil {
		return fail(err)
	}
	aapGW := &aapDecider{}
	aapRoutes, err := aapMounts(ctx, cfg, aapGW, az, engine, db, log)
	if err != nil {
		return fail(err)
	}
	gateways = append(gateways, aapRoutes...)
	mcpGateways, err := mcpRoutes(cfg, az, &g, log)
	if err != nil {
		return fail(err)
	}
	gateways = append(gateways, mcpGateways...)
	g, err = guardian.New(guardian.Config{
		Version:           version,
		MaxBodyBytes:      cfg.MaxBodyBytes,
		PublicURL:         cmp.Or(strings.TrimRight(cfg.PublicURL, "/"), url),
		DBPath:            db.Describe(),
		RulesFile:         cfg.RulesFile,
		AllowedHosts:      allowedHosts(ln.Addr(), publicHost),
		HistorySize:       guardianHistory,
		SessionCacheBytes: cfg.SessionCacheBytes,
		// The desktop webview's origins and --public-url may post to /aos; other pages not.
		AllowedOrigins: origins,
	}, guardian.Options{
		Store:     db,
		Logger:    log,
		UI:        ui.FS(),
		Publisher: obs.fan,
		Holds:     guardian.ManagerHolds{M: hm},
		Policy:    policy,
		Mount: append([]func(*http.ServeMux){
			func(mux *http.ServeMux) { mux.Handle("GET /api/live", hub) },
			hm.Register,
			rs.Register,
			az.Register,
			compare.New(db, log).Register,
			obs.mount(az.AuthorizeRequest),
		}, gateways...),
		CheckAgent: auth.CheckAgent,
		KeyOf:      auth.KeyOf,
	})
	if err != nil {
		return fail(fmt.Errorf("start guardian: %w", err))
	}
	aapGW.g = g
	// The steps of holds a crash left pending are stored before any new step comes. One
	// that cannot be is logged, not fatal: its hold is already ended, so a restart would
	// not try again, only fail to start.
	if err := g.RecordInterrupted(ctx, hm.Interrupted()); err != nil {
		log.Error("steps of interrupted holds not stored", "err", err)
	}
	s.closers = append(s.closers, repl.run(runCtx, hm, rs, g, hub))
	retDone := make(chan struct{})
	go func() {
		defer close(retDone)
		db.RunRetention(runCtx, record.Retention{MaxAge: cfg.RetainAge, MaxBytes: cfg.RetainSize, Interval: cfg.RetainInterval}, log)
	}()
	s.closers = append(s.closers, func() { s.cancel(); <-retDone })
	go publishStats(runCtx, g, hub, log)
	s.http = &http.Server{
		Handler:           guardian.SecurityHeaders(guardian.WithLongWaits(az.Wrap(g.Handler()), cfg.WriteTimeout)),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.done)
		var err error
		if tlsConfig != nil {
			err = s.http.ServeTLS(ln, "", "")
		} else {
			err = s.http.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	log.Info("guardian started", "url", url, "db", db.Describe(), "version", version)
	return s, nil
}

// Shutdown stops accepting requests, lets in-flight ones finish (held steps included, up to
// the grace period), then flushes and closes the database so no answered step is lost.
func (s *server) Shutdown(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	// Answer agents waiting on held steps first (a retryable deny, never an approval), so
	// the HTTP shutdown does not wait for reviewers who are not coming.
	if err := s.holds.Shutdown(ctx); err != nil {
		s.log.Warn("release held steps", "err", err)
	}
	s.repl.leave(ctx)
	errHTTP := s.http.Shutdown(ctx)
	if errHTTP != nil {
		// Grace ran out: close what is left; their steps were already stored or never answered.
		_ = s.http.Close()
	}
	<-s.done
	s.cancel()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	errDB := s.db.Close()
	return errors.Join(errHTTP, errDB)
}

// publishStats sends the traffic summary to live clients every few seconds, only while
// someone is watching.
func publishStats(ctx context.Context, g *guardian.Guardian, hub *live.Hub, log *slog.Logger) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if hub.Clients() == 0 {
			continue
		}
		st, err := g.Stats(ctx)
		if err != nil {
			log.Warn("stats tick", "err", err)
			continue
		}
		if b, err := json.Marshal(st); err == nil {
			hub.PublishStats(b)
		}
	}
}

// allowedHosts limits a loopback guardian to loopback host names (against DNS rebinding);
// a guardian on another address serves any host name, as a reverse proxy may rewrite it.
func allowedHosts(addr net.Addr, publicHost string) []string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return nil
	}
	hosts := []string{"127.0.0.1", "localhost", "::1", tcp.IP.String()}
	if publicHost != "" {
		hosts = append(hosts, publicHost)
	}
	return hosts
}

// publicOrigins adds the origin of --public-url (the address operators use through a
// reverse proxy) to the desktop origins, and returns its host name.
func publicOrigins(public string) ([]string, string, error) {
	origins := slices.Clone(desktopOrigins)
	if public == "" {
		return origins, "", nil
	}
	u, ok := parsePublicURL(public)
	if !ok {
		return nil, "", fmt.Errorf("-public-url: want an absolute http(s) URL such as https://vigil.example.com, got %q", public)
	}
	return append(origins, u.Scheme+"://"+u.Host), u.Hostname(), nil
}

// parsePublicURL reads --public-url: an absolute http(s) URL with a host.
func parsePublicURL(public string) (*neturl.URL, bool) {
	u, err := neturl.Parse(public)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, false
	}
	return u, true
}

// validPublicURL reports whether --public-url is one parsePublicURL accepts; parseConfig
// checks it so a bad one is bad usage (exit 2) rather than a failed start.
func validPublicURL(public string) bool {
	_, ok := parsePublicURL(public)
	return ok
}
