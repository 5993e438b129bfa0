// Package holds parks steps for human review. A held step keeps its agent waiting until an
// operator approves, denies or modifies it, its timeout passes, or the agent goes away;
// exactly one of those ends it. The package also keeps the operators' session controls
// (pause, resume, block) and writes every hold event and control to the audit log.
//
// Each pending hold is owned by the goroutine of the agent's request: decisions are sent to
// it, and it alone chooses, by one select, between the first decision, the timer and the
// agent's context. The database repeats the guard with a conditional update, so a second
// decision conflicts in memory and on disk alike.
package holds

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Hold, AuditEntry and AuditQuery are the storage types: a hold is stored, listed and
// published in the same shape.
type (
	Hold       = record.Hold
	AuditEntry = record.AuditEntry
	AuditQuery = record.AuditQuery
)

// Hold statuses, and the status of an Outcome whose step a remembered approval let through.
const (
	StatusPending   = record.HoldPending
	StatusApproved  = record.HoldApproved
	StatusDenied    = record.HoldDenied
	StatusModified  = record.HoldModified
	StatusTimedOut  = record.HoldTimedOut
	StatusAbandoned = record.HoldAbandoned
	// StatusInterrupted: the guardian stopped before anyone decided.
	StatusInterrupted = record.HoldInterrupted
	StatusRemembered  = "remembered"
)

// Reason codes of the answers the queue gives by itself.
const (
	// ReasonQueueFull: a limit of the review queue was reached, so the step that needed a
	// review was denied without one.
	ReasonQueueFull = "HOLD_QUEUE_FULL"
	// ReasonRestarting: the guardian stopped while the step waited; sending it again once
	// the guardian is back gets it reviewed.
	ReasonRestarting = "GUARDIAN_RESTARTING"
	// ReasonNotRecorded: the hold ended (its timeout, its agent leaving, a shutdown) but
	// the end could not be stored, so the step was denied whatever that end decided: the
	// agent is never let through on an outcome the record would not show.
	ReasonNotRecorded = "HOLD_NOT_RECORDED"
)

// Session controls (states) as Control reports them.
const (
	ControlActive  = record.ControlActive
	ControlPaused  = record.ControlPaused
	ControlBlocked = record.ControlBlocked
)

// Rule ids the guardian uses for holds and denials caused by session controls.
const (
	PauseRuleID = "session-paused"
	BlockRuleID = "session-blocked"
)

// Defaults of Options.
const (
	DefaultTimeout         = rules.DefaultHoldTimeout
	DefaultMaxPending      = 1000
	DefaultMaxPendingBytes = 256 << 20
	// DefaultAgentShare is the part of each limit one agent may take when
	// Options.MaxPendingPerAgent is not set: one agent filling the queue must not deny
	// every other agent's reviews.
	DefaultAgentShare = 4
	maxNote           = 4 << 10
)

var (
	// ErrConflict is returned when a hold was already decided (or timed out, or abandoned):
	// the first decision won.
	ErrConflict = record.ErrHoldDecided
	// ErrNotFound is returned for an unknown hold.
	ErrNotFound = record.ErrNotFound
	// ErrTooManyPending is returned (wrapped in a *QueueFullError) by Hold when a limit of
	// the review queue is reached.
	ErrTooManyPending = errors.New("too many pending holds")
	// ErrClosed is returned by Hold after Shutdown.
	ErrClosed = errors.New("holds: shut down")
	// ErrRememberFailed is returned by Approve when the approval stands but its remembered
	// rule could not be saved.
	ErrRememberFailed = errors.New("the approval stands, but the remembered rule could not be saved")
	// ErrNotForwarded is returned by a Forwarder when no other process owns the hold: the
	// decision is then stored here.
	ErrNotForwarded = errors.New("holds: no other guardian process owns the hold")
	// ErrOwnerUnavailable is returned (wrapped, with the details) when the guardian
	// process the hold's agent waits on cannot take a decision: nothing was decided.
	ErrOwnerUnavailable = errors.New("the replica the step waits on is unavailable")
)

// QueueFullError is Hold's error when a limit of the review queue is reached. It wraps
// ErrTooManyPending; Limit says which limit, in words for the agent.
type QueueFullError struct {
	Limit string
}

func (e *QueueFullError) Error() string { return "holds: the review queue is full: " + e.Limit }

func (e *QueueFullError) Unwrap() error { return ErrTooManyPending }

// FieldError is a caller's mistake in one field; the API answers it with 400 naming Field.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Message }

// Store is what the holds need from persistence; every storage backend implements it. Every method
// that changes state writes its events (and audit entry, when given one) in the same
// transaction and returns the events for publishing.
type Store interface {
	CreateHold(ctx context.Context, h *Hold, audit *AuditEntry) ([]record.Event, error)
	// ResolveHold updates the hold only while it is pending; otherwise it returns the stored
	// hold and an error wrapping ErrConflict.
	ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *AuditEntry) (Hold, []record.Event, error)
	GetHold(ctx context.Context, id string) (Hold, error)
	ListHolds(ctx context.Context, status string, limit int) ([]Hold, error)
	SetHoldSeq(ctx context.Context, id string, seq int64) error
	// HoldBySeq returns the hold of a stored step (ErrNotFound when it was not held).
	HoldBySeq(ctx context.Context, seq int64) (Hold, error)
	// ResolvePendingOnStartup times out every hold left pending by a previous run.
	ResolvePendingOnStartup(ctx context.Context, now time.Time) ([]Hold, []record.Event, error)
	SetSessionControl(ctx context.Context, c record.SessionControl, audit *AuditEntry) ([]record.Event, error)
	SessionControls(ctx context.Context) (map[string]string, error)
	AppendAudit(ctx context.Context, e *AuditEntry) (record.Event, error)
	ListAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error)
	// Session and Step find what a comment is about (ErrNotFound when missing).
	Session(ctx context.Context, id string) (record.Session, error)
	Step(ctx context.Context, seq int64) (record.StepRecord, error)
}

// Options configure a Manager. Store is required.
type Options struct {
	Store Store
	// Clock defaults to the system clock.
	Clock Clock
	// Publish sends a committed event to live clients; nil publishes nothing. It must not
	// block (the live hub drops slow clients rather than waiting).
	Publish func(record.Event)
	// Remember saves the rule of an "approve and remember" (create or replace by id) in the
	// name of the operator who approved; nil refuses remember requests.
	Remember func(ctx context.Context, r rules.Rule, operator string) error
	// ValidateParams checks an operator's modified params for a method as if they arrived
	// from an agent; nil only checks that they are a JSON object.
	ValidateParams func(method string, params json.RawMessage) error
	// CheckEdit, when set, evaluates the rules on an operator's edited params: an edit the
	// rules deny is refused with a *RulesDenyError unless the decision overrides it.
	CheckEdit CheckEditFunc
	// OperatorFrom, when set and returning true, names the operator of an API request
	// (e.g. the signed-in user), overriding the "operator" field of the body.
	OperatorFrom func(r *http.Request) (string, bool)
	// MaxPending bounds the holds waiting at once (default DefaultMaxPending).
	MaxPending int
	// MaxPageBytes bounds one list answer (holds, audit) of the API (default
	// apijson.MaxPageBytes).
	MaxPageBytes int
	// MaxPendingBytes bounds the summed Request.Size of the holds waiting at once (default
	// DefaultMaxPendingBytes): a held step keeps its request in memory.
	MaxPendingBytes int64
	// MaxPendingPerAgent bounds the holds of one agent (Request.AgentID, else its session)
	// waiting at once (default MaxPending / DefaultAgentShare, at least 1). The same
	// fraction of MaxPendingBytes bounds that agent's bytes.
	MaxPendingPerAgent int
	// DefaultTimeout applies to requests without a timeout, such as the holds of a paused
	// session (default DefaultTimeout). The guardian gives it the value it gives the rules
	// engine's HoldTimeout, so every hold without its own timeout waits the same.
	DefaultTimeout time.Duration
	Logger         *slog.Logger
	// Shared says other guardian processes (replicas) share the store: their pending holds
	// are alive, so Start leaves them alone (a dead replica's holds are ended by Owner's
	// sweep instead), and decisions stored elsewhere reach this process through Observe.
	Shared bool
	// Owner, when set, records which process waits on each hold, so that the holds of a
	// process that died can be ended by another.
	Owner Owner
	// InputsFrom, when set, reads a tool call's inputs from a stored hold's request, so
	// that a hold whose agent waits on another replica can be approved and remembered by
	// inputs here; without it, remembering such a hold is refused.
	InputsFrom func(request json.RawMessage) map[string]any
}

// Owner records which guardian process a pending hold's agent waits on.
type Owner interface {
	// Own records this process as the hold's owner; it is called before the hold is
	// stored, and an error refuses the hold.
	Own(ctx context.Context, holdID string) error
	// Disown forgets the hold once it has ended here; it must not block.
	Disown(holdID string)
}

// Forwarder carries a decision to the guardian process whose agent waits on the hold, so
// that it is decided there exactly as a decision of that process's own operators: only
// that process has the step and the modifications that matched with the hold, which an
// approval or an edit must apply before the decision is stored and audited. An Owner that
// is also a Forwarder is used for every decision of a hold not waiting here.
type Forwarder interface {
	// Forward delivers decision to the hold's owner and returns its answer. It returns
	// ErrNotForwarded when no other process owns the hold, and an error wrapping
	// ErrOwnerUnavailable when the owner cannot take it (then nothing was decided).
	Forward(ctx context.Context, holdID string, decision []byte) ([]byte, error)
	// ServeForwarded sets the function that decides what other processes forward here.
	ServeForwarded(func(ctx context.Context, holdID string, decision []byte) []byte)
}

// Request describes a step to hold.
type Request struct {
	SessionID string
	AgentID   string
	// KeyID is the API key the step came with ("" without one). Its holds share the
	// per-agent limits too: an agent id is what the step claims, and a key that may speak
	// for any agent could otherwise fill the queue under a new name per step.
	KeyID  string
	Method string
	Kind   string
	Tool   string
	// RuleID is the hold rule, or PauseRuleID for a paused session.
	RuleID  string
	Message string
	// Request is the step's JSON-RPC request as received.
	Request json.RawMessage
	// Params is the params member of Request (sharing its memory); nil reads it from
	// Request when needed.
	Params json.RawMessage
	// Size is what the hold is charged against the byte limits: the request's size.
	Size int64
	// Inputs returns the tool call's arguments, used to remember an approval by inputs. A
	// function, so a waiting hold does not keep a parsed copy it rarely needs.
	Inputs func() map[string]any
	// Modify, when set, applies the modifications of the modify rules that matched with
	// the hold to a params object and returns the new params. Every answer that lets the
	// step through (an approval, an edit, a remembered approval, an allow on timeout)
	// carries its result, so approving never drops a redaction the rules require.
	Modify func(params json.RawMessage) (json.RawMessage, error)
	// Timeout is how long to wait (zero: Options.DefaultTimeout); OnTimeout is the decision
	// then, allow or deny (anything else: deny).
	Timeout   time.Duration
	OnTimeout rules.Action
	// Matches are the rules that matched the step. An enforced match of a remembered
	// approval lets the step through without a hold.
	Matches []record.RuleMatch
}

// Outcome is how a held step ended.
type Outcome struct {
	// Status is the hold's final status, or StatusRemembered when no hold was needed.
	Status string
	// Decision is the answer for the agent: allow, deny or modify.
	Decision rules.Action
	// Params are the step's final params when Decision is modify: the operator's edit
	// and/or the rules' modifications applied.
	Params   json.RawMessage
	Operator string
	Note     string
	// Message explains the decision to the agent.
	Message string
	// RuleID is the remembered approval's rule when Status is StatusRemembered.
	RuleID string
	// ReasonCode, when set, is the reason code of an answer the queue gave by itself
	// (ReasonRestarting).
	ReasonCode string
	// Hold is the hold as resolved (zero when Status is StatusRemembered).
	Hold Hold
}

// Decision is an operator's approval, denial or modification.
type Decision struct {
	Operator string
	Note     string
	// Remember, on an approval, saves an allow rule so the same step is not held again.
	Remember *RememberSpec
	// Override, on a modification, sends an edit the rules would deny; the audit entry
	// names the deny that was overridden.
	Override bool
}

// Manager holds steps and keeps session controls. It is safe for concurrent use.
type Manager struct {
	store          Store
	clock          Clock
	publish        func(record.Event)
	remember       func(context.Context, rules.Rule, string) error
	validateParams func(string, json.RawMessage) error
	checkEditFn    CheckEditFunc
	operatorFrom   func(*http.Request) (string, bool)
	maxPending     int
	maxPageBytes   int
	maxBytes       int64
	agentMax       int
	agentMaxBytes  int64
	defaultTimeout time.Duration
	log            *slog.Logger
	shared         bool
	owner          Owner
	forwarder      Forwarder
	inputsFrom     func(json.RawMessage) map[string]any

	mu      sync.Mutex
	pending map[string]*waiter
	// pendingBytes, agents and keys are what the waiting holds are charged, in all, per
	// agent and per API key.
	pendingBytes int64
	agents       shares
	keys         shares
	started      bool
	closed       bool
	// interrupted are the holds Start ended whose steps were never stored, until
	// Interrupted hands them over.
	interrupted []record.Hold
	// closing is closed by Shutdown: every waiting hold then times out.
	closing chan struct{}
	waiters sync.WaitGroup
	// unrecorded are the holds whose end could not be stored: their agents were denied,
	// and a recorder (one goroutine each, in recorders) stores the deny until it sticks.
	// Until then a decision for one of them is refused, here and (the hold stays owned by
	// this process) when another replica forwards it: the store still says pending, and
	// an approval stored now would contradict the deny the agent got.
	unrecorded map[string]Hold
	recorders  sync.WaitGroup

	ctlMu    sync.RWMutex
	controls map[string]string
	// ctlWrite serialises control changes, so the last one stored is the one in memory.
	ctlWrite sync.Mutex
}

// waiter is one pending hold. Its owner is the Hold call that created it; the fields other
// goroutines read are set before it is shared and never changed.
type waiter struct {
	id  string
	req Request
	// agent and key name the hold's shares of the limits (key "" for none); size is what
	// it is charged.
	agent, key string
	size       int64
	// decide carries an operator's decision to the owner; done is closed once the hold is
	// resolved, so a decision that arrives later conflicts instead of waiting.
	decide chan *decideReq
	done   chan struct{}
}

type decideReq struct {
	ctx      context.Context
	status   string
	decision rules.Action
	operator string
	note     string
	params   json.RawMessage
	rule     *rules.Rule
	scope    string
	// overridden is the rules' deny of the edit that the operator sent anyway.
	overridden *EditVerdict
	reply      chan decideResult
	// stored, when set, is a decision another process already stored (Observe): the
	// owner only answers its agent with it.
	stored *Hold
}

// agentShare is what one agent's waiting holds take of the limits.
type agentShare struct {
	n     int
	bytes int64
}

// shares are the charges of the waiting holds by agent, or by API key.
type shares map[string]*agentShare

// of is the charge of name (zero for none).
func (s shares) of(name string) agentShare {
	if sh := s[name]; sh != nil {
		return *sh
	}
	return agentShare{}
}

// add charges name one more hold of size bytes; remove takes it back. An empty name is
// charged nothing (a step without an API key).
func (s shares) add(name string, size int64) {
	if name == "" {
		return
	}
	sh := s[name]
	if sh == nil {
		sh = &agentShare{}
		s[name] = sh
	}
	sh.n++
	sh.bytes += size
}

func (s shares) remove(name string, size int64) {
	if sh := s[name]; sh != nil {
		sh.n--
		sh.bytes -= size
		if sh.n == 0 {
			delete(s, name)
		}
	}
}

// shareFull is the error of a hold of size bytes past one agent's (or key's) share, or nil.
func (m *Manager) shareFull(sh agentShare, size int64, who, per string) error {
	switch {
	case sh.n >= m.agentMax:
		return &QueueFullError{Limit: fmt.Sprintf("this %s has %d steps waiting for review (at most %d per %s)",
			who, sh.n, m.agentMax, per)}
	case sh.bytes+size > m.agentMaxBytes:
		return &QueueFullError{Limit: fmt.Sprintf("this %s's steps waiting for review take %d bytes, and this one %d more (at most %d per %s)",
			who, sh.bytes, size, m.agentMaxBytes, per)}
	}
	return nil
}

type decideResult struct {
	hold Hold
	err  error
}

// NewManager returns a Manager. Call Start before serving.
func NewManager(opts Options) *Manager {
	m := &Manager{
		store:          opts.Store,
		clock:          opts.Clock,
		publish:        opts.Publish,
		remember:       opts.Remember,
		validateParams: opts.ValidateParams,
		checkEditFn:    opts.CheckEdit,
		operatorFrom:   opts.OperatorFrom,
		maxPending:     opts.MaxPending,
		maxPageBytes:   opts.MaxPageBytes,
		defaultTimeout: opts.DefaultTimeout,
		log:            opts.Logger,
		shared:         opts.Shared,
		owner:          opts.Owner,
		inputsFrom:     opts.InputsFrom,
		maxBytes:       opts.MaxPendingBytes,
		agentMax:       opts.MaxPendingPerAgent,
		pending:        make(map[string]*waiter),
		unrecorded:     make(map[string]Hold),
		agents:         shares{},
		keys:           shares{},
		closing:        make(chan struct{}),
		controls:       make(map[string]string),
	}
	if m.clock == nil {
		m.clock = SystemClock()
	}
	if m.publish == nil {
		m.publish = func(record.Event) {}
	}
	if m.maxPending <= 0 {
		m.maxPending = DefaultMaxPending
	}
	if m.maxPageBytes <= 0 {
		m.maxPageBytes = apijson.MaxPageBytes
	}
	if m.maxBytes <= 0 {
		m.maxBytes = DefaultMaxPendingBytes
	}
	if m.agentMax <= 0 {
		m.agentMax = max(1, m.maxPending/DefaultAgentShare)
	}
	m.agentMax = min(m.agentMax, m.maxPending)
	// The agent's byte share is its share of the holds.
	m.agentMaxBytes = max(1, int64(float64(m.maxBytes)*float64(m.agentMax)/float64(m.maxPending)))
	if m.defaultTimeout <= 0 {
		m.defaultTimeout = DefaultTimeout
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if f, ok := m.owner.(Forwarder); ok {
		m.forwarder = f
		f.ServeForwarded(m.serveForwarded)
	}
	return m
}

// Start ends the holds a previous run left pending as interrupted (their agents'
// connections ended with that process, so no decision is recorded for them) and loads the
// session controls. Call it once, before the first Hold.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started || len(m.pending) > 0 {
		m.mu.Unlock()
		return errors.New("holds: Start must be called once, before any hold")
	}
	m.started = true
	m.mu.Unlock()

	if !m.shared {
		resolved, events, err := m.store.ResolvePendingOnStartup(ctx, m.clock.Now())
		if err != nil {
			return fmt.Errorf("holds: resolve holds left pending: %w", err)
		}
		for _, h := range resolved {
			m.log.Warn("hold left pending by a previous run marked interrupted; its agent got no answer",
				"hold", h.ID, "session", h.SessionID, "rule", h.RuleID)
			if h.Seq == 0 {
				m.interrupted = append(m.interrupted, h)
			}
		}
		m.publishAll(events)
	}

	controls, err := m.store.SessionControls(ctx)
	if err != nil {
		return fmt.Errorf("holds: load session controls: %w", err)
	}
	m.ctlMu.Lock()
	m.controls = controls
	m.ctlMu.Unlock()
	return nil
}

// Interrupted returns, once, the holds Start ended whose steps were never stored: a held
// step is stored when it is decided, and their guardian stopped before that. The caller
// records those steps, so that the session and its search show them.
func (m *Manager) Interrupted() []record.Hold {
	m.mu.Lock()
	defer m.mu.Unlock()
	hs := m.interrupted
	m.interrupted = nil
	return hs
}

// Shutdown ends every pending hold as interrupted: its agent is denied with
// ReasonRestarting (never approved, whatever the hold's onTimeout), so it can send the step
// again once the guardian is back. It refuses new holds, and returns when all holds are
// resolved or ctx ends.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		close(m.closing)
	}
	m.mu.Unlock()
	done := make(chan struct{})
	go func() {
		m.waiters.Wait()
		// A hold whose end could not be stored (the shutdown's own, or an earlier one) has
		// a recorder, added before its waiter finished; it makes a last attempt now.
		m.recorders.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("holds: shutdown: %w", ctx.Err())
	}
}

// Pending reports how many holds are waiting.
func (m *Manager) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending)
}

// PendingBytes reports the summed Request.Size of the holds waiting.
func (m *Manager) PendingBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pendingBytes
}

// admit registers w unless a limit of the queue is reached; it runs under m.mu.
func (m *Manager) admit(w *waiter) error {
	switch {
	case m.closed:
		return ErrClosed
	case len(m.pending) >= m.maxPending:
		return &QueueFullError{Limit: fmt.Sprintf("%d steps are waiting for review (at most %d)",
			len(m.pending), m.maxPending)}
	case m.pendingBytes+w.size > m.maxBytes:
		return &QueueFullError{Limit: fmt.Sprintf("the steps waiting for review take %d bytes, and this one %d more (at most %d)",
			m.pendingBytes, w.size, m.maxBytes)}
	}
	if err := m.shareFull(m.agents.of(w.agent), w.size, "agent", "agent"); err != nil {
		return err
	}
	if w.key != "" {
		if err := m.shareFull(m.keys.of(w.key), w.size, "API key", "key"); err != nil {
			return err
		}
	}
	m.agents.add(w.agent, w.size)
	m.keys.add(w.key, w.size)
	m.pendingBytes += w.size
	m.pending[w.id] = w
	return nil
}

// Hold parks a step until an operator decides, the timeout passes or ctx ends (the agent
// went away), and reports how it ended. The hold is stored and published (hold.created)
// before Hold waits. An error means no hold was placed (MaxPending reached, shut down, or
// the store failed); the guardian should then deny the step.
func (m *Manager) Hold(ctx context.Context, req Request) (Outcome, error) {
	if req.SessionID == "" {
		return Outcome{}, &FieldError{Field: "sessionId", Message: "holds: request has no session id"}
	}
	if req.Method == "" {
		return Outcome{}, &FieldError{Field: "method", Message: "holds: request has no method"}
	}
	if req.RuleID != PauseRuleID {
		if id, ok := rememberedMatch(req.Matches); ok {
			return m.remembered(req, id), nil
		}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = m.defaultTimeout
	}
	onTimeout := rules.ActionDeny
	switch req.OnTimeout {
	case rules.ActionAllow:
		onTimeout = rules.ActionAllow
	case "", rules.ActionDeny:
	default:
		m.log.Warn("hold onTimeout is neither allow nor deny; denying on timeout",
			"rule", req.RuleID, "onTimeout", req.OnTimeout)
	}

	now := m.clock.Now()
	h := Hold{
		ID: newHoldID(), SessionID: req.SessionID, AgentID: req.AgentID, Method: req.Method,
		Kind: req.Kind, Tool: req.Tool, RuleID: req.RuleID, Message: req.Message,
		Request: req.Request, CreatedAt: now, Deadline: now.Add(timeout),
		OnTimeout: string(onTimeout), Status: StatusPending,
	}
	agent := req.AgentID
	if agent == "" {
		agent = "session " + req.SessionID
	}
	w := &waiter{id: h.ID, req: req, agent: agent, key: req.KeyID, size: max(0, req.Size),
		decide: make(chan *decideReq), done: make(chan struct{})}

	m.mu.Lock()
	if err := m.admit(w); err != nil {
		m.mu.Unlock()
		return Outcome{}, err
	}
	m.waiters.Add(1)
	m.mu.Unlock()
	defer m.waiters.Done()
	// SetControl updates the controls before it denies the queued steps of a blocked
	// session; a hold registered too late for that sweep sees the block here instead.
	if m.Control(req.SessionID) == ControlBlocked {
		m.release(w)
		return Outcome{Status: StatusDenied, Decision: rules.ActionDeny, RuleID: BlockRuleID,
			Message: "This session was blocked by an operator."}, nil
	}

	// The timer starts with the hold: its deadline is the one stored and shown.
	timer := m.clock.NewTimer(timeout)
	defer timer.Stop()

	detail, _ := json.Marshal(map[string]any{ // strings and a time always marshal
		"method": h.Method, "kind": h.Kind, "tool": h.Tool, "agentId": h.AgentID,
		"message": h.Message, "timeout": timeout.String(), "deadline": h.Deadline.UTC(),
		"onTimeout": h.OnTimeout,
	})
	audit := &AuditEntry{Type: record.AuditHoldCreated, SessionID: h.SessionID, HoldID: h.ID,
		RuleID: h.RuleID, Decision: string(rules.ActionHold), At: now, Detail: detail}
	if m.owner != nil {
		// Owned before it exists, so no stored pending hold is ever without an owner
		// whose death another process can notice.
		if err := m.owner.Own(context.WithoutCancel(ctx), h.ID); err != nil {
			m.release(w)
			return Outcome{}, fmt.Errorf("holds: record the hold's owner: %w", err)
		}
	}
	// Not the agent's ctx: a write it cancels might still commit, and a hold must either be
	// stored and then resolved, or not exist.
	events, err := m.store.CreateHold(context.WithoutCancel(ctx), &h, audit)
	if err != nil {
		m.release(w)
		return Outcome{}, fmt.Errorf("holds: store hold: %w", err)
	}
	m.publishAll(events)
	m.log.Info("step held", "hold", h.ID, "session", h.SessionID, "rule", h.RuleID,
		"method", h.Method, "tool", h.Tool, "timeout", timeout)

	for {
		select {
		case d := <-w.decide:
			if out, done := m.applyDecision(w, h, d); done {
				return out, nil
			}
		case <-timer.C():
			note := fmt.Sprintf("no operator decided within %s", timeout)
			detail, _ := json.Marshal(map[string]string{"timeout": timeout.String()})
			res := record.HoldResolution{Status: StatusTimedOut, Decision: h.OnTimeout, Note: note}
			if res.Decision == string(rules.ActionAllow) && req.Modify != nil {
				// An allow on timeout lets the step through as an approval would.
				if p, err := req.final(nil); err != nil {
					m.log.Error("the modifications that matched with the hold failed; denying on timeout",
						"hold", h.ID, "err", err)
					res.Decision = string(rules.ActionDeny)
					res.Note += "; the modifications the rules require could not be applied, so the step is denied"
				} else {
					res.Decision, res.Params = string(rules.ActionModify), p
				}
			}
			return m.finish(w, h, res, record.AuditHoldTimedOut, detail), nil
		case <-ctx.Done():
			return m.finish(w, h, record.HoldResolution{Status: StatusAbandoned,
				Decision: string(rules.ActionDeny), Note: "agent disconnected while the step was held"},
				record.AuditHoldAbandoned, nil), nil
		case <-m.closing:
			// Never the onTimeout decision: nobody reviewed the step, and a deny the agent
			// can retry once the guardian is back loses nothing.
			detail, _ := json.Marshal(map[string]string{"reason": "shutdown"})
			return m.finish(w, h, record.HoldResolution{Status: StatusInterrupted,
				Decision: string(rules.ActionDeny), Note: "guardian shut down while pending"},
				record.AuditHoldInterrupted, detail), nil
		}
	}
}

// remembered is the outcome of a step a remembered approval lets through: with the
// modifications that matched with the hold applied, as an operator's approval would have.
func (m *Manager) remembered(req Request, ruleID string) Outcome {
	out := Outcome{Status: StatusRemembered, Decision: rules.ActionAllow, RuleID: ruleID,
		Message: fmt.Sprintf("Allowed by a remembered approval (rule %s).", ruleID)}
	if req.Modify == nil {
		return out
	}
	p, err := req.final(nil)
	if err != nil {
		m.log.Error("the modifications that matched with the hold failed; denying",
			"rule", ruleID, "session", req.SessionID, "err", err)
		return Outcome{Status: StatusRemembered, Decision: rules.ActionDeny, RuleID: ruleID,
			Message: "Allowed by a remembered approval, but the modifications the rules require could not be applied; denied."}
	}
	out.Decision, out.Params = rules.ActionModify, p
	out.Message = fmt.Sprintf("Allowed by a remembered approval (rule %s), with the rules' modifications.", ruleID)
	return out
}

// final returns the params a step is let through with: params (an operator's edit; nil
// for the step's own) with the modifications that matched with the hold applied. Without
// modifications it returns params unchanged.
func (r *Request) final(params json.RawMessage) (json.RawMessage, error) {
	if r.Modify == nil {
		return params, nil
	}
	if params == nil {
		params = r.Params
		if params == nil {
			params = requestParams(r.Request)
		}
	}
	out, err := r.Modify(params)
	if err != nil {
		return nil, fmt.Errorf("holds: apply the modifications that matched with the hold: %w", err)
	}
	return out, nil
}

// finish resolves a hold without an operator (timeout, disconnect, shutdown). When the
// store already holds a decision (made elsewhere), that decision stands. When the store
// fails, the agent is denied whatever res decided (see unrecordedEnd): an answer is only
// ever one the record shows, or will show.
func (m *Manager) finish(w *waiter, h Hold, res record.HoldResolution, auditType string, detail json.RawMessage) Outcome {
	res.DecidedAt = m.clock.Now()
	audit := &AuditEntry{Type: auditType, Detail: detail}
	stored, events, err := m.store.ResolveHold(context.Background(), h.ID, res, audit)
	switch {
	case err == nil:
		m.release(w)
		m.publishAll(events)
		h = stored
	case errors.Is(err, ErrConflict):
		// Decided elsewhere (another replica's console) just before: that decision stands,
		// with the modifications that matched with the hold, as here.
		m.release(w)
		m.log.Info("hold ended", "hold", h.ID, "status", stored.Status, "decision", stored.Decision)
		return m.outcomeStored(w, stored)
	default:
		return m.unrecordedEnd(w, h, res, err)
	}
	m.log.Info("hold ended", "hold", h.ID, "status", h.Status, "decision", h.Decision)
	return outcomeOf(h)
}

// unrecordedEnd answers the agent of a hold whose end res could not be stored (err): with a
// deny, never res's allow or modify, since the record would otherwise contradict the answer
// (the hold left pending is later ended as interrupted, a deny, by a restart or a replica's
// sweep, or could be approved by an operator after the agent went ahead).
//
// The deny is stored at once as the hold's end, status interrupted, a write that may
// succeed where res's failed (a constraint or trigger on one status, a passing error). If
// it fails as well the hold stays pending in the store: it is kept owned here, every
// decision for it is refused, and a recorder stores the deny once the store takes it. A
// stop before that leaves it to the next start (or, with replicas, to a survivor's sweep
// of unowned holds), which ends it as interrupted too. The guardian stores the step with
// this deny, so the step, the hold and the audit log all say the agent was denied.
func (m *Manager) unrecordedEnd(w *waiter, h Hold, res record.HoldResolution, err error) Outcome {
	m.log.Error("could not store the end of a hold; its agent is denied",
		"hold", h.ID, "status", res.Status, "decision", res.Decision, "err", err)
	end := notRecorded(h, res, m.clock.Now())
	stored, events, err := m.store.ResolveHold(context.Background(), h.ID, end.resolution(), end.audit())
	switch {
	case err == nil:
		m.release(w)
		m.publishAll(events)
		m.log.Warn("hold ended as interrupted: its end could not be stored", "hold", h.ID, "status", stored.Status)
		return end.outcome(stored)
	case errors.Is(err, ErrConflict):
		// The first write was stored after all (it failed after its commit), or another
		// process ended the hold meanwhile: what the store holds is the end.
		m.release(w)
		m.log.Info("hold ended", "hold", h.ID, "status", stored.Status, "decision", stored.Decision)
		return m.outcomeStored(w, stored)
	}
	m.log.Error("could not store the deny of a hold whose end could not be stored; retrying until it is",
		"hold", h.ID, "err", err)
	m.mu.Lock()
	m.unrecorded[h.ID] = end.hold
	m.recorders.Add(1)
	m.mu.Unlock()
	m.releaseKeepOwner(w)
	go m.recordLater(end)
	return end.outcome(end.hold)
}

// notRecordedEnd is the deny of a hold whose end could not be stored, as it is to be stored.
type notRecordedEnd struct {
	// hold is the hold as ended: interrupted, denied, with a note saying why.
	hold Hold
	// lost is the end that could not be stored.
	lost record.HoldResolution
}

func notRecorded(h Hold, lost record.HoldResolution, at time.Time) notRecordedEnd {
	h.Status, h.Decision, h.DecidedBy, h.DecidedAt, h.Params = StatusInterrupted, string(rules.ActionDeny), "", at, nil
	h.Note = fmt.Sprintf("not recorded: the hold's end (%s, decision %s: %s) could not be stored, so its agent was denied",
		lost.Status, lost.Decision, lost.Note)
	return notRecordedEnd{hold: h, lost: lost}
}

func (e notRecordedEnd) resolution() record.HoldResolution {
	return record.HoldResolution{Status: e.hold.Status, Decision: e.hold.Decision,
		DecidedAt: e.hold.DecidedAt, Note: e.hold.Note}
}

// audit is the entry of the stored deny; a new one for each write, which fills it in.
func (e notRecordedEnd) audit() *AuditEntry {
	detail, _ := json.Marshal(map[string]string{"reason": "not recorded", // strings always marshal
		"status": e.lost.Status, "decision": e.lost.Decision})
	return &AuditEntry{Type: record.AuditHoldInterrupted, Note: e.hold.Note, Detail: detail}
}

// outcome is the agent's answer: a deny that says the end could not be recorded (not the
// restart message an interrupted hold otherwise gets).
func (e notRecordedEnd) outcome(h Hold) Outcome {
	how := "ended"
	switch e.lost.Status {
	case StatusTimedOut:
		d := e.lost.Decision
		if d == string(rules.ActionModify) {
			d = "allow, with the rules' modifications"
		}
		how = "timed out (decision on timeout: " + d + ")"
	case StatusAbandoned:
		how = "its agent disconnected"
	case StatusInterrupted:
		how = "the guardian is shutting down"
	}
	return Outcome{Status: h.Status, Decision: rules.ActionDeny, Note: h.Note, Hold: h,
		ReasonCode: ReasonNotRecorded,
		Message: "The step was held for review and " + how +
			", but that outcome could not be recorded, so the step is denied; send it again."}
}

// Bounds of the delay between a recorder's attempts: it doubles from the first to the last.
const (
	recordRetryFirst = time.Second
	recordRetryMax   = 30 * time.Second
)

// recordLater stores the deny of a hold whose end could not be stored, retrying until the
// store takes it or the hold is found ended; Shutdown makes it try once more and stop.
func (m *Manager) recordLater(e notRecordedEnd) {
	defer m.recorders.Done()
	delay := recordRetryFirst
	for {
		t := m.clock.NewTimer(delay)
		select {
		case <-t.C():
		case <-m.closing:
			t.Stop()
			if !m.recordDeny(e) {
				m.log.Error("the deny of a hold whose end could not be stored is not stored either; the next start, or a surviving replica, ends it as interrupted",
					"hold", e.hold.ID)
			}
			return
		}
		if m.recordDeny(e) {
			return
		}
		delay = min(2*delay, recordRetryMax)
	}
}

// recordDeny makes one attempt of recordLater; it reports whether the hold has ended in
// the store, and then forgets it here before publishing, so that whoever reacts to the
// event finds it ended here too.
func (m *Manager) recordDeny(e notRecordedEnd) bool {
	id := e.hold.ID
	stored, events, err := m.store.ResolveHold(context.Background(), id, e.resolution(), e.audit())
	switch {
	case err == nil, errors.Is(err, ErrConflict), errors.Is(err, ErrNotFound):
		// Stored; or ended otherwise (a sweep's interrupted, a deny, or the lost write
		// itself, stored after all); or gone (pruned): nothing is left to contradict the deny.
	default:
		m.log.Warn("could not store the deny of a hold whose end could not be stored; retrying",
			"hold", id, "err", err)
		return false
	}
	m.mu.Lock()
	delete(m.unrecorded, id)
	if m.owner != nil {
		m.owner.Disown(id)
	}
	m.mu.Unlock()
	if err == nil {
		m.publishAll(events)
		m.log.Warn("hold ended as interrupted: its end could not be stored when it ended", "hold", id)
		return true
	}
	// A lost end that lets the step through, stored after its agent was denied: the audit
	// log says what the agent got.
	if d := rules.Action(stored.Decision); errors.Is(err, ErrConflict) && (d == rules.ActionAllow || d == rules.ActionModify) {
		m.log.Error("a hold's end was stored after its agent had been denied for want of it",
			"hold", id, "status", stored.Status, "decision", stored.Decision)
		a := e.audit()
		a.SessionID, a.HoldID, a.RuleID, a.Decision = stored.SessionID, id, stored.RuleID, string(rules.ActionDeny)
		a.Note = fmt.Sprintf("its agent was denied: the hold's end (%s, decision %s) was stored only after the agent had to be answered",
			stored.Status, stored.Decision)
		if ev, err := m.store.AppendAudit(context.Background(), a); err != nil {
			m.log.Error("could not audit the deny of a hold", "hold", id, "err", err)
		} else {
			m.publish(ev)
		}
	}
	return true
}

// applyDecision stores an operator's decision; it runs on the hold's owner goroutine. It
// reports done when the hold is resolved (by this decision, or by one stored elsewhere).
func (m *Manager) applyDecision(w *waiter, h Hold, d *decideReq) (Outcome, bool) {
	if d.stored != nil {
		m.release(w)
		m.log.Info("hold decided elsewhere", "hold", h.ID, "status", d.stored.Status, "operator", d.stored.DecidedBy)
		return m.outcomeStored(w, *d.stored), true
	}
	res := record.HoldResolution{Status: d.status, Decision: string(d.decision),
		DecidedBy: d.operator, DecidedAt: m.clock.Now(), Note: d.note, Params: d.params}
	audit, err := m.decisionAudit(h, d)
	if err != nil {
		d.reply <- decideResult{err: err}
		return Outcome{}, false
	}
	// The operator's request may end now; the decision is still recorded in full.
	ctx := context.WithoutCancel(d.ctx)
	stored, events, err := m.store.ResolveHold(ctx, h.ID, res, audit)
	if errors.Is(err, ErrConflict) {
		m.release(w)
		d.reply <- decideResult{hold: stored, err: conflictError(stored)}
		return m.outcomeStored(w, stored), true
	}
	if err != nil {
		// Nothing was written: the hold is still pending and waiting.
		d.reply <- decideResult{err: fmt.Errorf("holds: store decision: %w", err)}
		return Outcome{}, false
	}
	m.publishAll(events)
	var rememberErr error
	if d.rule != nil {
		// Saved before the agent is answered, so its next identical step already passes.
		if err := m.remember(ctx, *d.rule, d.operator); err != nil {
			m.log.Error("could not save remembered approval", "hold", h.ID, "rule", d.rule.ID, "err", err)
			rememberErr = fmt.Errorf("holds: %w: %w", ErrRememberFailed, err)
		} else {
			m.log.Info("approval remembered", "hold", h.ID, "rule", d.rule.ID, "scope", d.scope)
		}
	}
	m.release(w)
	m.log.Info("hold decided", "hold", h.ID, "status", stored.Status, "operator", d.operator)
	d.reply <- decideResult{hold: stored, err: rememberErr}
	return outcomeOf(stored), true
}

func (m *Manager) decisionAudit(h Hold, d *decideReq) (*AuditEntry, error) {
	a := &AuditEntry{Operator: d.operator, Note: d.note}
	switch d.status {
	case StatusApproved:
		a.Type = record.AuditHoldApproved
		if d.rule != nil {
			detail, err := json.Marshal(map[string]any{"remember": map[string]any{
				"ruleId": d.rule.ID, "scope": d.scope, "expiresAt": d.rule.ExpiresAt}})
			if err != nil {
				return nil, fmt.Errorf("holds: encode audit detail: %w", err)
			}
			a.Detail = detail
		}
	case StatusDenied:
		a.Type = record.AuditHoldDenied
	case StatusModified:
		a.Type = record.AuditHoldModified
		if d.overridden != nil {
			detail, err := json.Marshal(map[string]any{"override": d.overridden})
			if err != nil {
				return nil, fmt.Errorf("holds: encode audit detail: %w", err)
			}
			a.Detail = detail
		}
	}
	// The params the step went out with (an edit, or an approval's modifications) are
	// audited as a patch of the agent's: what changed, not a second copy of the step.
	if d.params != nil {
		ops, err := Diff(requestParams(h.Request), d.params)
		if err != nil {
			return nil, fmt.Errorf("holds: diff params: %w", err)
		}
		diff, err := json.Marshal(ops)
		if err != nil {
			return nil, fmt.Errorf("holds: encode diff: %w", err)
		}
		a.Diff = diff
	}
	return a, nil
}

// requestParams is the params member of a JSON-RPC request (nil when absent).
func requestParams(req json.RawMessage) json.RawMessage {
	var r struct {
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(req, &r) != nil {
		return nil
	}
	return r.Params
}

// outcomeStored answers a waiting agent with a decision stored by another process (an
// operator on another replica, or a sweep). That process had not the hold's matched
// modifications in hand, so they are applied here, exactly as for a decision made here:
// an approval lets the step through with them, an edit gets them applied on top and is
// checked again; if they cannot be applied the step is denied, never let through unredacted.
func (m *Manager) outcomeStored(w *waiter, h Hold) Outcome {
	out := outcomeOf(h)
	if w.req.Modify == nil {
		return out
	}
	var edit json.RawMessage
	switch {
	case h.Status == StatusApproved && out.Decision == rules.ActionAllow:
	case h.Status == StatusModified && out.Decision == rules.ActionModify:
		edit = h.Params
	default:
		return out
	}
	p, err := w.req.final(edit)
	if err == nil && edit != nil {
		p, err = m.checkParams(w.req.Method, p)
	}
	if err != nil {
		m.log.Error("the modifications that matched with the hold failed on a decision made elsewhere; denying",
			"hold", h.ID, "err", err)
		out.Decision, out.Params = rules.ActionDeny, nil
		out.Message = "The step was approved, but the modifications the rules require could not be applied; denied."
		return out
	}
	out.Decision, out.Params = rules.ActionModify, p
	if h.Status == StatusApproved {
		out.Message = outcomeOf(Hold{Status: StatusApproved, Decision: string(rules.ActionModify),
			DecidedBy: h.DecidedBy, Note: h.Note}).Message
	}
	return out
}

// release forgets a resolved hold: later decisions find it only in the store (a conflict).
func (m *Manager) release(w *waiter) { m.releaseAs(w, true) }

// releaseKeepOwner is release for a hold whose end is not stored yet (unrecordedEnd): the
// hold stays owned by this process, so decisions made on other replicas are forwarded
// here and refused, and no sweep takes it for a dead replica's.
func (m *Manager) releaseKeepOwner(w *waiter) { m.releaseAs(w, false) }

func (m *Manager) releaseAs(w *waiter, disown bool) {
	m.mu.Lock()
	if m.pending[w.id] == w {
		if disown && m.owner != nil {
			m.owner.Disown(w.id)
		}
		delete(m.pending, w.id)
		close(w.done)
		m.pendingBytes -= w.size
		m.agents.remove(w.agent, w.size)
		m.keys.remove(w.key, w.size)
	}
	m.mu.Unlock()
}

func outcomeOf(h Hold) Outcome {
	out := Outcome{Status: h.Status, Decision: rules.Action(h.Decision), Operator: h.DecidedBy,
		Note: h.Note, Hold: h}
	if out.Decision == rules.ActionModify {
		out.Params = h.Params
	}
	suffix := ""
	if h.Note != "" {
		suffix = ": " + h.Note
	}
	switch h.Status {
	case StatusApproved:
		out.Message = "Approved by " + h.DecidedBy + suffix
		if out.Decision == rules.ActionModify {
			out.Message = "Approved by " + h.DecidedBy + ", with the rules' modifications" + suffix
		}
	case StatusDenied:
		out.Message = "Denied by " + h.DecidedBy + suffix
	case StatusModified:
		out.Message = "Modified by " + h.DecidedBy + suffix
	case StatusTimedOut:
		d := h.Decision
		if out.Decision == rules.ActionModify {
			d = "allow, with the rules' modifications"
		}
		out.Message = fmt.Sprintf("Held for review and timed out: %s; decision on timeout: %s.", h.Note, d)
	case StatusAbandoned:
		out.Message = "The agent disconnected while the step was held."
	case StatusInterrupted:
		out.Message = "The guardian is restarting: the step was not reviewed and is denied; send it again shortly."
		out.ReasonCode = ReasonRestarting
	}
	return out
}

func conflictError(h Hold) error {
	if h.DecidedBy != "" {
		return fmt.Errorf("hold %s was already %s by %s: %w", h.ID, h.Status, h.DecidedBy, ErrConflict)
	}
	return fmt.Errorf("hold %s has already ended (%s): %w", h.ID, h.Status, ErrConflict)
}

// Approve releases a held step as sent; with d.Remember it also saves an allow rule.
func (m *Manager) Approve(ctx context.Context, id string, d Decision) (Hold, error) {
	return m.decide(ctx, id, StatusApproved, rules.ActionAllow, d, nil)
}

// Deny refuses a held step.
func (m *Manager) Deny(ctx context.Context, id string, d Decision) (Hold, error) {
	if d.Remember != nil {
		return Hold{}, &FieldError{Field: "remember", Message: "only an approval can be remembered"}
	}
	return m.decide(ctx, id, StatusDenied, rules.ActionDeny, d, nil)
}

// Modify releases a held step with the operator's params, which are validated as the
// step's method requires (an invalid value returns a *FieldError for "params").
func (m *Manager) Modify(ctx context.Context, id string, d Decision, params json.RawMessage) (Hold, error) {
	if d.Remember != nil {
		return Hold{}, &FieldError{Field: "remember", Message: "only an approval can be remembered"}
	}
	return m.decide(ctx, id, StatusModified, rules.ActionModify, d, params)
}

func (m *Manager) decide(ctx context.Context, id string, status string, action rules.Action, d Decision, params json.RawMessage) (Hold, error) {
	return m.decideAt(ctx, id, status, action, d, params, true)
}

// decideAt decides hold id: here when its agent waits here, else (forward) by the process
// its agent waits on, else in the store. A decision forwarded here is not forwarded again.
func (m *Manager) decideAt(ctx context.Context, id string, status string, action rules.Action, d Decision, params json.RawMessage, forward bool) (Hold, error) {
	operator := strings.TrimSpace(d.Operator)
	if operator == "" {
		return Hold{}, &FieldError{Field: "operator", Message: "operator is required"}
	}
	if len(d.Note) > maxNote {
		return Hold{}, &FieldError{Field: "note", Message: fmt.Sprintf("note is longer than %d bytes", maxNote)}
	}
	if status == StatusModified && len(params) == 0 {
		return Hold{}, &FieldError{Field: "params", Message: "params are required to modify a step"}
	}

	m.mu.Lock()
	w := m.pending[id]
	ended, unrecorded := m.unrecorded[id]
	m.mu.Unlock()
	if unrecorded {
		// Its agent was denied, though the store, not yet told, says pending.
		return ended, conflictError(ended)
	}
	if w == nil {
		if forward && m.forwarder != nil {
			h, err := m.forward(ctx, id, status, operator, d, params)
			if !errors.Is(err, ErrNotForwarded) {
				return h, err
			}
		}
		return m.decideStored(ctx, id, status, action, operator, d, params)
	}

	req := &decideReq{ctx: ctx, status: status, decision: action, operator: operator,
		note: d.Note, reply: make(chan decideResult, 1)}
	if status == StatusModified {
		p, err := m.checkParams(w.req.Method, params)
		if err != nil {
			return Hold{}, err
		}
		// The operator's edit is judged as the agent's step would be, before the
		// modifications that matched with the hold apply (as they would to that step).
		if req.overridden, err = m.checkEdit(ctx, w.req, p, d.Override); err != nil {
			return Hold{}, err
		}
		req.params = p
	}
	if w.req.Modify != nil && status != StatusDenied {
		// The modifications that matched with the hold apply to what the operator lets
		// through: the step as sent, or the operator's edit. Computed here, before the
		// decision is stored and audited, so both show the params the agent gets (a
		// denied step gets none).
		p, err := w.req.final(req.params)
		if err != nil {
			return Hold{}, &FieldError{Field: "params", Message: "the modifications the rules require could not be applied: " + err.Error()}
		}
		if status == StatusModified {
			if p, err = m.checkParams(w.req.Method, p); err != nil {
				return Hold{}, err
			}
		}
		req.params = p
		if status == StatusApproved {
			req.decision = rules.ActionModify
		}
	}
	if d.Remember != nil {
		if m.remember == nil {
			return Hold{}, &FieldError{Field: "remember", Message: "remembering approvals is not enabled"}
		}
		r, err := RememberRule(w.req, *d.Remember, operator, id, m.clock.Now())
		if err != nil {
			return Hold{}, err
		}
		req.rule, req.scope = &r, d.Remember.Scope
	}

	select {
	case w.decide <- req:
	case <-w.done:
		return m.storedConflict(ctx, id)
	case <-ctx.Done():
		return Hold{}, fmt.Errorf("holds: decide %s: %w", id, ctx.Err())
	}
	// The owner always replies once it has taken the decision.
	r := <-req.reply
	return r.hold, r.err
}

// storedConflict reports a hold that ended while a decision was on its way.
func (m *Manager) storedConflict(ctx context.Context, id string) (Hold, error) {
	m.mu.Lock()
	ended, unrecorded := m.unrecorded[id]
	m.mu.Unlock()
	if unrecorded {
		return ended, conflictError(ended)
	}
	h, err := m.store.GetHold(ctx, id)
	if err != nil {
		return Hold{}, fmt.Errorf("holds: hold %s has already ended: %w", id, ErrConflict)
	}
	return h, conflictError(h)
}

// decideStored handles a decision for a hold no agent waits on here and that no other
// process took (see Forwarder): decided already (a conflict), unknown, or pending in the
// store only (a hold of another guardian process sharing the database without a registry
// of owners, or left by one), which the conditional update then resolves. The owner, if it
// is still waiting, applies the hold's matched modifications when the decision reaches it
// (outcomeStored).
func (m *Manager) decideStored(ctx context.Context, id, status string, action rules.Action, operator string, d Decision, params json.RawMessage) (Hold, error) {
	h, err := m.store.GetHold(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Hold{}, fmt.Errorf("hold %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Hold{}, fmt.Errorf("holds: hold %s: %w", id, err)
	}
	if h.Status != StatusPending {
		return h, conflictError(h)
	}
	req := &decideReq{ctx: ctx, status: status, decision: action, operator: operator, note: d.Note}
	if d.Remember != nil {
		if m.remember == nil {
			return Hold{}, &FieldError{Field: "remember", Message: "remembering approvals is not enabled"}
		}
		if m.inputsFrom == nil {
			return Hold{}, &FieldError{Field: "remember", Message: "this hold's step is not waiting on this guardian; approve it without remembering"}
		}
		// The agent waits on another replica; the rule is built from the stored hold as it
		// would be there from the waiting step.
		stored := Request{SessionID: h.SessionID, AgentID: h.AgentID, Method: h.Method, Kind: h.Kind,
			Tool: h.Tool, Request: h.Request, Inputs: func() map[string]any { return m.inputsFrom(h.Request) }}
		r, err := RememberRule(stored, *d.Remember, operator, id, m.clock.Now())
		if err != nil {
			return Hold{}, err
		}
		req.rule, req.scope = &r, d.Remember.Scope
	}
	if status == StatusModified {
		if req.params, err = m.checkParams(h.Method, params); err != nil {
			return Hold{}, err
		}
		if req.overridden, err = m.checkEdit(ctx, Request{SessionID: h.SessionID, Method: h.Method}, req.params, d.Override); err != nil {
			return Hold{}, err
		}
	}
	audit, err := m.decisionAudit(h, req)
	if err != nil {
		return Hold{}, err
	}
	res := record.HoldResolution{Status: status, Decision: string(action), DecidedBy: operator,
		DecidedAt: m.clock.Now(), Note: d.Note, Params: req.params}
	stored, events, err := m.store.ResolveHold(context.WithoutCancel(ctx), id, res, audit)
	if errors.Is(err, ErrConflict) {
		return stored, conflictError(stored)
	}
	if err != nil {
		return Hold{}, fmt.Errorf("holds: store decision: %w", err)
	}
	m.publishAll(events)
	if req.rule != nil {
		// Saved once the decision won. The waiting agent is answered by its own replica
		// when the decision reaches it, which may be a moment before the rule does: a
		// repeat of the step within those milliseconds may be held once more.
		if err := m.remember(context.WithoutCancel(ctx), *req.rule, req.operator); err != nil {
			m.log.Error("could not save remembered approval", "hold", id, "rule", req.rule.ID, "err", err)
			return stored, fmt.Errorf("holds: %w: %w", ErrRememberFailed, err)
		}
		m.log.Info("approval remembered", "hold", id, "rule", req.rule.ID, "scope", req.scope)
	}
	return stored, nil
}

// checkParams validates modified params and returns them compacted.
func (m *Manager) checkParams(method string, params json.RawMessage) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(params, &obj); err != nil || obj == nil {
		return nil, &FieldError{Field: "params", Message: "params must be a JSON object"}
	}
	if m.validateParams != nil {
		if err := m.validateParams(method, params); err != nil {
			return nil, &FieldError{Field: "params", Message: "params are not valid for " + method + ": " + err.Error()}
		}
	}
	return params, nil
}

// AttachStep records the seq of a held step once the guardian has stored it, so the hold
// links to its step.
func (m *Manager) AttachStep(ctx context.Context, holdID string, seq int64) error {
	if err := m.store.SetHoldSeq(ctx, holdID, seq); err != nil {
		return fmt.Errorf("holds: attach step %d to hold %s: %w", seq, holdID, err)
	}
	return nil
}

// List returns holds by status ("all" or "" for every status): pending ones oldest first.
func (m *Manager) List(ctx context.Context, status string, limit int) ([]Hold, error) {
	switch status {
	case "", "all", StatusPending, StatusApproved, StatusDenied, StatusModified, StatusTimedOut, StatusAbandoned, StatusInterrupted:
	default:
		return nil, &FieldError{Field: "status", Message: "status must be pending, approved, denied, modified, timedOut, abandoned, interrupted or all"}
	}
	hs, err := m.store.ListHolds(ctx, status, limit)
	if err != nil {
		return nil, fmt.Errorf("holds: list: %w", err)
	}
	return hs, nil
}

// Get returns one hold.
func (m *Manager) Get(ctx context.Context, id string) (Hold, error) {
	h, err := m.store.GetHold(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Hold{}, fmt.Errorf("hold %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Hold{}, fmt.Errorf("holds: hold %s: %w", id, err)
	}
	return h, nil
}

// StepHold is a held step's hold and its audit entries (created, then the decision, with
// the JSON Patch of an operator's edit), oldest first: what the console shows on the step.
type StepHold struct {
	Hold  Hold         `json:"hold"`
	Audit []AuditEntry `json:"audit"`
}

// maxStepHoldAudit bounds the audit entries returned with a step's hold: a hold has its
// creation, one decision and perhaps a remembered approval.
const maxStepHoldAudit = 20

// ForStep returns the hold of the stored step seq and its audit entries; ErrNotFound when
// the step was not held.
func (m *Manager) ForStep(ctx context.Context, seq int64) (StepHold, error) {
	h, err := m.store.HoldBySeq(ctx, seq)
	if errors.Is(err, ErrNotFound) {
		return StepHold{}, fmt.Errorf("step %d was not held: %w", seq, ErrNotFound)
	}
	if err != nil {
		return StepHold{}, fmt.Errorf("holds: hold of step %d: %w", seq, err)
	}
	es, err := m.store.ListAudit(ctx, AuditQuery{HoldID: h.ID, Limit: maxStepHoldAudit})
	if err != nil {
		return StepHold{}, fmt.Errorf("holds: audit of hold %s: %w", h.ID, err)
	}
	slices.Reverse(es)
	if es == nil {
		es = []AuditEntry{}
	}
	return StepHold{Hold: h, Audit: es}, nil
}

// Audit lists audit entries, newest first.
func (m *Manager) Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	es, err := m.store.ListAudit(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("holds: audit: %w", err)
	}
	return es, nil
}

func (m *Manager) publishAll(events []record.Event) {
	for _, ev := range events {
		m.publish(ev)
	}
}

// newHoldID returns a random hold id.
func newHoldID() string { return "h_" + strings.ToLower(rand.Text()) }
