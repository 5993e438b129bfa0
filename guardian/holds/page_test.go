package holds_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
)

// TestHoldsAndAuditAnswersAreByteBounded: the holds list and the audit log stop at the
// byte bound; the audit's cursor leads on to every entry exactly once, and the holds list
// says there is more.
func TestHoldsAndAuditAnswersAreByteBounded(t *testing.T) {
	const n = 20
	e := newEnv(t, func(o *holds.Options) { o.MaxPageBytes = 4 << 10 })
	for i := range n {
		e.held(e.ctx, toolRequest(fmt.Sprintf("s%02d", i), 1000+i))
	}
	e.rec.waitN(t, n, ofType(record.EventHoldCreated))

	var list struct {
		Holds []holds.Hold `json:"holds"`
		More  bool         `json:"more"`
	}
	require.Equal(t, http.StatusOK, e.call("GET", "/api/holds?status=pending&limit=100000", nil, &list))
	require.NotEmpty(t, list.Holds)
	require.Less(t, len(list.Holds), n)
	require.True(t, list.More)

	for i := range n {
		e.call("POST", "/api/sessions/"+fmt.Sprintf("s%02d", i)+"/pause", map[string]string{"operator": "ann"}, nil)
	}
	seen := map[int64]bool{}
	before, pages := int64(0), 0
	for {
		var page struct {
			Entries []record.AuditEntry `json:"entries"`
			Next    *int64              `json:"next"`
		}
		require.Equal(t, http.StatusOK, e.call("GET", fmt.Sprintf("/api/audit?limit=100000&before=%d", before), nil, &page))
		pages++
		for _, a := range page.Entries {
			require.False(t, seen[a.ID])
			seen[a.ID] = true
		}
		if page.Next == nil {
			break
		}
		before = *page.Next
	}
	require.Greater(t, pages, 1)
	require.Len(t, seen, len(e.audit(record.AuditQuery{Limit: 1000})))
}
