// Package storage names what a storage backend provides: Backend, the methods the guardian,
// its console API, holds, rules, team mode, the live stream, the Agent API gateway's
// approvals ledger and the gateways' secrets use. storage/sqlite (the default, one process) and storage/postgres
// (shared by replicas) implement it, and both pass the conformance suite in
// storage/storetest; shared.go holds what both do alike and what readers of the event log
// share (the retention loop, search snippets, the newest seq). Only package main picks a
// backend; the guardian's packages name the parts they need as their own interfaces and
// import record.
package storage

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Backend is a complete storage backend.
//
// Ordering: every write that produces events assigns them seqs from one sequence shared by
// all event types; seqs are strictly increasing in commit order, so a reader that has seen
// seq N and asks for events after N never misses one committed later (gaps are allowed).
type Backend interface {
	Steps
	Holds
	Rules
	Auth
	Approvals
	Secrets
	Maintenance
	Close() error
}

// Steps is the step log: steps, sessions and the event log, and what is read from them.
type Steps interface {
	// SaveStep stores a step and its "step" event, assigns rec.Seq, and returns once the
	// step is durable. Reads made after it returns see the step.
	SaveStep(ctx context.Context, rec *record.StepRecord) error
	// AppendEvent stores a non-step event, assigns ev.Seq and returns once committed.
	AppendEvent(ctx context.Context, ev *record.Event) error
	Sessions(ctx context.Context, q record.SessionQuery) (record.SessionPage, error)
	Session(ctx context.Context, id string) (record.Session, error)
	Steps(ctx context.Context, q record.StepQuery) ([]record.StepRecord, error)
	Step(ctx context.Context, seq int64) (record.StepRecord, error)
	// RecentSteps returns up to limit of the newest steps of a session, oldest first, as
	// the session history rules read them: without Request, Response and MatchedRules, and
	// with Text cut to HistoryText characters (a session reloaded into the guardian's cache
	// must not read megabytes per step to keep a few fields).
	RecentSteps(ctx context.Context, sessionID string, limit int) ([]record.StepRecord, error)
	// StepsIn returns a page of the steps of every session in r, oldest first (a
	// backtest's window, read a page at a time).
	StepsIn(ctx context.Context, r record.StepRange) ([]record.StepRecord, error)
	// StepWindow returns the window of the newest n steps with seq < before (0: no bound):
	// the steps with after < seq <= last (both 0 when there are none; after 0 when there
	// are no more than n), to be read a page at a time with StepsIn.
	StepWindow(ctx context.Context, before int64, n int) (after, last int64, err error)
	// SessionStepsBefore returns the newest steps of a session with seq < before, oldest
	// first, as RecentSteps returns them: the history a stored step was decided with.
	SessionStepsBefore(ctx context.Context, sessionID string, before int64, limit int) ([]record.StepRecord, error)
	// EventsAfter returns events with seq > after in seq order, at most limit.
	EventsAfter(ctx context.Context, after int64, limit int) ([]record.Event, error)
	// EventsPage is EventsAfter bounded by bytes, with big steps truncated.
	EventsPage(ctx context.Context, after int64, p record.EventPage) ([]record.Event, error)
	Search(ctx context.Context, q record.SearchQuery) (record.SearchPage, error)
	Stats(ctx context.Context, now time.Time) (record.Stats, error)
	// CheckWritable reports, without writing, whether the database takes writes: nil when
	// it does, an error wrapping ErrReadOnly when it would refuse them although it answers
	// reads (a PostgreSQL hot standby or read-only default, or a role lacking a privilege
	// some write needs; a SQLite file, write-ahead log or WAL index that could only be
	// opened for reading), naming what to fix, another error when it could not tell. It is
	// cheap enough for a health check: none of Vigil's tables is read.
	CheckWritable(ctx context.Context) error
}

// ErrReadOnly is what CheckWritable's error matches when the database would refuse writes.
var ErrReadOnly = errors.New("the database refuses writes")

// Holds keeps held steps, session controls and the audit log.
type Holds interface {
	CreateHold(ctx context.Context, h *record.Hold, audit *record.AuditEntry) ([]record.Event, error)
	// ResolveHold updates the hold only while it is pending; otherwise it returns the
	// stored hold and an error wrapping record.ErrHoldDecided.
	ResolveHold(ctx context.Context, id string, res record.HoldResolution, audit *record.AuditEntry) (record.Hold, []record.Event, error)
	GetHold(ctx context.Context, id string) (record.Hold, error)
	ListHolds(ctx context.Context, status string, limit int) ([]record.Hold, error)
	SetHoldSeq(ctx context.Context, id string, seq int64) error
	HoldBySeq(ctx context.Context, seq int64) (record.Hold, error)
	// ResolvePendingOnStartup ends every hold a previous run left pending.
	ResolvePendingOnStartup(ctx context.Context, now time.Time) ([]record.Hold, []record.Event, error)
	SetSessionControl(ctx context.Context, c record.SessionControl, audit *record.AuditEntry) ([]record.Event, error)
	SessionControls(ctx context.Context) (map[string]string, error)
	AppendAudit(ctx context.Context, e *record.AuditEntry) (record.Event, error)
	ListAudit(ctx context.Context, q record.AuditQuery) ([]record.AuditEntry, error)
}

// Rules keeps the rule set and every version of each rule.
type Rules interface {
	ListRules(ctx context.Context) ([]rules.Rule, error)
	GetRule(ctx context.Context, id string) (rules.Rule, error)
	// ApplyRules commits several changes and their events in one transaction, all or none,
	// and returns for each change the rule as stored (for a delete: as it was).
	//
	// Each change's precondition is checked against the stored rule inside that
	// transaction, under the lock that serialises rule writes, so it holds across the
	// processes and replicas sharing the database (a check made on an earlier read would
	// let two of them both pass it):
	//   - create: the rule must not exist, else an error wrapping record.ErrExists.
	//   - update, enable, disable: the rule must exist, else record.ErrNotFound; a
	//     non-zero Rule.Version is the version the change was made from, and must be the
	//     stored one, else a *StaleRuleError (ErrStaleRule).
	//   - delete: the rule must exist, else record.ErrNotFound.
	//   - any other change that would store the rule's content as it is (equal apart from
	//     version and save time) stores nothing: no version, event or audit entry, and
	//     its result is the stored rule. Its id is then not in the batch's reload event
	//     (b.EventOp), which is left out too when no change was stored.
	ApplyRules(ctx context.Context, b record.RuleBatch) ([]rules.Rule, []record.Event, error)
	RuleVersions(ctx context.Context, id string) ([]record.RuleVersion, error)
	RuleVersion(ctx context.Context, id string, version int) (record.RuleVersion, error)
}

// ErrStaleRule is what a *StaleRuleError matches: a rule change made from a version that
// is no longer the stored one (someone saved the rule in between).
var ErrStaleRule = errors.New("rule was changed meanwhile")

// StaleRuleError is ApplyRules' error when a change's expected version (Rule.Version) is
// not the stored one. Stored is the version the transaction found, for the caller's
// message: a version read again afterwards could already be newer still.
type StaleRuleError struct {
	ID       string
	Stored   int
	Expected int
}

func (e *StaleRuleError) Error() string {
	return fmt.Sprintf("storage: rule %q is at version %d, the change was made from version %d: %v",
		e.ID, e.Stored, e.Expected, ErrStaleRule)
}

func (e *StaleRuleError) Unwrap() error { return ErrStaleRule }

// Auth keeps agent keys, operator accounts and console sign-in sessions.
type Auth interface {
	CreateAPIKey(ctx context.Context, k *record.APIKey, audit *record.AuditEntry) (record.Event, error)
	APIKeys(ctx context.Context) ([]record.APIKey, error)
	APIKey(ctx context.Context, id string) (record.APIKey, error)
	APIKeyByHash(ctx context.Context, hash []byte) (record.APIKey, error)
	HasAPIKeys(ctx context.Context) (bool, error)
	RevokeAPIKey(ctx context.Context, id string, at time.Time, audit *record.AuditEntry) (record.APIKey, record.Event, error)
	TouchAPIKeys(ctx context.Context, used map[string]time.Time) error
	CreateUser(ctx context.Context, u *record.User, audit *record.AuditEntry) (record.Event, error)
	Users(ctx context.Context) ([]record.User, error)
	User(ctx context.Context, name string) (record.User, error)
	HasUsers(ctx context.Context) (bool, error)
	SetUserPassword(ctx context.Context, name string, hash []byte, at time.Time, audit *record.AuditEntry) (record.Event, error)
	DeleteUser(ctx context.Context, name string, audit *record.AuditEntry) (record.User, record.Event, error)
	CreateAuthSession(ctx context.Context, s *record.AuthSession, audit *record.AuditEntry) (record.Event, error)
	AuthSession(ctx context.Context, hash []byte) (record.AuthSession, error)
	DeleteAuthSession(ctx context.Context, hash []byte, audit *record.AuditEntry) (bool, record.Event, error)
	DeleteExpiredAuthSessions(ctx context.Context, now time.Time) (int64, error)
}

// Maintenance is retention, export and what operations report.
type Maintenance interface {
	// Prune deletes what the retention policy no longer keeps, one pass.
	Prune(ctx context.Context, now time.Time, r record.Retention) (record.PruneResult, error)
	// RunRetention prunes every r.Interval until ctx ends.
	RunRetention(ctx context.Context, r record.Retention, log *slog.Logger)
	// Export writes steps and audit entries as JSON Lines.
	Export(ctx context.Context, w io.Writer, opts record.ExportOptions) (record.ExportResult, error)
	// IngestStats is the backlog of durable steps not yet in the tables (zero when a
	// backend writes them there directly).
	IngestStats() record.IngestStats
	// Describe names the database for logs and /api/info, without credentials.
	Describe() string
}

// ApprovalState is what the database knows of an approval request the Agent API gateway
// judged (--agentapi-approvals client).
type ApprovalState uint8

const (
	// ApprovalUnknown: never recorded, or recorded too long ago.
	ApprovalUnknown ApprovalState = iota
	// ApprovalAllowed: Vigil let it through to the client, which has not answered yet.
	ApprovalAllowed
	// ApprovalDenied: Vigil denied it and answered the upstream itself.
	ApprovalDenied
	// ApprovalAnswered: the client's answer to it went up; each request is answered once.
	ApprovalAnswered
)

// Approvals keeps the Agent API gateway's verdicts on the approval requests it passed on
// or denied, so that a client may answer only a request Vigil let through to it, and only
// once, whichever guardian sharing the database let it through and whichever receives the
// answer (replicas behind a load balancer, a guardian restarted in between). A request is
// named by key, an opaque digest the gateway computes. A request recorded maxAge or longer
// before the time a call is given counts as unknown, as if it had never been recorded.
type Approvals interface {
	// RecordApproval keeps Vigil's verdict on the request key, judged at at. A denial
	// sticks: a request recorded denied less than maxAge before stays denied when it is
	// judged again; otherwise the request takes the new verdict. Either way its age counts
	// from at.
	RecordApproval(ctx context.Context, key []byte, allowed bool, at time.Time, maxAge time.Duration) error
	// TakeApprovals marks the requests keys answered, all or none, in one transaction:
	// when every one is allowed (and younger than maxAge at now), all become answered and
	// ok is true; otherwise nothing changes, and bad is the index of the first that is not
	// and state what the database knows of it. Two calls taking one request, from any
	// guardians sharing the database, never both succeed.
	TakeApprovals(ctx context.Context, keys [][]byte, now time.Time, maxAge time.Duration) (bad int, state ApprovalState, ok bool, err error)
	// RestoreApprovals makes the requests of keys that are answered allowed again (a turn
	// that never sent its answers up); others are left as they are.
	RestoreApprovals(ctx context.Context, keys [][]byte) error
	// PruneApprovals deletes the requests recorded maxAge or longer before now and returns
	// how many it deleted.
	PruneApprovals(ctx context.Context, now time.Time, maxAge time.Duration) (int64, error)
}

// Secrets keeps small random secrets by name, which every guardian sharing the database
// must agree on and which outlive a restart: the AAP gateway's key for the list cursors it
// seals, which a client may send back to any replica. A secret never leaves the database
// through Vigil: it is not logged, exported or copied by `vigil migrate` (a new one only
// makes what was sealed with the old one unreadable).
type Secrets interface {
	// Secret returns the secret named name, size random bytes made on its first use and
	// the same on every call after it, from any guardian sharing the database: two asking
	// first at once agree on one of theirs. A secret stored with another size is an error.
	Secret(ctx context.Context, name string, size int) ([]byte, error)
}

// NewSecret is a secret as Secrets makes them: size bytes from crypto/rand.
func NewSecret(size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("storage: a secret of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("storage: make a secret: %w", err)
	}
	return b, nil
}

// CheckSecret is the error for a stored secret of the wrong size, nil when it has size
// bytes.
func CheckSecret(name string, got []byte, size int) error {
	if len(got) != size {
		return fmt.Errorf("storage: the secret %q has %d bytes, not %d", name, len(got), size)
	}
	return nil
}
