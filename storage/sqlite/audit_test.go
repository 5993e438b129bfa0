package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAppendAuditEventCarriesEntry(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")
	e := &record.AuditEntry{Type: record.AuditHoldModified, Operator: "alice", SessionID: "s1", HoldID: "h1",
		RuleID: "r1", Decision: "modify", Note: "trimmed", At: holdT0,
		Diff:   json.RawMessage(`[{"op":"remove","path":"/cc","old":"x@y"}]`),
		Detail: json.RawMessage(`{"k":1}`)}
	ev, err := db.AppendAudit(ctx, e)
	require.NoError(t, err)
	require.NotZero(t, e.ID)
	require.Equal(t, ev.Seq, e.Seq)
	require.Equal(t, record.EventAudit, ev.Type)
	require.Equal(t, "s1", ev.SessionID)

	var payload record.AuditEntry
	require.NoError(t, json.Unmarshal(ev.Payload, &payload))
	require.Equal(t, *e, payload)
	requireSameEvents(t, []record.Event{ev}, storedEvents(t, db, 0))

	got, err := db.ListAudit(ctx, record.AuditQuery{})
	require.NoError(t, err)
	require.Equal(t, []record.AuditEntry{*e}, got)

	// Without a diff the field is null, and detail is left out.
	plain := &record.AuditEntry{Type: record.AuditSessionPause, Operator: "bob"}
	ev, err = db.AppendAudit(ctx, plain)
	require.NoError(t, err)
	require.False(t, plain.At.IsZero())
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(ev.Payload, &fields))
	require.Equal(t, "null", string(fields["diff"]))
	require.NotContains(t, fields, "detail")

	for _, bad := range []*record.AuditEntry{
		{},
		{Type: "x", Diff: json.RawMessage(`{`)},
		{Type: "x", Detail: json.RawMessage(`nope`)},
	} {
		_, err := db.AppendAudit(ctx, bad)
		require.Error(t, err)
	}
}

func TestListAuditFilters(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")
	add := func(typ, op, session, hold string) int64 {
		e := &record.AuditEntry{Type: typ, Operator: op, SessionID: session, HoldID: hold, At: holdT0}
		_, err := db.AppendAudit(ctx, e)
		require.NoError(t, err)
		return e.ID
	}
	id1 := add(record.AuditHoldCreated, "", "s1", "h1")
	id2 := add(record.AuditHoldApproved, "alice", "s1", "h1")
	id3 := add(record.AuditSessionPause, "bob", "s2", "")
	id4 := add(record.AuditHoldDenied, "bob", "s2", "h2")
	id5 := add("holdings.other", "carol", "s3", "")

	ids := func(es []record.AuditEntry) []int64 {
		out := []int64{}
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    record.AuditQuery
		want []int64
	}{
		{"all newest first", record.AuditQuery{}, []int64{id5, id4, id3, id2, id1}},
		{"limit", record.AuditQuery{Limit: 2}, []int64{id5, id4}},
		{"before", record.AuditQuery{Before: id4, Limit: 2}, []int64{id3, id2}},
		{"type prefix", record.AuditQuery{Type: "hold"}, []int64{id4, id2, id1}},
		{"exact type", record.AuditQuery{Type: record.AuditHoldApproved}, []int64{id2}},
		{"session prefix", record.AuditQuery{Type: "session"}, []int64{id3}},
		{"session id", record.AuditQuery{SessionID: "s2"}, []int64{id4, id3}},
		{"operator", record.AuditQuery{Operator: "bob"}, []int64{id4, id3}},
		{"hold", record.AuditQuery{HoldID: "h1"}, []int64{id2, id1}},
		{"combined", record.AuditQuery{Operator: "bob", Type: "hold"}, []int64{id4}},
		{"none", record.AuditQuery{Operator: "nobody"}, []int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := db.ListAudit(ctx, tc.q)
			require.NoError(t, err)
			require.Equal(t, tc.want, ids(got))
		})
	}
}

func TestAuditSurvivesEventPruning(t *testing.T) {
	ctx := context.Background()
	db := openHoldDB(t, "")
	for i := range 3 {
		_, err := db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditHoldApproved, Operator: fmt.Sprint("op", i),
			At: holdT0.Add(time.Duration(i) * time.Second)})
		require.NoError(t, err)
	}
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`DELETE FROM events`)
		return err
	}))
	got, err := db.ListAudit(ctx, record.AuditQuery{})
	require.NoError(t, err)
	require.Len(t, got, 3)
}

func TestAuditPrefixFilters(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	for _, sid := range []string{"sess-1", "sess-10", "sess-2", "other"} {
		_, err := db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionPause, SessionID: sid, Operator: "op-" + sid, HoldID: "h_" + sid})
		require.NoError(t, err)
	}
	sessions := func(q record.AuditQuery) []string {
		es, err := db.ListAudit(ctx, q)
		require.NoError(t, err)
		var out []string
		for _, e := range es {
			out = append(out, e.SessionID)
		}
		return out
	}
	require.Equal(t, []string{"sess-1"}, sessions(record.AuditQuery{SessionID: "sess-1"}), "exact by default")
	require.Equal(t, []string{"sess-10", "sess-1"}, sessions(record.AuditQuery{SessionID: "sess-1", Prefix: true}))
	require.Equal(t, []string{"sess-2", "sess-10", "sess-1"}, sessions(record.AuditQuery{SessionID: "sess", Prefix: true}))
	require.Equal(t, []string{"sess-2"}, sessions(record.AuditQuery{HoldID: "h_sess-2", Prefix: true}))
	require.Equal(t, []string{"other"}, sessions(record.AuditQuery{Operator: "op-o", Prefix: true}))
	require.Empty(t, sessions(record.AuditQuery{Operator: "op-o"}))
}
