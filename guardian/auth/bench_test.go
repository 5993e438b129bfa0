package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkAgentMiddleware is the /aos hot path with a cached key and the rate limiter on:
// what authentication adds to every agent request.
func BenchmarkAgentMiddleware(b *testing.B) {
	e := newEnv(b, Config{Loopback: true, AgentRate: 1e9, AgentBurst: 1e9})
	_, secret := e.createKey(b, "agent-a", 0)
	h := e.a.AgentMiddleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := AgentScope(r.Context()); !ok {
			b.Fatal("no scope")
		}
	}))
	req := httptest.NewRequest(http.MethodPost, "/aos", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}

func BenchmarkAgentMiddlewareParallel(b *testing.B) {
	e := newEnv(b, Config{Loopback: true, AgentRate: 1e9, AgentBurst: 1e9})
	_, secret := e.createKey(b, "agent-a", 0)
	h := e.a.AgentMiddleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodPost, "/aos", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		w := httptest.NewRecorder()
		for pb.Next() {
			h.ServeHTTP(w, req)
		}
	})
}
