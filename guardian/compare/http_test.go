package compare

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

var t0 = time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)

func openDB(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// toolCall is an AOS tool call request as an agent sends it.
func toolCall(session, turn, step, tool, to string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":{"context":{"agent":{"id":"agent-1","name":"Helpdesk","instructions":"Help users.","version":"1.0","provider":{"name":"corp","url":"https://corp.example"}},"session":{"id":%q},"turnId":%q,"stepId":%q,"timestamp":"2026-11-20T09:00:00Z"},"toolCallRequest":{"executionId":"x-%s","toolId":%q,"inputs":[{"name":"to","value":%q}]}}}`,
		session, turn, step, step, tool, to))
}

func save(t *testing.T, db *sqlite.DB, session, turn, step, tool, to, decision string) record.StepRecord {
	t.Helper()
	rec := record.StepRecord{SessionID: session, TurnID: turn, StepID: step, Method: "steps/toolCallRequest",
		Kind: "toolCall", Tool: tool, Decision: decision, ReceivedAt: t0, Request: toolCall(session, turn, step, tool, to),
		Response: json.RawMessage("null")}
	require.NoError(t, db.SaveStep(context.Background(), &rec))
	return rec
}

func serve(t *testing.T, db *sqlite.DB) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	New(db, nil).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string, status int, out any) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, status, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
}

func TestCompareAPI(t *testing.T) {
	db := openDB(t)
	save(t, db, "before", "t1", "s1", "lookup", "bob@corp.example", "allow")
	save(t, db, "before", "t1", "s2", "send_email", "eve@evil.example", "allow")
	save(t, db, "after", "t1", "s1", "lookup", "bob@corp.example", "allow")
	save(t, db, "after", "t1", "s2", "send_email", "eve@evil.example", "deny")
	save(t, db, "after", "t1", "s3", "send_email", "bob@corp.example", "allow")
	save(t, db, "after", "t2", "s1", "lookup", "ann@corp.example", "allow")
	save(t, db, "before", "t2", "s1", "lookup", "bob@corp.example", "allow")
	srv := serve(t, db)

	var res Result
	get(t, srv, "/api/compare?a=before&b=after", http.StatusOK, &res)
	require.Equal(t, "before", res.A.Session.ID)
	require.Equal(t, 3, res.A.Steps)
	require.Equal(t, 4, res.B.Steps)
	require.False(t, res.A.Truncated)
	require.Equal(t, MaxSteps, res.MaxSteps)
	require.Equal(t, []string{"1 same 1|3", "1 differ 2|4 decision", "1 onlyB -|5", "2 differ 7|6 inputs"}, layout(res.Rows))
	require.Equal(t, Summary{Same: 1, Differ: 2, OnlyB: 1}, res.Summary)
	ops := res.Rows[3].Inputs
	require.Len(t, ops, 1)
	require.Equal(t, "replace", ops[0].Op)
	require.Equal(t, "/to", ops[0].Path)
	require.JSONEq(t, `"ann@corp.example"`, string(ops[0].Value))
	require.JSONEq(t, `"bob@corp.example"`, string(ops[0].Old))

	var e struct {
		Error struct{ Code, Message string }
	}
	get(t, srv, "/api/compare?a=before&b=nope", http.StatusNotFound, &e)
	require.Equal(t, "not_found", e.Error.Code)
	require.Equal(t, `b: no session "nope"`, e.Error.Message, "said as a person reads it, not as an error chain")
	get(t, srv, "/api/compare?a=before", http.StatusBadRequest, &e)
	require.Equal(t, "invalid_argument", e.Error.Code)
	require.Contains(t, e.Error.Message, "b:")
}

// bulk stores n steps of each session, interleaved, straight into the tables (the journal
// would take minutes for a million). Every step carries a real AOS request; the i-th steps
// of all sessions have the same turn and tool.
func bulk(t testing.TB, db *sqlite.DB, sessions []string, n int) {
	t.Helper()
	ids, err := json.Marshal(sessions)
	require.NoError(t, err)
	require.NoError(t, db.Exec(context.Background(), func(tx *sql.Tx) error {
		var last int64
		if err := tx.QueryRow(`SELECT coalesce(max(seq), 0) FROM events`).Scan(&last); err != nil {
			return err
		}
		if _, err := tx.Exec(`WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < ? - 1)
			INSERT INTO events (type, session_id, at)
			SELECT 'step', json_extract(?, '$[' || (i % ?) || ']'), ? + i FROM k`,
			n*len(sessions), string(ids), len(sessions), t0.UnixNano()); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO steps (seq, session_id, turn_id, step_id, method, kind, tool, decision,
			received_at, request, response)
			SELECT seq, session_id, 't' || (i / 10), 's' || i, 'steps/toolCallRequest', 'toolCall',
				'tool' || (i % 7), 'allow', at, ?, 'null'
			FROM (SELECT *, (seq - ? - 1) / ? AS i FROM events WHERE seq > ?) ORDER BY seq`,
			string(toolCall("x", "t", "s", "tool", "bob@corp.example")), last, len(sessions), last); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO sessions (id, first_seen, last_seen, last_seq, steps)
			SELECT session_id, min(received_at), max(received_at), max(seq), count(*) FROM steps WHERE seq > ?
			GROUP BY session_id
			ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, last_seq = excluded.last_seq,
				steps = steps + excluded.steps`, last)
		return err
	}))
}

func TestCompareTruncates(t *testing.T) {
	db := openDB(t)
	bulk(t, db, []string{"long", "short"}, MaxSteps+1)
	srv := serve(t, db)
	var res Result
	get(t, srv, "/api/compare?a=long&b=short", http.StatusOK, &res)
	require.Equal(t, MaxSteps, res.A.Steps)
	require.True(t, res.A.Truncated)
	require.True(t, res.B.Truncated)
	require.Equal(t, Summary{Same: MaxSteps}, res.Summary)
}

// TestCompareCutsBigSessionsByBytes: a side stops once its steps' stored size reaches the
// byte bound (2000 steps of megabytes each were read whole), and says it was cut only when
// more steps follow.
func TestCompareCutsBigSessionsByBytes(t *testing.T) {
	db := openDB(t)
	var one int
	for i := range 6 {
		rec := save(t, db, "big", "t1", fmt.Sprint("s", i), "send", "ann@corp.example", "allow")
		one = storage.StepBytes(&rec)
		if i < 3 {
			save(t, db, "three", "t1", fmt.Sprint("s", i), "send", "ann@corp.example", "allow")
		}
	}
	svc := New(db, nil)
	svc.maxBytes = 3*one - 1 // the third step reaches it
	res, err := svc.Compare(context.Background(), "big", "three")
	require.NoError(t, err)
	require.Equal(t, 3, res.A.Steps)
	require.True(t, res.A.Truncated, "three more steps follow")
	require.Equal(t, 3, res.B.Steps)
	require.False(t, res.B.Truncated, "the session ended with the step that reached the bound")
	require.Equal(t, Summary{Same: 3}, res.Summary)
}
