package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// ErrNotEmpty is returned by Load for a database that already holds data.
var ErrNotEmpty = errors.New("the PostgreSQL database is not empty")

// Counts are the rows of each kind a database holds (or a Load wrote).
type Counts struct {
	Steps, Events, Sessions, Holds, Audit, Rules, RuleVersions, APIKeys, Users int64
}

// Loader writes another installation's records, keeping their seqs and ids, inside the
// one transaction of Load.
type Loader struct {
	ctx    context.Context
	tx     pgx.Tx
	n      Counts
	maxSeq int64
}

// Load copies an installation into this database in one transaction: fn hands its records
// to the Loader, and Load commits them, sets the seq counter after the highest seq loaded
// and returns what was written. It refuses a database that holds any record (ErrNotEmpty),
// so it never mixes two histories; a failed Load leaves the database empty.
func (db *DB) Load(ctx context.Context, fn func(l *Loader) error) (Counts, error) {
	var l *Loader
	err := db.plainTx(ctx, func(tx pgx.Tx) error {
		// The seq lock keeps this guardian's own writers (and another Load) out meanwhile.
		if _, err := tx.Exec(ctx, `SELECT seq FROM vigil_seq WHERE id = 1 FOR UPDATE`); err != nil {
			return fmt.Errorf("lock seq: %w", err)
		}
		c, err := countRows(ctx, tx)
		if err != nil {
			return err
		}
		if c != (Counts{}) {
			return fmt.Errorf("%w: it holds %s", ErrNotEmpty, c)
		}
		l = &Loader{ctx: ctx, tx: tx}
		if err := fn(l); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE vigil_seq SET seq = greatest(seq, $1) WHERE id = 1`, l.maxSeq); err != nil {
			return fmt.Errorf("set seq: %w", err)
		}
		// New audit entries continue after the loaded ids.
		if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('audit', 'id'),
			coalesce((SELECT max(id) FROM audit), 0) + 1, false)`); err != nil {
			return fmt.Errorf("set audit ids: %w", err)
		}
		got, err := countRows(ctx, tx)
		if err != nil {
			return err
		}
		if got != l.n {
			return fmt.Errorf("storage: load: wrote %s but the tables hold %s", l.n, got)
		}
		return nil
	})
	if err != nil {
		return Counts{}, fmt.Errorf("storage: load: %w", err)
	}
	return l.n, nil
}

// Count returns how many rows of each kind the database holds.
func (db *DB) Count(ctx context.Context) (Counts, error) {
	// Not bounded by QueryTimeout: it counts whole tables, for `vigil migrate`.
	var c Counts
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		c, err = countRows(ctx, tx)
		return err
	})
	return c, err
}

func countRows(ctx context.Context, tx pgx.Tx) (Counts, error) {
	var c Counts
	err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM steps), (SELECT count(*) FROM events),
		(SELECT count(*) FROM sessions), (SELECT count(*) FROM holds), (SELECT count(*) FROM audit),
		(SELECT count(*) FROM rules), (SELECT count(*) FROM rule_versions),
		(SELECT count(*) FROM api_keys), (SELECT count(*) FROM users)`).Scan(&c.Steps, &c.Events,
		&c.Sessions, &c.Holds, &c.Audit, &c.Rules, &c.RuleVersions, &c.APIKeys, &c.Users)
	if err != nil {
		return Counts{}, fmt.Errorf("count rows: %w", err)
	}
	return c, nil
}

func (c Counts) String() string {
	return fmt.Sprintf("%d steps, %d events, %d sessions, %d holds, %d audit entries, %d rules (%d versions), %d API keys, %d users",
		c.Steps, c.Events, c.Sessions, c.Holds, c.Audit, c.Rules, c.RuleVersions, c.APIKeys, c.Users)
}

func (l *Loader) seq(s int64) {
	l.maxSeq = max(l.maxSeq, s)
}

// Steps loads steps with their seqs, and their "step" events. Session summaries are not
// derived from them: load them with Sessions.
func (l *Loader) Steps(steps []record.StepRecord) error {
	if len(steps) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for i := range steps {
		// A SQLite file may hold bytes PostgreSQL text refuses (NUL, invalid UTF-8): they
		// are stored as SaveStep stores them, as U+FFFD, on a copy.
		cp := steps[i]
		rec := &cp
		cleanStep(rec)
		rules, err := json.Marshal(rec.MatchedRules)
		if err != nil {
			return fmt.Errorf("encode matched rules of step %d: %w", rec.Seq, err)
		}
		if rec.MatchedRules == nil {
			rules = []byte("[]")
		}
		var peers stepArgs
		if err := peers.setPeers(rec); err != nil {
			return fmt.Errorf("step %d: %w", rec.Seq, err)
		}
		b.Queue(`INSERT INTO events (seq, type, session_id, at) VALUES ($1, 'step', $2, $3)`,
			rec.Seq, rec.SessionID, rec.ReceivedAt.UnixNano())
		b.Queue(`INSERT INTO steps (seq, session_id, turn_id, step_id, method, kind, agent_id,
			agent_name, user_id, key_id, tool, decision, received_at, request, response,
			matched_rules, latency_micros, text, held, search, peers)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
				to_tsvector('simple', $20), $21)`,
			rec.Seq, rec.SessionID, rec.TurnID, rec.StepID, rec.Method, rec.Kind, rec.AgentID,
			rec.AgentName, rec.UserID, rec.KeyID, rec.Tool, rec.Decision, rec.ReceivedAt.UnixNano(),
			nullText(rec.Request), nullText(rec.Response), string(rules), rec.LatencyMicros,
			rec.Text, rec.Held, searchDoc(rec), peers.peers)
		l.seq(rec.Seq)
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load steps: %w", err)
	}
	l.n.Steps += int64(len(steps))
	l.n.Events += int64(len(steps))
	return nil
}

// Events loads events other than steps' (holds, rule changes, controls, audit, …) with
// their seqs and payloads as stored.
func (l *Loader) Events(events []record.Event) error {
	b := &pgx.Batch{}
	for _, ev := range events {
		if ev.Type == record.EventStep {
			return fmt.Errorf("load event %d: step events come with their steps", ev.Seq)
		}
		b.Queue(`INSERT INTO events (seq, type, session_id, at, payload) VALUES ($1, $2, $3, $4, $5)`,
			ev.Seq, cleanText(ev.Type), cleanText(ev.SessionID), ev.At.UnixNano(), nullText(cleanJSON(ev.Payload)))
		l.seq(ev.Seq)
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load events: %w", err)
	}
	l.n.Events += int64(len(events))
	return nil
}

// Sessions loads session summaries as they are, control, client and server included.
func (l *Loader) Sessions(sessions []record.Session) error {
	b := &pgx.Batch{}
	for _, s := range sessions {
		var client, server record.Peer
		if p := cleanPeer(s.Client); p != nil {
			client = *p
		}
		if p := cleanPeer(s.Server); p != nil {
			server = *p
		}
		for _, f := range []*string{&s.ID, &s.AgentID, &s.KeyID, &s.AgentName, &s.UserID, &s.LastMethod, &s.Control} {
			*f = cleanText(*f)
		}
		dec, err := json.Marshal(s.Decisions)
		if err != nil {
			return fmt.Errorf("encode decisions of session %q: %w", s.ID, err)
		}
		if s.Decisions == nil {
			dec = []byte("{}")
		}
		b.Queue(`INSERT INTO sessions (id, agent_id, key_id, agent_name, user_id, first_seen,
			last_seen, last_seq, steps, last_method, decisions, control,
			client_name, client_version, server_name, server_version)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14, $15, $16)`,
			s.ID, s.AgentID, s.KeyID, s.AgentName, s.UserID, s.FirstSeen.UnixNano(), s.LastSeen.UnixNano(),
			s.LastSeq, s.Steps, s.LastMethod, string(dec), s.Control,
			client.Name, client.Version, server.Name, server.Version)
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load sessions: %w", err)
	}
	l.n.Sessions += int64(len(sessions))
	return nil
}

// Holds loads holds in any status.
func (l *Loader) Holds(holds []record.Hold) error {
	b := &pgx.Batch{}
	for _, h := range holds {
		for _, f := range []*string{&h.ID, &h.SessionID, &h.AgentID, &h.Method, &h.Kind, &h.Tool,
			&h.RuleID, &h.Message, &h.OnTimeout, &h.Status, &h.Decision, &h.DecidedBy, &h.Note} {
			*f = cleanText(*f)
		}
		h.Request, h.Params = cleanJSON(h.Request), cleanJSON(h.Params)
		b.Queue(`INSERT INTO holds (`+holdColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`,
			h.ID, h.Seq, h.SessionID, h.AgentID, h.Method, h.Kind, h.Tool, h.RuleID, h.Message,
			nullText(h.Request), nanos(h.CreatedAt), nanos(h.Deadline), h.OnTimeout, h.Status,
			h.Decision, h.DecidedBy, nanos(h.DecidedAt), h.Note, nullText(h.Params))
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load holds: %w", err)
	}
	l.n.Holds += int64(len(holds))
	return nil
}

// Audit loads audit entries with their ids and seqs (their events come with Events).
func (l *Loader) Audit(entries []record.AuditEntry) error {
	b := &pgx.Batch{}
	for _, e := range entries {
		for _, f := range []*string{&e.Type, &e.Operator, &e.SessionID, &e.HoldID, &e.RuleID, &e.Decision, &e.Note} {
			*f = cleanText(*f)
		}
		e.Diff, e.Detail = cleanJSON(e.Diff), cleanJSON(e.Detail)
		b.Queue(`INSERT INTO audit (id, seq, at, type, operator, session_id, hold_id, rule_id,
			decision, note, diff, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			e.ID, e.Seq, e.At.UnixNano(), e.Type, e.Operator, e.SessionID, e.HoldID, e.RuleID,
			e.Decision, e.Note, nullText(e.Diff), nullText(e.Detail))
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load audit: %w", err)
	}
	l.n.Audit += int64(len(entries))
	return nil
}

// Rules loads the current rules (as ListRules returns them).
func (l *Loader) Rules(rs []rules.Rule) error {
	b := &pgx.Batch{}
	for _, r := range rs {
		js, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode rule %q: %w", r.ID, err)
		}
		b.Queue(`INSERT INTO rules (id, version, enabled, rule, updated_at) VALUES ($1, $2, $3, $4, $5)`,
			r.ID, r.Version, r.Enabled, string(js), r.UpdatedAt.UnixNano())
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load rules: %w", err)
	}
	l.n.Rules += int64(len(rs))
	return nil
}

// RuleVersions loads saved versions of rules, deleted rules' included.
func (l *Loader) RuleVersions(vs []record.RuleVersion) error {
	b := &pgx.Batch{}
	for _, v := range vs {
		js, err := json.Marshal(v.Rule)
		if err != nil {
			return fmt.Errorf("encode rule %q version %d: %w", v.RuleID, v.Version, err)
		}
		b.Queue(`INSERT INTO rule_versions (rule_id, version, rule, saved_at, operator, op)
			VALUES ($1, $2, $3, $4, $5, $6)`, v.RuleID, v.Version, string(js), v.SavedAt.UnixNano(), v.Operator, v.Op)
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load rule versions: %w", err)
	}
	l.n.RuleVersions += int64(len(vs))
	return nil
}

// APIKeys loads agent keys (hashes only, as stored).
func (l *Loader) APIKeys(keys []record.APIKey) error {
	b := &pgx.Batch{}
	for _, k := range keys {
		b.Queue(`INSERT INTO api_keys (`+apiKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			k.ID, k.Name, k.AgentID, k.Hash, k.Prefix, nanos(k.CreatedAt), k.CreatedBy,
			nanos(k.ExpiresAt), nanos(k.RevokedAt), nanos(k.LastUsedAt))
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load api keys: %w", err)
	}
	l.n.APIKeys += int64(len(keys))
	return nil
}

// Users loads operator accounts (bcrypt hashes as stored). Console sign-in sessions are
// not loaded: operators sign in again.
func (l *Loader) Users(users []record.User) error {
	b := &pgx.Batch{}
	for _, u := range users {
		b.Queue(`INSERT INTO users (`+userColumns+`) VALUES ($1, $2, $3, $4, $5)`,
			u.Name, u.Role, string(u.PasswordHash), nanos(u.CreatedAt), nanos(u.UpdatedAt))
	}
	if err := l.tx.SendBatch(l.ctx, b).Close(); err != nil {
		return fmt.Errorf("load users: %w", err)
	}
	l.n.Users += int64(len(users))
	return nil
}
