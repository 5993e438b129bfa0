package compare

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/vigil-guardian/vigil/guardian/apijson"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Store is what a comparison reads; every storage backend implements it.
type Store interface {
	Session(ctx context.Context, id string) (record.Session, error)
	// Steps pages through a session's steps in seq order (at most 1000 a page).
	Steps(ctx context.Context, q record.StepQuery) ([]record.StepRecord, error)
}

// Side describes one of the two sessions.
type Side struct {
	Session record.Session `json:"session"`
	// Steps is how many of its steps were compared; Truncated says the session has more
	// than MaxSteps (or than fit in MaxBytes) and the rest was left out.
	Steps     int  `json:"steps"`
	Truncated bool `json:"truncated"`
}

// Result is the answer of GET /api/compare.
type Result struct {
	A       Side    `json:"a"`
	B       Side    `json:"b"`
	Rows    []Row   `json:"rows"`
	Summary Summary `json:"summary"`
	// MaxSteps is the per-side bound, so a client can say what "truncated" means.
	MaxSteps      int   `json:"maxSteps"`
	ElapsedMicros int64 `json:"elapsedMicros"`
}

// Service answers comparisons. At most MaxRunning run at once (each can hold two sides of
// MaxSteps steps and an alignment table); a further one is refused with 429.
type Service struct {
	store Store
	log   *slog.Logger
	sem   chan struct{}
	// maxBytes is MaxBytes (a field so that tests can cut with small steps).
	maxBytes int
}

// MaxRunning is how many comparisons run at once.
const MaxRunning = 2

// New builds the service.
func New(store Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, log: log, sem: make(chan struct{}, MaxRunning), maxBytes: MaxBytes}
}

// Register mounts GET /api/compare?a=SESSION&b=SESSION.
func (s *Service) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/compare", s.handle)
}

// maxIDBytes bounds a session id in the query.
const maxIDBytes = 1024

func (s *Service) handle(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a, b := q.Get("a"), q.Get("b")
	for name, v := range map[string]string{"a": a, "b": b} {
		if v == "" || len(v) > maxIDBytes {
			apijson.Error(w, http.StatusBadRequest, "invalid_argument",
				fmt.Sprintf("%s: the id of a session is required (at most %d bytes)", name, maxIDBytes))
			return
		}
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		w.Header().Set("Retry-After", "1")
		apijson.Error(w, http.StatusTooManyRequests, "busy", fmt.Sprintf("%d comparisons are already running; try again shortly", MaxRunning))
		return
	}
	res, err := s.Compare(r.Context(), a, b)
	if err != nil {
		if errors.Is(err, record.ErrNotFound) {
			apijson.Error(w, http.StatusNotFound, "not_found", err.Error())
			return
		}
		if r.Context().Err() == nil {
			s.log.Error("compare sessions", "a", a, "b", b, "err", err)
		}
		apijson.Error(w, http.StatusInternalServerError, "internal", "internal error")
		return
	}
	apijson.Write(w, http.StatusOK, res)
}

// Compare aligns the first MaxSteps steps of sessions a and b.
func (s *Service) Compare(ctx context.Context, a, b string) (Result, error) {
	start := time.Now()
	sa, err := s.side(ctx, "a", a)
	if err != nil {
		return Result{}, err
	}
	sb, err := s.side(ctx, "b", b)
	if err != nil {
		return Result{}, err
	}
	rows, sum := Align(sa.steps, sb.steps)
	return Result{A: sa.Side, B: sb.Side, Rows: rows, Summary: sum, MaxSteps: MaxSteps,
		ElapsedMicros: time.Since(start).Microseconds()}, nil
}

type loaded struct {
	Side
	steps []record.StepRecord
}

// notFound is a side's missing session, said as the console shows it (the storage
// error's chain is for the logs).
type notFound struct{ side, id string }

func (e *notFound) Error() string { return fmt.Sprintf("%s: no session %q", e.side, e.id) }
func (e *notFound) Unwrap() error { return record.ErrNotFound }

func (s *Service) side(ctx context.Context, name, id string) (loaded, error) {
	sess, err := s.store.Session(ctx, id)
	if errors.Is(err, record.ErrNotFound) {
		return loaded{}, &notFound{name, id}
	}
	if err != nil {
		return loaded{}, fmt.Errorf("compare: %w", err)
	}
	var steps []record.StepRecord
	after, size := int64(0), 0
	out := loaded{Side: Side{Session: sess}}
	for len(steps) <= MaxSteps {
		// One more than MaxSteps tells a cut-off session from one of exactly MaxSteps; past
		// MaxBytes, one more step tells it from one that ended there.
		limit, maxBytes := min(1000, MaxSteps+1-len(steps)), s.maxBytes-size
		if maxBytes <= 0 {
			limit, maxBytes = 1, 1
		}
		page, err := s.store.Steps(ctx, record.StepQuery{SessionID: id, After: after, Limit: limit, MaxBytes: maxBytes})
		if err != nil {
			return loaded{}, fmt.Errorf("compare: %w", err)
		}
		if size >= s.maxBytes {
			out.Truncated = len(page) > 0
			break
		}
		steps = append(steps, page...)
		for i := range page {
			size += storage.StepBytes(&page[i])
		}
		if len(page) == 0 || len(page) < limit && size < s.maxBytes || len(steps) > MaxSteps {
			break
		}
		after = page[len(page)-1].Seq
	}
	if len(steps) > MaxSteps {
		steps, out.Truncated = steps[:MaxSteps], true
	}
	out.steps, out.Steps = steps, len(steps)
	return out, nil
}
