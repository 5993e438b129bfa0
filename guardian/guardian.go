// Package guardian is Vigil's HTTP surface and decision pipeline: the AOS endpoint, the
// console API and the embedded UI.
package guardian

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
)

// Config holds the guardian's settings; main fills it from flags and environment.
type Config struct {
	// Version is reported by ping and /api/info.
	Version string
	// MaxBodyBytes limits one POST /aos body (default 10 MiB).
	MaxBodyBytes int64
	// MaxBatch limits the number of requests in one JSON-RPC batch (default 1000).
	MaxBatch int
	// HistorySize is how many recent steps of a session rules can see (default 200).
	HistorySize int
	// SessionCache bounds how many sessions' histories stay in memory (0: no bound by
	// number; SessionCacheBytes bounds them).
	SessionCache int
	// SessionCacheBytes bounds the memory the sessions' histories in memory take
	// (DefaultSessionCacheBytes when 0); the least recently used are evicted beyond it.
	SessionCacheBytes int64
	// PublicURL is the base URL printed and reported by /api/info, e.g. http://127.0.0.1:7878.
	PublicURL string
	// DBPath and RulesFile are reported by /api/info.
	DBPath    string
	RulesFile string
	// AllowedHosts, when set, are the only Host header names served (ports ignored).
	AllowedHosts []string
	// MaxPageBytes bounds one list answer of the console API (default apijson.MaxPageBytes).
	MaxPageBytes int
	// AllowedOrigins are the origins, besides the server's own, whose pages may post to /aos
	// (e.g. the desktop webview's). Any other Origin header is refused.
	AllowedOrigins []string
}

func (c *Config) withDefaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 10 << 20
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.HistorySize <= 0 {
		c.HistorySize = 200
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.MaxPageBytes <= 0 {
		c.MaxPageBytes = apijson.MaxPageBytes
	}
	origins := make([]string, len(c.AllowedOrigins))
	for i, o := range c.AllowedOrigins {
		origins[i] = strings.TrimRight(o, "/")
	}
	c.AllowedOrigins = origins
}

// Publisher receives the guardian's stored steps for the live stream (other events reach
// it from their own services). It must not block.
type Publisher interface {
	// PublishStep publishes a stored step's "step" event (its payload the record).
	PublishStep(rec *record.StepRecord)
}

// Options are the guardian's collaborators. Store is required; the rest have defaults.
type Options struct {
	Store  Store
	Policy Policy
	// Holds parks held steps and knows session controls; nil means hold decisions deny.
	Holds     HoldService
	Publisher Publisher
	Logger    *slog.Logger
	// Now is the clock; tests pass a fixed one.
	Now func() time.Time
	// UI is the console's static files (ui.FS: the committed ui/dist); nil (a no_ui build)
	// serves a short page saying the console is not built in.
	UI fs.FS
	// Mount adds further routes (rules, holds, live) to the mux.
	Mount []func(mux *http.ServeMux)
	// CheckAgent, when set, refuses a step whose context.agent.id the request's credentials
	// may not speak as (auth.CheckAgent); its *aos.Error is answered as is.
	CheckAgent func(ctx context.Context, agentID string) error
	// KeyOf, when set, returns the API key a request authenticated with: its id and the
	// agent id it is scoped to, ok false without a key (auth.KeyOf). Steps record the key,
	// and a session belongs to the key that opened it.
	KeyOf func(ctx context.Context) (id, agentID string, ok bool)
}

// Guardian decides steps and serves the HTTP surface.
type Guardian struct {
	cfg        Config
	store      Store
	policy     Policy
	holds      HoldService
	pub        Publisher
	log        *slog.Logger
	now        func() time.Time
	sessions   *sessionCache
	handler    http.Handler
	checkAgent func(ctx context.Context, agentID string) error
	keyOf      func(ctx context.Context) (id, agentID string, ok bool)
}

// New builds a guardian.
func New(cfg Config, opts Options) (*Guardian, error) {
	if opts.Store == nil {
		return nil, errors.New("guardian: a store is required")
	}
	cfg.withDefaults()
	g := &Guardian{
		cfg:        cfg,
		store:      opts.Store,
		policy:     opts.Policy,
		holds:      opts.Holds,
		pub:        opts.Publisher,
		log:        opts.Logger,
		now:        opts.Now,
		checkAgent: opts.CheckAgent,
		keyOf:      opts.KeyOf,
	}
	if g.policy == nil {
		g.policy = AllowAll{}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.sessions = newSessionCache(cfg.SessionCache, cfg.SessionCacheBytes, cfg.HistorySize, opts.Store)
	g.handler = g.routes(opts.UI, opts.Mount)
	return g, nil
}

// Handler is the whole HTTP surface: /aos, /api and the console UI.
func (g *Guardian) Handler() http.Handler { return g.handler }

// Policy returns the guardian's policy.
func (g *Guardian) Policy() Policy { return g.policy }

// clientAddr is the request's remote host, for attribution of context-free steps.
func clientAddr(r *http.Request) string {
	return strings.TrimSpace(r.RemoteAddr)
}
