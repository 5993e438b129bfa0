package guardian_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/storage"
)

// BenchmarkAOSEndpoint measures the whole /aos path (decode, validate, decide, store with
// group commit, encode) through the handler, without a network in between.
func BenchmarkAOSEndpoint(b *testing.B) {
	body, err := os.ReadFile(filepath.Join("aos", "testdata", "toolCallRequest.json"))
	require.NoError(b, err)
	db, err := storage.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), storage.Options{})
	require.NoError(b, err)
	defer db.Close()
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db})
	require.NoError(b, err)
	h := g.Handler()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		sess := fmt.Sprintf("bench-%d", n.Add(1))
		req := strings.Replace(string(body), `"sess-7f3a9c"`, `"`+sess+`"`, 1)
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, "/aos", strings.NewReader(req))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
}
