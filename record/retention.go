package record

import "time"

// Retention bounds the step history the database keeps. A zero MaxAge and MaxBytes keep
// everything.
//
// Only steps (with their "step" events) are pruned, oldest first. The audit log, holds,
// rules and their versions, and the other events (holds, rule changes, session controls,
// audit) are kept: they record what operators did and are small next to the steps. A session
// row goes with its last step, unless the session is paused or blocked or has a pending
// hold; a session that keeps some steps keeps its summary as it was (first seen, step count
// and decision tally cover its whole life, which is also what rules see as the session's
// step count). A hold whose step was pruned keeps its seq, which then finds no step.
type Retention struct {
	// MaxAge deletes steps received longer ago than this; 0 keeps steps of any age.
	MaxAge time.Duration
	// MaxBytes bounds the database's used size (SQLite: pages in use, without the WAL;
	// PostgreSQL, which reuses deleted space rather than giving it back: an estimate of the
	// live data, see docs/operations.md). Above it the
	// oldest steps are deleted until the used size is back under nine tenths of it, so that
	// the next passes have room before pruning again; 0 sets no bound.
	MaxBytes int64
	// Interval is the time between background passes (default 5m).
	Interval time.Duration
	// BatchSize is how many steps one write deletes (default 500). Each batch is one short
	// write queued with the agents' writes, so they interleave.
	BatchSize int
}

// Retention defaults.
const (
	DefaultRetentionInterval = 5 * time.Minute
	DefaultPruneBatch        = 500
)

// Enabled reports whether r bounds anything.
func (r Retention) Enabled() bool { return r.MaxAge > 0 || r.MaxBytes > 0 }

// WithDefaults fills the interval and batch size a backend prunes with when r leaves them
// zero.
func (r Retention) WithDefaults() Retention {
	if r.Interval <= 0 {
		r.Interval = DefaultRetentionInterval
	}
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultPruneBatch
	}
	return r
}

// PruneResult says what one Prune pass did.
type PruneResult struct {
	// Steps is the number of steps deleted, with their events.
	Steps int64
	// Sessions is the number of session rows deleted with their last step.
	Sessions int64
	// Batches is the number of deleting writes.
	Batches int
	// UsedBefore and UsedAfter are the database's used bytes around the pass.
	UsedBefore, UsedAfter int64
	// VacuumedPages is the number of free pages returned to the file system; non-zero only
	// when the database uses auto_vacuum=INCREMENTAL.
	VacuumedPages int64
}
