package holds_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/record"
)

func TestCommentsOnSessionsAndSteps(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rec := &record.StepRecord{SessionID: "s1", Method: "steps/message", Kind: "message", Decision: "allow",
		ReceivedAt: start, Request: json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"steps/message"}`),
		Response: json.RawMessage(`{"jsonrpc":"2.0","id":1,"result":{"decision":"allow"}}`)}
	require.NoError(t, e.db.SaveStep(ctx, rec))
	other := *rec
	other.SessionID, other.Seq = "s2", 0
	require.NoError(t, e.db.SaveStep(ctx, &other))

	var c holds.Comment
	require.Equal(t, http.StatusCreated, e.call("POST", "/api/sessions/s1/comments",
		map[string]any{"operator": "ann", "text": "  Looks like a retry loop  "}, &c))
	require.Equal(t, "ann", c.Operator)
	require.Equal(t, "Looks like a retry loop", c.Text)
	require.Zero(t, c.StepSeq)
	require.Equal(t, http.StatusCreated, e.call("POST", "/api/sessions/s1/comments",
		map[string]any{"operator": "bob", "text": "this one", "stepSeq": rec.Seq}, &c))
	require.Equal(t, rec.Seq, c.StepSeq)

	// Shown live to other operators: each comment is an audit event.
	evs := e.rec.waitN(t, 2, func(ev record.Event) bool { return ev.Type == record.EventAudit })
	var live record.AuditEntry
	require.NoError(t, json.Unmarshal(evs[1].Payload, &live))
	require.Equal(t, holds.AuditComment, live.Type)
	require.Equal(t, "bob", live.Operator)
	require.Equal(t, "this one", live.Note)

	var list struct {
		Comments []holds.Comment `json:"comments"`
	}
	require.Equal(t, http.StatusOK, e.call("GET", "/api/sessions/s1/comments", nil, &list))
	require.Len(t, list.Comments, 2)
	require.Equal(t, "Looks like a retry loop", list.Comments[0].Text, "oldest first")
	require.Equal(t, rec.Seq, list.Comments[1].StepSeq)
	require.Equal(t, http.StatusOK, e.call("GET", "/api/sessions/s2/comments", nil, &list))
	require.Empty(t, list.Comments)

	// In the audit log, and so in exports.
	require.Len(t, e.audit(record.AuditQuery{Type: "comment", SessionID: "s1"}), 2)

	type apiErr struct {
		Error struct{ Code, Field, Message string } `json:"error"`
	}
	for _, tc := range []struct {
		name, path  string
		body        map[string]any
		status      int
		field, want string
	}{
		{"no text", "/api/sessions/s1/comments", map[string]any{"operator": "a", "text": "  "}, 400, "text", "required"},
		{"too long", "/api/sessions/s1/comments", map[string]any{"operator": "a", "text": strings.Repeat("x", 5000)}, 400, "text", "longer"},
		{"no operator", "/api/sessions/s1/comments", map[string]any{"text": "x"}, 400, "operator", "required"},
		{"unknown session", "/api/sessions/nope/comments", map[string]any{"operator": "a", "text": "x"}, 404, "", "not found"},
		{"step of another session", "/api/sessions/s1/comments", map[string]any{"operator": "a", "text": "x", "stepSeq": other.Seq}, 400, "stepSeq", "not a step of session s1"},
		{"unknown step", "/api/sessions/s1/comments", map[string]any{"operator": "a", "text": "x", "stepSeq": 999}, 400, "stepSeq", "not a step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got apiErr
			require.Equal(t, tc.status, e.call("POST", tc.path, tc.body, &got))
			require.Equal(t, tc.field, got.Error.Field)
			require.Contains(t, got.Error.Message, tc.want)
		})
	}
	require.Equal(t, http.StatusNotFound, e.call("GET", "/api/sessions/nope/comments", nil, nil))
}
