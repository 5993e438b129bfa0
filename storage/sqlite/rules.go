package sqlite

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"

	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vigil-guardian/vigil/jsonpatch"
	"github.com/vigil-guardian/vigil/rules"
)

// ListRules returns the current rules ordered by id.
func (db *DB) ListRules(ctx context.Context) ([]rules.Rule, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT id, version, rule, updated_at FROM rules ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("storage: list rules: %w", err)
	}
	defer rows.Close()
	out, err := storage.Collect(rows, []rules.Rule{}, storage.ScanRule)
	if err != nil {
		return nil, fmt.Errorf("storage: list rules: %w", err)
	}
	return out, nil
}

// GetRule returns the current rule with the given id, or ErrNotFound.
func (db *DB) GetRule(ctx context.Context, id string) (rules.Rule, error) {
	r, err := storage.ScanRule(db.r.QueryRowContext(ctx,
		`SELECT id, version, rule, updated_at FROM rules WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return rules.Rule{}, fmt.Errorf("storage: rule %q: %w", id, record.ErrNotFound)
	}
	if err != nil {
		return rules.Rule{}, fmt.Errorf("storage: rule %q: %w", id, err)
	}
	return r, nil
}

// RuleVersions returns every version of a rule, newest first, including the versions of a
// deleted rule. A rule that never existed is ErrNotFound.
func (db *DB) RuleVersions(ctx context.Context, id string) ([]record.RuleVersion, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT version, rule, saved_at, operator, op
		FROM rule_versions WHERE rule_id = ? ORDER BY version DESC`, id)
	if err != nil {
		return nil, fmt.Errorf("storage: versions of rule %q: %w", id, err)
	}
	defer rows.Close()
	out, err := storage.Collect(rows, nil, func(sc storage.Scanner) (record.RuleVersion, error) { return storage.ScanRuleVersion(sc, id) })
	if err != nil {
		return nil, fmt.Errorf("storage: versions of rule %q: %w", id, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("storage: versions of rule %q: %w", id, record.ErrNotFound)
	}
	return out, nil
}

// RuleVersion returns one version of a rule, or ErrNotFound.
func (db *DB) RuleVersion(ctx context.Context, id string, version int) (record.RuleVersion, error) {
	v, err := storage.ScanRuleVersion(db.r.QueryRowContext(ctx, `SELECT version, rule, saved_at, operator, op
		FROM rule_versions WHERE rule_id = ? AND version = ?`, id, version), id)
	if errors.Is(err, sql.ErrNoRows) {
		return record.RuleVersion{}, fmt.Errorf("storage: rule %q version %d: %w", id, version, record.ErrNotFound)
	}
	if err != nil {
		return record.RuleVersion{}, fmt.Errorf("storage: rule %q version %d: %w", id, version, err)
	}
	return v, nil
}

// SaveRule stores r as the next version of rule r.ID (creating the rule when it does not
// exist), records the version with operator and op, and appends a rule.changed event in the
// same transaction. It returns the rule as stored (Version = previous version + 1,
// UpdatedAt = r.UpdatedAt when set, else now) and the event, whose Seq is assigned.
func (db *DB) SaveRule(ctx context.Context, r rules.Rule, operator, op string) (rules.Rule, record.Event, error) {
	saved, events, err := db.ApplyRules(ctx, record.RuleBatch{
		Changes:  []record.RuleChange{{Op: op, Rule: r}},
		Operator: operator,
		At:       r.UpdatedAt,
	})
	if err != nil {
		return rules.Rule{}, record.Event{}, err
	}
	return saved[0], events[0], nil
}

// DeleteRule removes rule id, keeping its versions and recording the delete as a version,
// and appends a rule.changed event. It returns the rule as it was (with the delete's version
// number) and the event; ErrNotFound when there is no such rule.
func (db *DB) DeleteRule(ctx context.Context, id, operator string, at time.Time) (rules.Rule, record.Event, error) {
	saved, events, err := db.ApplyRules(ctx, record.RuleBatch{
		Changes:  []record.RuleChange{{Op: record.RuleOpDelete, Rule: rules.Rule{ID: id}}},
		Operator: operator,
		At:       at,
	})
	if err != nil {
		return rules.Rule{}, record.Event{}, err
	}
	return saved[0], events[0], nil
}

// ApplyRules commits the changes of b in one transaction, all or none, together with their
// rule.changed events. It returns, for each change in order, the rule as stored (for a
// delete: the rule as it was, numbered with the delete's version), and the events written.
// A delete of a rule that does not exist fails the batch with ErrNotFound. Each change's
// precondition (storage.Rules) is checked inside the transaction: it begins immediate, so
// it holds the database's write lock from the start (against a process beside this one as
// well as this process's other writes), and the rule read there stays the stored one until
// this commits.
func (db *DB) ApplyRules(ctx context.Context, b record.RuleBatch) ([]rules.Rule, []record.Event, error) {
	if len(b.Changes) == 0 {
		return nil, nil, errors.New("storage: empty rule batch")
	}
	at := b.At
	if at.IsZero() {
		at = time.Now()
	}
	at = time.Unix(0, at.UnixNano()).UTC()
	changes := make([]record.RuleChange, len(b.Changes))
	for i, c := range b.Changes {
		switch {
		case c.Rule.ID == "":
			return nil, nil, fmt.Errorf("storage: rule change %d has no rule id", i)
		case c.Op == "":
			return nil, nil, fmt.Errorf("storage: rule change %d (%q) has no op", i, c.Rule.ID)
		}
		changes[i] = record.RuleChange{Op: c.Op, Rule: canonicalRule(c.Rule)}
	}
	operator, eventOp := b.Operator, b.EventOp

	var (
		saved  []rules.Rule
		events []record.Event
	)
	err := db.Exec(ctx, func(tx *sql.Tx) error {
		saved, events = make([]rules.Rule, 0, len(changes)), make([]record.Event, 0, 2*len(changes))
		ids := make([]string, 0, len(changes))
		audits := make([]ruleAudit, 0, len(changes))
		for _, c := range changes {
			before, err := currentRule(tx, c.Rule.ID)
			if err != nil {
				return err
			}
			unchanged, err := storage.CheckRuleChange(c, before)
			if err != nil {
				return err
			}
			if unchanged {
				saved = append(saved, *before)
				continue
			}
			r, err := applyRuleChange(tx, c, operator, at)
			if err != nil {
				return err
			}
			saved = append(saved, r)
			ids = append(ids, r.ID)
			audits = append(audits, ruleAudit{op: c.Op, before: before, after: r})
			if eventOp != "" {
				continue
			}
			p := record.RuleChangedPayload{Op: c.Op, RuleID: r.ID}
			if c.Op != record.RuleOpDelete {
				p.Rule = &r
			}
			ev, err := db.ruleEvent(tx, p, at)
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		if eventOp != "" && len(ids) > 0 {
			ev, err := db.ruleEvent(tx, record.RuleChangedPayload{Op: eventOp, RuleIDs: ids}, at)
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		// The audit entries follow the changes they record.
		for _, a := range audits {
			ev, err := db.ruleAuditTx(tx, a, operator, at)
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return saved, events, nil
}

// currentRule is rule id as stored now, nil when there is none.
func currentRule(tx *sql.Tx, id string) (*rules.Rule, error) {
	r, err := storage.ScanRule(tx.QueryRow(`SELECT id, version, rule, updated_at FROM rules WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage: rule %q: %w", id, err)
	}
	return &r, nil
}

// ruleAudit is one rule change to audit: its op and the rule before (nil: none) and after.
type ruleAudit struct {
	op     string
	before *rules.Rule
	after  rules.Rule
}

// AuditRulePrefix starts the audit type of every rule change: "rule.create", "rule.update",
// "rule.delete", "rule.enable", "rule.disable", "rule.restore", "rule.import" (a rule an
// import or the rules file, read at start, on SIGHUP or by POST /api/rules/reload, created
// or changed) and "rule.revert". "reload" is only a batch's live event op, never an audit type.
const AuditRulePrefix = "rule."

// ruleAuditTx writes the audit entry of one rule change inside its transaction: who, the
// version it made, and the change as a JSON Patch from the rule before to the rule after
// (a create patches from null, a delete to null; versions and times are left out).
func (db *DB) ruleAuditTx(tx *sql.Tx, a ruleAudit, operator string, at time.Time) (record.Event, error) {
	op, before, after := a.op, a.before, a.after
	from, err := storage.RuleContent(before)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", after.ID, err)
	}
	var to json.RawMessage
	if op == record.RuleOpDelete {
		to = json.RawMessage("null")
	} else if to, err = storage.RuleContent(&after); err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", after.ID, err)
	}
	ops, err := jsonpatch.Diff(from, to)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", after.ID, err)
	}
	diff, err := json.Marshal(ops)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", after.ID, err)
	}
	detail, err := json.Marshal(map[string]any{"version": after.Version})
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", after.ID, err)
	}
	return db.appendAuditTx(tx, &auditArgs{entry: record.AuditEntry{Type: AuditRulePrefix + op, Operator: operator,
		RuleID: after.ID, At: holdTime(at), Diff: diff, Detail: detail}})
}

// canonicalRule copies r with its expiry in UTC, so equal rules store equal JSON.
func canonicalRule(r rules.Rule) rules.Rule {
	if r.ExpiresAt != nil {
		e := r.ExpiresAt.UTC()
		r.ExpiresAt = &e
	}
	return r
}

// applyRuleChange writes one change inside tx and returns the rule as recorded.
func applyRuleChange(tx *sql.Tx, c record.RuleChange, operator string, at time.Time) (rules.Rule, error) {
	id := c.Rule.ID
	var prev int
	if err := tx.QueryRow(`SELECT coalesce(max(version), 0) FROM rule_versions WHERE rule_id = ?`,
		id).Scan(&prev); err != nil {
		return rules.Rule{}, fmt.Errorf("storage: rule %q: read version: %w", id, err)
	}
	r := c.Rule
	if c.Op == record.RuleOpDelete {
		cur, err := storage.ScanRule(tx.QueryRow(`SELECT id, version, rule, updated_at FROM rules WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return rules.Rule{}, fmt.Errorf("storage: delete rule %q: %w", id, record.ErrNotFound)
		}
		if err != nil {
			return rules.Rule{}, fmt.Errorf("storage: delete rule %q: %w", id, err)
		}
		if _, err := tx.Exec(`DELETE FROM rules WHERE id = ?`, id); err != nil {
			return rules.Rule{}, fmt.Errorf("storage: delete rule %q: %w", id, err)
		}
		r = cur
	}
	r.Version, r.UpdatedAt = prev+1, at
	js, err := json.Marshal(r)
	if err != nil {
		return rules.Rule{}, fmt.Errorf("storage: encode rule %q: %w", id, err)
	}
	if c.Op != record.RuleOpDelete {
		if _, err := tx.Exec(`INSERT INTO rules (id, version, enabled, rule, updated_at)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET version = excluded.version,
				enabled = excluded.enabled, rule = excluded.rule, updated_at = excluded.updated_at`,
			id, r.Version, r.Enabled, string(js), at.UnixNano()); err != nil {
			return rules.Rule{}, fmt.Errorf("storage: save rule %q: %w", id, err)
		}
	}
	if _, err := tx.Exec(`INSERT INTO rule_versions (rule_id, version, rule, saved_at, operator, op)
		VALUES (?, ?, ?, ?, ?, ?)`, id, r.Version, string(js), at.UnixNano(), operator, c.Op); err != nil {
		return rules.Rule{}, fmt.Errorf("storage: record version %d of rule %q: %w", r.Version, id, err)
	}
	return r, nil
}

func (db *DB) ruleEvent(tx *sql.Tx, p record.RuleChangedPayload, at time.Time) (record.Event, error) {
	js, err := json.Marshal(p)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: encode rule event: %w", err)
	}
	return db.eventTx(tx, record.EventRuleChanged, "", at, js)
}

// SessionStepsBefore returns the newest steps of one session with seq < before, at most
// limit (clamped to 1..1000, default 200), oldest first, as RecentSteps returns them: the
// history a stored step had.
func (db *DB) SessionStepsBefore(ctx context.Context, sessionID string, before int64, limit int) ([]record.StepRecord, error) {
	limit = storage.ClampLimit(limit, 200, 1000)
	if before <= 0 {
		before = math.MaxInt64
	}
	if err := db.flushSession(ctx, sessionID); err != nil {
		return nil, fmt.Errorf("storage: steps of session %q before %d: %w", sessionID, before, err)
	}
	rows, err := db.r.QueryContext(ctx, `SELECT `+historyColumns+` FROM steps
		WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?`, sessionID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: steps of session %q before %d: %w", sessionID, before, err)
	}
	steps, err := collectSteps(rows, limit, 0)
	if err != nil {
		return nil, fmt.Errorf("storage: steps of session %q before %d: %w", sessionID, before, err)
	}
	slices.Reverse(steps)
	return steps, nil
}
