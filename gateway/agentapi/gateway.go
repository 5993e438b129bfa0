// Package agentapi is Vigil's gateway for the Agent API protocol (agentscope-runtime): a
// reverse proxy in front of an agent server's POST /process and GET /health that turns its
// traffic into AOS steps, has the guardian decide them, and applies each verdict in the
// protocol's own terms (a rejected response, a withheld or redacted message, an MCP approval
// answered on the client's behalf).
package agentapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/gateway"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Decider is the guardian's pipeline as the gateway uses it (*guardian.Guardian).
type Decider interface {
	DecideStep(ctx context.Context, step *aos.Step, meta guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error)
	MayAct(step *aos.Step, meta guardian.RequestMeta) bool
}

// Who answers an upstream's mcp_approval_request.
const (
	// ApprovalsVigil: Vigil decides (rules, holds) and answers the upstream itself; the
	// client never sees the request.
	ApprovalsVigil = "vigil"
	// ApprovalsClient: what Vigil allows reaches the client with Vigil's verdict in its
	// metadata, for the client to answer; what Vigil denies is answered by Vigil.
	ApprovalsClient = "client"
)

// Config is one upstream agent server.
type Config struct {
	// Name is the upstream's name in the route /agentapi/NAME/… and in sessions.
	Name string
	// URL is the agent server's base URL; /process and /health are appended to its path.
	URL string
	// Approvals is ApprovalsVigil (default) or ApprovalsClient.
	Approvals string
	// KeepAlive is how often a waiting stream gets an SSE comment (default 15s).
	KeepAlive time.Duration
	// MaxBodyBytes bounds a client's request body (default 10 MiB).
	MaxBodyBytes int64
	// MaxEventBytes bounds one upstream event, and what one turn holds back for verdicts
	// (default 8 MiB).
	MaxEventBytes int
	// MaxResponseBytes bounds a non-streamed upstream answer (default 32 MiB).
	MaxResponseBytes int64
	// MaxRounds bounds the approval answers Vigil sends upstream in one turn (default 8).
	MaxRounds int
	// ApprovalRecordAge is how long the gateway remembers its verdict on an approval
	// request, with ApprovalsClient, to let the client answer only those Vigil let through
	// (default 1h). ApprovalRecords bounds how many it remembers without a database
	// (Options.Approvals nil; default 10000, the oldest forgotten first). A client's answer
	// to a request forgotten is refused.
	ApprovalRecords   int
	ApprovalRecordAge time.Duration
}

// Options are the gateway's collaborators.
type Options struct {
	Decider Decider
	// Client calls the upstream; nil uses a transport without an overall timeout (streams
	// last as long as the agent talks) and a 5-minute wait for response headers.
	Client *http.Client
	Logger *slog.Logger
	// Wrap guards the routes (team mode: auth.GatewayMiddleware); nil serves them open.
	Wrap func(http.Handler) http.Handler
	// KeyOf returns the API key the request authenticated with (auth.KeyOf).
	KeyOf func(ctx context.Context) (id, agentID string, ok bool)
	Now   func() time.Time
	// Approvals keeps the verdicts on approval requests with ApprovalsClient: the
	// guardian's database, which every replica on it shares and which outlives a restart.
	// Nil keeps them in the gateway's memory (Config.ApprovalRecords).
	Approvals storage.Approvals
}

// Gateway serves /agentapi/NAME/process and /agentapi/NAME/health for one upstream.
type Gateway struct {
	cfg    Config
	base   *url.URL
	dec    Decider
	client *http.Client
	log    *slog.Logger
	wrap   func(http.Handler) http.Handler
	keyOf  func(ctx context.Context) (id, agentID string, ok bool)
	now    func() time.Time
	// approvals remembers the verdicts on the approval requests judged, with
	// ApprovalsClient (nil otherwise).
	approvals ledger
}

// New builds a gateway.
func New(cfg Config, opts Options) (*Gateway, error) {
	if opts.Decider == nil {
		return nil, errors.New("agentapi: a decider is required")
	}
	if !gateway.ValidName(cfg.Name) {
		return nil, fmt.Errorf("agentapi: invalid upstream name %q", cfg.Name)
	}
	base, err := url.Parse(cfg.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("agentapi: upstream %s: want an absolute http(s) URL, got %q", cfg.Name, cfg.URL)
	}
	switch cfg.Approvals {
	case "":
		cfg.Approvals = ApprovalsVigil
	case ApprovalsVigil, ApprovalsClient:
	default:
		return nil, fmt.Errorf("agentapi: approvals: want %q or %q, got %q", ApprovalsVigil, ApprovalsClient, cfg.Approvals)
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = 8 << 20
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 32 << 20
	}
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = 8
	}
	if cfg.ApprovalRecords <= 0 {
		cfg.ApprovalRecords = defaultApprovalRecords
	}
	if cfg.ApprovalRecordAge <= 0 {
		cfg.ApprovalRecordAge = defaultApprovalRecordAge
	}
	gw := &Gateway{cfg: cfg, base: base, dec: opts.Decider, client: opts.Client, log: opts.Logger,
		wrap: opts.Wrap, keyOf: opts.KeyOf, now: opts.Now}
	if gw.client == nil {
		gw.client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			ResponseHeaderTimeout: 5 * time.Minute,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
		}}
	}
	if gw.log == nil {
		gw.log = slog.New(slog.DiscardHandler)
	}
	if gw.now == nil {
		gw.now = time.Now
	}
	gw.log = gw.log.With("gateway", "agentapi", "upstream", cfg.Name)
	switch {
	case cfg.Approvals != ApprovalsClient:
		// Vigil answers every approval request itself: no client's answer to check.
	case opts.Approvals != nil:
		gw.approvals = &storeLedger{store: opts.Approvals, age: cfg.ApprovalRecordAge, now: gw.now, log: gw.log}
	default:
		gw.approvals = memoryLedger{newApprovalLedger(cfg.ApprovalRecords, cfg.ApprovalRecordAge, gw.now)}
	}
	return gw, nil
}

// Name is the upstream's name.
func (gw *Gateway) Name() string { return gw.cfg.Name }

// Register adds the gateway's routes to mux.
func (gw *Gateway) Register(mux *http.ServeMux) {
	wrap := gw.wrap
	if wrap == nil {
		wrap = func(h http.Handler) http.Handler { return h }
	}
	prefix := "/agentapi/" + gw.cfg.Name
	mux.Handle("POST "+prefix+"/process", wrap(http.HandlerFunc(gw.handleProcess)))
	mux.Handle("GET "+prefix+"/health", wrap(http.HandlerFunc(gw.handleHealth)))
}

// Refuse writes a refusal of the auth middleware in the protocol's error shape.
func Refuse(w http.ResponseWriter, status int, message string, _ time.Duration) {
	code := codeUnauthorized
	switch status {
	case http.StatusTooManyRequests:
		code = codeRateLimited
	case http.StatusServiceUnavailable:
		code = codeGuardian
	}
	writeJSON(w, status, errorBody(code, message, "", time.Now()))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (gw *Gateway) endpoint(p string) string {
	u := *gw.base
	u.Path = strings.TrimRight(u.Path, "/") + p
	u.RawPath = ""
	return u.String()
}

// unreachable is the 502 message for an upstream that did not answer; the URL is named
// without its credentials.
func (gw *Gateway) unreachable(err error) string {
	u := *gw.base
	u.User = nil
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Sprintf("upstream %q (%s) is unreachable: %v", gw.cfg.Name, u.String(), err)
}

// handleHealth passes GET /health through.
func (gw *Gateway) handleHealth(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, gw.endpoint("/health"), nil)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, errorBody(codeGuardian, "internal error", "", gw.now()))
		return
	}
	gateway.CopyHeaders(req.Header, r.Header)
	resp, err := gw.client.Do(req)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, errorBody(codeUpstream, gw.unreachable(err), "", gw.now()))
		return
	}
	defer resp.Body.Close()
	gateway.CopyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, gw.cfg.MaxResponseBytes))
}

// handleProcess serves POST /process: judge the input, call the upstream, judge and apply
// what it answers.
func (gw *Gateway) handleProcess(w http.ResponseWriter, r *http.Request) {
	w = gateway.TimedWriter(w, r)
	received := gw.now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, gw.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody(codeTooLarge,
				fmt.Sprintf("request too large: the body exceeds %d bytes", gw.cfg.MaxBodyBytes), "", received))
			return
		}
		// A body that breaks off or is malformed on the wire (bad chunked encoding) is a
		// malformed request; a client that went away does not read the answer anyway.
		gw.log.Debug("read body", "err", err)
		writeJSON(w, http.StatusBadRequest, errorBody(codeInvalidRequest, "invalid request: body: could not be read", "", received))
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(codeInvalidRequest, "invalid request: "+err.Error(), "", received))
		return
	}
	t, err := gw.newTurn(w, r, req, received)
	var failed *ledgerError
	if errors.As(err, &failed) {
		// As a step the guardian could not decide or record: fail closed, nothing sent up.
		gw.log.Error("check approval answers", "session", req.sessionID, "err", failed.err)
		writeJSON(w, http.StatusServiceUnavailable, errorBody(codeGuardian,
			"guardian unavailable: the approval answers could not be checked", req.sessionID, received))
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(codeInvalidRequest, "invalid request: "+err.Error(), req.sessionID, received))
		return
	}
	// A turn streams for as long as the agent talks, and may wait for a reviewer.
	done := guardian.LongWait(r.Context())
	defer done()
	t.run()
}
