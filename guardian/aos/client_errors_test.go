package aos

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClientHTTPError: an answer that is not JSON-RPC keeps its status for the caller (a
// proxy's 413 means the step was too large, not that the guardian is down).
func TestClientHTTPError(t *testing.T) {
	tests := []struct {
		name, body string
		status     int
		wantBody   bool
	}{
		{"proxy page", "<html>413 Request Entity Too Large</html>", http.StatusRequestEntityTooLarge, true},
		{"result under an error status", `{"jsonrpc":"2.0","id":1,"result":{"decision":"allow","message":""}}`, http.StatusTeapot, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			_, err := NewClient(srv.URL).Call(context.Background(), MethodPing, PingParams{Timestamp: "2026-01-02T15:04:05Z"})
			var herr *HTTPError
			require.True(t, errors.As(err, &herr), "%v", err)
			require.Equal(t, tt.status, herr.StatusCode)
			require.Equal(t, tt.wantBody, herr.Body != nil)
		})
	}
}
