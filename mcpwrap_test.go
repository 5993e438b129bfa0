package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// serverEnv makes this test binary run as a stdio MCP server (TestHelperMCPServer).
const serverEnv = "VIGIL_TEST_AS_MCP_SERVER"

// TestHelperMCPServer is not a test: run with serverEnv set, it is a stdio MCP server with
// one tool, echo, and exits when its input ends.
func TestHelperMCPServer(t *testing.T) {
	if os.Getenv(serverEnv) != "1" {
		t.Skip("runs only as the MCP server of TestMCPWrapMarksSteps")
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "echo-server", Version: "1.0"}, nil)
	type echoIn struct {
		Message string `json:"message"`
	}
	sdk.AddTool(s, &sdk.Tool{Name: "echo"}, func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
	os.Exit(0)
}

// TestMCPWrapMarksSteps: the steps `vigil mcp wrap` sends to /aos are stored as the MCP
// gateway's, as `vigil serve --mcp` stores its own: the answer's data names the protocol
// and the wrapped server's name, which the console shows as "via mcp · NAME".
func TestMCPWrapMarksSteps(t *testing.T) {
	srv, err := startServer(context.Background(), testConfig(t, filepath.Join(t.TempDir(), "vigil.db")), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
	self, err := os.Executable()
	require.NoError(t, err)
	t.Setenv(serverEnv, "1") // inherited by the wrapped server

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clientR, relayW := io.Pipe() // wrap → client
	relayR, clientW := io.Pipe() // client → wrap
	done := make(chan int, 1)
	go func() {
		cfg := mcpWrapConfig{Guardian: srv.URL, Name: "files", OnGuardianError: "deny", ShowDenied: true,
			Command: []string{self, "-test.run=^TestHelperMCPServer$"}}
		code := mcpWrap(ctx, cfg, relayR, relayW, io.Discard, slog.New(slog.DiscardHandler))
		_ = relayW.Close()
		done <- code
	}()
	c := sdk.NewClient(&sdk.Implementation{Name: "wrap-client", Version: "0.1"}, nil)
	cs, err := c.Connect(ctx, &sdk.IOTransport{Reader: clientR, Writer: clientW}, nil)
	require.NoError(t, err)
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.NoError(t, cs.Close())
	select {
	case code := <-done:
		require.Zero(t, code)
	case <-ctx.Done():
		t.Fatal("vigil mcp wrap did not end with its client")
	}

	var page record.SessionPage
	getJSON(t, srv.URL+"/api/sessions?q=mcp-files-", &page)
	require.Len(t, page.Sessions, 1)
	var steps struct {
		Steps []record.StepRecord `json:"steps"`
	}
	getJSON(t, srv.URL+"/api/sessions/"+page.Sessions[0].ID+"/steps", &steps)
	var call *record.StepRecord
	for i, s := range steps.Steps {
		if len(s.Response) == 0 || string(s.Response) == "null" {
			continue
		}
		var resp struct {
			Result struct {
				Data map[string]any `json:"data"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal(s.Response, &resp), string(s.Response))
		require.Equal(t, "mcp", resp.Result.Data["protocol"], string(s.Response))
		require.Equal(t, "files", resp.Result.Data["upstream"], string(s.Response))
		if s.Tool == "echo" {
			call = &steps.Steps[i]
		}
	}
	require.NotNil(t, call, "the tools/call step is stored")
}
