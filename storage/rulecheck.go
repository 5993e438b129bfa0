package storage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// CheckRuleChange checks c against the stored rule before (nil: none), as Rules.ApplyRules
// describes: an error when its precondition fails, unchanged when it would store the rule
// as it is. A backend calls it inside its write transaction, under the lock that
// serialises rule writes, so no other writer can change the rule before the transaction
// commits what the check allowed.
func CheckRuleChange(c record.RuleChange, before *rules.Rule) (unchanged bool, err error) {
	id := c.Rule.ID
	switch c.Op {
	case record.RuleOpCreate:
		if before != nil {
			return false, fmt.Errorf("storage: create rule %q: %w", id, record.ErrExists)
		}
		return false, nil
	case record.RuleOpDelete:
		return false, nil // the backend refuses a missing rule as it deletes
	case record.RuleOpUpdate, record.RuleOpEnable, record.RuleOpDisable:
		if before == nil {
			return false, fmt.Errorf("storage: %s rule %q: %w", c.Op, id, record.ErrNotFound)
		}
		if c.Rule.Version != 0 && c.Rule.Version != before.Version {
			return false, &StaleRuleError{ID: id, Stored: before.Version, Expected: c.Rule.Version}
		}
	}
	if before == nil {
		return false, nil
	}
	from, err := RuleContent(before)
	if err != nil {
		return false, fmt.Errorf("storage: rule %q: %w", id, err)
	}
	to, err := RuleContent(&c.Rule)
	if err != nil {
		return false, fmt.Errorf("storage: rule %q: %w", id, err)
	}
	return bytes.Equal(from, to), nil
}

// RuleContent is what a rule change changes: the rule without its version and save time,
// with its expiry in UTC (stored rules have it so; a caller may send another zone).
func RuleContent(r *rules.Rule) (json.RawMessage, error) {
	if r == nil {
		return json.RawMessage("null"), nil
	}
	c := *r
	c.Version, c.UpdatedAt = 0, time.Time{}
	if c.ExpiresAt != nil {
		e := c.ExpiresAt.UTC()
		c.ExpiresAt = &e
	}
	return json.Marshal(c)
}
