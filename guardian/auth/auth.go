// Package auth is Vigil's team mode: agents authenticate to /aos with API keys (optionally
// scoped to one agent id) and are rate limited per key; operators sign in to the console with
// accounts that carry a role (viewer, reviewer, admin), held in cookie sessions with CSRF
// protection. With no accounts and a loopback listener everything stays open, so the desktop
// app needs no setup.
package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Operator roles. Each includes what the ones before it may do.
const (
	// RoleViewer reads everything the console shows.
	RoleViewer = "viewer"
	// RoleReviewer also decides holds and pauses, resumes or blocks sessions.
	RoleReviewer = "reviewer"
	// RoleAdmin also edits rules, API keys and accounts.
	RoleAdmin = "admin"
)

// roleRank orders roles; 0 is no valid role.
func roleRank(role string) int {
	switch role {
	case RoleViewer:
		return 1
	case RoleReviewer:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// ValidRole reports whether role is one of viewer, reviewer and admin.
func ValidRole(role string) bool { return roleRank(role) > 0 }

// ErrInvalid marks a request the caller got wrong (a bad name, role, password or duration).
var ErrInvalid = errors.New("invalid")

// ErrLastAdmin is returned when an admin tries to remove the only admin account.
var ErrLastAdmin = errors.New("the last admin account cannot be removed from the console")

// Store is what auth keeps in the database: agent keys, operator accounts and console
// sign-in sessions, as every storage backend provides them.
type Store = storage.Auth

// Config is team mode's settings; main fills it from flags.
type Config struct {
	// Loopback is true when the server listens on loopback addresses only. With no operator
	// accounts the console is then open to clients on this machine (zero-config).
	Loopback bool
	// Insecure opens the console and /aos without accounts or keys on any address (the
	// operator passed --insecure).
	Insecure bool
	// RequireAgentKeys demands a key on /aos even before any key has been created.
	// Otherwise keys are required as soon as one exists (revoked ones included).
	RequireAgentKeys bool
	// AgentRate is the sustained number of /aos requests per second allowed per API key, or
	// per client address for requests without a key; 0 disables the limit.
	AgentRate float64
	// AgentBurst is how many requests may arrive at once above the rate (default: the rate
	// rounded up, at least 1).
	AgentBurst int
	// MaxBuckets bounds the rate limiter's memory: idle buckets are evicted beyond it
	// (default 10000).
	MaxBuckets int
	// SessionTTL is how long a console sign-in lasts (default 12h).
	SessionTTL time.Duration
	// SecureCookies marks the session cookie Secure even on plain-HTTP requests; set it
	// behind a reverse proxy that terminates TLS. Requests that arrive over TLS always get
	// Secure cookies.
	SecureCookies bool
	// AllowedOrigins are further origins (besides the server's own) whose pages may make
	// changes through the open, zero-config console, e.g. the desktop webview's.
	AllowedOrigins []string
	// BcryptCost is the cost of new password hashes (default bcrypt.DefaultCost).
	BcryptCost int
	// RefreshInterval is how often keys are re-read from the database, so that keys created
	// or revoked by another process (the vigil keys command) take effect (default 2s).
	// Changes made through this server take effect at once.
	RefreshInterval time.Duration
	// FlushInterval is how often keys' last-use times are written (default 30s).
	FlushInterval time.Duration
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the real client
	// (for sign-in throttling, rate limits and the audit log). The header of any other peer
	// is ignored. The zero-config console still refuses every forwarded request.
	TrustedProxies []netip.Prefix
}

func (c *Config) withDefaults() {
	if c.AgentRate < 0 {
		c.AgentRate = 0
	}
	if c.AgentBurst <= 0 {
		c.AgentBurst = max(1, int(c.AgentRate+0.999999))
	}
	if c.MaxBuckets <= 0 {
		c.MaxBuckets = 10000
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.BcryptCost == 0 {
		c.BcryptCost = bcrypt.DefaultCost
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = 2 * time.Second
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 30 * time.Second
	}
}

// Options are team mode's collaborators. Store is required.
type Options struct {
	Store Store
	// Publish receives the audit events of key, account and sign-in changes, for the live
	// stream. Optional; it must not block.
	Publish func(record.Event)
	Logger  *slog.Logger
	// Now is the clock (default time.Now); tests pass a controllable one.
	Now func() time.Time
}

// Auth authenticates agents and operators. It is safe for concurrent use.
type Auth struct {
	// epoch moves with every change to accounts, keys and sign-ins (Epoch).
	epoch   atomic.Uint64
	cfg     Config
	store   Store
	publish func(record.Event)
	log     *slog.Logger
	now     func() time.Time

	keys     keyCache
	agents   *limiter // per key (or client address) request rate; nil when unlimited
	misses   *limiter // per client address, for keys not in memory (each costs a query)
	logins   signInThrottle
	bcryptCh chan struct{} // bounds concurrent password hashing, which is CPU-heavy by design

	origins map[string]bool
	// dummyHash is compared against when a sign-in names no account, so that answering
	// takes as long as for a real one and does not reveal which names exist.
	dummyOnce sync.Once
	dummyHash []byte
	dummyErr  error
}

// New builds team mode and loads the API keys into memory.
func New(ctx context.Context, cfg Config, opts Options) (*Auth, error) {
	if opts.Store == nil {
		return nil, errors.New("auth: a store is required")
	}
	cfg.withDefaults()
	if cfg.BcryptCost < bcrypt.MinCost || cfg.BcryptCost > bcrypt.MaxCost {
		return nil, fmt.Errorf("auth: bcrypt cost %d out of range %d..%d", cfg.BcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	a := &Auth{
		cfg:      cfg,
		store:    opts.Store,
		publish:  opts.Publish,
		log:      opts.Logger,
		now:      opts.Now,
		misses:   newLimiter(5, 20, cfg.MaxBuckets),
		logins:   newSignInThrottle(cfg.MaxBuckets),
		bcryptCh: make(chan struct{}, 2),
		origins:  make(map[string]bool, len(cfg.AllowedOrigins)),
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if cfg.AgentRate > 0 {
		a.agents = newLimiter(cfg.AgentRate, float64(cfg.AgentBurst), cfg.MaxBuckets)
	}
	for _, o := range cfg.AllowedOrigins {
		a.origins[strings.TrimRight(o, "/")] = true
	}
	a.keys.init()
	if err := a.refreshKeys(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// Run keeps the key cache in step with the database (keys created or revoked by another
// process), writes keys' last-use times, and removes expired sessions, until ctx ends. It
// writes the last-use times a final time before returning.
func (a *Auth) Run(ctx context.Context) {
	t := time.NewTicker(a.cfg.RefreshInterval)
	defer t.Stop()
	lastFlush, lastPurge := a.now(), time.Time{}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := a.flushLastUsed(fctx); err != nil {
				a.log.Warn("auth: write key last-use times", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
		if err := a.refreshKeys(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("auth: reload api keys", "err", err)
		}
		now := a.now()
		if now.Sub(lastFlush) >= a.cfg.FlushInterval {
			lastFlush = now
			if err := a.flushLastUsed(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("auth: write key last-use times", "err", err)
			}
		}
		if now.Sub(lastPurge) >= 10*time.Minute {
			lastPurge = now
			if n, err := a.store.DeleteExpiredAuthSessions(ctx, now); err != nil && ctx.Err() == nil {
				a.log.Warn("auth: remove expired sessions", "err", err)
			} else if n > 0 {
				a.log.Debug("auth: removed expired sessions", "count", n)
			}
		}
	}
}

func (a *Auth) emit(ev record.Event) {
	a.epoch.Add(1) // every change emits: a sign-in may have ended (see Epoch)
	if a.publish != nil && ev.Seq != 0 {
		a.publish(ev)
	}
}

// SignInsChanged moves Epoch for a change made elsewhere (another process, another
// replica) that may have ended a sign-in, which this Auth learns of from its audit event.
func (a *Auth) SignInsChanged() { a.epoch.Add(1) }

// Epoch changes whenever a sign-in may have ended (a logout, an account removed, a password
// changed, and any other change to accounts, keys and sign-ins): the live stream authorizes
// its connections again when it moves (live.Options.AuthEpoch).
func (a *Auth) Epoch() uint64 { return a.epoch.Load() }

// Context values set by the middlewares.
type ctxKey int

const (
	principalKey ctxKey = iota
	agentKeyKey
)

// principal is who a console request acts as.
type principal struct {
	name, role, csrf string
	// open is true in zero-config mode: no accounts, nobody signed in.
	open bool
	// tokenHash identifies the session (for sign-out).
	tokenHash []byte
}

func principalFrom(ctx context.Context) (principal, bool) {
	p, ok := ctx.Value(principalKey).(principal)
	return p, ok
}

// OperatorFrom returns the signed-in operator of a console request that passed
// ConsoleMiddleware. It is false in zero-config mode, where the request names its operator
// itself.
func OperatorFrom(r *http.Request) (string, bool) {
	p, ok := principalFrom(r.Context())
	if !ok || p.open || p.name == "" {
		return "", false
	}
	return p.name, true
}

// RoleFrom returns the role of the signed-in operator of a console request; false as for
// OperatorFrom.
func RoleFrom(r *http.Request) (string, bool) {
	p, ok := principalFrom(r.Context())
	if !ok || p.open {
		return "", false
	}
	return p.role, true
}

// agentKey is the verified API key of an /aos request.
type agentKey struct {
	id, agentID string
}

// AgentScope returns the agent id the request's API key is scoped to. ok is false when the
// request carried no key or an unscoped one.
func AgentScope(ctx context.Context) (agentID string, ok bool) {
	k, found := ctx.Value(agentKeyKey).(*agentKey)
	if !found || k.agentID == "" {
		return "", false
	}
	return k.agentID, true
}

// KeyID returns the id of the API key an /aos request authenticated with.
func KeyID(ctx context.Context) (string, bool) {
	k, found := ctx.Value(agentKeyKey).(*agentKey)
	if !found {
		return "", false
	}
	return k.id, true
}

// KeyOf returns the API key an /aos request authenticated with: its id and the agent id it is
// scoped to ("" for any agent). ok is false when the request carried no key.
func KeyOf(ctx context.Context) (id, agentID string, ok bool) {
	k, found := ctx.Value(agentKeyKey).(*agentKey)
	if !found {
		return "", "", false
	}
	return k.id, k.agentID, true
}

// CheckAgent returns an unauthorized JSON-RPC error (code -32004) when the request's key is
// scoped to an agent other than agentID. A step that names no agent passes: it claims no
// identity, and the caller may attribute it to the key's agent (see AgentScope).
func CheckAgent(ctx context.Context, agentID string) error {
	scope, ok := AgentScope(ctx)
	if !ok || agentID == "" || agentID == scope {
		return nil
	}
	return &aos.Error{
		Code:    aos.CodeUnauthorized,
		Message: fmt.Sprintf("unauthorized: key is scoped to agent %q", scope),
		Data:    map[string]any{"agentId": agentID, "keyAgentId": scope},
	}
}

// IsLoopback reports whether addr (host:port, or a bare host) names only loopback
// interfaces. An empty host listens on every interface and is not loopback.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckBind refuses to serve on a non-loopback address unless authentication is configured
// (operator accounts and agent keys both exist) or the operator insisted with --insecure.
func CheckBind(addr string, authConfigured, insecure bool) error {
	if IsLoopback(addr) || authConfigured || insecure {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without authentication: anyone who can reach it "+
		"could read agent traffic and change rules. Create an operator account "+
		"(vigil users add NAME --role admin) and an agent key (vigil keys create --agent ID), "+
		"listen on 127.0.0.1, or pass --insecure to serve without authentication anyway", addr)
}

// Configured reports whether both operator accounts and agent keys exist, which is what
// CheckBind's authConfigured asks.
func (a *Auth) Configured(ctx context.Context) (bool, error) {
	users, err := a.store.HasUsers(ctx)
	if err != nil {
		return false, err
	}
	keys, err := a.store.HasAPIKeys(ctx)
	if err != nil {
		return false, err
	}
	return users && keys, nil
}
