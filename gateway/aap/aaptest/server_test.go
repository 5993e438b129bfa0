package aaptest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap/aaptest"
)

// SessionBody creates a session the way the captured client did.
const sessionBody = `{"agent":{"name":"guarded-agent","tools":[{"name":"read_file","trust":true},{"name":"delete_file"}],"options":{"apiKey":"sk-test"}},` +
	`"tools":[{"name":"get_time","description":"client-side clock","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}]}`

// TestServerMatchesTranscript replays the captured session against the fake and compares
// every answer with the transcript: status, content type and body, byte for byte.
func TestServerMatchesTranscript(t *testing.T) {
	raw, err := os.ReadFile("testdata/wire-transcript.txt")
	require.NoError(t, err)
	want := map[string]aaptest.Exchange{}
	for _, ex := range aaptest.ParseTranscript(string(raw)) {
		want[ex.Title] = ex
	}
	require.Len(t, want, 12)

	srv := httptest.NewServer(aaptest.New())
	defer srv.Close()
	do := func(method, path, body string) (*http.Response, string) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, srv.URL+path, rd)
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	for range 4 {
		do("POST", "/sessions", sessionBody)
	}
	steps := []struct{ title, method, path, body string }{
		{"GET /meta", "GET", "/meta", ""},
		{"POST /sessions", "POST", "/sessions", sessionBody},
		{"POST /sessions/sess_5/turns stream=delta", "POST", "/sessions/sess_5/turns",
			`{"stream":"delta","messages":[{"role":"user","content":"read and delete /srv/notes.txt"}]}`},
		{"POST /sessions/sess_5/turns tool_permission granted=true (stream=message)", "POST", "/sessions/sess_5/turns",
			`{"stream":"message","messages":[{"role":"tool_permission","toolCallId":"call_delete_2","granted":true}]}`},
		{"unknown session turn", "POST", "/sessions/nope/turns", `{"messages":[{"role":"user","content":"hello"}]}`},
		{"GET unknown session", "GET", "/sessions/nope", ""},
		{"DELETE unknown session", "DELETE", "/sessions/nope", ""},
		{"history bad type", "GET", "/sessions/sess_5/history?type=bogus", ""},
		{"malformed JSON body", "POST", "/sessions", `{"agent":`},
		{"tool_permission for unknown toolCallId", "POST", "/sessions/sess_5/turns",
			`{"messages":[{"role":"tool_permission","toolCallId":"call_nope_9","granted":true}]}`},
		{"DELETE session", "DELETE", "/sessions/sess_5", ""},
		{"GET /sessions", "GET", "/sessions", ""},
	}
	for _, s := range steps {
		ex, ok := want[s.title]
		require.True(t, ok, s.title)
		resp, body := do(s.method, s.path, s.body)
		if ex.Status != 0 {
			require.Equal(t, ex.Status, resp.StatusCode, s.title)
			require.Equal(t, ex.Header.Get("Content-Type"), resp.Header.Get("Content-Type"), s.title)
		}
		require.Equal(t, ex.Body, body, s.title)
	}
}
