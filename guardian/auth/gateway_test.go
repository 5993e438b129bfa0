package auth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatewayProbe serves a gateway route behind GatewayMiddleware and reports what reached it.
func gatewayProbe(t *testing.T, e *env) http.Handler {
	t.Helper()
	refuse := func(w http.ResponseWriter, status int, message string, _ time.Duration) {
		http.Error(w, message, status)
	}
	return e.a.GatewayMiddleware(refuse)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, agent, _ := KeyOf(r.Context())
		_, _ = fmt.Fprintf(w, "key=%s agent=%s auth=%s vigil=%s", id, agent, r.Header.Get("Authorization"), r.Header.Get(GatewayKeyHeader))
	}))
}

func TestGatewayMiddleware(t *testing.T) {
	e := newEnv(t, Config{Loopback: true})
	h := gatewayProbe(t, e)
	call := func(hdr map[string]string) (int, string) {
		r := httptest.NewRequest(http.MethodPost, "/agentapi/x/process", nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	// No key exists: open on this machine, the client's Authorization passes through.
	code, body := call(map[string]string{"Authorization": "Bearer sk-upstream"})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "key= agent= auth=Bearer sk-upstream vigil=", body)

	k, secret := e.createKey(t, "agent-a", time.Hour)
	tests := []struct {
		name   string
		hdr    map[string]string
		status int
		body   string
	}{
		{"missing", map[string]string{"Authorization": "Bearer sk-upstream"}, http.StatusUnauthorized, "send X-Vigil-Key"},
		{"header", map[string]string{GatewayKeyHeader: secret, "Authorization": "Bearer sk-upstream"}, http.StatusOK,
			"key=" + k.ID + " agent=agent-a auth=Bearer sk-upstream vigil="},
		{"bearer vgl_ without header", map[string]string{"Authorization": "Bearer " + secret}, http.StatusOK,
			"key=" + k.ID + " agent=agent-a auth= vigil="},
		{"header wins over a vgl_ bearer", map[string]string{GatewayKeyHeader: "vgl_wrong", "Authorization": "Bearer " + secret},
			http.StatusUnauthorized, "invalid API key"},
		{"empty header does not fall back", map[string]string{GatewayKeyHeader: "", "Authorization": "Bearer " + secret},
			http.StatusUnauthorized, "send X-Vigil-Key"},
		{"invalid", map[string]string{GatewayKeyHeader: "hunter2"}, http.StatusUnauthorized, "invalid API key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(tt.hdr)
			require.Equal(t, tt.status, code, body)
			require.Contains(t, body, tt.body)
		})
	}
}

func TestGatewayMiddlewareRate(t *testing.T) {
	e := newEnv(t, Config{Loopback: true, AgentRate: 1, AgentBurst: 1})
	h := gatewayProbe(t, e)
	_, secret := e.createKey(t, "", 0)
	codes := make([]int, 2)
	var retry string
	for i := range codes {
		r := httptest.NewRequest(http.MethodPost, "/agentapi/x/process", nil)
		r.Header.Set(GatewayKeyHeader, secret)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes[i], retry = w.Code, w.Header().Get("Retry-After")
	}
	require.Equal(t, []int{http.StatusOK, http.StatusTooManyRequests}, codes)
	require.Equal(t, "1", retry)
}
