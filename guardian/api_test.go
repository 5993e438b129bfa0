package guardian_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
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
		{"..", "%2E%2E"},
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
