package guardian_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// probedStore counts the reads of the health check and fails them while down is set.
type probedStore struct {
	guardian.Store
	reads atomic.Int64
	down  atomic.Bool
	// stall, when set, makes the reads wait for their context instead.
	stall atomic.Bool
	// writableChecks counts CheckWritable calls; readOnly makes them report a database
	// that refuses writes.
	writableChecks atomic.Int64
	readOnly       atomic.Bool
}

func (s *probedStore) CheckWritable(ctx context.Context) error {
	s.writableChecks.Add(1)
	if s.readOnly.Load() {
		return fmt.Errorf("storage: test: %w: transaction_read_only is on", storage.ErrReadOnly)
	}
	return s.Store.CheckWritable(ctx)
}

func (s *probedStore) Session(ctx context.Context, id string) (record.Session, error) {
	s.reads.Add(1)
	switch {
	case s.stall.Load():
		<-ctx.Done()
		return record.Session{}, ctx.Err()
	case s.down.Load():
		return record.Session{}, errors.New("storage: session: connection refused")
	}
	return s.Store.Session(ctx, id)
}

// healthServer is the guardian as a team replica serves it: on a non-loopback address,
// with an operator account, behind team mode's middleware and the security headers.
func healthServer(t *testing.T, now func() time.Time) (*httptest.Server, *probedStore) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	store := &probedStore{Store: db}
	az, err := auth.New(ctx, auth.Config{Loopback: false}, auth.Options{Store: db})
	require.NoError(t, err)
	_, err = az.AddUser(ctx, "alice", auth.RoleAdmin, "correct horse battery staple", "test")
	require.NoError(t, err)
	g, err := guardian.New(guardian.Config{Version: "9.9.9-build-secret", DBPath: "/srv/vigil/secret.db",
		RulesFile: "/etc/vigil/rules.yaml", PublicURL: "https://vigil.internal.example"},
		guardian.Options{Store: store, Now: now})
	require.NoError(t, err)
	srv := httptest.NewServer(guardian.SecurityHeaders(az.Wrap(g.Handler())))
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, db.Close())
	})
	return srv, store
}

type healthAnswer struct {
	status int
	header http.Header
	body   string
}

func healthGet(t *testing.T, srv *httptest.Server, method, path string) healthAnswer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return healthAnswer{resp.StatusCode, resp.Header, string(b)}
}

// A balancer's health check needs no credentials where every other console route does,
// carries the security headers, and says nothing of the version, addresses or database.
func TestHealthCheckNeedsNoCredentials(t *testing.T) {
	srv, _ := healthServer(t, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{http.MethodGet, "/api/health", http.StatusOK, `{"status":"ok"}`},
		{http.MethodHead, "/api/health", http.StatusOK, ""},
		// Unchanged: the rest of the API, and other spellings or methods of the path.
		{http.MethodGet, "/api/info", http.StatusUnauthorized, ""},
		{http.MethodGet, "/api/sessions", http.StatusUnauthorized, ""},
		{http.MethodPost, "/api/health", http.StatusUnauthorized, ""},
		{http.MethodGet, "/api/%68ealth", http.StatusUnauthorized, ""},
		{http.MethodGet, "/api/health/", http.StatusUnauthorized, ""},
		{http.MethodGet, "/api/health/../info", http.StatusUnauthorized, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			a := healthGet(t, srv, tc.method, tc.path)
			require.Equal(t, tc.status, a.status, a.body)
			require.Equal(t, "nosniff", a.header.Get("X-Content-Type-Options"))
			require.Equal(t, "DENY", a.header.Get("X-Frame-Options"))
			require.Equal(t, "default-src 'none'; frame-ancestors 'none'", a.header.Get("Content-Security-Policy"))
			if tc.status != http.StatusOK {
				return
			}
			require.Equal(t, "no-store", a.header.Get("Cache-Control"))
			require.Equal(t, "application/json", a.header.Get("Content-Type"))
			require.JSONEq(t, orEmptyJSON(tc.body), orEmptyJSON(a.body))
			for _, secret := range []string{"9.9.9", "secret", "vigil.internal", "rules.yaml", "sqlite"} {
				require.NotContains(t, a.body, secret)
			}
		})
	}
}

func orEmptyJSON(s string) string {
	if s == "" {
		return "null"
	}
	return s
}

// A replica whose database does not answer (refuses, or hangs), or answers but refuses
// writes, is reported unavailable within the check's bound, so the balancer sends its
// traffic elsewhere; and well again once the database answers and takes writes.
func TestHealthCheckReportsTheDatabase(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fail   func(*probedStore)
		reason string
	}{
		{"refused", func(s *probedStore) { s.down.Store(true) }, "the database did not answer"},
		{"stalled", func(s *probedStore) { s.stall.Store(true) }, "the database did not answer"},
		{"read-only", func(s *probedStore) { s.readOnly.Store(true) }, "the database is read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clock atomic.Int64 // seconds
			now := func() time.Time { return time.Unix(1_750_000_000+clock.Load(), 0) }
			srv, store := healthServer(t, now)
			tc.fail(store)
			start := time.Now()
			a := healthGet(t, srv, http.MethodGet, "/api/health")
			require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
			require.JSONEq(t, `{"status":"unavailable","reason":"`+tc.reason+`"}`, a.body)
			for _, detail := range []string{"connection refused", "transaction_read_only", "storage"} {
				require.NotContains(t, a.body, detail, "no internal detail")
			}
			require.Less(t, time.Since(start), 10*time.Second, "bounded")

			store.down.Store(false)
			store.stall.Store(false)
			store.readOnly.Store(false)
			clock.Add(1)
			a = healthGet(t, srv, http.MethodGet, "/api/health")
			require.Equal(t, http.StatusOK, a.status, a.body)
		})
	}
}

// However many checks arrive, the database is read at most once a second.
func TestHealthCheckReadsTheDatabaseOncePerSecond(t *testing.T) {
	var clock atomic.Int64 // milliseconds
	now := func() time.Time { return time.UnixMilli(1_750_000_000_000 + clock.Load()) }
	srv, store := healthServer(t, now)
	var wg sync.WaitGroup
	codes := make(chan int, 20)
	for range 20 {
		wg.Go(func() {
			resp, err := srv.Client().Get(srv.URL + "/api/health")
			if err == nil {
				codes <- resp.StatusCode
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	close(codes)
	n := 0
	for c := range codes {
		require.Equal(t, http.StatusOK, c)
		n++
	}
	require.Equal(t, 20, n)
	require.Equal(t, int64(1), store.reads.Load())
	require.Equal(t, int64(1), store.writableChecks.Load())

	clock.Add(999)
	require.Equal(t, http.StatusOK, healthGet(t, srv, http.MethodGet, "/api/health").status)
	require.Equal(t, int64(1), store.reads.Load())
	require.Equal(t, int64(1), store.writableChecks.Load())
	clock.Add(1)
	require.Equal(t, http.StatusOK, healthGet(t, srv, http.MethodGet, "/api/health").status)
	require.Equal(t, int64(2), store.reads.Load())
	require.Equal(t, int64(2), store.writableChecks.Load())
}
