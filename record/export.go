package record

import "time"

// ExportOptions select what Export writes.
type ExportOptions struct {
	// Steps and Audit choose the record kinds; steps are written first, then audit entries.
	Steps, Audit bool
	// Since keeps steps received, and audit entries made, at or after it; zero keeps all.
	Since time.Time
	// SessionID keeps one session's steps and audit entries when set.
	SessionID string
}

// ExportResult counts the records Export wrote.
type ExportResult struct {
	Steps int64
	Audit int64
}

// Record kinds, the value of the "record" field every exported line starts with.
const (
	RecordStep  = "step"
	RecordAudit = "audit"
)
