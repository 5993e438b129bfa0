package guardian_test

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"

	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/rules"
)

const previewRules = `
rules:
  - id: no-env
    when: mcp.method == "tools/call" && tool == "get-env"
    action: deny
    message: The environment is private.
  - id: review-sums
    when: mcp.method == "tools/call" && tool == "get-sum"
    action: hold
    hold: {timeout: 1m, onTimeout: deny}
  - id: writes-outside-tmp
    when: mcp.method == "tools/call" && tool == "write" && len(inputs.path) > 0 && !(inputs.path startsWith "/tmp/")
    action: deny
`

func previewCall(id, tool, session string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"protocols/MCP","params":{"message":{"jsonrpc":"2.0","id":7,` +
		`"method":"tools/call","params":{"name":"` + tool + `","arguments":{}}},"_meta":{"sessionId":"` + session + `"}}}`
}

// previewEnv is a guardian with rules and a hold queue over a real SQLite file, whose
// requests authenticate with the key named in X-Test-Key (as auth.Wrap would set it).
func previewEnv(t *testing.T) (*httptest.Server, *sqlite.DB, *holds.Manager) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	f, err := rules.ParseFile("rules.yaml", []byte(previewRules))
	require.NoError(t, err)
	engine := rules.NewEngine(rules.Options{})
	require.NoError(t, engine.Load(f.Rules))
	hm := holds.NewManager(holds.Options{Store: db, ValidateParams: guardian.ValidateParams})
	require.NoError(t, hm.Start(ctx))
	type keyCtx struct{}
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Policy: &guardian.RulesPolicy{Engine: engine},
		Holds: guardian.ManagerHolds{M: hm},
		KeyOf: func(ctx context.Context) (string, string, bool) {
			k, _ := ctx.Value(keyCtx{}).(string)
			return k, "", k != ""
		}})
	require.NoError(t, err)
	h := g.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, r.Header.Get("X-Test-Key"))))
	}))
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, hm.Shutdown(ctx))
		require.NoError(t, db.Close())
	})
	return srv, db, hm
}

func postTo(t *testing.T, url, body string, headers ...string) (int, rpcResp) {
	t.Helper()
	code, b := postRaw(t, url, body, headers...)
	return code, decode(t, b)
}

// postRaw posts body and returns the answer's bytes as sent.
func postRaw(t *testing.T, url, body string, headers ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// ownSession makes session key's with a real step.
func ownSession(t *testing.T, base, session, key string) {
	t.Helper()
	code, r := postTo(t, base+"/aos", previewCall("1", "echo", session), "X-Test-Key", key)
	require.Equal(t, http.StatusOK, code)
	require.Nil(t, r.Error)
}

// The dry run says what the rules would decide, holds included, and stores, holds and
// publishes nothing; a rule that failed to evaluate is reported with its error.
func TestPreviewDecidesWithoutRecording(t *testing.T) {
	srv, db, hm := previewEnv(t)
	url := srv.URL + guardian.PreviewPath
	cases := []struct {
		tool, decision, ruleID string
		ruleError              bool
	}{
		{"get-env", "deny", "no-env", false},
		{"get-sum", "hold", "review-sums", false},
		{"echo", "allow", "", false},
		// A rule that fails to evaluate denies (fail closed) and says so.
		{"write", "deny", "", true},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			code, r := postTo(t, url, previewCall(`"p1"`, c.tool, "mcp-preview"))
			require.Equal(t, http.StatusOK, code)
			require.Nil(t, r.Error)
			require.JSONEq(t, `"p1"`, string(r.ID))
			require.Equal(t, aos.Decision(c.decision), r.Result.Decision)
			require.Equal(t, true, r.Result.Data["preview"])
			if c.ruleID != "" {
				require.Equal(t, c.ruleID, r.Result.Data["ruleId"])
			}
			ms, ok := r.Result.Data["matchedRules"].([]any)
			require.True(t, ok, r.Result.Data)
			errs := 0
			for _, m := range ms {
				if m.(map[string]any)["error"] != nil {
					errs++
				}
			}
			require.Equal(t, c.ruleError, errs > 0, ms)
		})
	}
	ctx := context.Background()
	page, err := db.Sessions(ctx, record.SessionQuery{})
	require.NoError(t, err)
	require.Empty(t, page.Sessions, "a preview stores no step")
	pending, err := hm.List(ctx, holds.StatusPending, 10)
	require.NoError(t, err)
	require.Empty(t, pending, "a preview holds nothing")
	evs, err := db.EventsAfter(ctx, 0, 10)
	require.NoError(t, err)
	require.Empty(t, evs)
}

// Bad input gets the AOS error it would get at /aos, plus what a dry run cannot take.
func TestPreviewRefusals(t *testing.T) {
	srv, _, _ := previewEnv(t)
	url := srv.URL + guardian.PreviewPath
	ownSession(t, srv.URL, "mcp-owned", "k1")

	cases := []struct {
		name, body string
		headers    []string
		status     int
		code       int
		want       string
	}{
		{"empty batch", "[]", nil, 200, aos.CodeInvalidRequest, ""},
		{"batch too long", "[" + strings.Repeat(previewCall("1", "echo", "s")+",", 1000) + previewCall("2", "echo", "s") + "]",
			nil, 200, aos.CodeInvalidRequest, "at most 1000 requests"},
		{"notification", strings.Replace(previewCall("1", "echo", "s"), `"id":1,`, ``, 1), nil, 200, aos.CodeInvalidRequest, "needs a step with an id"},
		{"ping", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}`, nil, 200, aos.CodeInvalidRequest, "not ping"},
		{"not json", `{`, nil, 200, aos.CodeParseError, ""},
		{"bad params", `{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":{}}`, nil, 200, aos.CodeInvalidParams, ""},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"steps/nope","params":{}}`, nil, 200, aos.CodeMethodNotFound, ""},
		{"too large", previewCall("1", strings.Repeat("x", 1<<20), "s"), nil, 413, aos.CodeRequestTooLarge, "at most 1048576 bytes"},
		{"another key's session", previewCall("1", "get-env", "mcp-owned"), []string{"X-Test-Key", "k2"}, 200, aos.CodeInvalidParams, "belongs to another API key"},
		{"no key, a keyed session", previewCall("1", "get-env", "mcp-owned"), nil, 200, aos.CodeInvalidParams, "belongs to another API key"},
		{"text/plain", previewCall("1", "echo", "s"), []string{"Content-Type", "text/plain"}, 415, aos.CodeInvalidRequest, "Content-Type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, r := postTo(t, url, c.body, c.headers...)
			require.Equal(t, c.status, code)
			require.NotNil(t, r.Error)
			require.Equal(t, c.code, r.Error.Code, r.Error.Message)
			require.Contains(t, r.Error.Message, c.want)
		})
	}
	// The owner may preview its own session.
	code, r := postTo(t, url, previewCall("1", "get-env", "mcp-owned"), "X-Test-Key", "k1")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, aos.Deny, r.Result.Decision)

	resp, err := http.Get(url)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	var er rpcResp
	require.NoError(t, json.Unmarshal(b, &er))
	require.Equal(t, aos.CodeInvalidRequest, er.Error.Code)
}

// A batch asks about several steps in one request (a gateway's whole tools/list): each
// element is answered in order, as alone, errors included, and nothing is recorded.
func TestPreviewBatch(t *testing.T) {
	srv, db, _ := previewEnv(t)
	url := srv.URL + guardian.PreviewPath
	ownSession(t, srv.URL, "mcp-owned", "k1")

	body := "[" + strings.Join([]string{
		previewCall("1", "echo", "s"),
		previewCall("2", "get-env", "s"),
		strings.Replace(previewCall("3", "echo", "s"), `"id":3,`, ``, 1),
		previewCall("4", "get-sum", "s"),
		previewCall("5", "get-env", "mcp-owned"),
		`{"jsonrpc":"2.0","id":6,"method":"steps/nope","params":{}}`,
	}, ",") + "]"
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out []rpcResp
	require.NoError(t, json.Unmarshal(b, &out), string(b))
	require.Len(t, out, 6)

	type want struct {
		id       string
		decision aos.Decision
		code     int
	}
	for i, w := range []want{
		{"1", aos.Allow, 0},
		{"2", aos.Deny, 0},
		{"null", "", aos.CodeInvalidRequest}, // a notification: a preview needs an id
		{"4", aos.Decision("hold"), 0},       // a preview says it would hold
		{"5", "", aos.CodeInvalidParams},     // another key's session
		{"6", "", aos.CodeMethodNotFound},
	} {
		require.Equal(t, w.id, string(out[i].ID), "element %d", i)
		if w.code != 0 {
			require.NotNil(t, out[i].Error, "element %d", i)
			require.Equal(t, w.code, out[i].Error.Code, "element %d: %s", i, out[i].Error.Message)
			continue
		}
		require.Nil(t, out[i].Error, "element %d", i)
		require.Equal(t, w.decision, out[i].Result.Decision, "element %d", i)
		require.Equal(t, true, out[i].Result.Data["preview"], "element %d", i)
	}
	page, err := db.Sessions(context.Background(), record.SessionQuery{})
	require.NoError(t, err)
	require.Len(t, page.Sessions, 1, "only the real step's session; previews store nothing")
}

// A dry run echoes the id byte for byte, as /aos does: encoding/json would rewrite its <, >
// and & as \u003c, \u0026 and \u003e.
func TestPreviewEchoesIDByteForByte(t *testing.T) {
	srv, _, _ := previewEnv(t)
	const id = `"<&> caf` + "\u00e9" + `"`
	code, b := postRaw(t, srv.URL+guardian.PreviewPath, previewCall(id, "get-env", "mcp-preview"))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(b), `"id":`+id, string(b))
}
