package guardian_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// Any session id can be named in the API's paths, percent-encoded. A lone encoded slash
// is the one ServeMux routes nowhere by itself (the id "/": GET /api/sessions/%2F).
func TestSessionIDsInPaths(t *testing.T) {
	// Mounted routes, as the holds' session controls, get their wildcards too.
	echo := func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, map[string]string{
			"id": r.PathValue("id"), "rest": r.PathValue("rest"), "pattern": r.Pattern})
	}
	e := newEnv(t, "", guardian.Options{Mount: []func(*http.ServeMux){func(mux *http.ServeMux) {
		mux.HandleFunc("POST /api/sessions/{id}/pause", echo)
		mux.HandleFunc("GET /api/echo/{id}/{rest...}", echo)
	}}}, guardian.Config{})

	tests := []struct {
		id, path string // path: the id in the URL
	}{
		{"/", "%2F"},
		{"/", "%2f"},
		{"//", "%2F%2F"},
		{"a//b", "a%2F%2Fb"},
		{"/foo", "%2Ffoo"},
		{"foo/", "foo%2F"},
		{"..x", "%2E%2Ex"}, // "." and ".." themselves are refused at /aos: no browser can ask for them
		{"%2F", "%252F"},
		{"a b?#", url.PathEscape("a b?#")},
	}
	posted := map[string]bool{}
	for _, tc := range tests {
		if !posted[tc.id] {
			status, b := e.post(messageStep(tc.id, "agent-1"))
			require.Equal(t, http.StatusOK, status, string(b))
			posted[tc.id] = true
		}
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			var s record.Session
			require.Equal(t, http.StatusOK, e.get("/api/sessions/"+tc.path, &s))
			require.Equal(t, tc.id, s.ID)
			var page struct {
				Steps []record.StepRecord `json:"steps"`
			}
			require.Equal(t, http.StatusOK, e.get("/api/sessions/"+tc.path+"/steps", &page))
			require.Len(t, page.Steps, 1)
			require.Equal(t, tc.id, page.Steps[0].SessionID)
		})
	}

	t.Run("mounted route", func(t *testing.T) {
		resp, err := http.Post(e.srv.URL+"/api/sessions/%2F/pause", "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var got map[string]string
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		require.Equal(t, map[string]string{"id": "/", "rest": "", "pattern": "POST /api/sessions/{id}/pause"}, got)
	})
	t.Run("every wildcard", func(t *testing.T) {
		var got map[string]string
		require.Equal(t, http.StatusOK, e.get("/api/echo/%2F/x/%2F/%2Fy", &got))
		require.Equal(t, map[string]string{"id": "/", "rest": "x////y", "pattern": "GET /api/echo/{id}/{rest...}"}, got)
	})
	for _, path := range []string{
		"/api/sessions/%2F/nope", // no such route, the slash or not
		"/api/nope/%2F",
		"/api/%2F",
	} {
		t.Run("not found "+path, func(t *testing.T) {
			var apiErr struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			require.Equal(t, http.StatusNotFound, e.get(path, &apiErr))
			require.Equal(t, "not_found", apiErr.Error.Code)
		})
	}
	t.Run("wrong method", func(t *testing.T) {
		resp, err := http.Post(e.srv.URL+"/api/sessions/%2F", "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}

// A path under a gateway's prefix that no configured gateway serves, or any method but GET
// and HEAD on the console's pages, is answered in JSON with its status: a client at the
// wrong URL must not get the console's page with 200. A mounted gateway's own routes win.
func TestWrongURLsAreNotTheConsole(t *testing.T) {
	mounted := func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, map[string]string{"pattern": r.Pattern})
	}
	e := newEnv(t, "", guardian.Options{Mount: []func(*http.ServeMux){func(mux *http.ServeMux) {
		mux.HandleFunc("POST /agentapi/demo/process", mounted)
		mux.HandleFunc("/mcp/demo", mounted)
		mux.HandleFunc("/aap/demo/", mounted)
	}}}, guardian.Config{})
	tests := []struct {
		method, path string
		status       int
		code         string
	}{
		{"POST", "/aap/nope/sessions", http.StatusNotFound, "not_found"},
		{"POST", "/agentapi/nope/process", http.StatusNotFound, "not_found"},
		{"GET", "/agentapi/demo/", http.StatusNotFound, "not_found"},
		{"POST", "/mcp/nope", http.StatusNotFound, "not_found"},
		{"POST", "/", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"DELETE", "/index.html", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"POST", "/agentapi/demo/process", http.StatusOK, ""},
		{"POST", "/mcp/demo", http.StatusOK, ""},
		{"POST", "/aap/demo/sessions", http.StatusOK, ""},
		{"GET", "/", http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, e.srv.URL+tt.path, strings.NewReader("{}"))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tt.status, resp.StatusCode)
			if tt.code == "" {
				return
			}
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var body struct {
				Error struct{ Code string } `json:"error"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			require.Equal(t, tt.code, body.Error.Code)
		})
	}
}

// loadCountingStore counts what Steps loads: the handler of a session's steps must not
// load more than it can send.
type loadCountingStore struct {
	guardian.Store
	reads, rows, bytes atomic.Int64
}

func (s *loadCountingStore) Steps(ctx context.Context, q record.StepQuery) ([]record.StepRecord, error) {
	steps, err := s.Store.Steps(ctx, q)
	s.reads.Add(1)
	s.rows.Add(int64(len(steps)))
	for i := range steps {
		s.bytes.Add(int64(record.StepBulk(&steps[i])))
	}
	return steps, err
}

func (s *loadCountingStore) reset() { s.reads.Store(0); s.rows.Store(0); s.bytes.Store(0) }

// newCountingEnv is newEnv with the store wrapped in a loadCountingStore.
func newCountingEnv(t *testing.T, cfg guardian.Config) (*env, *loadCountingStore) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{ManualIndex: true})
	require.NoError(t, err)
	store := &loadCountingStore{Store: db}
	g, err := guardian.New(cfg, guardian.Options{Store: store})
	require.NoError(t, err)
	e := &env{t: t, path: path, db: db, srv: httptest.NewServer(g.Handler())}
	t.Cleanup(e.close)
	return e, store
}

// stepsAnswer is the answer of GET /api/sessions/{id}/steps.
type stepsAnswer struct {
	Steps []record.StepRecord `json:"steps"`
	Next  *int64              `json:"next"`
}

// A page of a session's big steps loads about what it can send, not limit rows of them:
// the answer is bounded by MaxPageBytes, and so is what the handler reads to make it.
// Following the cursor still returns every step once, in order.
func TestSessionStepsLoadIsBoundedByBytes(t *testing.T) {
	const maxPage, steps, text = 1 << 20, 40, 256 << 10 // a step: its text and a request holding it
	e, store := newCountingEnv(t, guardian.Config{MaxPageBytes: maxPage})
	for i := range steps {
		status, b := e.post(bigStep("big", fmt.Sprintf("s%d", i), text))
		require.Equal(t, http.StatusOK, status, string(b))
	}
	require.NoError(t, e.db.Flush(context.Background()))

	store.reset()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var page stepsAnswer
	require.Equal(t, http.StatusOK, e.get("/api/sessions/big/steps", &page))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a page of 1 step of %d: %d reads loaded %d rows, %.1f MiB; %.1f MiB allocated",
		steps, store.reads.Load(), store.rows.Load(), float64(store.bytes.Load())/(1<<20), float64(allocated)/(1<<20))
	require.Len(t, page.Steps, 1, "a second step does not fit in the answer")
	require.NotNil(t, page.Next)
	require.Equal(t, page.Steps[0].Seq, *page.Next)
	// The first read: the step sent and one that does not fit (before: limit rows, 20 MiB).
	require.LessOrEqual(t, store.bytes.Load(), int64(2*maxPage), "rows loaded beyond the answer")
	require.Less(t, allocated, uint64(16*maxPage), "bytes allocated to answer")

	var seqs []int64
	after0 := int64(0)
	for range steps + 1 {
		var p stepsAnswer
		require.Equal(t, http.StatusOK, e.get(fmt.Sprintf("/api/sessions/big/steps?after=%d", after0), &p))
		for _, s := range p.Steps {
			seqs = append(seqs, s.Seq)
		}
		if p.Next == nil {
			break
		}
		after0 = *p.Next
	}
	require.Len(t, seqs, steps)
	require.IsIncreasing(t, seqs)
}

// The cursor of a session's steps, read in several pieces now: next is the last step sent
// when the answer stopped at limit (or at the byte bound, above), and null when the
// session has no more steps.
func TestSessionStepsCursor(t *testing.T) {
	const n = 150
	e, store := newCountingEnv(t, guardian.Config{})
	for i := range n {
		status, b := e.post(bigStep("s", fmt.Sprintf("s%d", i), 10))
		require.Equal(t, http.StatusOK, status, string(b))
	}
	var all stepsAnswer
	require.Equal(t, http.StatusOK, e.get("/api/sessions/s/steps?limit=500", &all))
	require.Len(t, all.Steps, n)
	require.Nil(t, all.Next)
	seq := func(i int) int64 { return all.Steps[i].Seq }

	for _, tc := range []struct {
		name     string
		query    string
		first    int // index of the first step sent
		count    int
		wantNext int // index of the step next names; -1: null
	}{
		{"default limit, more than there are", "", 0, n, -1},
		{"limit", "?limit=5", 0, 5, 4},
		{"limit past several reads", "?limit=130", 0, 130, 129},
		{"limit equal to what is left", fmt.Sprintf("?after=%d&limit=10", seq(139)), 140, 10, 149},
		{"fewer than limit", fmt.Sprintf("?after=%d&limit=11", seq(139)), 140, 10, -1},
		{"after the last", fmt.Sprintf("?after=%d", seq(n-1)), 0, 0, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store.reset()
			var p stepsAnswer
			require.Equal(t, http.StatusOK, e.get("/api/sessions/s/steps"+tc.query, &p))
			require.NotNil(t, p.Steps, "an empty page is [], not null")
			require.Len(t, p.Steps, tc.count)
			for i, s := range p.Steps {
				require.Equal(t, seq(tc.first+i), s.Seq)
			}
			if tc.wantNext < 0 {
				require.Nil(t, p.Next)
			} else {
				require.NotNil(t, p.Next)
				require.Equal(t, seq(tc.wantNext), *p.Next)
			}
			// Small steps take a few reads, not one per step.
			require.LessOrEqual(t, store.reads.Load(), int64(10))
		})
	}
	var apiErr struct {
		Error struct{ Code string } `json:"error"`
	}
	require.Equal(t, http.StatusNotFound, e.get("/api/sessions/nope/steps", &apiErr))
	require.Equal(t, "not_found", apiErr.Error.Code)
}
