package agentapi

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/vigil-guardian/vigil/storage"
)

// With --agentapi-approvals client the client answers the approval requests Vigil let
// through to it. Its answer is sent up as it is, so the gateway must know that the request
// answered is one of those: otherwise a client that knows or guesses the id of a request
// Vigil denied (and answered approve: false itself), or of one it never passed on (a hold
// abandoned), could approve it and run a tool the rules stopped. The storage API has no
// lookup of a session's step by its call id, so the gateway keeps, for a bounded time, the
// verdict on each approval request it judged, in a ledger: in the database when it has one
// (Options.Approvals), so that an answer may reach another replica than the one that let
// the request through, or the same guardian after a restart; in memory otherwise, for a
// bounded number of requests too. An answer to a request the ledger does not know
// (another session's, one forgotten) is refused, never sent up: fail closed.

// ledger keeps the verdicts on approval requests (see approvalLedger and storeLedger).
type ledger interface {
	// record keeps Vigil's verdict on an approval request. A denial sticks: once Vigil
	// has answered a request approve: false, judging it again (an upstream that asks
	// twice with one id) does not let the client approve it.
	record(ctx context.Context, k approvalKey, allowed bool) error
	// take marks the requests keys answered when every one of them is one Vigil let
	// through and not yet answered; otherwise it changes nothing and returns the index of
	// the first that is not and what the ledger knows of it. Of two takes of one request,
	// one succeeds.
	take(ctx context.Context, keys []approvalKey) (bad int, state approvalState, ok bool, err error)
	// restore makes requests taken for a turn that never sent the answers up answerable
	// again (those still remembered).
	restore(ctx context.Context, keys []approvalKey) error
}

// Default bounds of what the gateway remembers of approval requests.
const (
	defaultApprovalRecords   = 10000
	defaultApprovalRecordAge = time.Hour
)

// approvalState is what the gateway knows of an approval request it judged: the same
// states whichever ledger keeps it.
type approvalState = storage.ApprovalState

const (
	approvalUnknown = storage.ApprovalUnknown
	// approvalAllowed: Vigil let it through to the client, which has not answered yet.
	approvalAllowed = storage.ApprovalAllowed
	// approvalDenied: Vigil denied it and answered the upstream approve: false itself.
	approvalDenied = storage.ApprovalDenied
	// approvalAnswered: the client's answer to it went up; each request is answered once.
	approvalAnswered = storage.ApprovalAnswered
)

// approvalKey names one approval request of one session, as one API key (or none) saw it.
// It is a digest, so that an entry costs the same whatever the lengths of the ids (an
// upstream's approval id may be as long as an event).
type approvalKey [sha256.Size]byte

func approvalKeyOf(session, keyID, requestID string) approvalKey {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{session, keyID, requestID} {
		// Length-prefixed, so that no two triples write the same bytes.
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var k approvalKey
	h.Sum(k[:0])
	return k
}

type approvalEntry struct {
	key   approvalKey
	at    time.Time
	state approvalState
}

// approvalLedger remembers the verdicts on approval requests in memory, for a gateway
// without a database: at most max entries (the oldest forgotten first), each for at most
// age. What it forgot is unknown, and an answer to an unknown request is refused.
type approvalLedger struct {
	max int
	age time.Duration
	now func() time.Time

	mu sync.Mutex
	// order lists the entries oldest first; byKey finds them.
	order *list.List
	byKey map[approvalKey]*list.Element
}

func newApprovalLedger(max int, age time.Duration, now func() time.Time) *approvalLedger {
	return &approvalLedger{max: max, age: age, now: now, order: list.New(), byKey: map[approvalKey]*list.Element{}}
}

// prune forgets the entries older than age. The caller holds mu.
func (l *approvalLedger) prune(now time.Time) {
	for e := l.order.Front(); e != nil; e = l.order.Front() {
		if now.Sub(e.Value.(*approvalEntry).at) < l.age {
			return
		}
		l.remove(e)
	}
}

func (l *approvalLedger) remove(e *list.Element) {
	delete(l.byKey, e.Value.(*approvalEntry).key)
	l.order.Remove(e)
}

// record keeps Vigil's verdict on an approval request. A denial sticks: once Vigil has
// answered a request approve: false, judging it again (an upstream that asks twice with one
// id) does not let the client approve it.
func (l *approvalLedger) record(k approvalKey, allowed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.prune(now)
	state := approvalDenied
	if allowed {
		state = approvalAllowed
	}
	if e, ok := l.byKey[k]; ok {
		ent := e.Value.(*approvalEntry)
		if ent.state != approvalDenied {
			ent.state = state
		}
		ent.at = now
		l.order.MoveToBack(e)
		return
	}
	l.byKey[k] = l.order.PushBack(&approvalEntry{key: k, at: now, state: state})
	for l.order.Len() > l.max {
		l.remove(l.order.Front())
	}
}

// take marks the requests keys answered when every one of them is one Vigil let through
// and not yet answered; otherwise it changes nothing and returns the index of the first
// that is not and what the ledger knows of it.
func (l *approvalLedger) take(keys []approvalKey) (bad int, state approvalState, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prune(l.now())
	for i, k := range keys {
		state := approvalUnknown
		if e, ok := l.byKey[k]; ok {
			state = e.Value.(*approvalEntry).state
		}
		if state != approvalAllowed {
			l.setAll(keys[:i], approvalAllowed)
			return i, state, false
		}
		l.byKey[k].Value.(*approvalEntry).state = approvalAnswered
	}
	return 0, 0, true
}

// restore makes requests taken for a turn that never sent the answers up answerable again
// (those still remembered).
func (l *approvalLedger) restore(keys []approvalKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setAll(keys, approvalAllowed)
}

// setAll sets the state of the remembered answered entries of keys. The caller holds mu.
func (l *approvalLedger) setAll(keys []approvalKey, state approvalState) {
	for _, k := range keys {
		if e, ok := l.byKey[k]; ok && e.Value.(*approvalEntry).state == approvalAnswered {
			e.Value.(*approvalEntry).state = state
		}
	}
}

// memoryLedger is the ledger of a gateway without a database: an approvalLedger, which
// never fails.
type memoryLedger struct{ l *approvalLedger }

func (m memoryLedger) record(_ context.Context, k approvalKey, allowed bool) error {
	m.l.record(k, allowed)
	return nil
}

func (m memoryLedger) take(_ context.Context, keys []approvalKey) (int, approvalState, bool, error) {
	bad, state, ok := m.l.take(keys)
	return bad, state, ok, nil
}

func (m memoryLedger) restore(_ context.Context, keys []approvalKey) error {
	m.l.restore(keys)
	return nil
}

// approvalPruneEvery is how often a store ledger deletes the requests older than its age:
// the table holds at most that age of requests, and a minute more.
const approvalPruneEvery = time.Minute

// storeLedger keeps the verdicts in the database, shared by every guardian on it (and
// kept across restarts), for age; the database makes each take atomic across them. It is
// bounded by age only: the requests of the last age, which the database holds on disk.
type storeLedger struct {
	store storage.Approvals
	age   time.Duration
	now   func() time.Time
	log   *slog.Logger
	// nextPrune is when record next prunes, in unix nanoseconds: each gateway prunes at
	// most every approvalPruneEvery (a few guardians doing it is harmless).
	nextPrune atomic.Int64
}

func (s *storeLedger) record(ctx context.Context, k approvalKey, allowed bool) error {
	now := s.now()
	if err := s.store.RecordApproval(ctx, k[:], allowed, now, s.age); err != nil {
		return err
	}
	next := s.nextPrune.Load()
	if now.UnixNano() < next || !s.nextPrune.CompareAndSwap(next, now.Add(approvalPruneEvery).UnixNano()) {
		return nil
	}
	// The verdict is stored: a failure here leaves old rows for the next prune, and
	// they count as unknown meanwhile.
	if _, err := s.store.PruneApprovals(ctx, now, s.age); err != nil {
		s.log.Warn("prune approval requests", "err", err)
	}
	return nil
}

func (s *storeLedger) take(ctx context.Context, keys []approvalKey) (int, approvalState, bool, error) {
	return s.store.TakeApprovals(ctx, keyBytes(keys), s.now(), s.age)
}

func (s *storeLedger) restore(ctx context.Context, keys []approvalKey) error {
	return s.store.RestoreApprovals(ctx, keyBytes(keys))
}

func keyBytes(keys []approvalKey) [][]byte {
	out := make([][]byte, len(keys))
	for i := range keys {
		out[i] = keys[i][:]
	}
	return out
}

// approvalData is what the gateway reads of an mcp_approval_response's data: the request
// it answers. Whether it approves does not matter to the gateway: only an answer to a
// request Vigil let through to this client goes up, whatever it says.
//
// Its reason, though, is text the client writes and the agent reads (the runtime hands it
// to the model with the answer), so it is judged as the client's messages are; see
// readAnswer and turn.reasons.
type approvalData struct {
	ApprovalRequestID *string `json:"approval_request_id"`
	Reason            *string `json:"reason"`
}

var approvalDataMembers = []string{"approval_request_id", "reason"}

func (*approvalData) members() []string { return approvalDataMembers }

// readAnswer returns the ids of the approval requests an mcp_approval_response answers:
// one for each content part, every part a data part naming one (a part that names none
// could be read by the upstream otherwise than the gateway reads it, so it is refused);
// and the reason each part gives with its answer, nil where it gives none or an empty one,
// reasons itself nil when no part gives one.
func readAnswer(m *message) (ids []string, reasons []*string, err error) {
	const want = "want a data part whose approval_request_id names the approval request it answers"
	if len(m.Content) == 0 {
		return nil, nil, &fieldError{"content", want}
	}
	parts, err := readParts(m)
	if err != nil {
		return nil, nil, err
	}
	ids = make([]string, len(parts))
	for j, c := range parts {
		path := fmt.Sprintf("content[%d]", j)
		if len(c.Data) == 0 || isNull(c.Data) {
			return nil, nil, &fieldError{path, want}
		}
		var d approvalData
		if err := decodeExact(c.Data, &d); err != nil {
			return nil, nil, under(path+".data", err)
		}
		if d.ApprovalRequestID == nil {
			return nil, nil, &fieldError{path + ".data.approval_request_id", "required: the id of the approval request answered"}
		}
		ids[j] = *d.ApprovalRequestID
		if d.Reason != nil && *d.Reason != "" {
			if reasons == nil {
				reasons = make([]*string, len(parts))
			}
			reasons[j] = d.Reason
		}
	}
	return ids, reasons, nil
}

// withReasons returns the mcp_approval_response raw with the reason of each part j for
// which reasons[j] is set replaced by it.
func withReasons(raw []byte, m *message, reasons []*string) ([]byte, error) {
	parts := append([]json.RawMessage(nil), m.Content...)
	for j, r := range reasons {
		if r == nil || j >= len(parts) {
			continue
		}
		var err error
		if parts[j], err = setDataMember(parts[j], "reason", *r); err != nil {
			return nil, err
		}
	}
	return setContent(raw, parts)
}

// admitAnswers checks, before anything of the turn is stored or sent, that each
// mcp_approval_response in the input answers an approval request Vigil let through to this
// client in this session and that it has not answered yet, and marks them answered (run
// restores them if the turn never sends them up). Any other answer refuses the request.
func (t *turn) admitAnswers() error {
	var (
		keys  []approvalKey
		where []int
		ids   []string
		seen  = map[string]int{}
	)
	for i := range t.req.items {
		if t.req.items[i].Type != typeMCPApprovalResponse {
			continue
		}
		item := fmt.Sprintf("input[%d]", i)
		if t.req.sessionID == "" {
			// Without a session id each request is a session of its own: no approval
			// request asked in another can be answered in it.
			return &fieldError{item, "an mcp_approval_response needs the session_id of the request whose answer asked for it"}
		}
		answered, reasons, err := readAnswer(&t.req.items[i])
		if err != nil {
			return under(item, err)
		}
		if reasons != nil {
			if t.reasons == nil {
				t.reasons = map[int][]*string{}
			}
			t.reasons[i] = reasons
		}
		for _, id := range answered {
			if j, dup := seen[id]; dup {
				return &fieldError{item, fmt.Sprintf("approval request %s is answered already by input[%d]: each is answered once", quoteID(id), j)}
			}
			seen[id] = i
			keys = append(keys, approvalKeyOf(t.st.session, t.meta.KeyID, id))
			where = append(where, i)
			ids = append(ids, id)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	bad, state, ok, err := t.gw.approvals.take(t.ctx, keys)
	if err != nil {
		return &ledgerError{err}
	}
	if !ok {
		item, id := fmt.Sprintf("input[%d]", where[bad]), quoteID(ids[bad])
		switch state {
		case approvalDenied:
			return &fieldError{item, fmt.Sprintf("approval request %s was denied by Vigil: the client may not answer it", id)}
		case approvalAnswered:
			return &fieldError{item, fmt.Sprintf("approval request %s was answered already: each is answered once", id)}
		}
		return &fieldError{item, fmt.Sprintf("an mcp_approval_response may answer only an approval request Vigil passed to this client "+
			"in this session, and %s is not one it knows (never passed on here, or no longer remembered: ask the agent again)", id)}
	}
	t.taken = keys
	return nil
}

// ledgerError is a failure of the ledger to check a client's answers (the database did
// not answer): the request is refused as a server-side failure, and nothing is sent up.
type ledgerError struct{ err error }

func (e *ledgerError) Error() string { return "agentapi: check approval answers: " + e.err.Error() }
func (e *ledgerError) Unwrap() error { return e.err }

// ledgerTimeout bounds the ledger's writes made on the turn's behalf whether or not its
// client is still there (see ledgerContext).
const ledgerTimeout = 10 * time.Second

// ledgerContext is for a write to the ledger that must happen even when the client has
// gone (a verdict on a request the upstream sent, answers made answerable again).
func (t *turn) ledgerContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(t.ctx), ledgerTimeout)
}

// rememberApproval keeps Vigil's verdict on an approval request the upstream sent, so that
// the client may answer it only when Vigil let it through. A verdict the ledger could not
// keep is logged: the request then stays as the ledger knew it (unknown, most often, so
// that the client's answer to it is refused: fail closed).
func (t *turn) rememberApproval(id string, allowed bool) {
	if t.gw.approvals == nil || id == "" {
		return
	}
	ctx, cancel := t.ledgerContext()
	defer cancel()
	if err := t.gw.approvals.record(ctx, approvalKeyOf(t.st.session, t.meta.KeyID, id), allowed); err != nil {
		t.gw.log.Error("approval verdict not recorded: the client's answer to the request will be refused",
			"session", t.st.session, "approvalRequest", quoteID(id), "allowed", allowed, "err", err)
	}
}

// restoreAnswers makes the answers the turn took answerable again: they never went up.
func (t *turn) restoreAnswers() {
	ctx, cancel := t.ledgerContext()
	defer cancel()
	if err := t.gw.approvals.restore(ctx, t.taken); err != nil {
		t.gw.log.Error("approval answers not restored: the client may not send them again",
			"session", t.st.session, "answers", len(t.taken), "err", err)
	}
}

// quoteID quotes a client's id for an error message, cut short: the message is not the
// place to echo a megabyte back.
func quoteID(id string) string {
	const most = 64
	if len(id) <= most {
		return strconv.Quote(id)
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return strconv.Quote(id[:cut]) + "…"
}
