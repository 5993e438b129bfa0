package mcp

import (
	"context"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/storage"
)

func TestHTTPToolCalls(t *testing.T) {
	up := startEverythingHTTP(t)
	s := newStack(t, testRules, up, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := s.connect(ctx, nil)

	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.NotEmpty(t, tools.Tools)

	cases := []struct {
		name    string
		tool    string
		args    map[string]any
		isError bool
		want    string
	}{
		{"allowed", "echo", map[string]any{"message": "hello"}, false, "Echo: hello"},
		{"denied call is a tool error", "get-env", map[string]any{}, true, "Denied by Vigil: The environment is private."},
		{"arguments redacted", "echo", map[string]any{"message": "key secret-abc1 here"}, false, "Echo: key [REDACTED] here"},
		{"result redacted", "echo", map[string]any{"message": "tok-12345"}, false, "Echo: [REDACTED]"},
		{"result withheld", "echo", map[string]any{"message": "classified"}, true, "Denied by Vigil: That result is classified."},
		{"tool annotations in the rules", "echo", map[string]any{"message": "annotated"}, true, "Denied by Vigil: read-only tool seen with its annotations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: c.args})
			require.NoError(t, err)
			require.Equal(t, c.isError, res.IsError)
			require.Equal(t, c.want, text(t, res))
		})
	}

	steps, err := s.db.Steps(ctx, storage.StepQuery{SessionID: "mcp-everything-" + cs.ID(), Limit: 100})
	require.NoError(t, err)
	require.NotEmpty(t, steps)
	for _, st := range steps {
		require.Equal(t, "protocols/MCP", st.Method)
		require.Equal(t, "test-client", st.AgentID)
	}
	// Every judged message is a step: six calls, and the results of the four that reached
	// the server.
	require.Equal(t, 10, len(steps))
}
