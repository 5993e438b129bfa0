package mcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/internal/mcptest"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

const testRules = `
rules:
  - id: no-env
    when: mcp.method == "tools/call" && tool == "get-env"
    action: deny
    message: The environment is private.
  - id: redact-args
    when: mcp.method == "tools/call" && tool == "echo" && text contains "secret-"
    action: modify
    modify: {redact: ['secret-[a-z0-9]+']}
  - id: redact-results
    when: kind == "mcp" && mcp.method == "" && tool == "echo" && text contains "tok-"
    action: modify
    modify: {redact: ['tok-[0-9]+']}
  - id: withhold-results
    when: kind == "mcp" && mcp.method == "" && tool == "echo" && text contains "classified"
    action: deny
    message: That result is classified.
  - id: readonly-seen
    when: mcp.method == "tools/call" && toolDef?.annotations?.readOnlyHint == true && inputs.message == "annotated"
    action: deny
    message: read-only tool seen with its annotations
  - id: review-sums
    when: mcp.method == "tools/call" && tool == "get-sum"
    action: hold
    hold: {timeout: 1m, onTimeout: deny}
    message: Sums need a reviewer.
  - id: no-forbidden-sampling
    when: mcp.method == "sampling/createMessage" && text contains "forbidden"
    action: deny
    message: That prompt may not be sampled.
  - id: no-secret-resources
    when: mcp.method == "resources/read" && text contains "resource/2"
    action: deny
    message: That resource is private.
`

// nodeBin returns a test MCP server's executable from test/mcp/node_modules, skipping the
// test when `npm ci` has not installed it there (make deps-test does).
func nodeBin(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "test", "mcp", "node_modules", ".bin", name))
	require.NoError(t, err)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is not installed: run `npm ci --prefix test/mcp` (make deps-test does)", name)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	return p
}

// startEverythingHTTP runs server-everything's Streamable HTTP transport and returns its
// MCP endpoint.
func startEverythingHTTP(t testing.TB) string {
	t.Helper()
	return mcptest.StartEverythingHTTP(t, nodeBin(t, "mcp-server-everything"))
}

type stack struct {
	t     testing.TB
	url   string
	db    *sqlite.DB
	holds *holds.Manager
	g     *guardian.Guardian
}

func newGuardian(t testing.TB, ruleText string) (*guardian.Guardian, *sqlite.DB, *holds.Manager) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	engine := rules.NewEngine(rules.Options{})
	if ruleText != "" {
		f, err := rules.ParseFile("rules.yaml", []byte(ruleText))
		require.NoError(t, err)
		require.NoError(t, engine.Load(f.Rules))
	}
	hm := holds.NewManager(holds.Options{Store: db, ValidateParams: guardian.ValidateParams})
	require.NoError(t, hm.Start(ctx))
	t.Cleanup(func() { _ = hm.Shutdown(context.Background()) })
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db, Policy: &guardian.RulesPolicy{Engine: engine},
		Holds: guardian.ManagerHolds{M: hm}, Mount: []func(*http.ServeMux){hm.Register}})
	require.NoError(t, err)
	return g, db, hm
}

// newStack puts the gateway, with a real guardian over a real SQLite file, in front of
// upstream.
func newStack(t testing.TB, ruleText, upstream string, cfg Config) *stack {
	t.Helper()
	g, db, hm := newGuardian(t, ruleText)
	cfg.Name, cfg.URL = "everything", upstream
	gw, err := New(cfg, Options{Decider: g})
	require.NoError(t, err)
	mux := http.NewServeMux()
	gw.Register(mux)
	mux.Handle("/", g.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &stack{t: t, url: srv.URL, db: db, holds: hm, g: g}
}

// connect opens an MCP session through the proxy with the Go SDK's client.
func (s *stack) connect(ctx context.Context, opts *sdk.ClientOptions) *sdk.ClientSession {
	s.t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1.2.3"}, opts)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: s.url + "/mcp/everything", MaxRetries: -1}, nil)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// waitHold returns the first pending hold once there is one.
func (s *stack) waitHold(ctx context.Context) holds.Hold {
	s.t.Helper()
	for {
		hs, err := s.holds.List(ctx, holds.StatusPending, 10)
		require.NoError(s.t, err)
		if len(hs) > 0 {
			return hs[0]
		}
		select {
		case <-ctx.Done():
			s.t.Fatal("no hold appeared")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *stack) decideHold(id, action string) {
	s.t.Helper()
	resp, err := http.Post(s.url+"/api/holds/"+id+"/"+action, "application/json", strings.NewReader(`{"operator":"dana"}`))
	require.NoError(s.t, err)
	resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
}

func text(t testing.TB, r *sdk.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
