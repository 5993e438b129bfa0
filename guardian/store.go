package guardian

import (
	"context"
	"time"

	"github.com/vigil-guardian/vigil/record"
)

// Store is what the guardian needs from persistence. storage.DB implements it over SQLite;
// another backend only has to satisfy this interface.
type Store interface {
	// SaveStep stores a step and the matching "step" event, assigns rec.Seq, and returns
	// once the step is durable (storage.DB: in its step journal; concurrent callers share
	// one write). Reads made after it returns see the step.
	SaveStep(ctx context.Context, rec *record.StepRecord) error
	// AppendEvent stores a non-step event (hold, rule, session control), assigns ev.Seq and
	// returns once committed.
	AppendEvent(ctx context.Context, ev *record.Event) error
	Sessions(ctx context.Context, q record.SessionQuery) (record.SessionPage, error)
	Session(ctx context.Context, id string) (record.Session, error)
	Steps(ctx context.Context, q record.StepQuery) ([]record.StepRecord, error)
	Step(ctx context.Context, seq int64) (record.StepRecord, error)
	// RecentSteps returns up to limit of the newest steps of a session, oldest first.
	RecentSteps(ctx context.Context, sessionID string, limit int) ([]record.StepRecord, error)
	// EventsAfter returns events with seq > after in seq order, at most limit.
	EventsAfter(ctx context.Context, after int64, limit int) ([]record.Event, error)
	// Search finds steps by content and attributes, newest first.
	Search(ctx context.Context, q record.SearchQuery) (record.SearchPage, error)
	// Stats summarises recent traffic for GET /api/stats and the live stats ticks.
	Stats(ctx context.Context, now time.Time) (record.Stats, error)
	Close() error
}
