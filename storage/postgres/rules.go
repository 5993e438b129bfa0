package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/jsonpatch"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// AuditRulePrefix starts the audit type of a rule change ("rule." + op).
const AuditRulePrefix = "rule."

// ListRules returns every rule by id.
func (db *DB) ListRules(ctx context.Context) (_ []rules.Rule, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	rows, err := db.pool.Query(ctx, `SELECT id, version, rule, updated_at FROM rules ORDER BY id`)
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

// GetRule returns one rule, or ErrNotFound.
func (db *DB) GetRule(ctx context.Context, id string) (_ rules.Rule, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	r, err := storage.ScanRule(db.pool.QueryRow(ctx, `SELECT id, version, rule, updated_at FROM rules WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return rules.Rule{}, fmt.Errorf("storage: rule %q: %w", id, record.ErrNotFound)
	}
	if err != nil {
		return rules.Rule{}, fmt.Errorf("storage: rule %q: %w", id, err)
	}
	return r, nil
}

// RuleVersions returns every version of a rule, newest first; ErrNotFound when it never
// existed.
func (db *DB) RuleVersions(ctx context.Context, id string) (_ []record.RuleVersion, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	rows, err := db.pool.Query(ctx, `SELECT version, rule, saved_at, operator, op
		FROM rule_versions WHERE rule_id = $1 ORDER BY version DESC`, id)
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
func (db *DB) RuleVersion(ctx context.Context, id string, version int) (_ record.RuleVersion, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	v, err := storage.ScanRuleVersion(db.pool.QueryRow(ctx, `SELECT version, rule, saved_at, operator, op
		FROM rule_versions WHERE rule_id = $1 AND version = $2`, id, version), id)
	if errors.Is(err, pgx.ErrNoRows) {
		return record.RuleVersion{}, fmt.Errorf("storage: rule %q version %d: %w", id, version, record.ErrNotFound)
	}
	if err != nil {
		return record.RuleVersion{}, fmt.Errorf("storage: rule %q version %d: %w", id, version, err)
	}
	return v, nil
}

// ApplyRules commits several rule changes, their versions, events and audit entries in one
// transaction, and returns the rules as saved and the events in seq order: one
// rule.changed event per change (or one for the batch when b.EventOp is set), then one
// audit entry per change. Each change's precondition (storage.Rules) is checked in that
// transaction after it has taken the seq lock, which every rule write takes first: the
// rule read there is the newest any replica committed, and stays so until this commits.
func (db *DB) ApplyRules(ctx context.Context, b record.RuleBatch) (_ []rules.Rule, _ []record.Event, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
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
		r := c.Rule
		if r.ExpiresAt != nil {
			e := r.ExpiresAt.UTC()
			r.ExpiresAt = &e
		}
		changes[i] = record.RuleChange{Op: c.Op, Rule: r}
	}
	var (
		saved  []rules.Rule
		events []record.Event
	)
	err = db.writeTx(ctx, func(t *seqTx) error {
		saved, events = make([]rules.Rule, 0, len(changes)), make([]record.Event, 0, 2*len(changes))
		ids := make([]string, 0, len(changes))
		audits := make([]ruleAudit, 0, len(changes))
		for _, c := range changes {
			before, err := currentRule(t, c.Rule.ID)
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
			r, err := applyRuleChange(t, c, b.Operator, at)
			if err != nil {
				return err
			}
			saved = append(saved, r)
			ids = append(ids, r.ID)
			audits = append(audits, ruleAudit{op: c.Op, before: before, after: r})
			if b.EventOp != "" {
				continue
			}
			p := record.RuleChangedPayload{Op: c.Op, RuleID: r.ID}
			if c.Op != record.RuleOpDelete {
				p.Rule = &r
			}
			ev, err := ruleEvent(t, p, at)
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		if b.EventOp != "" && len(ids) > 0 {
			ev, err := ruleEvent(t, record.RuleChangedPayload{Op: b.EventOp, RuleIDs: ids}, at)
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		for _, a := range audits {
			ev, err := ruleAuditTx(t, a, b.Operator, at)
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

func currentRule(t *seqTx, id string) (*rules.Rule, error) {
	r, err := storage.ScanRule(t.QueryRow(t.ctx, `SELECT id, version, rule, updated_at FROM rules WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage: rule %q: %w", id, err)
	}
	return &r, nil
}

type ruleAudit struct {
	op     string
	before *rules.Rule
	after  rules.Rule
}

// ruleAuditTx writes the audit entry of one rule change: its diff as a JSON Patch of the
// rule's content (without version and time) and the new version in its detail.
func ruleAuditTx(t *seqTx, a ruleAudit, operator string, at time.Time) (record.Event, error) {
	from, err := storage.RuleContent(a.before)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", a.after.ID, err)
	}
	to := json.RawMessage("null")
	if a.op != record.RuleOpDelete {
		if to, err = storage.RuleContent(&a.after); err != nil {
			return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", a.after.ID, err)
		}
	}
	ops, err := jsonpatch.Diff(from, to)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", a.after.ID, err)
	}
	diff, err := json.Marshal(ops)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", a.after.ID, err)
	}
	detail, err := json.Marshal(map[string]any{"version": a.after.Version})
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: audit rule %q: %w", a.after.ID, err)
	}
	return appendAudit(t, &auditArgs{entry: record.AuditEntry{Type: AuditRulePrefix + a.op, Operator: operator,
		RuleID: a.after.ID, At: at, Diff: diff, Detail: detail}})
}

// applyRuleChange saves one change as the rule's next version (numbering continues across
// deletes) and returns the rule as saved; a delete of an unknown rule is ErrNotFound.
func applyRuleChange(t *seqTx, c record.RuleChange, operator string, at time.Time) (rules.Rule, error) {
	ctx, id := t.ctx, c.Rule.ID
	var prev int
	if err := t.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM rule_versions WHERE rule_id = $1`, id).Scan(&prev); err != nil {
		return rules.Rule{}, fmt.Errorf("storage: rule %q: read version: %w", id, err)
	}
	r := c.Rule
	if c.Op == record.RuleOpDelete {
		cur, err := storage.ScanRule(t.QueryRow(ctx, `DELETE FROM rules WHERE id = $1 RETURNING id, version, rule, updated_at`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return rules.Rule{}, fmt.Errorf("storage: delete rule %q: %w", id, record.ErrNotFound)
		}
		if err != nil {
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
		if _, err := t.Exec(ctx, `INSERT INTO rules (id, version, enabled, rule, updated_at)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO UPDATE SET version = excluded.version, enabled = excluded.enabled,
				rule = excluded.rule, updated_at = excluded.updated_at`,
			id, r.Version, r.Enabled, string(js), at.UnixNano()); err != nil {
			return rules.Rule{}, fmt.Errorf("storage: save rule %q: %w", id, err)
		}
	}
	if _, err := t.Exec(ctx, `INSERT INTO rule_versions (rule_id, version, rule, saved_at, operator, op)
		VALUES ($1, $2, $3, $4, $5, $6)`, id, r.Version, string(js), at.UnixNano(), operator, c.Op); err != nil {
		return rules.Rule{}, fmt.Errorf("storage: record version %d of rule %q: %w", r.Version, id, err)
	}
	return r, nil
}

func ruleEvent(t *seqTx, p record.RuleChangedPayload, at time.Time) (record.Event, error) {
	js, err := json.Marshal(p)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: encode rule event: %w", err)
	}
	ev, err := t.event(record.EventRuleChanged, "", at, js)
	if err != nil {
		return record.Event{}, fmt.Errorf("storage: %w", err)
	}
	return ev, nil
}
