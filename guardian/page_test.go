package guardian_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/record"
)

// bigStep is a message step of about size bytes of text.
func bigStep(session, step string, size int) string {
	return `{"jsonrpc":"2.0","id":1,"method":"steps/message","params":{"context":` + stepCtx(session, step) +
		`,"message":{"id":"m","role":"user","content":[{"kind":"text","text":"` + strings.Repeat("x", size) + `"}]}}}`
}

// TestListAnswersAreByteBounded: a page stops once its items pass the byte bound, however
// high the limit, and its cursor leads on to the rest, so following it returns every item
// exactly once.
func TestListAnswersAreByteBounded(t *testing.T) {
	const maxPage = 20 << 10
	e := newEnv(t, "", guardian.Options{}, guardian.Config{MaxPageBytes: maxPage})
	for i := range 12 {
		status, b := e.post(bigStep("big", fmt.Sprintf("s%d", i), 4<<10))
		require.Equal(t, http.StatusOK, status, string(b))
	}
	var seqs []int64
	after, pages := int64(0), 0
	for {
		var page struct {
			Steps []record.StepRecord `json:"steps"`
			Next  *int64              `json:"next"`
		}
		resp, err := http.Get(fmt.Sprintf("%s/api/sessions/big/steps?limit=1000&after=%d", e.srv.URL, after))
		require.NoError(t, err)
		n, err := decodeBody(resp, &page)
		require.NoError(t, err)
		require.LessOrEqual(t, n, maxPage+6<<10, "one item may pass the bound, no more")
		pages++
		for _, s := range page.Steps {
			seqs = append(seqs, s.Seq)
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	require.Len(t, seqs, 12)
	require.IsIncreasing(t, seqs)
	require.GreaterOrEqual(t, pages, 3)

	// Sessions: a page of many sessions is cut the same way, with a cursor.
	e2 := newEnv(t, "", guardian.Options{}, guardian.Config{MaxPageBytes: 2 << 10})
	for i := range 30 {
		status, _ := e2.post(bigStep(fmt.Sprintf("session-%02d-%s", i, strings.Repeat("y", 100)), "s", 10))
		require.Equal(t, http.StatusOK, status)
	}
	seen := map[string]bool{}
	before := ""
	for range 40 {
		var page record.SessionPage
		require.Equal(t, http.StatusOK, e2.get("/api/sessions?limit=500&before="+url.QueryEscape(before), &page))
		require.NotEmpty(t, page.Sessions)
		require.Less(t, len(page.Sessions), 30)
		for _, s := range page.Sessions {
			require.False(t, seen[s.ID], "session %s twice", s.ID)
			seen[s.ID] = true
		}
		if page.Next == "" {
			break
		}
		before = page.Next
	}
	require.Len(t, seen, 30)
}

// TestListLimitIsCapped: a limit above the cap is lowered, not refused, and the answer says
// there is more.
func TestListLimitIsCapped(t *testing.T) {
	e := newEnv(t, "", guardian.Options{}, guardian.Config{})
	for i := range 3 {
		status, _ := e.post(bigStep("s", fmt.Sprintf("s%d", i), 10))
		require.Equal(t, http.StatusOK, status)
	}
	var page struct {
		Steps []record.StepRecord `json:"steps"`
		Next  *int64              `json:"next"`
	}
	require.Equal(t, http.StatusOK, e.get("/api/sessions/s/steps?limit=100000", &page))
	require.Len(t, page.Steps, 3)
	require.Nil(t, page.Next)
}

// decodeBody decodes a response body and returns its size.
func decodeBody(resp *http.Response, v any) (int, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return len(b), json.Unmarshal(b, v)
}
