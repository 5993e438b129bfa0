package agentapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// A body that cannot be read (here, malformed chunked encoding) is a malformed request:
// 400 INVALID_REQUEST in the protocol's shape, never an empty 200.
func TestUnreadableBodyIsInvalidRequest(t *testing.T) {
	s := newStack(t, "", Config{})
	u, err := url.Parse(s.url)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Write([]byte("POST /agentapi/support/process HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"inp\r\nZZZ\r\n"))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var f responseObject
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
	require.Equal(t, "response", f.Object)
	require.Equal(t, statusFailed, f.Status)
	require.Equal(t, codeInvalidRequest, f.Error.Code)
	require.Equal(t, "invalid request: body: could not be read", f.Error.Message)
	require.Empty(t, s.agent.requests())
}

// approvalResponseRequest is the runtime's sample request carrying an
// mcp_approval_response, answering approve.
func approvalResponseRequest(t *testing.T, approve bool) string {
	t.Helper()
	var req map[string]any
	require.NoError(t, json.Unmarshal(sample(t, "request-approval-response.json"), &req))
	data := req["input"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["data"].(map[string]any)
	data["approve"] = approve
	b, err := json.Marshal(req)
	require.NoError(t, err)
	return string(b)
}

// With --agentapi-approvals vigil, Vigil answers every approval request itself and the
// client never sees one: a client's own mcp_approval_response is refused (400, naming the
// item) before anything is stored or sent up. With client, the client answers the requests
// Vigil let through, and its answer goes up as it is.
func TestClientApprovalResponse(t *testing.T) {
	for _, tt := range []struct {
		approvals string
		approve   bool
	}{{ApprovalsVigil, true}, {ApprovalsVigil, false}, {ApprovalsClient, true}} {
		t.Run(tt.approvals+map[bool]string{true: "/approve", false: "/refuse"}[tt.approve], func(t *testing.T) {
			s := newStack(t, testRules, Config{Approvals: tt.approvals})
			resp := s.post(context.Background(), approvalResponseRequest(t, tt.approve))
			defer resp.Body.Close()
			if tt.approvals == ApprovalsClient {
				require.Equal(t, http.StatusOK, resp.StatusCode)
				evs, _ := events(t, resp.Body)
				require.Equal(t, "completed", final(t, evs)["status"])
				got := s.agent.requests()
				require.Len(t, got, 1)
				require.Contains(t, string(got[0]), `"approve":true`)
				return
			}
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			var f responseObject
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
			require.Equal(t, statusFailed, f.Status)
			require.Equal(t, codeInvalidRequest, f.Error.Code)
			require.True(t, strings.HasPrefix(f.Error.Message, "invalid request: input[0]: an mcp_approval_response is Vigil's to send"), f.Error.Message)
			require.Empty(t, s.agent.requests(), "never forwarded")
			n, err := s.db.Steps(context.Background(), record.StepQuery{Limit: 10})
			require.NoError(t, err)
			require.Empty(t, n, "nothing stored")
		})
	}
}
