package guardian

import (
	"context"
	"time"

	"github.com/vigil-guardian/vigil/storage"
)

// Store is what the guardian needs from persistence. storage.DB implements it over SQLite;
// another backend only has to satisfy this interface.
type Store interface {
	// SaveStep stores a step and the matching "step" event, assigns rec.Seq, and returns
	// once the step is durable (storage.DB: in its step journal; concurrent callers share
	// one write). Reads made after it returns see the step.
	SaveStep(ctx context.Context, rec *storage.StepRecord) error
	// AppendEvent stores a non-step event (hold, rule, session control), assigns ev.Seq and
	// returns once committed.
	AppendEvent(ctx context.Context, ev *storage.Event) error
	Sessions(ctx context.Context, q storage.SessionQuery) (storage.SessionPage, error)
	Session(ctx context.Context, id string) (storage.Session, error)
	Steps(ctx context.Context, q storage.StepQuery) ([]storage.StepRecord, error)
	Step(ctx context.Context, seq int64) (storage.StepRecord, error)
	// RecentSteps returns up to limit of the newest steps of a session, oldest first.
	RecentSteps(ctx context.Context, sessionID string, limit int) ([]storage.StepRecord, error)
	// EventsAfter returns events with seq > after in seq order, at most limit.
	EventsAfter(ctx context.Context, after int64, limit int) ([]storage.Event, error)
	// Search finds steps by content and attributes, newest first.
	Search(ctx context.Context, q storage.SearchQuery) (storage.SearchPage, error)
	// Stats summarises recent traffic for GET /api/stats and the live stats ticks.
	Stats(ctx context.Context, now time.Time) (storage.Stats, error)
	Close() error
}
