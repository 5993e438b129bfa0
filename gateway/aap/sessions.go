package aap

import (
	"container/list"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/storage"
)

// session is what the gateway knows of one upstream session.
type session struct {
	id      string
	vigilID string
	// lock lets one turn of the session run at a time: the messages the gateway owes the
	// upstream (pending) belong to the turn that follows.
	lock chan struct{}

	// mu guards serverTools, which GET /sessions reads while a turn may hold lock for as
	// long as a hold waits; lock's holder writes it with mu held too.
	mu          sync.Mutex
	serverTools map[string]bool // enabled server tools → the client trusted it

	// Guarded by lock.
	agent       agentInfo
	options     map[string]string // masked, bounded by mergeOptions
	clientTools map[string]bool
	// pending are tool permissions and denial messages the gateway owes the upstream; they
	// go up with the client's next turn (which carries the results of the client tools
	// that were let through).
	pending []json.RawMessage
	// answered are the tool calls whose answers Vigil sent the upstream in the session's
	// last turn (pending's go up with the next): the client's own permissions for them are
	// dropped on the next turn, as the upstream has Vigil's.
	answered map[string]bool
	// retrust is set for a session the upstream holds with trusted tools (created past the
	// gateway): its next turn tells the upstream they need permission.
	retrust bool
}

func (s *session) acquire(ctx context.Context) error {
	select {
	case s.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *session) release() { <-s.lock }

// applyAgent takes a request's agent config; options are the session's options with the
// request's merged in (mergeOptions).
func (s *session) applyAgent(a *agentConfig, options map[string]string) {
	if a == nil {
		return
	}
	if a.hasTool {
		tools := make(map[string]bool, len(a.tools))
		for _, t := range a.tools {
			tools[t.Name] = t.Trust
		}
		s.mu.Lock()
		s.serverTools = tools
		s.mu.Unlock()
	}
	if a.options != nil {
		s.options = options
	}
}

// mergeOptions returns a session's options (old) with a request's (a's, masked) merged in
// by key, as AAP has the upstream do it ("Options merged by key"): a turn's options add to
// the session's, so names set by earlier turns stay. What the gateway keeps is bounded,
// since every step of the session carries it: at most MaxOptions names and MaxOptionBytes
// of names and recorded values (a masked value counts as its "***"). An error names the
// bound; the request is refused before the upstream sees it, so the upstream's options
// and the recorded ones stay the same.
func (g *Gateway) mergeOptions(ai agentInfo, old map[string]string, a *agentConfig, field string) (map[string]string, error) {
	if a == nil || a.options == nil {
		return old, nil
	}
	merged := make(map[string]string, len(old)+len(a.options))
	for k, v := range old {
		merged[k] = v
	}
	for k, v := range maskOptions(ai, a.options) {
		merged[k] = v
	}
	if len(merged) > g.opts.MaxOptions {
		return nil, fmt.Errorf("%s.options: a session has at most %d options (a turn's options are merged into the session's by key), got %d",
			field, g.opts.MaxOptions, len(merged))
	}
	size := 0
	for k, v := range merged {
		size += len(k) + len(v)
	}
	if size > g.opts.MaxOptionBytes {
		return nil, fmt.Errorf("%s.options: a session's option names and recorded values are at most %d bytes (a turn's options are merged into the session's by key), got %d",
			field, g.opts.MaxOptionBytes, size)
	}
	return merged, nil
}

func (s *session) applyClientTools(names []string, has bool) {
	if !has {
		return
	}
	s.clientTools = make(map[string]bool, len(names))
	for _, n := range names {
		s.clientTools[n] = true
	}
}

// sessionCache keeps the most recently used sessions, at most max.
type sessionCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *session, most recent first
	byID  map[string]*list.Element
}

func newSessionCache(max int) *sessionCache {
	return &sessionCache{max: max, order: list.New(), byID: map[string]*list.Element{}}
}

func (c *sessionCache) get(id string) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byID[id]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*session)
	}
	return nil
}

// put stores s unless a session of that id is already known, and returns the stored one.
func (c *sessionCache) put(s *session) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byID[s.id]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*session)
	}
	c.byID[s.id] = c.order.PushFront(s)
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byID, last.Value.(*session).id)
	}
	return s
}

func (c *sessionCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byID[id]; ok {
		c.order.Remove(e)
		delete(c.byID, id)
	}
}

func (g *Gateway) newSession(id string, ai agentInfo) *session {
	return &session{id: id, vigilID: g.vigilSession(id), lock: make(chan struct{}, 1), agent: ai,
		serverTools: map[string]bool{}, clientTools: map[string]bool{}}
}

// handleCreate is POST /sessions: the agent's trusted tools become untrusted upstream, the
// session is created, and its seed messages are decided. A seed the rules deny or would
// modify refuses the session: the upstream stored the history when it created the session,
// so the gateway deletes it rather than leave an unjudged history behind.
func (g *Gateway) handleCreate(w http.ResponseWriter, r *http.Request) {
	body, ok := g.readBody(w, r)
	if !ok {
		return
	}
	req, err := parseObject(body, "")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !req.has("agent") {
		writeError(w, http.StatusBadRequest, "agent: required")
		return
	}
	agent, err := parseAgentConfig(req.raw("agent"), "agent", true)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	elems, err := req.array("", "messages")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	seeds := make([]message, len(elems))
	for i, e := range elems {
		if seeds[i], err = parseMessage(e, fmt.Sprintf("messages[%d]", i), "system", "user", "assistant", "tool"); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	toolElems, err := req.array("", "tools")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	toolNames, err := parseToolSpecs("tools", toolElems)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.set("agent", agent.obj.bytes())

	ai := g.agent(r.Context(), r, agent.name)
	options, err := g.mergeOptions(ai, nil, agent, "agent")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	resp, err := g.upstreamRequest(r.Context(), r, http.MethodPost, "/sessions", "", req.bytes())
	if err != nil {
		g.unreachable(w, err)
		return
	}
	answer, err := g.readUpstream(resp)
	if err != nil {
		g.unreachable(w, err)
		return
	}
	if resp.StatusCode/100 != 2 {
		passBody(w, resp, answer)
		return
	}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if json.Unmarshal(answer, &created) != nil || created.SessionID == "" || aos.CheckID(g.vigilSession(created.SessionID)) != "" {
		g.log.Warn("upstream created a session without a usable sessionId", "status", resp.StatusCode)
		writeError(w, http.StatusBadGateway, fmt.Sprintf("the AAP upstream %q answered POST /sessions without a usable sessionId", g.opts.Name))
		return
	}
	s := g.newSession(created.SessionID, ai)
	s.applyAgent(agent, options)
	s.applyClientTools(toolNames, req.has("tools"))

	st := &stepper{sessionID: s.vigilID, upstream: g.opts.Name, agent: g.aosAgent(ai, s.options), turnID: "seed"}
	meta := g.requestMeta(r)
	// refuse deletes the new session upstream and answers why it was refused.
	refuse := func(err error, what string, v verdict) {
		g.deleteUpstream(r, s.id)
		var owner *aos.Error
		switch {
		case errors.As(err, &owner):
			writeError(w, http.StatusForbidden, owner.Message)
		case err != nil:
			g.log.Error("decide "+what, "session", s.vigilID, "err", err)
			writeError(w, http.StatusInternalServerError, "Vigil could not decide the session's "+what)
		default:
			writeError(w, http.StatusForbidden, verdictMessage(v))
		}
	}
	if len(seeds) == 0 && (meta.KeyID != "" || meta.KeyAgent != "") {
		// A seed's step records the key that opened the session; without one, the first
		// turn's would, whoever's key sent it. The opening is a step of its own then.
		var v verdict
		step, err := st.openStep(g.opts.Now().UTC().Format(time.RFC3339Nano), s.id)
		if err == nil {
			v, _, err = g.opts.Decider.DecideStep(r.Context(), step, meta)
		}
		if err != nil || v.Decision != allow {
			if err == nil && v.Decision == modify {
				v.Message = "Vigil would change the session's opening, which it cannot do. " + v.Message
			}
			refuse(err, "opening", v)
			return
		}
	}
	for i, m := range seeds {
		v, refused, err := g.decideSeed(r.Context(), st, meta, m, i)
		if err != nil || refused {
			v.Message = fmt.Sprintf("messages[%d]: %s", i, verdictMessage(v))
			refuse(err, "seed messages", v)
			return
		}
	}
	g.sessions.put(s)
	passBody(w, resp, answer)
}

func (g *Gateway) decideSeed(ctx context.Context, st *stepper, meta requestMetaT, m message, i int) (verdict, bool, error) {
	now := g.opts.Now().UTC().Format(time.RFC3339Nano)
	var step *aos.Step
	var err error
	switch m.role {
	case "tool":
		step, err = st.toolResultStep(now, m.toolCallID, m.content)
	default:
		role := m.role
		if role == "assistant" {
			role = aos.RoleAgent
		}
		step, err = st.messageStep(now, role, "seed-"+strconv.Itoa(i), m.content.texts())
	}
	if err != nil {
		return verdict{}, false, err
	}
	v, _, err := g.opts.Decider.DecideStep(ctx, step, meta)
	if err != nil {
		return v, false, err
	}
	if v.Decision == modify {
		v.Message = "Vigil would redact this seed message, and the upstream already holds it; send the history redacted. " + v.Message
	}
	return v, v.Decision != allow, nil
}

// deleteUpstream removes a session the gateway refused; the client never learns its id.
func (g *Gateway) deleteUpstream(r *http.Request, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	resp, err := g.upstreamRequest(ctx, r, http.MethodDelete, "/sessions/"+url.PathEscape(id), "", nil)
	if err != nil {
		g.log.Warn("delete refused session", "session", id, "err", err)
		return
	}
	resp.Body.Close()
}

// listCursorPrefix marks a GET /sessions cursor: every next the gateway gives out is one
// of its own, sealed (see sealListCursor), never the upstream's.
const listCursorPrefix = "vigil2."

// CursorKeySize is the size of Options.CursorKey: an AES-256 key.
const CursorKeySize = 32

// CursorKeyName names the cursor key among the database's secrets (storage.Secrets).
const CursorKeyName = "aap-list-cursor"

// LoadCursorKey is the cursor key the guardian's database keeps for every AAP gateway of
// every replica on it, made on first use: Options.CursorKey.
func LoadCursorKey(ctx context.Context, secrets storage.Secrets) ([]byte, error) {
	key, err := secrets.Secret(ctx, CursorKeyName, CursorKeySize)
	if err != nil {
		return nil, fmt.Errorf("aap gateway: the list cursors' key: %w", err)
	}
	return key, nil
}

// errNotACursor is the refusal of an after the gateway cannot open: not its prefix or
// base64, altered, given to another key or by another gateway, the upstream's own, or of
// an older form (vigil1.). It says no more than that: which of these it was is nobody's
// business but the gateway's.
var errNotACursor = errors.New("after: not a cursor of this list")

// listMaxPages bounds the upstream pages one GET /sessions reads to fill a client's page:
// a key that sees few of many sessions gets a short page with a cursor rather than make
// the gateway walk the whole list.
const listMaxPages = 8

// listCursor resumes a list after Last, a session already listed, on the upstream page
// fetched with After (nil: the first page). The upstream's cursor is kept as it gave it;
// Last is a session the client was shown.
type listCursor struct {
	After *string
	Last  string
}

// newCursorAEAD is the AES-256-GCM the gateway seals its list cursors with; key nil makes
// a random one, good for this process only.
func newCursorAEAD(key []byte) (cipher.AEAD, error) {
	if key == nil {
		key = make([]byte, CursorKeySize)
		_, _ = rand.Read(key) // never fails: crypto/rand crashes the program instead
	}
	if len(key) != CursorKeySize {
		return nil, fmt.Errorf("a cursor key has %d bytes, not %d", len(key), CursorKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// cursorAAD binds a cursor to the gateway (its upstream's name) and to the API key it was
// given to: authenticated, not stored in it, so that it opens only for that key there.
func (g *Gateway) cursorAAD(keyID string) []byte {
	aad := append([]byte(listCursorPrefix), byte(len(g.opts.Name)))
	aad = append(aad, g.opts.Name...)
	return append(aad, keyID...)
}

// cursorPad is what a cursor's plain text is padded to a multiple of: its length tells
// little of the upstream's cursor and of the session ids inside (an offset's digits, say).
const cursorPad = 32

// sealListCursor is the cursor a client of key keyID sends as after to get what follows.
// The upstream's cursor and the last session shown are inside, encrypted and
// authenticated: an upstream cursor is often a session id or an offset, which would tell
// the client of sessions hidden from it or how many there are, and a cursor the client
// could write would let it name where to resume. Plain text: a flag byte (1: After is
// set), After's length as a uvarint and its bytes when set, Last's the same way, then
// zeros to a multiple of cursorPad.
func (g *Gateway) sealListCursor(c listCursor, keyID string) string {
	size := 1 + 2*binary.MaxVarintLen64 + len(c.Last) + cursorPad
	if c.After != nil {
		size += len(*c.After)
	}
	plain := make([]byte, 1, size)
	if c.After != nil {
		plain[0] = 1
		plain = binary.AppendUvarint(plain, uint64(len(*c.After)))
		plain = append(plain, *c.After...)
	}
	plain = binary.AppendUvarint(plain, uint64(len(c.Last)))
	plain = append(plain, c.Last...)
	plain = append(plain, make([]byte, (cursorPad-len(plain)%cursorPad)%cursorPad)...)
	ns := g.cursors.NonceSize()
	sealed := make([]byte, ns, ns+len(plain)+g.cursors.Overhead())
	_, _ = rand.Read(sealed)
	sealed = g.cursors.Seal(sealed, sealed, plain, g.cursorAAD(keyID))
	return listCursorPrefix + base64.RawURLEncoding.EncodeToString(sealed)
}

// openListCursor reads the after a request of key keyID sent (the first page when
// absent); errNotACursor when it is not one the gateway sealed for that key.
func (g *Gateway) openListCursor(after string, present bool, keyID string) (listCursor, error) {
	if !present {
		return listCursor{}, nil
	}
	enc, ours := strings.CutPrefix(after, listCursorPrefix)
	if !ours {
		return listCursor{}, errNotACursor
	}
	sealed, err := base64.RawURLEncoding.DecodeString(enc)
	ns := g.cursors.NonceSize()
	if err != nil || len(sealed) < ns+g.cursors.Overhead() {
		return listCursor{}, errNotACursor
	}
	plain, err := g.cursors.Open(nil, sealed[:ns], sealed[ns:], g.cursorAAD(keyID))
	if err != nil || len(plain) == 0 || plain[0] > 1 {
		return listCursor{}, errNotACursor
	}
	rest := plain[1:]
	// field reads a uvarint length and that many bytes from rest.
	field := func() (string, bool) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return "", false
		}
		f := string(rest[w : w+int(n)])
		rest = rest[w+int(n):]
		return f, true
	}
	var c listCursor
	if plain[0] == 1 {
		a, ok := field()
		if !ok {
			return listCursor{}, errNotACursor
		}
		c.After = &a
	}
	last, ok := field()
	if !ok {
		return listCursor{}, errNotACursor
	}
	c.Last = last
	return c, nil
}

// listPage is one upstream page of GET /sessions.
type listPage struct {
	sessions []json.RawMessage
	next     string // "" when the upstream has no more
}

// listUpstream reads the upstream page after after (nil: the first). A nil page with a nil
// error means the upstream's answer was passed to the client (it was not 200).
func (g *Gateway) listUpstream(w http.ResponseWriter, r *http.Request, query url.Values, after *string, pass bool) (*listPage, error) {
	q := make(url.Values, len(query))
	for k, vs := range query {
		q[k] = vs
	}
	q.Del("after")
	if after != nil {
		q.Set("after", *after)
	}
	resp, err := g.upstreamRequest(r.Context(), r, http.MethodGet, "/sessions", q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	b, err := g.readUpstream(resp)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		if pass {
			passBody(w, resp, b)
			return nil, nil
		}
		return nil, &errUpstream{fmt.Errorf("GET /sessions: status %d", resp.StatusCode)}
	}
	o, err := parseObject(b, "")
	var p listPage
	if err == nil {
		p.sessions, err = o.array("", "sessions")
	}
	if err == nil {
		p.next, err = o.str("", "next", false)
	}
	if err != nil {
		return nil, &errUpstream{fmt.Errorf("GET /sessions: unreadable list: %w", err)}
	}
	return &p, nil
}

// handleList is GET /sessions: the upstream's list less the sessions the request's key may
// not access (refusal, as for GET /sessions/:id), so that nobody learns of another key's
// sessions. A page the client gets has as many sessions as the upstream's first page had,
// filled from the upstream pages that follow (at most listMaxPages of them, and about
// MaxUpstreamBytes of sessions), so that its length does not tell how many were left out;
// its next resumes after its last session (see listCursor) and is absent only when the
// upstream has no more. The envelope has sessions and next only: another member (a total,
// say) would count the hidden ones.
func (g *Gateway) handleList(w http.ResponseWriter, r *http.Request) {
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed query: "+err.Error())
		return
	}
	keyID := g.requestMeta(r).KeyID
	cur, err := g.openListCursor(query.Get("after"), query.Has("after"), keyID)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if cur.Last != "" && g.refusal(r, cur.Last) != "" {
		// A session the client may not see is as good as one that does not exist: where it
		// sits in the list is nobody else's business.
		cur.Last = ""
	}
	out, next, ok := g.listVisible(w, r, query, cur, keyID)
	if !ok {
		return
	}
	o := &object{vals: map[string]json.RawMessage{}}
	o.set("sessions", mustJSON(out))
	if next != "" {
		o.setString("next", next)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(o.bytes())
}

// listVisible collects one client page of the sessions the request may see, from cur on,
// and the cursor of what follows ("" for nothing more). ok is false when the client was
// answered already (the first upstream page failed).
func (g *Gateway) listVisible(w http.ResponseWriter, r *http.Request, query url.Values, cur listCursor, keyID string) (out []json.RawMessage, next string, ok bool) {
	out = []json.RawMessage{}
	after := cur.After
	size, want := 0, 0
	for n := 0; ; n++ {
		page, err := g.listUpstream(w, r, query, after, n == 0)
		switch {
		case err != nil && n == 0:
			g.unreachable(w, err)
			return nil, "", false
		case page == nil && err == nil:
			return nil, "", false
		case err != nil:
			// The pages so far are listed; the client's next request meets the failure.
			g.log.Warn("list sessions: stopped at an upstream page", "err", err)
			return out, g.sealListCursor(listCursor{After: after}, keyID), true
		}
		if n == 0 {
			want = max(len(page.sessions), 1)
		}
		skip := cur.Last != "" && n == 0 && slices.ContainsFunc(page.sessions, func(e json.RawMessage) bool {
			id, _ := listedID(e)
			return id == cur.Last
		})
		last := "" // the last session listed from this page
		for _, e := range page.sessions {
			id, so := listedID(e)
			if skip {
				skip = id != cur.Last
				continue
			}
			if so == nil || g.refusal(r, id) != "" {
				continue
			}
			b := g.restoreTrust(so).bytes()
			if len(out) == want || (len(out) > 0 && int64(size+len(b)) > g.opts.MaxUpstreamBytes) {
				// Full before this upstream page ends: the next request resumes in it (reads
				// it again when nothing of it was listed).
				return out, g.sealListCursor(listCursor{After: after, Last: last}, keyID), true
			}
			out = append(out, b)
			size += len(b)
			last = id
		}
		switch {
		case page.next == "":
			return out, "", true
		case len(out) == want || n+1 == listMaxPages:
			return out, g.sealListCursor(listCursor{After: &page.next}, keyID), true
		}
		after = &page.next
	}
}

// listedID reads a listed session's id; a nil object when it has none, which lists it to
// nobody (whose it is cannot be told).
func listedID(e json.RawMessage) (string, *object) {
	so, err := parseObject(e, "session")
	if err != nil {
		return "", nil
	}
	id, err := so.str("", "sessionId", true)
	if err != nil {
		return "", nil
	}
	return id, so
}

func (g *Gateway) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if g.foreign(w, r, id) {
		return
	}
	resp, err := g.upstreamRequest(r.Context(), r, http.MethodGet, "/sessions/"+url.PathEscape(id), r.URL.RawQuery, nil)
	if err != nil {
		g.unreachable(w, err)
		return
	}
	b, err := g.readUpstream(resp)
	if err != nil {
		g.unreachable(w, err)
		return
	}
	if resp.StatusCode == http.StatusOK {
		if o, err := parseObject(b, ""); err == nil {
			b = g.restoreTrust(o).bytes()
		}
	}
	passBody(w, resp, b)
}

// restoreTrust shows a session's server tools with the trust the client gave them: the
// upstream holds them all untrusted, as the gateway asked.
func (g *Gateway) restoreTrust(o *object) *object {
	id, _ := o.str("", "sessionId", false)
	s := g.sessions.get(id)
	if s == nil || !o.has("agent") {
		return o
	}
	s.mu.Lock()
	trusted := s.serverTools
	s.mu.Unlock()
	agent, err := parseObject(o.raw("agent"), "agent")
	if err != nil {
		return o
	}
	elems, err := agent.array("agent", "tools")
	if err != nil || elems == nil {
		return o
	}
	out := make([]json.RawMessage, len(elems))
	for i, e := range elems {
		to, err := parseObject(e, "tool")
		if err != nil {
			return o
		}
		name, _ := to.str("", "name", false)
		if trusted[name] {
			to.set("trust", json.RawMessage("true"))
		}
		out[i] = to.bytes()
	}
	agent.set("tools", mustJSON(out))
	o.set("agent", agent.bytes())
	return o
}

// foreign answers 403 and reports true when the session belongs to another API key (or
// agent) than the request's. Reading or deleting a session adds no step the guardian could
// refuse, and a turn of tool permissions alone forwards before it decides any: each is
// checked here first, against the owner the guardian keeps in its store.
func (g *Gateway) foreign(w http.ResponseWriter, r *http.Request, id string) bool {
	why := g.refusal(r, id)
	if why == "" {
		return false
	}
	g.log.Warn("aap request refused", "session", g.vigilSession(id), "method", r.Method, "reason", why)
	writeError(w, http.StatusForbidden, why)
	return true
}

// refusal is why the request's key (or agent) may not touch the session, "" when it may:
// the one rule for reaching a session and for seeing it listed.
func (g *Gateway) refusal(r *http.Request, id string) string {
	meta := g.requestMeta(r)
	return g.opts.Decider.SessionRefusal(r.Context(), g.vigilSession(id), meta.KeyID, meta.KeyAgent)
}

// lookup returns the session of a turn: known, or read from the upstream (after a restart,
// or for a session created elsewhere). A nil session with a nil error means the upstream's
// answer was passed to the client (a 404).
func (g *Gateway) lookup(w http.ResponseWriter, r *http.Request, id string) (*session, error) {
	if s := g.sessions.get(id); s != nil {
		return s, nil
	}
	resp, err := g.upstreamRequest(r.Context(), r, http.MethodGet, "/sessions/"+url.PathEscape(id), "", nil)
	if err != nil {
		return nil, err
	}
	b, err := g.readUpstream(resp)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		passBody(w, resp, b)
		return nil, nil
	}
	o, err := parseObject(b, "")
	if err != nil || !o.has("agent") {
		return nil, &errUpstream{fmt.Errorf("GET /sessions/%s: unreadable session", id)}
	}
	agent, err := parseAgentConfig(o.raw("agent"), "agent", true)
	if err != nil {
		return nil, &errUpstream{fmt.Errorf("GET /sessions/%s: %w", id, err)}
	}
	if aos.CheckID(g.vigilSession(id)) != "" {
		return nil, &errUpstream{fmt.Errorf("session id of %d bytes is too long", len(id))}
	}
	s := g.newSession(id, g.agent(r.Context(), r, agent.name))
	options, err := g.mergeOptions(s.agent, nil, agent, "agent")
	if err != nil {
		// The upstream's own record of the session is more than the gateway keeps.
		return nil, &errUpstream{fmt.Errorf("GET /sessions/%s: %w", id, err)}
	}
	s.applyAgent(agent, options)
	untrusted := make(map[string]bool, len(agent.tools))
	for _, t := range agent.tools {
		// A tool the upstream trusts would run without asking; the next turn tells it
		// otherwise.
		untrusted[t.Name] = false
		s.retrust = s.retrust || t.Trust
	}
	s.serverTools = untrusted
	tools, _ := o.array("", "tools")
	names, err := parseToolSpecs("tools", tools)
	if err != nil {
		// More tools than the gateway keeps for a session: it could not tell them apart.
		return nil, &errUpstream{fmt.Errorf("GET /sessions/%s: %w", id, err)}
	}
	s.applyClientTools(names, true)
	return g.sessions.put(s), nil
}
