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
	var rule rules.Rule
	if !s.readJSON(w, r, &rule, maxBody) {
		return
	}
	saved, err := s.Create(r.Context(), rule, s.opts.OperatorFrom(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/rules/"+saved.ID)
	apijson.Write(w, http.StatusCreated, s.view(saved))
}

func (s *Service) handleUpdate(w http.ResponseWriter, r *http.Request) {
	var rule rules.Rule
	if !s.readJSON(w, r, &rule, maxBody) {
		return
	}
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

// validateRequest is the body of POST /api/rules/validate: one of rule, when or rules.
type validateRequest struct {
	Rule  *rules.Rule  `json:"rule"`
	When  *string      `json:"when"`
	Rules []rules.Rule `json:"rules"`
}

func (s *Service) handleValidate(w http.ResponseWriter, r *http.Request) {
	var body validateRequest
	if !s.readJSON(w, r, &body, maxFileBody) {
		return
	}
	var diags []rules.Diagnostic
	switch {
	case body.Rule != nil:
		var inv *InvalidRulesError
		if err := validate(*body.Rule); errors.As(err, &inv) {
			diags = inv.Diagnostics
		}
	case body.When != nil:
		diags = rules.ValidateExpr(*body.When)
	case body.Rules != nil:
		var ce rules.CompileErrors
		if _, err := rules.Compile(body.Rules, s.draftOptions()); errors.As(err, &ce) {
			diags = ce
		}
	default:
		s.writeErr(w, r, fmt.Errorf(`give "rule", "when" or "rules": %w`, ErrBadRequest))
		return
	}
	if diags == nil {
		diags = []rules.Diagnostic{}
	}
	apijson.Write(w, http.StatusOK, map[string]any{"ok": len(diags) == 0, "errors": diags})
}

func (s *Service) handleTest(w http.ResponseWriter, r *http.Request) {
	var body TestRequest
	if !s.readJSON(w, r, &body, maxFileBody) {
		return
	}
	res, err := s.Test(r.Context(), body)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	apijson.Write(w, http.StatusOK, res)
}

func (s *Service) handleBacktest(w http.ResponseWriter, r *http.Request) {
	var body BacktestRequest
	if !s.readJSON(w, r, &body, maxFileBody) {
		return
	}
	res, err := s.Backtest(r.Context(), body)
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
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	if err := dec.Decode(v); err != nil {
		s.writeErr(w, r, fmt.Errorf("request body is not valid JSON: %w: %w", err, ErrBadRequest))
		return false
	}
	return true
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
