package holds

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
)

// maxBody bounds an action's body; modified params carry a whole step's arguments.
const maxBody = 4 << 20

// Register adds the holds, session control and audit endpoints to mux:
//
//	GET  /api/holds?status=pending|approved|denied|modified|timedOut|abandoned|interrupted|all&limit=N
//	     → {"holds":[…],"now":…,"more":bool}; more: the list was cut at limit or the byte bound
//	GET  /api/holds/{id}
//	GET  /api/steps/{seq}/hold                 the hold of a held step and its audit entries
//	POST /api/holds/{id}/approve|deny|modify   {"operator","note","params","override","remember"}
//	POST /api/sessions/{id}/pause|resume|block {"operator","note"}
//	GET  /api/audit?limit=&before=&type=&sessionId=&operator=&holdId=
//	GET  /api/sessions/{id}/comments
//	POST /api/sessions/{id}/comments           {"operator","text","stepSeq"}
func (m *Manager) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/holds", m.handleList)
	mux.HandleFunc("GET /api/holds/{id}", m.handleGet)
	mux.HandleFunc("GET /api/steps/{seq}/hold", m.handleStepHold)
	for _, action := range []string{"approve", "deny", "modify"} {
		mux.HandleFunc("POST /api/holds/{id}/"+action, m.handleAction(action))
	}
	for _, control := range []string{record.ControlPause, record.ControlResume, record.ControlBlock} {
		mux.HandleFunc("POST /api/sessions/{id}/"+control, m.handleControl(control))
	}
	mux.HandleFunc("GET /api/audit", m.handleAudit)
	mux.HandleFunc("GET /api/sessions/{id}/comments", m.handleComments)
	mux.HandleFunc("POST /api/sessions/{id}/comments", m.handleAddComment)
}

func (m *Manager) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status := q.Get("status")
	if status == "" {
		status = StatusPending
	}
	limit, err := queryInt(q.Get("limit"), "limit")
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	limit = min(limit, apijson.MaxPageItems)
	hs, err := m.List(r.Context(), status, int(limit))
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	fit, full, err := apijson.Fit(hs, m.maxPageBytes)
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	more := !full || len(hs) == effectiveHoldsLimit(int(limit))
	// now lets a console count down to each deadline without trusting its own clock.
	apijson.Write(w, http.StatusOK, map[string]any{"holds": fit, "now": m.clock.Now().UTC(), "more": more})
}

func (m *Manager) handleGet(w http.ResponseWriter, r *http.Request) {
	h, err := m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	apijson.Write(w, http.StatusOK, h)
}

func (m *Manager) handleStepHold(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq <= 0 {
		m.writeError(w, &FieldError{Field: "seq", Message: "seq must be a positive integer"}, nil)
		return
	}
	sh, err := m.ForStep(r.Context(), seq)
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	apijson.Write(w, http.StatusOK, sh)
}

type actionBody struct {
	Operator string          `json:"operator"`
	Note     string          `json:"note"`
	Params   json.RawMessage `json:"params"`
	// Override sends an edit the rules would deny.
	Override bool `json:"override"`
	Remember *struct {
		Scope     string `json:"scope"`
		ExpiresIn string `json:"expiresIn"`
	} `json:"remember"`
}

func (m *Manager) handleAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body actionBody
		if err := readBody(w, r, &body); err != nil {
			m.writeError(w, err, nil)
			return
		}
		d := Decision{Operator: m.operator(r, body.Operator), Note: body.Note, Override: body.Override}
		if body.Override && action != "modify" {
			m.writeError(w, &FieldError{Field: "override", Message: "override applies to modify only"}, nil)
			return
		}
		if body.Remember != nil {
			if action != "approve" {
				m.writeError(w, &FieldError{Field: "remember", Message: "only an approval can be remembered"}, nil)
				return
			}
			exp, err := parseExpiresIn(body.Remember.ExpiresIn)
			if err != nil {
				m.writeError(w, err, nil)
				return
			}
			d.Remember = &RememberSpec{Scope: body.Remember.Scope, ExpiresIn: exp}
		}
		if body.Params != nil && action != "modify" {
			m.writeError(w, &FieldError{Field: "params", Message: "params apply to modify only"}, nil)
			return
		}
		id := r.PathValue("id")
		var (
			h   Hold
			err error
		)
		switch action {
		case "approve":
			h, err = m.Approve(r.Context(), id, d)
		case "deny":
			h, err = m.Deny(r.Context(), id, d)
		default:
			h, err = m.Modify(r.Context(), id, d, body.Params)
		}
		if err != nil {
			m.writeError(w, err, &h)
			return
		}
		apijson.Write(w, http.StatusOK, h)
	}
}

type controlBody struct {
	Operator string `json:"operator"`
	Note     string `json:"note"`
}

func (m *Manager) handleControl(control string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body controlBody
		if err := readBody(w, r, &body); err != nil {
			m.writeError(w, err, nil)
			return
		}
		id := r.PathValue("id")
		if err := m.SetControl(r.Context(), id, control, m.operator(r, body.Operator), body.Note); err != nil {
			m.writeError(w, err, nil)
			return
		}
		apijson.Write(w, http.StatusOK, map[string]string{"sessionId": id, "control": m.Control(id)})
	}
}

func (m *Manager) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), "limit")
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	// The store is asked for one page at most, so that a full page tells there is more.
	limit = int64(effectiveAuditLimit(int(limit)))
	before, err := queryInt(q.Get("before"), "before")
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	for _, name := range []string{"type", "sessionId", "operator", "holdId"} {
		if len(q.Get(name)) > MaxFilterBytes {
			m.writeError(w, &FieldError{Field: name, Message: fmt.Sprintf("%s is longer than %d bytes", name, MaxFilterBytes)}, nil)
			return
		}
	}
	aq := AuditQuery{Limit: int(limit), Before: before, Type: q.Get("type"),
		SessionID: q.Get("sessionId"), Operator: q.Get("operator"), HoldID: q.Get("holdId"), Prefix: true}
	entries, err := m.Audit(r.Context(), aq)
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	fit, full, err := apijson.Fit(entries, m.maxPageBytes)
	if err != nil {
		m.writeError(w, err, nil)
		return
	}
	// next is the cursor of the following page: null once a page comes back short.
	var next *int64
	if n := len(entries); n > 0 && (!full || n == aq.Limit) {
		next = &entries[len(fit)-1].ID
	}
	apijson.Write(w, http.StatusOK, map[string]any{"entries": fit, "next": next})
}

// effectiveAuditLimit is the page size asked of the store: 100 by default, at most
// apijson.MaxPageItems, so a full page can be told from the last one.
func effectiveAuditLimit(limit int) int {
	if limit <= 0 {
		return 100
	}
	return min(limit, apijson.MaxPageItems)
}

// effectiveHoldsLimit mirrors the store's default, to tell a full list from a complete one.
func effectiveHoldsLimit(limit int) int {
	if limit <= 0 {
		return 200
	}
	return limit
}

// operator is the signed-in name when an auth layer supplies one, else the body's.
func (m *Manager) operator(r *http.Request, fromBody string) string {
	if m.operatorFrom != nil {
		if name, ok := m.operatorFrom(r); ok {
			return name
		}
	}
	return fromBody
}

func readBody(w http.ResponseWriter, r *http.Request, dst any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &FieldError{Field: "body", Message: fmt.Sprintf("request body is larger than %d bytes", maxBody)}
		}
		return &FieldError{Field: "body", Message: "could not read the request body"}
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil // every field empty: the handler names what is missing
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return &FieldError{Field: "body", Message: "request body is not a valid JSON object: " + err.Error()}
	}
	return nil
}

// MaxFilterBytes bounds a text filter of a listing: longer than any id Vigil accepts, and
// far below what a LIKE pattern or an index lookup can be made to chew on.
const MaxFilterBytes = 1024

func queryInt(s, field string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, &FieldError{Field: field, Message: field + " must be a non-negative integer"}
	}
	return n, nil
}

// parseExpiresIn reads a Go duration ("24h", "90m") or a number of days ("7d").
func parseExpiresIn(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	var (
		d   time.Duration
		err error
	)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		n, err = strconv.ParseInt(days, 10, 64)
		if err == nil && (n <= 0 || n > int64(MaxRememberFor/(24*time.Hour))) {
			err = errors.New("out of range")
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 || d > MaxRememberFor {
		return 0, &FieldError{Field: "remember.expiresIn", Message: fmt.Sprintf(
			`expiresIn must be a duration such as "24h" or "7d", at least 1s and at most %d days, not %q`,
			MaxRememberFor/(24*time.Hour), s)}
	}
	return d, nil
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// writeError maps an error to its status and JSON body. A conflict and a failed remember
// also carry the hold as it now stands, so a console can show who won.
func (m *Manager) writeError(w http.ResponseWriter, err error, h *Hold) {
	var (
		fe     *FieldError
		status int
		body   = map[string]any{}
		e      apiError
	)
	var deny *RulesDenyError
	switch {
	case errors.As(err, &deny):
		// A 400 like any refused params, with its own code and the verdict, so a client
		// can show the rule and offer the override.
		status, e = http.StatusBadRequest, apiError{Code: "rules_deny", Message: deny.Error(), Field: "params"}
		body["verdict"] = deny.Verdict
	case errors.As(err, &fe):
		status, e = http.StatusBadRequest, apiError{Code: "bad_request", Message: fe.Message, Field: fe.Field}
	case errors.Is(err, ErrNotFound):
		status, e = http.StatusNotFound, apiError{Code: "not_found", Message: err.Error()}
	case errors.Is(err, ErrConflict):
		status, e = http.StatusConflict, apiError{Code: "conflict", Message: err.Error()}
		if h != nil && h.ID != "" {
			body["hold"] = h
		}
	case errors.Is(err, ErrOwnerUnavailable):
		// Nothing was decided; the operator may try again (or the hold ends as interrupted
		// once its replica is found dead).
		status, e = http.StatusServiceUnavailable, apiError{Code: "unavailable", Message: err.Error()}
	case errors.Is(err, ErrRememberFailed):
		status, e = http.StatusInternalServerError, apiError{Code: "remember_failed", Message: err.Error()}
		if h != nil && h.ID != "" {
			body["hold"] = h
		}
	default:
		m.log.Error("holds API request failed", "err", err)
		status, e = http.StatusInternalServerError, apiError{Code: "internal", Message: "internal error; see the guardian's log"}
	}
	body["error"] = e
	apijson.Write(w, status, body)
}
