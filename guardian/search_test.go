package guardian_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
)

func TestSearchAPI(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{})
	for _, body := range sessionSteps("sess-S") {
		status, _ := e.post(body)
		require.Equal(t, http.StatusOK, status)
	}
	require.NoError(t, e.db.IndexComplete(context.Background()))
	var page record.SearchPage
	require.Equal(t, http.StatusOK, e.get("/api/search?q=invoice", &page))
	require.Len(t, page.Steps, 4, "the message, the knowledge query, the memory and the lookup_invoice call")
	require.Equal(t, http.StatusOK, e.get("/api/search?q=8812&tool=lookup_invoice&session=sess", &page))
	require.Len(t, page.Steps, 1)
	require.Equal(t, "customer=8812", page.Steps[0].Snippet)
	require.Equal(t, "sess-S", page.Steps[0].SessionID)
	require.Equal(t, http.StatusOK, e.get("/api/search?limit=2", &page))
	require.Len(t, page.Steps, 2)
	require.NotNil(t, page.Next)

	var apiErr apijson.ErrorBody
	for _, tc := range []struct{ path, want string }{
		{"/api/search?q=" + strings.Repeat("x", 1025), "q: at most 1024 bytes"},
		{"/api/search?from=yesterday", "from: want a time"},
		{"/api/search?limit=500", "limit"},
	} {
		require.Equal(t, http.StatusBadRequest, e.get(tc.path, &apiErr), tc.path)
		require.Contains(t, apiErr.Error.Message, tc.want)
	}
}
