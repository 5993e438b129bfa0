package holds

import (
	"context"
	"encoding/json"

	"github.com/vigil-guardian/vigil/record"
)

// Observe takes a committed event of any guardian process sharing the store (replicas), in
// seq order, and brings this process's state in line with it:
//   - hold.resolved of a hold whose agent waits here: the agent is answered with the stored
//     decision (first decision wins in the store, so it is the one that counts);
//   - session.control: the session's control is set as stored, and a block denies the
//     session's steps waiting here, as it does on the process where it was made.
//
// Events this process made itself arrive too and change nothing. Observe never blocks: it
// runs on the bus's delivery goroutine.
func (m *Manager) Observe(ev record.Event) {
	switch ev.Type {
	case record.EventHoldResolved:
		var h Hold
		if err := json.Unmarshal(ev.Payload, &h); err != nil || h.ID == "" || h.Status == StatusPending {
			return
		}
		m.mu.Lock()
		w := m.pending[h.ID]
		m.mu.Unlock()
		if w == nil {
			return
		}
		// The owner may be busy storing a decision of its own (which then conflicts, or
		// wins and closes done): hand over without holding up the bus.
		go func() {
			select {
			case w.decide <- &decideReq{stored: &h}:
			case <-w.done:
			}
		}()
	case record.EventSessionControl:
		var c record.SessionControl
		if err := json.Unmarshal(ev.Payload, &c); err != nil || c.SessionID == "" {
			return
		}
		state, ok := record.ControlState(c.Control)
		if !ok {
			return
		}
		m.ctlMu.Lock()
		if state == ControlActive {
			delete(m.controls, c.SessionID)
		} else {
			m.controls[c.SessionID] = state
		}
		m.ctlMu.Unlock()
		if state == ControlBlocked {
			go m.denySession(context.Background(), c.SessionID, c.Operator, c.Note)
		}
	}
}
