package agentapi

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// With --agentapi-approvals client the client answers the approval requests Vigil let
// through to it. Its answer is sent up as it is, so the gateway must know that the request
// answered is one of those: otherwise a client that knows or guesses the id of a request
// Vigil denied (and answered approve: false itself), or of one it never passed on (a hold
// abandoned), could approve it and run a tool the rules stopped. The storage API has no
// lookup of a session's step by its call id, and the gateway holds no store, so the
// gateway remembers, for a bounded number of requests and a bounded time, the verdict on
// each approval request it judged; an answer to a request it does not remember (another
// session's, one from before a restart or from another replica, one forgotten) is refused,
// never sent up: fail closed.

// Default bounds of what the gateway remembers of approval requests.
const (
	defaultApprovalRecords   = 10000
	defaultApprovalRecordAge = time.Hour
)

// approvalState is what the gateway knows of an approval request it judged.
type approvalState uint8

const (
	approvalUnknown approvalState = iota
	// approvalAllowed: Vigil let it through to the client, which has not answered yet.
	approvalAllowed
	// approvalDenied: Vigil denied it and answered the upstream approve: false itself.
	approvalDenied
	// approvalAnswered: the client's answer to it went up; each request is answered once.
	approvalAnswered
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

// approvalLedger remembers the verdicts on approval requests: at most max entries (the
// oldest forgotten first), each for at most age. What it forgot is unknown, and an answer
// to an unknown request is refused.
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

// approvalData is what the gateway reads of an mcp_approval_response's data: the request
// it answers. Whether it approves does not matter to the gateway: only an answer to a
// request Vigil let through to this client goes up, whatever it says.
//
// Its reason, though, is text the client writes and the agent reads (the runtime hands it
// to the model with the answer), so it is judged as the client's messages are; see
// answerReasons.
type approvalData struct {
	ApprovalRequestID *string `json:"approval_request_id"`
	Reason            *string `json:"reason"`
}

var approvalDataMembers = []string{"approval_request_id", "reason"}

func (*approvalData) members() []string { return approvalDataMembers }

// answeredIDs returns the ids of the approval requests an mcp_approval_response answers:
// one for each content part, every part a data part naming one (a part that names none
// could be read by the upstream otherwise than the gateway reads it, so it is refused).
func answeredIDs(m *message) ([]string, error) {
	const want = "want a data part whose approval_request_id names the approval request it answers"
	if len(m.Content) == 0 {
		return nil, &fieldError{"content", want}
	}
	parts, err := readParts(m)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(parts))
	for j, c := range parts {
		path := fmt.Sprintf("content[%d]", j)
		if len(c.Data) == 0 || isNull(c.Data) {
			return nil, &fieldError{path, want}
		}
		var d approvalData
		if err := decodeExact(c.Data, &d); err != nil {
			return nil, under(path+".data", err)
		}
		if d.ApprovalRequestID == nil {
			return nil, &fieldError{path + ".data.approval_request_id", "required: the id of the approval request answered"}
		}
		ids[j] = *d.ApprovalRequestID
	}
	return ids, nil
}

// answerReasons returns the reason each content part of an mcp_approval_response gives
// with its answer, nil where a part gives none or an empty one, and whether any does. The
// message was read by answeredIDs when the turn was admitted, so its parts decode.
func answerReasons(m *message) (reasons []*string, some bool, err error) {
	parts, err := readParts(m)
	if err != nil {
		return nil, false, err
	}
	reasons = make([]*string, len(parts))
	for j, c := range parts {
		var d approvalData
		if err := decodeExact(c.Data, &d); err != nil {
			return nil, false, under(fmt.Sprintf("content[%d].data", j), err)
		}
		if d.Reason != nil && *d.Reason != "" {
			reasons[j], some = d.Reason, true
		}
	}
	return reasons, some, nil
}

// withReasons returns the mcp_approval_response raw with the reason of each part j for
// which reasons[j] is set replaced by it.
func withReasons(raw []byte, m *message, reasons []*string) ([]byte, error) {
	parts := append([]json.RawMessage(nil), m.Content...)
	for j, r := range reasons {
		if r == nil || j >= len(parts) {
			continue
		}
		var c map[string]json.RawMessage
		if err := json.Unmarshal(parts[j], &c); err != nil {
			return nil, err
		}
		v, _ := json.Marshal(*r)
		data, err := setKey(c["data"], "reason", v)
		if err != nil {
			return nil, err
		}
		if parts[j], err = setKey(parts[j], "data", data); err != nil {
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
		answered, err := answeredIDs(&t.req.items[i])
		if err != nil {
			return under(item, err)
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
	bad, state, ok := t.gw.approvals.take(keys)
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

// rememberApproval keeps Vigil's verdict on an approval request the upstream sent, so that
// the client may answer it only when Vigil let it through.
func (t *turn) rememberApproval(id string, allowed bool) {
	if t.gw.approvals == nil || id == "" {
		return
	}
	t.gw.approvals.record(approvalKeyOf(t.st.session, t.meta.KeyID, id), allowed)
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
