package holds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/vigil-guardian/vigil/record"
)

// Control reports a session's control: ControlActive, ControlPaused or ControlBlocked. It
// is a map read, cheap enough for every step.
func (m *Manager) Control(sessionID string) string {
	m.ctlMu.RLock()
	c, ok := m.controls[sessionID]
	m.ctlMu.RUnlock()
	if !ok {
		return ControlActive
	}
	return c
}

// Controls returns every session that is not active, with its control.
func (m *Manager) Controls() map[string]string {
	m.ctlMu.RLock()
	defer m.ctlMu.RUnlock()
	out := make(map[string]string, len(m.controls))
	for k, v := range m.controls {
		out[k] = v
	}
	return out
}

// SetControl applies an operator's control to a session: "pause" (its further steps are
// held), "resume" (back to normal) or "block" (its further steps are denied). It is stored,
// audited and published before it takes effect here. Blocking also denies the session's
// steps already waiting in the queue; resuming leaves them for the operators to decide.
func (m *Manager) SetControl(ctx context.Context, sessionID, control, operator, note string) error {
	operator = strings.TrimSpace(operator)
	state, ok := record.ControlState(control)
	switch {
	case sessionID == "":
		return &FieldError{Field: "sessionId", Message: "session id is required"}
	case !ok:
		return &FieldError{Field: "control", Message: "control must be pause, resume or block"}
	case operator == "":
		return &FieldError{Field: "operator", Message: "operator is required"}
	case len(note) > maxNote:
		return &FieldError{Field: "note", Message: fmt.Sprintf("note is longer than %d bytes", maxNote)}
	}

	m.ctlWrite.Lock()
	defer m.ctlWrite.Unlock()
	detail, _ := json.Marshal(map[string]string{"state": state}) // strings always marshal
	audit := &AuditEntry{Type: "session." + control, Operator: operator, SessionID: sessionID,
		Note: note, Detail: detail}
	events, err := m.store.SetSessionControl(context.WithoutCancel(ctx), record.SessionControl{
		SessionID: sessionID, Control: control, Operator: operator, Note: note, At: m.clock.Now(),
	}, audit)
	if err != nil {
		return fmt.Errorf("holds: %s session %s: %w", control, sessionID, err)
	}
	m.ctlMu.Lock()
	if state == ControlActive {
		delete(m.controls, sessionID)
	} else {
		m.controls[sessionID] = state
	}
	m.ctlMu.Unlock()
	m.publishAll(events)
	m.log.Info("session control", "session", sessionID, "control", control, "operator", operator)

	if state == ControlBlocked {
		m.denySession(ctx, sessionID, operator, note)
	}
	return nil
}

// denySession denies every step of a just-blocked session still waiting for an operator.
// A hold that ends meanwhile (a conflict) is left as it ended.
func (m *Manager) denySession(ctx context.Context, sessionID, operator, note string) {
	m.mu.Lock()
	var ids []string
	for id, w := range m.pending {
		if w.req.SessionID == sessionID {
			ids = append(ids, id)
		}
	}
	m.mu.Unlock()
	n := "session blocked"
	if note != "" {
		n += ": " + note
	}
	// The sweep finishes even if the operator's request ends meanwhile.
	ctx = context.WithoutCancel(ctx)
	for _, id := range ids {
		if _, err := m.Deny(ctx, id, Decision{Operator: operator, Note: n}); err != nil && !errors.Is(err, ErrConflict) {
			m.log.Error("could not deny a held step of a blocked session", "session", sessionID,
				"hold", id, "err", err)
		}
	}
}
