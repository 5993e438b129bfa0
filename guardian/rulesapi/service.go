// Package rulesapi keeps the rule set: rules stored in SQLite with every version, the live
// rules.Engine that evaluates them, and the /api/rules HTTP API operators edit them with.
//
// Every change follows one order, so the database and the engine never disagree: compile
// the whole candidate set (refusing it with diagnostics when any rule fails), commit it to
// the store with its rule.changed events, load the same set into the engine (an atomic
// swap: a request in flight sees the old set or the new one, never a mix), and only then
// publish the events. Changes are serialised by one mutex within this process; what a
// change requires of the stored rule (that a created id is free, that an edit was made
// from the stored version, that a save changes something) the store checks again inside
// the write's transaction, so it also holds against other replicas and processes sharing
// the database: the checks made here on the rules read before are only a fast path.
package rulesapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// Store is what the rules service needs from persistence; every storage backend implements it.
type Store interface {
	// ListRules returns the current rules ordered by id.
	ListRules(ctx context.Context) ([]rules.Rule, error)
	// GetRule returns one rule or an error wrapping storage.ErrNotFound.
	GetRule(ctx context.Context, id string) (rules.Rule, error)
	// ApplyRules commits several changes and their events in one transaction, checking
	// each change's precondition in it (storage.Rules): a create of an existing id wraps
	// record.ErrExists, an edit made from another version is a *storage.StaleRuleError,
	// an edit or delete of a missing rule wraps record.ErrNotFound, and a change that
	// would leave a rule as it is stores nothing.
	ApplyRules(ctx context.Context, b record.RuleBatch) ([]rules.Rule, []record.Event, error)
	// RuleVersions returns a rule's versions newest first, also for a deleted rule.
	RuleVersions(ctx context.Context, id string) ([]record.RuleVersion, error)
	RuleVersion(ctx context.Context, id string, version int) (record.RuleVersion, error)
	// Step returns one stored step (for POST /api/rules/test with a seq).
	Step(ctx context.Context, seq int64) (record.StepRecord, error)
	// StepWindow returns the backtest window of the newest n steps with seq < before (0:
	// no bound): the steps with after < seq <= last.
	StepWindow(ctx context.Context, before int64, n int) (after, last int64, err error)
	// StepsIn returns a page of the steps of every session in r, oldest first.
	StepsIn(ctx context.Context, r record.StepRange) ([]record.StepRecord, error)
	// SessionStepsBefore returns the newest steps of a session with seq < before, oldest
	// first, as history (storage.AsHistory): the history a stored step was decided with.
	SessionStepsBefore(ctx context.Context, sessionID string, before int64, limit int) ([]record.StepRecord, error)
}

// Options configure the service. Store is required.
type Options struct {
	Store Store
	// Engine is the live engine the guardian evaluates with; nil creates one from
	// EngineOptions (see Engine()).
	Engine *rules.Engine
	// EngineOptions are used to create the engine when Engine is nil. Drafts (test,
	// backtest) always compile with the live engine's options, so they decide alike.
	EngineOptions rules.Options
	// Publish receives every committed rule.changed event, after the engine has the new
	// set. It must not block. Nil publishes nothing.
	Publish func(record.Event)
	// EnvForStep builds the rule environment of a stored step; history is the session's
	// earlier steps, oldest first. Required for backtests and tests by seq.
	EnvForStep func(ctx context.Context, rec record.StepRecord, history []record.StepRecord) (*rules.Env, error)
	// EnvForDraft builds the rule environment of a step given as method and params.
	// Required for tests of a draft step.
	EnvForDraft func(method string, params json.RawMessage) (*rules.Env, error)
	// ModifiedRequest renders the request a modify verdict produces, for test output.
	// Optional.
	ModifiedRequest func(method string, params json.RawMessage, v rules.Verdict) (json.RawMessage, error)
	// OperatorFrom names the operator of an API request (default: the X-Vigil-Operator
	// header, else "api").
	OperatorFrom func(*http.Request) string
	// RulesFile is the file POST /api/rules/reload and Reload read; empty disables them.
	RulesFile string
	// HistorySize is how many earlier steps of a session a stored step is replayed with
	// (default 200, the guardian's default; at most 1000).
	HistorySize int
	Logger      *slog.Logger
	// Now is the clock for UpdatedAt and expiry (default time.Now).
	Now func() time.Time
	// MaxDraftRuns is how many rule tests and backtests may run at once (default 2; at
	// most one of them a backtest). A further one waits up to DraftQueueWait (default 1s)
	// for a turn, then is refused with ErrBusy (HTTP 429).
	MaxDraftRuns   int
	DraftQueueWait time.Duration
	// DraftTimeout bounds one rule test or backtest (default 30s); past it the request
	// fails with ErrTimeout. Each rule is also bounded by the engine's Budget.
	DraftTimeout time.Duration
	// BacktestPageBytes bounds one read of a backtest's window (default 16 MiB): a page
	// ends with the step that reaches it, so big steps are read a few at a time.
	BacktestPageBytes int
}

// Defaults of the draft run limits.
const (
	DefaultMaxDraftRuns      = 2
	DefaultDraftQueueWait    = time.Second
	DefaultDraftTimeout      = 30 * time.Second
	DefaultBacktestPageBytes = 16 << 20
)

// engine is the part of *rules.Engine the service uses; tests substitute a failing Load.
type engine interface {
	Load([]rules.Rule) error
	Stats() map[string]rules.RuleStats
	Options() rules.Options
}

// Service owns the rule set.
type Service struct {
	opts   Options
	store  Store
	live   *rules.Engine
	engine engine
	log    *slog.Logger
	now    func() time.Time

	// mu serialises changes: read the set, compile, write, load.
	mu sync.Mutex
	// drafts admits MaxDraftRuns tests and backtests at a time, backtests one backtest:
	// each can replay 10000 steps.
	drafts, backtests chan struct{}

	// fileMu guards fileIDs: the ids of the rules the configured rules file held when it
	// was last read. The next start or reload writes them over console edits, which the
	// console warns about.
	fileMu  sync.RWMutex
	fileIDs map[string]bool

	// follow asks Follow for a reload from the store (a rule changed on some replica); one
	// pending request stands for any number of changes.
	follow chan struct{}
}

// Errors the API maps to HTTP statuses. A missing rule or step wraps storage.ErrNotFound.
var (
	ErrConflict   = errors.New("conflict")
	ErrBadRequest = errors.New("bad request")
	// ErrBusy: too many rule tests and backtests are running (HTTP 429).
	ErrBusy = errors.New("busy")
	// ErrTimeout: a rule test or backtest ran past DraftTimeout.
	ErrTimeout = errors.New("time limit reached")
)

// InvalidRulesError is returned when a change would leave rules that do not compile.
type InvalidRulesError struct {
	Diagnostics []rules.Diagnostic
}

func (e *InvalidRulesError) Error() string {
	var b strings.Builder
	b.WriteString("rules do not compile")
	for i, d := range e.Diagnostics {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … and %d more", len(e.Diagnostics)-i)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(d.String())
	}
	return b.String()
}

// asInvalid turns a compile error into *InvalidRulesError; other errors pass through.
func asInvalid(err error) error {
	var ce rules.CompileErrors
	if errors.As(err, &ce) {
		return &InvalidRulesError{Diagnostics: []rules.Diagnostic(ce)}
	}
	return err
}

// reservedIDs are path segments of the API that a rule id would shadow.
var reservedIDs = []string{"validate", "test", "backtest", "import", "export", "reload"}

// New builds the service. Call Start before serving.
func New(opts Options) *Service {
	if opts.MaxDraftRuns <= 0 {
		opts.MaxDraftRuns = DefaultMaxDraftRuns
	}
	if opts.DraftQueueWait <= 0 {
		opts.DraftQueueWait = DefaultDraftQueueWait
	}
	if opts.DraftTimeout <= 0 {
		opts.DraftTimeout = DefaultDraftTimeout
	}
	if opts.BacktestPageBytes <= 0 {
		opts.BacktestPageBytes = DefaultBacktestPageBytes
	}
	s := &Service{opts: opts, store: opts.Store, live: opts.Engine, log: opts.Logger, now: opts.Now,
		drafts: make(chan struct{}, opts.MaxDraftRuns), backtests: make(chan struct{}, 1),
		follow: make(chan struct{}, 1)}
	if s.live == nil {
		s.live = rules.NewEngine(opts.EngineOptions)
	}
	s.engine = s.live
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.opts.OperatorFrom == nil {
		s.opts.OperatorFrom = defaultOperator
	}
	if s.opts.HistorySize <= 0 {
		s.opts.HistorySize = 200
	}
	s.opts.HistorySize = min(s.opts.HistorySize, 1000)
	return s
}

func defaultOperator(r *http.Request) string {
	if op := strings.TrimSpace(r.Header.Get("X-Vigil-Operator")); op != "" {
		return op
	}
	return "api"
}

// Engine is the live engine; the guardian's policy evaluates with it.
func (s *Service) Engine() *rules.Engine { return s.live }

// Start loads the stored rules into the engine. It refuses, listing every diagnostic, when
// a stored rule does not compile (for example one written by another version of Vigil):
// the guardian must not run with part of its policy silently missing.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.store.ListRules(ctx)
	if err != nil {
		return fmt.Errorf("rulesapi: read stored rules: %w", err)
	}
	if err := s.engine.Load(cur); err != nil {
		return fmt.Errorf("rulesapi: the rules stored in the database cannot be loaded; "+
			"import a rules file that replaces them (ImportFile with mode replace) or remove "+
			"them from the database: %w", asInvalid(err))
	}
	s.log.Info("rules loaded", "rules", len(cur))
	return nil
}

// draftOptions are the options drafts compile with: the live engine's, without its logger,
// so a draft's run-time errors do not flood the log.
func (s *Service) draftOptions() rules.Options {
	o := s.engine.Options()
	o.Logger = nil
	return o
}

// normalize fills defaults a Go caller may leave out, so equal rules compare equal.
func normalize(r rules.Rule) rules.Rule {
	if r.Mode == "" {
		r.Mode = rules.ModeEnforce
	}
	if r.ExpiresAt != nil {
		e := r.ExpiresAt.UTC()
		r.ExpiresAt = &e
	}
	r.Version, r.UpdatedAt = 0, time.Time{}
	return r
}

// sameContent reports whether a and b differ only in version and save time.
func sameContent(a, b rules.Rule) bool {
	ja, errA := json.Marshal(normalize(a))
	jb, errB := json.Marshal(normalize(b))
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// validate checks one rule on its own, with the API's extra constraints.
func validate(r rules.Rule) error {
	diags := rules.Validate(r)
	if slices.Contains(reservedIDs, r.ID) {
		diags = append(diags, rules.Diagnostic{RuleID: r.ID, Field: "id",
			Message: fmt.Sprintf("id %q is reserved by the rules API", r.ID)})
	}
	if len(diags) > 0 {
		return &InvalidRulesError{Diagnostics: diags}
	}
	return nil
}

// commit applies changes to the current set cur under s.mu: compile the candidate set,
// write it with its events, load it into the engine, publish. It returns the stored rules
// of the changes in order, and how many changes the store wrote: it skips those that
// would leave a rule as it is (another replica may have saved the same content since cur
// was read). The store's refusals come back as they are; the callers name them (ruleErr).
//
// The Rule.Version of an update, enable or disable is kept: it is the version the change
// was made from, which the store requires to be the stored one (0: no check).
func (s *Service) commit(ctx context.Context, cur []rules.Rule, changes []record.RuleChange, operator, eventOp string) ([]rules.Rule, int, error) {
	for i, c := range changes {
		if c.Op != record.RuleOpDelete {
			changes[i].Rule = normalize(c.Rule)
		}
		switch c.Op {
		case record.RuleOpUpdate, record.RuleOpEnable, record.RuleOpDisable:
			changes[i].Rule.Version = c.Rule.Version
		}
	}
	if _, err := rules.Compile(merge(cur, changes, nil), s.draftOptions()); err != nil {
		return nil, 0, asInvalid(err)
	}
	// The write must not be abandoned half-way by a caller that goes away: once queued it
	// may commit, and the engine has to follow whatever the database holds.
	wctx := context.WithoutCancel(ctx)
	saved, events, err := s.store.ApplyRules(wctx, record.RuleBatch{
		Changes: changes, Operator: operator, At: s.now(), EventOp: eventOp,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("rulesapi: save rules: %w", err)
	}
	stored := storedIDs(events)
	if len(stored) == 0 {
		// Nothing changed, so the engine has nothing new to load: a rule another replica
		// saved meanwhile reaches it through Follow, as any change of theirs does.
		return saved, 0, nil
	}
	if err := s.engine.Load(merge(cur, changes, saved)); err != nil {
		s.revert(wctx, cur, changes, operator, events)
		return nil, 0, fmt.Errorf("rulesapi: load rules (change reverted): %w", err)
	}
	for _, ev := range events {
		s.publish(ev)
	}
	n := 0
	for i, c := range changes {
		if stored[c.Rule.ID] {
			n++
			s.log.Info("rule changed", "op", c.Op, "rule", c.Rule.ID, "version", saved[i].Version, "operator", operator)
		}
	}
	return saved, n, nil
}

// storedIDs names the rules a batch stored, from its rule.changed events (one per change,
// or one naming them all): the store writes none for a change it skipped.
func storedIDs(events []record.Event) map[string]bool {
	ids := map[string]bool{}
	for _, ev := range events {
		if ev.Type != record.EventRuleChanged {
			continue
		}
		var p record.RuleChangedPayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			continue
		}
		if p.RuleID != "" {
			ids[p.RuleID] = true
		}
		for _, id := range p.RuleIDs {
			ids[id] = true
		}
	}
	return ids
}

// ruleAttempts bounds how often a change that needs no operator's decision (an upsert, an
// enable or disable, an import) is made again when another replica changed the rules
// between its read and its write.
const ruleAttempts = 5

// ruleErr names, for the API, a precondition the store refused for a change of rule id,
// with the messages the same refusal has when this process sees it first: a conflict for
// an id that exists or a stale version, not found for a rule that is gone.
func ruleErr(err error, id string) error {
	var stale *storage.StaleRuleError
	switch {
	case errors.As(err, &stale):
		return fmt.Errorf("rule %q was changed meanwhile (now version %d, edited version %d): %w",
			id, stale.Stored, stale.Expected, ErrConflict)
	case errors.Is(err, record.ErrExists):
		return fmt.Errorf("rule %q already exists: %w", id, ErrConflict)
	case errors.Is(err, record.ErrNotFound):
		return notFound(id)
	}
	return err
}

// revert undoes a committed change the engine refused, restoring cur in the store. It is a
// safety net: the candidate set compiled just before, so Load failing means a defect.
func (s *Service) revert(ctx context.Context, cur []rules.Rule, changes []record.RuleChange, operator string, events []record.Event) {
	// The change's own events are in the log already; publish them so live clients see the
	// same history as a replay, followed by the revert.
	for _, ev := range events {
		s.publish(ev)
	}
	prev := make(map[string]rules.Rule, len(cur))
	for _, r := range cur {
		prev[r.ID] = r
	}
	undo := make([]record.RuleChange, 0, len(changes))
	for _, c := range changes {
		if old, ok := prev[c.Rule.ID]; ok {
			undo = append(undo, record.RuleChange{Op: record.RuleOpRevert, Rule: normalize(old)})
		} else if c.Op != record.RuleOpDelete {
			undo = append(undo, record.RuleChange{Op: record.RuleOpDelete, Rule: rules.Rule{ID: c.Rule.ID}})
		}
	}
	_, revEvents, err := s.store.ApplyRules(ctx, record.RuleBatch{
		Changes: undo, Operator: operator, At: s.now(), EventOp: record.RuleOpReload,
	})
	if err != nil {
		s.log.Error("rules: could not revert a change the engine refused; the stored rules "+
			"differ from the running ones until restart", "err", err)
		return
	}
	for _, ev := range revEvents {
		s.publish(ev)
	}
	if err := s.engine.Load(cur); err != nil {
		s.log.Error("rules: could not reload the previous rules after a revert", "err", err)
	}
}

func (s *Service) publish(ev record.Event) {
	if s.opts.Publish != nil {
		s.opts.Publish(ev)
	}
}

// merge returns cur with changes applied, ordered by id. When saved is given (the store's
// results, in change order) those are used for the changed rules, carrying their versions.
func merge(cur []rules.Rule, changes []record.RuleChange, saved []rules.Rule) []rules.Rule {
	byID := make(map[string]rules.Rule, len(cur)+len(changes))
	for _, r := range cur {
		byID[r.ID] = r
	}
	for i, c := range changes {
		if c.Op == record.RuleOpDelete {
			delete(byID, c.Rule.ID)
			continue
		}
		if saved != nil {
			byID[c.Rule.ID] = saved[i]
		} else {
			byID[c.Rule.ID] = c.Rule
		}
	}
	out := make([]rules.Rule, 0, len(byID))
	for _, r := range byID {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b rules.Rule) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func find(cur []rules.Rule, id string) (rules.Rule, bool) {
	for _, r := range cur {
		if r.ID == id {
			return r, true
		}
	}
	return rules.Rule{}, false
}

func notFound(id string) error {
	return fmt.Errorf("rule %q: %w", id, record.ErrNotFound)
}

// Create adds a new rule; ErrConflict when the id exists.
func (s *Service) Create(ctx context.Context, r rules.Rule, operator string) (rules.Rule, error) {
	if err := validate(r); err != nil {
		return rules.Rule{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.store.ListRules(ctx)
	if err != nil {
		return rules.Rule{}, err
	}
	if _, ok := find(cur, r.ID); ok {
		return rules.Rule{}, fmt.Errorf("rule %q already exists: %w", r.ID, ErrConflict)
	}
	// Another replica may create the id after this read: the store refuses the create then.
	saved, _, err := s.commit(ctx, cur, []record.RuleChange{{Op: record.RuleOpCreate, Rule: r}}, operator, "")
	if err != nil {
		return rules.Rule{}, ruleErr(err, r.ID)
	}
	return saved[0], nil
}

// Update replaces an existing rule. When r.Version is set it must be the current version
// (ErrConflict otherwise), so an editor working from a stale copy does not overwrite
// someone else's change. An update that changes nothing returns the rule unchanged.
func (s *Service) Update(ctx context.Context, r rules.Rule, operator string) (rules.Rule, error) {
	if err := validate(r); err != nil {
		return rules.Rule{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.store.ListRules(ctx)
	if err != nil {
		return rules.Rule{}, err
	}
	old, ok := find(cur, r.ID)
	if !ok {
		return rules.Rule{}, notFound(r.ID)
	}
	if r.Version != 0 && r.Version != old.Version {
		return rules.Rule{}, fmt.Errorf("rule %q was changed meanwhile (now version %d, edited version %d): %w",
			r.ID, old.Version, r.Version, ErrConflict)
	}
	if sameContent(old, r) {
		return old, nil
	}
	// r.Version goes to the store, which checks it again against the version stored when
	// it writes: another replica may have saved the rule after this read.
	saved, _, err := s.commit(ctx, cur, []record.RuleChange{{Op: record.RuleOpUpdate, Rule: r}}, operator, "")
	if err != nil {
		return rules.Rule{}, ruleErr(err, r.ID)
	}
	return saved[0], nil
}

// Upsert creates or updates r; saving identical content is a no-op. It is the entry for
// rules made elsewhere in Vigil, such as the rules a hold approval remembers.
func (s *Service) Upsert(ctx context.Context, r rules.Rule, operator string) error {
	if err := validate(r); err != nil {
		return err
	}
	r.Version = 0 // an upsert saves r whatever the stored version is
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		cur, err := s.store.ListRules(ctx)
		if err != nil {
			return err
		}
		op := record.RuleOpCreate
		if old, ok := find(cur, r.ID); ok {
			if sameContent(old, r) {
				return nil
			}
			op = record.RuleOpUpdate
		}
		_, _, err = s.commit(ctx, cur, []record.RuleChange{{Op: op, Rule: r}}, operator, "")
		if attempt < ruleAttempts && (errors.Is(err, record.ErrExists) || errors.Is(err, record.ErrNotFound)) {
			// Another replica created or deleted the rule after the read: decide create or
			// update again from the rule as it is now.
			continue
		}
		if err != nil {
			return ruleErr(err, r.ID)
		}
		return nil
	}
}

// Delete removes a rule; its versions stay and it can be restored.
func (s *Service) Delete(ctx context.Context, id, operator string) (rules.Rule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.store.ListRules(ctx)
	if err != nil {
		return rules.Rule{}, err
	}
	if _, ok := find(cur, id); !ok {
		return rules.Rule{}, notFound(id)
	}
	saved, _, err := s.commit(ctx, cur, []record.RuleChange{{Op: record.RuleOpDelete, Rule: rules.Rule{ID: id}}}, operator, "")
	if err != nil {
		return rules.Rule{}, ruleErr(err, id)
	}
	return saved[0], nil
}

// SetEnabled enables or disables a rule. Setting the state it already has changes nothing.
func (s *Service) SetEnabled(ctx context.Context, id string, enabled bool, operator string) (rules.Rule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		cur, err := s.store.ListRules(ctx)
		if err != nil {
			return rules.Rule{}, err
		}
		r, ok := find(cur, id)
		if !ok {
			return rules.Rule{}, notFound(id)
		}
		if r.Enabled == enabled {
			return r, nil
		}
		r.Enabled = enabled
		op := record.RuleOpDisable
		if enabled {
			op = record.RuleOpEnable
		}
		// The change is the rule as read with its state flipped, so it carries the version
		// read: saved over an edit another replica made since, it would undo that edit.
		// The store refuses it then, and it is made again from the rule as it is now.
		saved, _, err := s.commit(ctx, cur, []record.RuleChange{{Op: op, Rule: r}}, operator, "")
		if attempt < ruleAttempts && errors.Is(err, storage.ErrStaleRule) {
			continue
		}
		if err != nil {
			return rules.Rule{}, ruleErr(err, id)
		}
		return saved[0], nil
	}
}

// Restore saves version n of a rule as its newest version; this also brings back a
// deleted rule. Restoring a version the rule already equals (the current one, say) changes
// nothing and returns the rule unchanged, as saving an unchanged rule does: a version whose
// diff is empty would only bury the history's real changes.
func (s *Service) Restore(ctx context.Context, id string, version int, operator string) (rules.Rule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.store.RuleVersion(ctx, id, version)
	if err != nil {
		return rules.Rule{}, err
	}
	cur, err := s.store.ListRules(ctx)
	if err != nil {
		return rules.Rule{}, err
	}
	if old, ok := find(cur, id); ok && sameContent(old, v.Rule) {
		return old, nil
	}
	// Equal to the rule as stored when written (another replica restored it too, say), the
	// restore stores nothing and saved[0] is that rule.
	saved, _, err := s.commit(ctx, cur, []record.RuleChange{{Op: record.RuleOpRestore, Rule: v.Rule}}, operator, "")
	if err != nil {
		return rules.Rule{}, err
	}
	return saved[0], nil
}

// Import modes.
const (
	ModeMerge   = "merge"
	ModeReplace = "replace"
)

// ImportFile loads a rules file (YAML or JSON) into the stored set, as at start with
// `vigil serve --rules FILE`. merge upserts the file's rules by id; replace also deletes
// stored rules the file does not name. Only rules that differ get a new version; the
// whole import is one transaction and one "reload" event. It returns how many rules were
// created, changed or deleted. Errors carry file positions.
func (s *Service) ImportFile(ctx context.Context, path, mode, operator string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("rulesapi: read rules file: %w", err)
	}
	f, err := rules.ParseFile(path, data)
	if err != nil {
		return 0, err
	}
	n, _, err := s.importRules(ctx, f, mode, operator)
	if err == nil && s.opts.RulesFile != "" && samePath(path, s.opts.RulesFile) {
		ids := make(map[string]bool, len(f.Rules))
		for _, r := range f.Rules {
			ids[r.ID] = true
		}
		s.fileMu.Lock()
		s.fileIDs = ids
		s.fileMu.Unlock()
	}
	return n, err
}

// samePath reports whether two paths name the same file.
func samePath(a, b string) bool {
	if a == b {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// fromFile reports whether rule id is one the configured rules file sets.
func (s *Service) fromFile(id string) bool {
	s.fileMu.RLock()
	defer s.fileMu.RUnlock()
	return s.fileIDs[id]
}

// Reload imports Options.RulesFile again (merge), e.g. on SIGHUP or POST /api/rules/reload.
func (s *Service) Reload(ctx context.Context, operator string) (int, error) {
	if s.opts.RulesFile == "" {
		return 0, fmt.Errorf("no rules file is configured (start with --rules FILE): %w", ErrBadRequest)
	}
	return s.ImportFile(ctx, s.opts.RulesFile, ModeMerge, operator)
}

func (s *Service) importRules(ctx context.Context, f *rules.File, mode, operator string) (int, []rules.Rule, error) {
	if mode == "" {
		mode = ModeReplace
	}
	if mode != ModeMerge && mode != ModeReplace {
		return 0, nil, fmt.Errorf("import mode %q is not merge or replace: %w", mode, ErrBadRequest)
	}
	// Compile the file on its own first, for diagnostics located in the file.
	if _, err := rules.CompileFile(f, s.draftOptions()); err != nil {
		return 0, nil, asInvalid(err)
	}
	for i, r := range f.Rules {
		if slices.Contains(reservedIDs, r.ID) {
			return 0, nil, &InvalidRulesError{Diagnostics: []rules.Diagnostic{f.Locate(rules.Diagnostic{
				RuleID: r.ID, Index: i, Field: "id", Message: fmt.Sprintf("id %q is reserved by the rules API", r.ID)})}}
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		cur, err := s.store.ListRules(ctx)
		if err != nil {
			return 0, nil, err
		}
		inFile := make(map[string]bool, len(f.Rules))
		var changes []record.RuleChange
		for _, r := range f.Rules {
			inFile[r.ID] = true
			if old, ok := find(cur, r.ID); ok && sameContent(old, r) {
				continue
			}
			changes = append(changes, record.RuleChange{Op: record.RuleOpImport, Rule: r})
		}
		if mode == ModeReplace {
			for _, r := range cur {
				if !inFile[r.ID] {
					changes = append(changes, record.RuleChange{Op: record.RuleOpDelete, Rule: rules.Rule{ID: r.ID}})
				}
			}
		}
		if len(changes) == 0 {
			return 0, nil, nil
		}
		// The store skips a rule some other replica stored as the file has it after this
		// read (replicas started together with one file each import it), so n counts what
		// this import changed.
		saved, n, err := s.commit(ctx, cur, changes, operator, record.RuleOpReload)
		if attempt < ruleAttempts && errors.Is(err, record.ErrNotFound) {
			// A rule to delete was deleted by another replica after the read (which
			// fails the whole batch): compare the file with the rules as they are now.
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		if n > 0 {
			s.log.Info("rules imported", "file", f.Name(), "mode", mode, "changed", n, "operator", operator)
		}
		return n, saved, nil
	}
}

// viewFields are the JSON fields RuleView adds to a rule's own. They are read-only, yet a
// client may send a rule back as it got it (the console's held-step check sends the rules
// of GET /api/rules to POST /api/rules/test), so a rule in a request may carry them; they
// are ignored there. Keep this in step with RuleView.MarshalJSON.
var viewFields = []string{"expired", "stats", "fromFile"}

// RuleView is a rule as the API lists it: with its counters and whether it has expired.
type RuleView struct {
	rules.Rule
	// Expired rules stay listed but are no longer evaluated.
	Expired bool            `json:"expired"`
	Stats   rules.RuleStats `json:"stats"`
	// FromFile says the rule is in the rules file (--rules): the next start or reload
	// writes the file's version over a console edit.
	FromFile bool `json:"fromFile,omitempty"`
}

// MarshalJSON writes the rule's own fields and the view's. Without it the embedded rule's
// MarshalJSON would be promoted and drop expired and stats.
func (v RuleView) MarshalJSON() ([]byte, error) {
	rule, err := json.Marshal(v.Rule)
	if err != nil {
		return nil, err
	}
	extra, err := json.Marshal(struct {
		Expired  bool            `json:"expired"`
		Stats    rules.RuleStats `json:"stats"`
		FromFile bool            `json:"fromFile,omitempty"`
	}{v.Expired, v.Stats, v.FromFile})
	if err != nil {
		return nil, err
	}
	if len(rule) < 2 || rule[len(rule)-1] != '}' {
		return nil, fmt.Errorf("rule encodes as %q, not an object", rule)
	}
	out := append(rule[:len(rule)-1:len(rule)-1], ',')
	if len(rule) == 2 { // "{}"
		out = out[:1]
	}
	return append(out, extra[1:]...), nil
}

// List returns the stored rules with their counters, ordered by id.
func (s *Service) List(ctx context.Context) ([]RuleView, error) {
	cur, err := s.store.ListRules(ctx)
	if err != nil {
		return nil, err
	}
	stats := s.engine.Stats()
	now := s.now()
	out := make([]RuleView, len(cur))
	for i, r := range cur {
		out[i] = RuleView{Rule: r, Expired: r.Expired(now), Stats: stats[r.ID], FromFile: s.fromFile(r.ID)}
	}
	return out, nil
}

// Get returns one rule with its counters.
func (s *Service) Get(ctx context.Context, id string) (RuleView, error) {
	r, err := s.store.GetRule(ctx, id)
	if err != nil {
		return RuleView{}, err
	}
	return s.view(r), nil
}

func (s *Service) view(r rules.Rule) RuleView {
	return RuleView{Rule: r, Expired: r.Expired(s.now()), Stats: s.engine.Stats()[r.ID], FromFile: s.fromFile(r.ID)}
}

// Export writes the stored rules as a rules file ("yaml" or "json").
func (s *Service) Export(ctx context.Context, format string) ([]byte, error) {
	cur, err := s.store.ListRules(ctx)
	if err != nil {
		return nil, err
	}
	return rules.MarshalFile(&rules.File{Rules: cur}, format)
}
