package record

import (
	"time"

	"github.com/vigil-guardian/vigil/rules"
)

// Operations recorded in rule versions and in rule.changed events. Import and revert are
// only version ops: an import, and the undo of a change the engine refused, publish one
// reload event for the whole batch.
const (
	RuleOpCreate  = "create"
	RuleOpUpdate  = "update"
	RuleOpDelete  = "delete"
	RuleOpEnable  = "enable"
	RuleOpDisable = "disable"
	RuleOpRestore = "restore"
	RuleOpReload  = "reload"
	RuleOpImport  = "import"
	RuleOpRevert  = "revert"
)

// RuleVersion is one saved version of a rule. A delete is a version too: its Rule is the
// rule as it was when deleted.
type RuleVersion struct {
	RuleID   string     `json:"ruleId"`
	Version  int        `json:"version"`
	Rule     rules.Rule `json:"rule"`
	SavedAt  time.Time  `json:"savedAt"`
	Operator string     `json:"operator"`
	Op       string     `json:"op"`
}

// RuleChangedPayload is the payload of a rule.changed event.
type RuleChangedPayload struct {
	Op string `json:"op"`
	// Rule is the rule as saved; nil for a delete and for a reload.
	Rule   *rules.Rule `json:"rule"`
	RuleID string      `json:"ruleId"`
	// RuleIDs lists every rule a reload created, changed or deleted.
	RuleIDs []string `json:"ruleIds,omitempty"`
}

// RuleChange is one change of a RuleBatch. Op RuleOpDelete removes Rule.ID (only the id is
// read); any other op saves Rule as the rule's next version.
type RuleChange struct {
	Op   string
	Rule rules.Rule
}

// RuleBatch is a set of rule changes committed in one transaction.
type RuleBatch struct {
	Changes  []RuleChange
	Operator string
	// At is the time recorded as the rules' UpdatedAt and the versions' SavedAt; zero
	// means now.
	At time.Time
	// EventOp, when set, records one rule.changed event with this op (e.g. reload) for
	// the whole batch instead of one event per change.
	EventOp string
}
