package holds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vigil-guardian/vigil/guardian/apijson"
)

// Comments are operators' notes on a session or on one of its steps. Each is an audit entry
// of type AuditComment (operator, session, text in Note, the step's seq in Detail), so it is
// stored in the same transaction as its live "audit" event, exported with the audit log and
// kept when step retention prunes the steps it talks about.

// AuditComment is the audit type of a comment.
const AuditComment = "comment"

// maxComment bounds a comment's text; maxComments bounds one session's listing.
const (
	maxComment  = 4 << 10
	maxComments = 1000
)

// Comment is one operator's comment, as the API returns it.
type Comment struct {
	ID        int64     `json:"id"`
	Seq       int64     `json:"seq"`
	At        time.Time `json:"at"`
	Operator  string    `json:"operator"`
	SessionID string    `json:"sessionId"`
	// StepSeq is the step the comment is on; 0 for the whole session.
	StepSeq int64  `json:"stepSeq,omitempty"`
	Text    string `json:"text"`
}

type commentDetail struct {
	StepSeq int64 `json:"stepSeq,omitempty"`
}

// commentOf reads a comment back from its audit entry.
func commentOf(e AuditEntry) Comment {
	var d commentDetail
	_ = json.Unmarshal(e.Detail, &d) // written by AddComment; absent means the session
	return Comment{ID: e.ID, Seq: e.Seq, At: e.At,
		Operator: e.Operator, SessionID: e.SessionID, StepSeq: d.StepSeq, Text: e.Note}
}

// AddComment stores an operator's comment on session sessionID, or on its step stepSeq
// when that is not 0, and publishes it. The session (and step) must exist.
func (m *Manager) AddComment(ctx context.Context, sessionID string, stepSeq int64, operator, text string) (Comment, error) {
	operator = strings.TrimSpace(operator)
	text = strings.TrimSpace(text)
	switch {
	case operator == "":
		return Comment{}, &FieldError{Field: "operator", Message: "operator is required"}
	case text == "":
		return Comment{}, &FieldError{Field: "text", Message: "text is required"}
	case len(text) > maxComment:
		return Comment{}, &FieldError{Field: "text", Message: fmt.Sprintf("text is longer than %d bytes", maxComment)}
	case !utf8.ValidString(text):
		return Comment{}, &FieldError{Field: "text", Message: "text is not valid UTF-8"}
	case stepSeq < 0:
		return Comment{}, &FieldError{Field: "stepSeq", Message: "stepSeq must be a step's seq"}
	}
	if _, err := m.store.Session(ctx, sessionID); err != nil {
		return Comment{}, fmt.Errorf("holds: comment on session %s: %w", sessionID, err)
	}
	if stepSeq > 0 {
		st, err := m.store.Step(ctx, stepSeq)
		if errors.Is(err, ErrNotFound) || (err == nil && st.SessionID != sessionID) {
			return Comment{}, &FieldError{Field: "stepSeq", Message: fmt.Sprintf("step %d is not a step of session %s", stepSeq, sessionID)}
		}
		if err != nil {
			return Comment{}, fmt.Errorf("holds: comment on step %d: %w", stepSeq, err)
		}
	}
	detail, err := json.Marshal(commentDetail{StepSeq: stepSeq})
	if err != nil {
		return Comment{}, fmt.Errorf("holds: encode comment: %w", err)
	}
	e := &AuditEntry{Type: AuditComment, Operator: operator, SessionID: sessionID, Note: text,
		At: m.clock.Now(), Detail: detail}
	// Not the operator's ctx: once queued, the write may commit; its event must follow.
	ev, err := m.store.AppendAudit(context.WithoutCancel(ctx), e)
	if err != nil {
		return Comment{}, fmt.Errorf("holds: store comment: %w", err)
	}
	m.publish(ev)
	return commentOf(*e), nil
}

// Comments lists a session's comments, oldest first, at most maxComments (the newest).
func (m *Manager) Comments(ctx context.Context, sessionID string) ([]Comment, error) {
	if _, err := m.store.Session(ctx, sessionID); err != nil {
		return nil, fmt.Errorf("holds: comments of session %s: %w", sessionID, err)
	}
	es, err := m.store.ListAudit(ctx, AuditQuery{Type: AuditComment, SessionID: sessionID, Limit: maxComments})
	if err != nil {
		return nil, fmt.Errorf("holds: comments of session %s: %w", sessionID, err)
	}
	out := make([]Comment, len(es))
	for i, e := range es { // newest first from the store
		out[len(es)-1-i] = commentOf(e)
	}
	return out, nil
}

type commentBody struct {
	Operator string `json:"operator"`
	Text     string `json:"text"`
	StepSeq  int64  `json:"stepSeq"`
}

func (m *Manager) handleComments(w http.ResponseWriter, r *http.Request) {
	cs, err := m.Comments(r.Context(), r.PathValue("id"))
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	apijson.Write(w, http.StatusOK, map[string]any{"comments": cs})
}

func (m *Manager) handleAddComment(w http.ResponseWriter, r *http.Request) {
	var body commentBody
	if err := readBody(w, r, &body); err != nil {
		m.writeError(w, err, nil)
		return
	}
	c, err := m.AddComment(r.Context(), r.PathValue("id"), body.StepSeq, m.operator(r, body.Operator), body.Text)
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	apijson.Write(w, http.StatusCreated, c)
}
