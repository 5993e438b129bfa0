package agentapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
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

// With --agentapi-approvals vigil, Vigil answers every approval request itself and the
// client never sees one: a client's own mcp_approval_response is refused (400, naming the
// item) before anything is stored or sent up, whatever it answers, and even right after
// Vigil answered that very request. (With client, see
// TestClientAnswersOnlyApprovalsVigilLetThrough.)
func TestClientApprovalResponse(t *testing.T) {
	for _, tt := range []struct {
		name    string
		asked   bool
		approve bool
	}{{"approve", false, true}, {"refuse", false, false}, {"approve after Vigil answered", true, true}} {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, "", Config{Approvals: ApprovalsVigil})
			calls, steps := 0, 0
			if tt.asked {
				status, f := s.send(askRequest("sess-1", true))
				require.Equal(t, http.StatusOK, status)
				require.Contains(t, texts(f["output"]), "Deleted /home/dev/x.", "Vigil approved it")
				calls, steps = len(s.agent.requests()), s.stored()
				require.Equal(t, 2, calls)
			}
			status, f := s.send(approvalAnswer(t, "sess-1", "apr_1", tt.approve, true, nil))
			s.requireRefused(status, f, "invalid request: input[0]: an mcp_approval_response is Vigil's to send", calls, steps)
			if steps == 0 {
				n, err := s.db.Steps(context.Background(), record.StepQuery{Limit: 10})
				require.NoError(t, err)
				require.Empty(t, n, "nothing stored")
			}
		})
	}
}
