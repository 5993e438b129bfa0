package aap_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap"
	"github.com/vigil-guardian/vigil/gateway/aap/aaptest"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// pager serves the scripted upstream's GET /sessions in pages of size (all in one when 0),
// its next the last listed session's id or, with offsets, the index the next page starts at.
type pager struct {
	inner   http.Handler
	size    int
	offsets bool
	fail    string // an after answered 500
	lists   atomic.Int32
}

func (p *pager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/sessions" {
		p.inner.ServeHTTP(w, r)
		return
	}
	p.lists.Add(1)
	q := r.URL.Query()
	if q.Has("after") && q.Get("after") == p.fail {
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	rec := httptest.NewRecorder()
	p.inner.ServeHTTP(rec, r)
	var all struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &all); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	idOf := func(e json.RawMessage) string {
		var s struct{ SessionID string }
		_ = json.Unmarshal(e, &s)
		return s.SessionID
	}
	start := 0
	if q.Has("after") {
		if p.offsets {
			start, _ = strconv.Atoi(q.Get("after"))
		} else {
			start = slices.IndexFunc(all.Sessions, func(e json.RawMessage) bool { return idOf(e) == q.Get("after") }) + 1
		}
	}
	start = min(start, len(all.Sessions))
	end := len(all.Sessions)
	out := map[string]any{}
	if p.size > 0 && start+p.size < end {
		end = start + p.size
		out["next"] = idOf(all.Sessions[end-1])
		if p.offsets {
			out["next"] = strconv.Itoa(end)
		}
	}
	out["sessions"] = all.Sessions[start:end]
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// ownerEnv is a gateway in front of a paged scripted upstream, deciding with a real
// guardian (owners kept in SQLite); a request's agent key is its X-Test-Key header, "id"
// or "id/agent".
type ownerEnv struct {
	t        *testing.T
	db       *sqlite.DB
	upstream *aaptest.Server
	pager    *pager
	up       *httptest.Server
	gw       *aap.Gateway
	front    *httptest.Server
	opts     aap.Options
}

type testKeyCtx struct{}

func newOwnerEnv(t *testing.T, p *pager, mod ...func(*aap.Options)) *ownerEnv {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db})
	require.NoError(t, err)
	e := &ownerEnv{t: t, db: db, upstream: aaptest.New(), pager: p}
	p.inner = e.upstream
	e.up = httptest.NewServer(p)
	t.Cleanup(e.up.Close)
	e.opts = aap.Options{Name: "demo", Upstream: e.up.URL, Decider: g,
		KeyOf: func(ctx context.Context) (string, string, bool) {
			k, _ := ctx.Value(testKeyCtx{}).(string)
			id, agent, _ := strings.Cut(k, "/")
			return id, agent, k != ""
		}}
	for _, m := range mod {
		m(&e.opts)
	}
	e.gw, e.front = e.newFront(e.opts)
	return e
}

// newFront serves a gateway built with opts, before the same upstream and guardian.
func (e *ownerEnv) newFront(opts aap.Options) (*aap.Gateway, *httptest.Server) {
	e.t.Helper()
	gw, err := aap.New(opts)
	require.NoError(e.t, err)
	mux := http.NewServeMux()
	gw.Register(mux, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if k := r.Header.Get("X-Test-Key"); k != "" {
				r = r.WithContext(context.WithValue(r.Context(), testKeyCtx{}, k))
			}
			h.ServeHTTP(w, r)
		})
	})
	front := httptest.NewServer(mux)
	e.t.Cleanup(front.Close)
	return gw, front
}

// replica is e with its requests sent to another gateway built with opts: another
// replica, or the guardian restarted.
func (e *ownerEnv) replica(opts aap.Options) *ownerEnv {
	r := *e
	r.gw, r.front = e.newFront(opts)
	return &r
}

func (e *ownerEnv) do(method, path, key, body string) (int, string) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.front.URL+"/aap/demo"+path, rd)
	require.NoError(e.t, err)
	if key != "" {
		req.Header.Set("X-Test-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp.StatusCode, string(b)
}

// open creates a session through the gateway with key ("" for none).
func (e *ownerEnv) open(key, body string) string {
	e.t.Helper()
	status, b := e.do("POST", "/sessions", key, body)
	require.Equal(e.t, http.StatusCreated, status, b)
	var created struct{ SessionID string }
	require.NoError(e.t, json.Unmarshal([]byte(b), &created))
	return created.SessionID
}

// openUpstream creates a session past the gateway: Vigil knows no owner of it.
func (e *ownerEnv) openUpstream() string {
	e.t.Helper()
	resp, err := http.Post(e.up.URL+"/sessions", "application/json", strings.NewReader(`{"agent":{"name":"guarded-agent"}}`))
	require.NoError(e.t, err)
	defer resp.Body.Close()
	require.Equal(e.t, http.StatusCreated, resp.StatusCode)
	var created struct{ SessionID string }
	require.NoError(e.t, json.NewDecoder(resp.Body).Decode(&created))
	return created.SessionID
}

// listPage is one page of GET /sessions as the client got it.
type listPage struct {
	ids  []string
	next *string
	raw  string
}

func (e *ownerEnv) list(key, after *string) listPage {
	e.t.Helper()
	path := "/sessions"
	if after != nil {
		path += "?after=" + url.QueryEscape(*after)
	}
	k := ""
	if key != nil {
		k = *key
	}
	status, body := e.do("GET", path, k, "")
	require.Equal(e.t, http.StatusOK, status, body)
	var m map[string]json.RawMessage
	require.NoError(e.t, json.Unmarshal([]byte(body), &m), body)
	for name := range m {
		require.Contains(e.t, []string{"sessions", "next"}, name, "the list says nothing else: %s", body)
	}
	var out struct {
		Sessions []struct{ SessionID string }
		Next     *string
	}
	require.NoError(e.t, json.Unmarshal([]byte(body), &out))
	require.NotNil(e.t, out.Sessions, "sessions is an array: %s", body)
	p := listPage{next: out.Next, raw: body, ids: []string{}}
	for _, s := range out.Sessions {
		p.ids = append(p.ids, s.SessionID)
	}
	return p
}

// listAll follows next to the end, at most limit pages.
func (e *ownerEnv) listAll(key string, limit int) []listPage {
	e.t.Helper()
	var pages []listPage
	var after *string
	for range limit {
		p := e.list(&key, after)
		pages = append(pages, p)
		if p.next == nil {
			return pages
		}
		after = p.next
	}
	e.t.Fatalf("the list did not end in %d pages: %v", limit, pages)
	return nil
}

func pageIDs(pages []listPage) []string {
	var ids []string
	for _, p := range pages {
		ids = append(ids, p.ids...)
	}
	return ids
}

// GET /sessions lists the sessions a key may access, by the rule GET /sessions/:id uses: a
// key's own and those with no owner key (created past Vigil, or without a key), less those
// of another agent than the key's; a request without a key (desktop mode) sees only those
// without an owner key. However the upstream pages the list, every page but the last has
// the upstream's page size (its length does not count hidden sessions) and a next, the last
// has none, and following next lists each visible session once, in the upstream's order.
func TestListShowsOnlyAccessibleSessions(t *testing.T) {
	const key1, key2, key3, noKey = "key_1", "key_2", "key_3/other-agent", ""
	want := map[string][]string{
		key1:  {"sess_1", "sess_2", "sess_4", "sess_5", "sess_6"},
		key2:  {"sess_3", "sess_4", "sess_5", "sess_6"},
		key3:  {"sess_5", "sess_6"},
		noKey: {"sess_4", "sess_5", "sess_6"},
	}
	for _, c := range []struct {
		name    string
		size    int
		offsets bool
	}{
		{"one page", 0, false},
		{"pages of 1", 1, false},
		{"pages of 2", 2, false},
		{"pages of 4", 4, false},
		{"pages of 2, offset cursors", 2, true},
		{"pages of 4, offset cursors", 4, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newOwnerEnv(t, &pager{size: c.size, offsets: c.offsets})
			require.Equal(t, "sess_1", e.open(key1, `{"agent":{"name":"guarded-agent"}}`))
			require.Equal(t, "sess_2", e.open(key1, `{"agent":{"name":"guarded-agent"}}`))
			require.Equal(t, "sess_3", e.open(key2, `{"agent":{"name":"guarded-agent"}}`))
			// Seeds without a key make the agent the owner, and no key.
			require.Equal(t, "sess_4", e.open(noKey, `{"agent":{"name":"guarded-agent"},"messages":[{"role":"user","content":"hi"}]}`))
			require.Equal(t, "sess_5", e.open(noKey, `{"agent":{"name":"guarded-agent"}}`))
			require.Equal(t, "sess_6", e.openUpstream())

			for key, ids := range want {
				var reachable []string
				for _, id := range e.upstream.Sessions() {
					if status, _ := e.do("GET", "/sessions/"+id, key, ""); status == http.StatusOK {
						reachable = append(reachable, id)
					}
				}
				require.Equal(t, ids, reachable, "key %q", key)

				e.pager.lists.Store(0)
				pages := e.listAll(key, 10)
				require.Equal(t, ids, pageIDs(pages), "key %q", key)
				upstreamPage := c.size
				if upstreamPage == 0 {
					upstreamPage = len(e.upstream.Sessions())
				}
				for i, p := range pages {
					require.LessOrEqual(t, len(p.ids), upstreamPage, "key %q page %d: %s", key, i, p.raw)
					if i < len(pages)-1 {
						require.Len(t, p.ids, upstreamPage, "key %q page %d: %s", key, i, p.raw)
					}
				}
				require.LessOrEqual(t, int(e.pager.lists.Load()), len(pages)*8, "key %q", key)
			}
		})
	}
}

// A page is filled from at most 8 upstream pages: a key that sees little of a long list
// gets a short page (here empty) with a next, not a walk of the whole list, and following
// next reaches its sessions.
func TestListReadsBoundedUpstreamPages(t *testing.T) {
	e := newOwnerEnv(t, &pager{size: 1})
	for range 20 {
		e.open("key_1", `{"agent":{"name":"guarded-agent"}}`)
	}
	mine := e.open("key_2", `{"agent":{"name":"guarded-agent"}}`)
	key := "key_2"
	first := e.list(&key, nil)
	require.Empty(t, first.ids)
	require.NotNil(t, first.next, "more is to come: %s", first.raw)
	require.EqualValues(t, 8, e.pager.lists.Load())

	pages := e.listAll(key, 10)
	require.Equal(t, []string{mine}, pageIDs(pages))
}

// A cursor naming a session the key may not see resumes as one naming no session at all:
// it tells nothing of where that session sits.
func TestListCursorOfHiddenSession(t *testing.T) {
	e := newOwnerEnv(t, &pager{size: 3})
	e.open("key_2", `{"agent":{"name":"guarded-agent"}}`)
	e.open("key_1", `{"agent":{"name":"guarded-agent"}}`)
	e.open("key_2", `{"agent":{"name":"guarded-agent"}}`)
	e.open("key_2", `{"agent":{"name":"guarded-agent"}}`)
	key := "key_2"
	cursor := func(last string) *string {
		c := e.gw.SealListCursor(key, nil, last)
		return &c
	}
	hidden := e.list(&key, cursor("sess_2"))
	require.Equal(t, e.list(&key, cursor("sess_99")), hidden)
	require.Equal(t, e.list(&key, nil), hidden)
	require.Equal(t, []string{"sess_1", "sess_3", "sess_4"}, hidden.ids)
	// The key's own session resumes after it.
	require.Equal(t, []string{"sess_3", "sess_4"}, e.list(&key, cursor("sess_1")).ids)
	require.Equal(t, []string{"sess_4"}, e.list(&key, cursor("sess_3")).ids)

	status, body := e.do("GET", "/sessions?after=vigil2.not-base64!", key, "")
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Equal(t, `{"error":"after: not a cursor of this list"}`+"\n", body)
}

// The sessions of one page are at most MaxUpstreamBytes of JSON, about: past it the page
// ends early with a next that resumes inside the upstream page.
func TestListPageBoundedInBytes(t *testing.T) {
	const limit = 5000
	e := newOwnerEnv(t, &pager{size: 3}, func(o *aap.Options) { o.MaxUpstreamBytes = limit })
	small := `{"agent":{"name":"guarded-agent"}}`
	big := `{"agent":{"name":"guarded-agent"},"tools":[{"name":"get_time","description":"` + strings.Repeat("d", 2000) +
		`","parameters":{"type":"object"}}]}`
	e.open("key_1", small)
	e.open("key_1", small)
	e.open("key_2", big)
	e.open("key_2", big)
	e.open("key_2", big)
	e.open("key_1", small)

	pages := e.listAll("key_2", 10)
	require.Len(t, pages, 2)
	require.Equal(t, []string{"sess_3", "sess_4"}, pages[0].ids)
	require.LessOrEqual(t, len(pages[0].raw), limit)
	require.Equal(t, []string{"sess_5"}, pages[1].ids)
}

// An upstream page that fails after the first ends the client's page there, with a next
// that meets the failure: what was listed so far is not lost, nor is the rest claimed to be
// empty.
func TestListUpstreamFailsOnLaterPage(t *testing.T) {
	e := newOwnerEnv(t, &pager{size: 2, fail: "sess_2"})
	e.open("key_2", `{"agent":{"name":"guarded-agent"}}`)
	e.open("key_1", `{"agent":{"name":"guarded-agent"}}`)
	e.open("key_2", `{"agent":{"name":"guarded-agent"}}`)
	key := "key_2"
	first := e.list(&key, nil)
	require.Equal(t, []string{"sess_1"}, first.ids)
	require.NotNil(t, first.next, first.raw)
	status, body := e.do("GET", "/sessions?after="+url.QueryEscape(*first.next), key, "")
	require.Equal(t, http.StatusInternalServerError, status, body)
	require.Equal(t, "Internal Server Error\n", body)
}

// requireSealed requires next to be a cursor of Vigil's that tells nothing in clear: no
// session id (the upstream's cursors here are ids, and a hidden session's would tell of
// it) in the cursor or in its base64 decoded.
func requireSealed(t *testing.T, next string, ids []string) {
	t.Helper()
	enc, ok := strings.CutPrefix(next, "vigil2.")
	require.True(t, ok, "a cursor of Vigil's: %q", next)
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	require.NoError(t, err, next)
	for _, id := range ids {
		require.NotContains(t, next, id)
		require.NotContains(t, string(raw), id, "cursor %q", next)
	}
	require.NotContains(t, string(raw), "sess_")
}

// Every next is a sealed cursor of Vigil's, also when the page ends where an upstream page
// does (where the upstream's cursor, the id of the last session of its page, hidden or
// not, went to the client before), and following them lists every session the key may
// see, once, to the end.
func TestListCursorsAreSealed(t *testing.T) {
	for _, c := range []struct {
		name    string
		offsets bool
		owners  []string // the key opening each session, in order
		key     string
		want    []string
		pages   int
	}{
		// Pages of 2 of the key's own: each ends where the upstream's does.
		{"at upstream page ends", false, []string{"key_1", "key_1", "key_1", "key_1", "key_1"}, "key_1",
			[]string{"sess_1", "sess_2", "sess_3", "sess_4", "sess_5"}, 3},
		// The upstream's pages end at sessions of key_1, hidden from key_2.
		{"after hidden sessions", false, []string{"key_2", "key_1", "key_2", "key_1", "key_2", "key_2"}, "key_2",
			[]string{"sess_1", "sess_3", "sess_5", "sess_6"}, 2},
		// Offsets of one digit and of two: the cursors' lengths do not tell them apart.
		{"offsets", true, slices.Repeat([]string{"key_1"}, 12), "key_1",
			[]string{"sess_1", "sess_2", "sess_3", "sess_4", "sess_5", "sess_6", "sess_7", "sess_8", "sess_9", "sess_10", "sess_11", "sess_12"}, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newOwnerEnv(t, &pager{size: 2, offsets: c.offsets})
			for _, k := range c.owners {
				e.open(k, `{"agent":{"name":"guarded-agent"}}`)
			}
			pages := e.listAll(c.key, 10)
			require.Equal(t, c.want, pageIDs(pages))
			require.Len(t, pages, c.pages)
			for _, p := range pages[:len(pages)-1] {
				require.NotNil(t, p.next, p.raw)
				requireSealed(t, *p.next, e.upstream.Sessions())
				require.Len(t, *p.next, len(*pages[0].next), "every cursor of the list is as long")
			}
			// Two cursors of one place differ (a random nonce), so neither tells where it is.
			first := e.list(&c.key, nil)
			require.NotEqual(t, *pages[0].next, *first.next)
			require.Equal(t, pages[1].ids, e.list(&c.key, first.next).ids)
		})
	}
}

// A cursor Vigil did not give to the key sending it is refused with a 400, as a malformed
// one: altered, another key's, the upstream's own (which went to clients before), or of the
// earlier forms.
func TestListRefusesForeignCursors(t *testing.T) {
	e := newOwnerEnv(t, &pager{size: 2})
	for range 3 {
		e.open("key_1", `{"agent":{"name":"guarded-agent"}}`)
	}
	e.open("key_2", `{"agent":{"name":"guarded-agent"}}`)
	key1 := "key_1"
	next := e.list(&key1, nil).next
	require.NotNil(t, next)
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(*next, "vigil2."))
	require.NoError(t, err)
	flipped := func(i int) string {
		b := slices.Clone(raw)
		b[i] ^= 1
		return "vigil2." + base64.RawURLEncoding.EncodeToString(b)
	}
	cases := []struct{ name, key, after string }{
		{"another key's", "key_2", *next},
		{"no key's", "", *next},
		{"another agent's key", "key_1/other-agent", ""}, // after set below: the same key id
		{"nonce flipped", "key_1", flipped(0)},
		{"text flipped", "key_1", flipped(len(raw) / 2)},
		{"tag flipped", "key_1", flipped(len(raw) - 1)},
		{"truncated", "key_1", "vigil2." + base64.RawURLEncoding.EncodeToString(raw[:len(raw)-1])},
		{"too short", "key_1", "vigil2.AAAA"},
		{"empty", "key_1", ""},
		{"upstream's", "key_1", "sess_2"},
		{"offset", "key_1", "2"},
		{"vigil1", "key_1", "vigil1." + base64.RawURLEncoding.EncodeToString([]byte(`{"a":"sess_2","s":"sess_3"}`))},
		{"bad base64", "key_1", "vigil2.not-base64!"},
	}
	for _, c := range cases {
		if c.name == "another agent's key" {
			// The cursor is bound to the key id, not to the agent its key is scoped to:
			// that is the same key's.
			status, body := e.do("GET", "/sessions?after="+url.QueryEscape(*next), c.key, "")
			require.Equal(t, http.StatusOK, status, body)
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			status, body := e.do("GET", "/sessions?after="+url.QueryEscape(c.after), c.key, "")
			require.Equal(t, http.StatusBadRequest, status, body)
			require.Equal(t, `{"error":"after: not a cursor of this list"}`+"\n", body)
		})
	}
	status, body := e.do("GET", "/sessions?after="+url.QueryEscape(*next), "key_1", "")
	require.Equal(t, http.StatusOK, status, body)
}

// The key a gateway seals its cursors with is kept in the guardian's database: a gateway
// built on the same store (another replica, or the guardian restarted) opens the cursors
// of the first, and paging may go back and forth between them; one with a key of its own
// refuses them.
func TestListCursorsOpenOnEveryReplica(t *testing.T) {
	ctx := context.Background()
	e := newOwnerEnv(t, &pager{size: 2})
	for _, k := range []string{"key_1", "key_2", "key_1", "key_1", "key_2", "key_1", "key_1"} {
		e.open(k, `{"agent":{"name":"guarded-agent"}}`)
	}
	// Each replica reads the key as it starts: the first makes it, the next finds it.
	replica := func() *ownerEnv {
		key, err := aap.LoadCursorKey(ctx, e.db)
		require.NoError(t, err)
		require.Len(t, key, aap.CursorKeySize)
		opts := e.opts
		opts.CursorKey = key
		return e.replica(opts)
	}
	one, other := replica(), replica()

	key1 := "key_1"
	var ids []string
	var after *string
	for i := 0; ; i++ {
		p := []*ownerEnv{one, other}[i%2].list(&key1, after)
		ids = append(ids, p.ids...)
		if p.next == nil {
			break
		}
		require.Less(t, i, 10)
		after = p.next
	}
	require.Equal(t, []string{"sess_1", "sess_3", "sess_4", "sess_6", "sess_7"}, ids)

	// e's gateway has a key of its own (none given).
	first := one.list(&key1, nil)
	stranger := e
	status, body := stranger.do("GET", "/sessions?after="+url.QueryEscape(*first.next), key1, "")
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, "after: not a cursor of this list")

	opts := e.opts
	opts.CursorKey = make([]byte, 16)
	_, err := aap.New(opts)
	require.ErrorContains(t, err, "cursor key")
}
