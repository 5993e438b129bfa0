package storetest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

var auditCases = []testCase{
	{"AppendAuditAndListFilters", func(t *testing.T, db storage.Backend) {
		entries := []record.AuditEntry{
			{Type: "hold.approved", Operator: "ann", SessionID: "sess-1", HoldID: "hold-1"},
			{Type: "hold.denied", Operator: "bob", SessionID: "sess-2", HoldID: "hold-2", Diff: json.RawMessage(`[{"op":"remove","path":"/a"}]`)},
			{Type: "session.pause", Operator: "annie", SessionID: "sess-1", Detail: json.RawMessage(`{"why":"x"}`)},
			{Type: "holdx.other", Operator: "ann"},
			{Type: "rule.update", Operator: "bob", RuleID: "r1", At: t0},
		}
		var ids []int64
		var last int64
		for i := range entries {
			e := &entries[i]
			ev, err := db.AppendAudit(bg(), e)
			require.NoError(t, err)
			require.Positive(t, e.ID)
			require.Equal(t, ev.Seq, e.Seq)
			require.Greater(t, e.Seq, last)
			last = e.Seq
			require.False(t, e.At.IsZero())
			require.Equal(t, record.EventAudit, ev.Type)
			require.Equal(t, e.SessionID, ev.SessionID)
			ids = append(ids, e.ID)
		}
		require.Equal(t, t0, entries[4].At, "a given time is kept")
		list := func(q record.AuditQuery) []int64 {
			got, err := db.ListAudit(bg(), q)
			require.NoError(t, err)
			out := []int64{}
			for _, e := range got {
				out = append(out, e.ID)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			q    record.AuditQuery
			want []int
		}{
			{"all newest first", record.AuditQuery{}, []int{4, 3, 2, 1, 0}},
			{"type exact", record.AuditQuery{Type: "hold.denied"}, []int{1}},
			{"type prefix without a dot", record.AuditQuery{Type: "hold"}, []int{1, 0}},
			{"session", record.AuditQuery{SessionID: "sess-1"}, []int{2, 0}},
			{"operator exact", record.AuditQuery{Operator: "ann"}, []int{3, 0}},
			{"operator prefix", record.AuditQuery{Operator: "ann", Prefix: true}, []int{3, 2, 0}},
			{"hold prefix", record.AuditQuery{HoldID: "hold-", Prefix: true}, []int{1, 0}},
			{"session prefix", record.AuditQuery{SessionID: "sess", Prefix: true}, []int{2, 1, 0}},
			{"limit", record.AuditQuery{Limit: 2}, []int{4, 3}},
			{"before", record.AuditQuery{Limit: 2, Before: ids[3]}, []int{2, 1}},
			{"combined", record.AuditQuery{Type: "hold", Operator: "bob"}, []int{1}},
		} {
			want := []int64{}
			for _, i := range tc.want {
				want = append(want, ids[i])
			}
			require.Equal(t, want, list(tc.q), tc.name)
		}
		got, err := db.ListAudit(bg(), record.AuditQuery{HoldID: "hold-2"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, entries[1], got[0], "an entry reads back as written")
		require.JSONEq(t, `[{"op":"remove","path":"/a"}]`, string(got[0].Diff))

		for name, e := range map[string]*record.AuditEntry{
			"no type":    {},
			"bad diff":   {Type: "x", Diff: json.RawMessage(`{`)},
			"bad detail": {Type: "x", Detail: json.RawMessage(`{`)},
		} {
			_, err := db.AppendAudit(bg(), e)
			require.Error(t, err, name)
		}
	}},
}
