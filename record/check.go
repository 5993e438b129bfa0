package record

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The checks every storage backend makes before writing a record: the same refusals,
// word for word, whichever backend a guardian runs on.

// CheckNew reports what makes h unfit to be stored as a new hold.
func (h *Hold) CheckNew() error {
	switch {
	case h.ID == "":
		return errors.New("storage: hold has no id")
	case h.SessionID == "":
		return errors.New("storage: hold has no session id")
	case h.Method == "":
		return errors.New("storage: hold has no method")
	case h.OnTimeout != "allow" && h.OnTimeout != "deny":
		return fmt.Errorf("storage: hold onTimeout %q: must be allow or deny", h.OnTimeout)
	case h.Status != "" && h.Status != HoldPending:
		return fmt.Errorf("storage: new hold has status %q", h.Status)
	case len(h.Request) > 0 && !json.Valid(h.Request):
		return errors.New("storage: hold request is not valid JSON")
	}
	return nil
}

// Check reports what makes r unfit to end hold id: a status that is not an end, a
// decision other than allow, deny or modify, params that are not JSON.
func (r HoldResolution) Check(id string) error {
	switch r.Status {
	case HoldApproved, HoldDenied, HoldModified, HoldTimedOut, HoldAbandoned, HoldInterrupted:
	default:
		return fmt.Errorf("storage: resolve hold %s: invalid status %q", id, r.Status)
	}
	if r.Decision != "allow" && r.Decision != "deny" && r.Decision != "modify" {
		return fmt.Errorf("storage: resolve hold %s: invalid decision %q", id, r.Decision)
	}
	if len(r.Params) > 0 && !json.Valid(r.Params) {
		return fmt.Errorf("storage: resolve hold %s: params are not valid JSON", id)
	}
	return nil
}

// CheckNew reports what makes e unfit to be stored as an audit entry.
func (e *AuditEntry) CheckNew() error {
	if e.Type == "" {
		return errors.New("storage: audit entry has no type")
	}
	if len(e.Diff) > 0 && !json.Valid(e.Diff) {
		return fmt.Errorf("storage: audit %s: diff is not valid JSON", e.Type)
	}
	if len(e.Detail) > 0 && !json.Valid(e.Detail) {
		return fmt.Errorf("storage: audit %s: detail is not valid JSON", e.Type)
	}
	return nil
}

// CheckNew reports what makes k unfit to be stored as a new API key.
func (k *APIKey) CheckNew() error {
	switch {
	case k.ID == "":
		return errors.New("storage: api key has no id")
	case len(k.Hash) == 0:
		return errors.New("storage: api key has no hash")
	}
	return nil
}

// CheckNew reports what makes u unfit to be stored as a new operator account.
func (u *User) CheckNew() error {
	switch {
	case u.Name == "":
		return errors.New("storage: user has no name")
	case len(u.PasswordHash) == 0:
		return errors.New("storage: user has no password hash")
	}
	return nil
}

// CheckNew reports what makes s unfit to be stored as a new console sign-in.
func (s *AuthSession) CheckNew() error {
	switch {
	case len(s.TokenHash) == 0:
		return errors.New("storage: session has no token hash")
	case s.CSRFToken == "":
		return errors.New("storage: session has no CSRF token")
	case s.ExpiresAt.IsZero():
		return errors.New("storage: session has no expiry")
	}
	return nil
}

// CheckNew reports what makes rec unfit to be stored as a step.
func (rec *StepRecord) CheckNew() error {
	switch {
	case rec.SessionID == "":
		return errors.New("storage: step has no session id")
	case rec.Method == "":
		return errors.New("storage: step has no method")
	case rec.Decision == "":
		return errors.New("storage: step has no decision")
	case !validDecision(rec.Decision):
		return fmt.Errorf("storage: step decision %q: want letters, digits, '_', '.', ':' or '-'", rec.Decision)
	}
	return nil
}

// validDecision reports whether d can be a decision: 1 to 64 letters, digits, '_', '.', ':'
// or '-'. A decision is a key of the session's decision tally, addressed by a JSON path in
// SQLite, so it must not need quoting there.
func validDecision(d string) bool {
	if len(d) == 0 || len(d) > 64 {
		return false
	}
	for _, c := range []byte(d) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}
