package rulesapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Body size limits: a rule is small; a rules file or a draft set may hold many.
const (
	maxBody     = 1 << 20
	maxFileBody = 8 << 20
)

// Register adds the /api/rules endpoints to mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/rules", s.handleList)
	mux.HandleFunc("POST /api/rules", s.handleCreate)
	mux.HandleFunc("GET /api/rules/export", s.handleExport)
	mux.HandleFunc("POST /api/rules/import", s.handleImport)
	mux.HandleFunc("POST /api/rules/reload", s.handleReload)
	mux.HandleFunc("POST /api/rules/validate", s.handleValidate)
	mux.HandleFunc("POST /api/rules/test", s.handleTest)
	mux.HandleFunc("POST /api/rules/backtest", s.handleBacktest)
	mux.HandleFunc("GET /api/rules/{id}", s.handleGet)
	mux.HandleFunc("PUT /api/rules/{id}", s.handleUpdate)
	mux.HandleFunc("DELETE /api/rules/{id}", s.handleDelete)
	mux.HandleFunc("POST /api/rules/{id}/enable", s.handleEnable(true))
	mux.HandleFunc("POST /api/rules/{id}/disable", s.handleEnable(false))
	mux.HandleFunc("GET /api/rules/{id}/versions", s.handleVersions)
	mux.HandleFunc("GET /api/rules/{id}/versions/{n}", s.handleVersion)
	mux.HandleFunc("POST /api/rules/{id}/versions/{n}/restore", s.handleRestore)
	mux.HandleFunc("GET /api/rules/{id}/diff", s.handleDiff)
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	list, err := s.List(r.Context())
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, map[string]any{"rules": list})
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	v, err := s.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, v)
}

func (s *Service) handleCreate(w http.ResponseWriter, r *http.Request) {
	var body ruleBody
	if !s.readJSON(w, r, &body, maxBody) {
		return
	}
	saved, err := s.Create(r.Context(), rules.Rule(body), s.opts.OperatorFrom(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/rules/"+saved.ID)
	apijson.Write(w, http.StatusCreated, s.view(saved))
}

func (s *Service) handleUpdate(w http.ResponseWriter, r *http.Request) {
	var body ruleBody
	if !s.readJSON(w, r, &body, maxBody) {
		return
	}
	rule := rules.Rule(body)
	id := r.PathValue("id")
	if rule.ID == "" {
		rule.ID = id
	}
	if rule.ID != id {
		s.writeErr(w, r, fmt.Errorf("body id %q does not match the path's %q (a rule cannot be renamed; create a new one): %w",
			rule.ID, id, ErrBadRequest))
		return
	}
	saved, err := s.Update(r.Context(), rule, s.opts.OperatorFrom(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, s.view(saved))
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request) {
	gone, err := s.Delete(r.Context(), r.PathValue("id"), s.opts.OperatorFrom(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, map[string]any{"ruleId": gone.ID, "version": gone.Version})
}

func (s *Service) handleEnable(enabled bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		saved, err := s.SetEnabled(r.Context(), r.PathValue("id"), enabled, s.opts.OperatorFrom(r))
		if err != nil {
			s.writeErr(w, r, err)
			return
		}
		apijson.Write(w, http.StatusOK, s.view(saved))
	}
}

func (s *Service) handleVersions(w http.ResponseWriter, r *http.Request) {
	vs, err := s.store.RuleVersions(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, map[string]any{"versions": vs})
}

func (s *Service) handleVersion(w http.ResponseWriter, r *http.Request) {
	n, ok := s.versionParam(w, r)
	if !ok {
		return
	}
	v, err := s.store.RuleVersion(r.Context(), r.PathValue("id"), n)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, v)
}

func (s *Service) handleRestore(w http.ResponseWriter, r *http.Request) {
	n, ok := s.versionParam(w, r)
	if !ok {
		return
	}
	saved, err := s.Restore(r.Context(), r.PathValue("id"), n, s.opts.OperatorFrom(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, s.view(saved))
}

func (s *Service) versionParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		s.writeErr(w, r, fmt.Errorf("version %q is not a positive number: %w", r.PathValue("n"), ErrBadRequest))
		return 0, false
	}
	return n, true
}

func (s *Service) handleDiff(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var from, to int
	for _, p := range []struct {
		name string
		dst  *int
	}{{"from", &from}, {"to", &to}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.writeErr(w, r, fmt.Errorf("%s=%q is not a positive version number: %w", p.name, v, ErrBadRequest))
			return
		}
		*p.dst = n
	}
	d, err := s.DiffVersions(r.Context(), r.PathValue("id"), from, to)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, d)
}

// ruleBody is a rule in a request body. Unlike a stored rule it is decoded strictly, as a
// rules file is: a field rules do not have ("mood", a misspelt "priorty") is refused with a
// *rules.FieldError naming it, instead of being dropped while the rest is saved. The
// read-only fields the API answers with (viewFields) are accepted and ignored.
type ruleBody rules.Rule

func (b *ruleBody) UnmarshalJSON(data []byte) error {
	r, err := rules.DecodeJSON(data, viewFields...)
	if err != nil {
		return err
	}
	*b = ruleBody(r)
	return nil
}

// ruleList is a list of rules in a request body; nil (absent) and empty stay apart, since
// an absent draft means the stored rules.
type ruleList []ruleBody

func (l ruleList) rules() []rules.Rule {
	if l == nil {
		return nil
	}
	out := make([]rules.Rule, len(l))
	for i, r := range l {
		out[i] = rules.Rule(r)
	}
	return out
}

// validateRequest is the body of POST /api/rules/validate: one of rule, when or rules.
type validateRequest struct {
	Rule  *ruleBody `json:"rule"`
	When  *string   `json:"when"`
	Rules ruleList  `json:"rules"`
}

func (s *Service) handleValidate(w http.ResponseWriter, r *http.Request) {
	var body validateRequest
	var diags []rules.Diagnostic
	if err := decodeBody(w, r, &body, maxFileBody); err != nil {
		// A rule field that cannot be read (unknown, or a value of the wrong form) is a
		// problem of the rule, which is what validate answers with; anything else is a bad
		// request.
		var fe *rules.FieldError
		if !errors.As(err, &fe) {
			s.writeErr(w, r, err)
			return
		}
		writeValidation(w, []rules.Diagnostic{fe.Diagnostic()})
		return
	}
	switch {
	case body.Rule != nil:
		var inv *InvalidRulesError
		if err := validate(rules.Rule(*body.Rule)); errors.As(err, &inv) {
			diags = inv.Diagnostics
		}
	case body.When != nil:
		diags = rules.ValidateExpr(*body.When)
	case body.Rules != nil:
		var ce rules.CompileErrors
		if _, err := rules.Compile(body.Rules.rules(), s.draftOptions()); errors.As(err, &ce) {
			diags = ce
		}
	default:
		s.writeErr(w, r, fmt.Errorf(`give "rule", "when" or "rules": %w`, ErrBadRequest))
		return
	}
	writeValidation(w, diags)
}

func writeValidation(w http.ResponseWriter, diags []rules.Diagnostic) {
	if diags == nil {
		diags = []rules.Diagnostic{}
	}
	apijson.Write(w, http.StatusOK, map[string]any{"ok": len(diags) == 0, "errors": diags})
}

// testBody is the body of POST /api/rules/test (see TestRequest).
type testBody struct {
	Rules ruleList        `json:"rules"`
	Step  *rules.TestStep `json:"step"`
	Seq   int64           `json:"seq"`
}

func (s *Service) handleTest(w http.ResponseWriter, r *http.Request) {
	var body testBody
	if !s.readJSON(w, r, &body, maxFileBody) {
		return
	}
	res, err := s.Test(r.Context(), TestRequest{Rules: body.Rules.rules(), Step: body.Step, Seq: body.Seq})
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, res)
}

// backtestBody is the body of POST /api/rules/backtest (see BacktestRequest). Limit and
// Before are pointers to tell a 0 that was sent, which is refused as ?limit=0 is elsewhere
// in the API, from one left out, which means the default.
type backtestBody struct {
	Rules  ruleList `json:"rules"`
	Limit  *int     `json:"limit"`
	Before *int64   `json:"before"`
}

func (s *Service) handleBacktest(w http.ResponseWriter, r *http.Request) {
	var body backtestBody
	if !s.readJSON(w, r, &body, maxFileBody) {
		return
	}
	req := BacktestRequest{Rules: body.Rules.rules()}
	if body.Limit != nil {
		if err := positive("limit", "integer", int64(*body.Limit)); err != nil {
			s.writeErr(w, r, err)
			return
		}
		req.Limit = *body.Limit
	}
	if body.Before != nil {
		if err := positive("before", "seq", *body.Before); err != nil {
			s.writeErr(w, r, err)
			return
		}
		req.Before = *body.Before
	}
	res, err := s.Backtest(r.Context(), req)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, res)
}

func (s *Service) handleExport(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	ctype := "application/yaml"
	switch format {
	case "", "yaml", "yml":
		format = "yaml"
	case "json":
		ctype = "application/json"
	default:
		s.writeErr(w, r, fmt.Errorf("format %q is not yaml or json: %w", format, ErrBadRequest))
		return
	}
	b, err := s.Export(r.Context(), format)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	w.Header().Set("Content-Type", ctype+"; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="vigil-rules.`+format+`"`)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (s *Service) handleImport(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFileBody))
	if err != nil {
		s.writeErr(w, r, fmt.Errorf("read body: %w: %w", err, ErrBadRequest))
		return
	}
	if strings.TrimSpace(string(data)) == "" {
		s.writeErr(w, r, fmt.Errorf("the body is empty; send a rules file (YAML or JSON): %w", ErrBadRequest))
		return
	}
	name := "import.yaml"
	if strings.Contains(r.Header.Get("Content-Type"), "json") {
		name = "import.json"
	}
	f, err := rules.ParseFile(name, data)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	n, _, err := s.importRules(r.Context(), f, r.URL.Query().Get("mode"), s.opts.OperatorFrom(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	list, err := s.List(r.Context())
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, map[string]any{"changed": n, "rules": list})
}

func (s *Service) handleReload(w http.ResponseWriter, r *http.Request) {
	n, err := s.Reload(r.Context(), s.opts.OperatorFrom(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, map[string]any{"changed": n, "file": s.opts.RulesFile})
}

// readJSON decodes a JSON body of at most limit bytes into v, answering the error itself
// when it cannot.
func (s *Service) readJSON(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	if err := decodeBody(w, r, v, limit); err != nil {
		s.writeErr(w, r, err)
		return false
	}
	return true
}

// decodeBody decodes a JSON body of at most limit bytes into v. A field v does not have is
// an error, as a rule's is (ruleBody), and so is anything after the JSON value: either
// would otherwise be dropped without a word.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var (
		fe *rules.FieldError
		se *json.SyntaxError
		te *json.UnmarshalTypeError
	)
	switch {
	case err == nil:
	case errors.As(err, &fe):
		// A rule's field: writeErr answers it as the rule's own problem.
		return err
	case errors.As(err, &se), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("request body is not valid JSON: %w: %w", err, ErrBadRequest)
	case errors.As(err, &te):
		// Name the field in JSON terms; the Go types in err mean nothing to a client.
		if te.Field == "" {
			return fmt.Errorf("request body must be a JSON object, not a JSON %s: %w", te.Value, ErrBadRequest)
		}
		return fmt.Errorf("request body: %s cannot be a JSON %s: %w", te.Field, te.Value, ErrBadRequest)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no type for this error; its text is documented behaviour.
		return fmt.Errorf("request body: %s: %w", strings.TrimPrefix(err.Error(), "json: "), ErrBadRequest)
	default:
		return fmt.Errorf("request body: %w: %w", err, ErrBadRequest)
	}
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return fmt.Errorf("request body holds more than one JSON value: %w", ErrBadRequest)
	}
	return nil
}

// positive refuses a value of a request field below 1, as the console API refuses a limit
// of 0 or less: what is meant cannot be guessed, so no default is put in its place.
func positive(field, what string, v int64) error {
	if v < 1 {
		return fmt.Errorf("%s: must be a positive %s, not %d: %w", field, what, v, ErrBadRequest)
	}
	return nil
}

// apiError is the body of every error answer.
type apiError struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

// filePosition is a detail of an invalid_file error.
type filePosition struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

// writeErr maps an error to its status and code; unexpected errors are logged, not shown.
func (s *Service) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var (
		inv    *InvalidRulesError
		field  *rules.FieldError
		fe     *rules.FileError
		tooBig *http.MaxBytesError
	)
	switch {
	case errors.As(err, &inv):
		msg := "the rule does not compile"
		if len(inv.Diagnostics) > 0 {
			msg += ": " + inv.Diagnostics[0].String()
		}
		apijson.Write(w, http.StatusBadRequest, apiError{errorBody{"invalid_rule", msg, inv.Diagnostics}})
	case errors.As(err, &field):
		// A field of a rule in the body that cannot be read: answered as the rule's other
		// field problems are (a hold timeout over 24h, say), with the field in the details.
		d := field.Diagnostic()
		apijson.Write(w, http.StatusBadRequest, apiError{errorBody{"invalid_rule", "the rule is not valid: " + d.String(),
			[]rules.Diagnostic{d}}})
	case errors.As(err, &fe):
		apijson.Write(w, http.StatusBadRequest, apiError{errorBody{"invalid_file", fe.Error(),
			[]filePosition{{File: fe.File, Line: fe.Line, Column: fe.Column, Message: fe.Message}}}})
	case errors.Is(err, record.ErrNotFound):
		apijson.Write(w, http.StatusNotFound, apiError{errorBody{Code: "not_found", Message: err.Error()}})
	case errors.Is(err, ErrConflict):
		apijson.Write(w, http.StatusConflict, apiError{errorBody{Code: "conflict", Message: err.Error()}})
	case errors.As(err, &tooBig):
		apijson.Write(w, http.StatusRequestEntityTooLarge, apiError{errorBody{Code: "too_large",
			Message: fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit)}})
	case errors.Is(err, ErrBusy):
		w.Header().Set("Retry-After", "1")
		apijson.Write(w, http.StatusTooManyRequests, apiError{errorBody{Code: "busy", Message: strings.TrimSuffix(err.Error(), ": "+ErrBusy.Error())}})
	case errors.Is(err, ErrTimeout):
		apijson.Write(w, http.StatusServiceUnavailable, apiError{errorBody{Code: "timeout", Message: strings.TrimSuffix(err.Error(), ": "+ErrTimeout.Error())}})
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client left; nobody reads the answer.
		s.log.Debug("rules API request cancelled by its client", "method", r.Method, "path", r.URL.Path)
		apijson.Write(w, http.StatusServiceUnavailable, apiError{errorBody{Code: "cancelled", Message: "the request was cancelled"}})
	case errors.Is(err, ErrBadRequest):
		msg := strings.TrimSuffix(err.Error(), ": "+ErrBadRequest.Error())
		apijson.Write(w, http.StatusBadRequest, apiError{errorBody{Code: "invalid_request", Message: msg}})
	default:
		s.log.Error("rules API request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		apijson.Write(w, http.StatusInternalServerError, apiError{errorBody{Code: "internal",
			Message: "internal error; see the guardian's log"}})
	}
}
