package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// Session summaries are written behind their steps. A session's row sits in the sessions
// table and in its recency index at a place of its own, so a transaction that stores steps
// of thousands of sessions (each taking a step a second, say) rewrites thousands of pages
// for their summaries: with 20 000 sessions that was most of what a stored step cost beyond
// what it costs with 100. The writer therefore keeps what a session's stored steps still owe
// its row (a SessionDelta) and writes it summaryDelay after the oldest of them was stored,
// together with everything the session took meanwhile, or earlier when
//   - a reader needs every row whole (Flush: the session list, the statistics, a copy),
//   - a write may change rows (retention), or the DB closes,
//   - more than maxOwed sessions owe theirs (the oldest go first).
//
// Reads of one session (Session) add what it owes to its row. After a crash, the rows are
// made whole at the next start from the stored steps: summary_mark holds a seq at or below
// every step not counted in its row, and a step past it is counted exactly when its seq is
// above its session's last_seq, because a row always takes every step it owes at once.

const (
	// summaryDelay is how long a stored step may wait for its session's row, by default.
	summaryDelay = 5 * time.Second
	// maxOwed bounds the sessions whose rows wait (a delta is a few hundred bytes).
	maxOwed = 1 << 16
)

// owedSummary is what a session's stored steps owe its row.
type owedSummary struct {
	d storage.SessionDelta
	// first is the seq of the oldest step it holds; since when that step was stored.
	first      int64
	since      time.Time
	prev, next *owedSummary
}

// owedSummaries are the writer's owed rows, oldest first. Only the writer changes them, under
// mu, which readers take to look one up.
type owedSummaries struct {
	mu         sync.Mutex
	byID       map[string]*owedSummary
	head, tail *owedSummary
	// n is len(byID), for callers that need not take mu to learn that none is owed.
	n atomic.Int64
	// delay is Options.SummaryDelay: a row waits this long; at or below 0 it is written
	// with its steps.
	delay time.Duration
	// max is how many sessions may owe their rows (maxOwed; tests lower it).
	max int
	// mark is summary_mark.seq as committed; high the newest seq stored (writer only).
	mark, high int64
}

// txDelta is one session's steps in a transaction, and the seq of the oldest.
type txDelta struct {
	d     storage.SessionDelta
	first int64
}

// summaryPlan is what a transaction does to the owed rows, applied once it has committed.
type summaryPlan struct {
	written []*owedSummary // owed rows the transaction wrote (a prefix of the list)
	fresh   []*txDelta     // sessions whose steps in it are owed from now on
	mark    int64
	high    int64
}

// lookup returns a copy of what session id owes its row, if anything.
func (o *owedSummaries) lookup(id string) (storage.SessionDelta, bool) {
	if o.n.Load() == 0 {
		return storage.SessionDelta{}, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.byID[id]
	if e == nil {
		return storage.SessionDelta{}, false
	}
	d := e.d
	d.Decisions = slices.Clone(e.d.Decisions)
	return d, true
}

// due reports when the oldest owed row is to be written; false when none is owed.
func (o *owedSummaries) due() (time.Time, bool) {
	if o.head == nil {
		return time.Time{}, false
	}
	return o.head.since.Add(o.delay), true
}

// write writes, in the writer's transaction b, the owed rows that are due (all of them when
// all is set) and the summaries of the transaction's steps that cannot wait; it returns
// what to change in the owed rows once b commits. deltas are in the order of their first
// seq; high is the newest seq the transaction stores.
func (o *owedSummaries) write(b *batchTx, deltas []*txDelta, high int64, all bool, now time.Time) (*summaryPlan, error) {
	p := &summaryPlan{high: max(o.high, high)}
	if o.delay <= 0 {
		all = true
	}
	inTx := make(map[string]*txDelta, len(deltas))
	for _, t := range deltas {
		inTx[t.d.ID] = t
	}
	owed := len(o.byID)
	// rest ends as the first owed row not written now (nil when all are).
	rest := o.head
	for ; rest != nil; rest = rest.next {
		if !all && now.Sub(rest.since) < o.delay && owed-len(p.written) <= o.max {
			break // the rest is newer
		}
		d := rest.d
		d.Decisions = slices.Clone(rest.d.Decisions) // rest is left as it is should b fail
		if t := inTx[d.ID]; t != nil {
			d.Merge(&t.d)
			delete(inTx, d.ID)
		}
		if err := applyDelta(b, &d); err != nil {
			return nil, err
		}
		p.written = append(p.written, rest)
	}
	for _, t := range deltas {
		if inTx[t.d.ID] == nil {
			continue // written with what its session owed
		}
		if all {
			if err := applyDelta(b, &t.d); err != nil {
				return nil, err
			}
			continue
		}
		p.fresh = append(p.fresh, t)
	}
	// Every step at or below the mark is counted in its row: the oldest still owed is the
	// first owed row not written now, or else the first of this transaction's.
	p.mark = p.high
	if rest != nil {
		p.mark = rest.first - 1
	} else if len(p.fresh) > 0 {
		p.mark = p.fresh[0].first - 1
	}
	if p.mark != o.mark {
		if _, err := b.stmt(b.stmts.setSummaryMark).Exec(p.mark); err != nil {
			return nil, fmt.Errorf("storage: set summary mark: %w", err)
		}
	}
	return p, nil
}

// apply records what a committed transaction did (p from write).
func (o *owedSummaries) apply(p *summaryPlan, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range p.written {
		o.unlink(e)
		delete(o.byID, e.d.ID)
	}
	for _, t := range p.fresh {
		// The delta's strings may point into its steps' requests: the owed row keeps copies.
		c := t.d.Clone()
		if e := o.byID[c.ID]; e != nil {
			e.d.Merge(&c)
			continue
		}
		e := &owedSummary{d: c, first: t.first, since: now, prev: o.tail}
		if o.tail != nil {
			o.tail.next = e
		} else {
			o.head = e
		}
		o.tail = e
		o.byID[c.ID] = e
	}
	o.mark, o.high = p.mark, p.high
	o.n.Store(int64(len(o.byID)))
}

func (o *owedSummaries) unlink(e *owedSummary) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		o.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		o.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

const sqlSetSummaryMark = `UPDATE summary_mark SET seq = ? WHERE id = 1`

// summariesTx writes, in the writer's transaction b, the summaries of deltas as it must
// (see owedSummaries.write), setting aside the plan to apply once b commits.
func (db *DB) summariesTx(b *batchTx, deltas []*txDelta, high int64, all bool) error {
	p, err := db.owed.write(b, deltas, high, all, time.Now())
	if err != nil {
		return err
	}
	b.plan = p
	return nil
}

// summariesCommitted applies the plan of b, which has committed.
func (db *DB) summariesCommitted(b *batchTx) {
	if b.plan != nil {
		db.owed.apply(b.plan, time.Now())
		b.plan = nil
	}
}

// withOwed is s (the zero Session for one without a row yet) with d, what its session's
// stored steps still owe its row. d was read before s: a row written since then counts it
// already (its last_seq is past the owed steps), one not written yet does not.
func withOwed(s record.Session, d *storage.SessionDelta) record.Session {
	if s.ID == "" || s.LastSeq < d.LastSeq {
		d.ApplyTo(&s)
	}
	return s
}

// applyDeltas writes the summaries of deltas, in b, as they are.
func applyDeltas(b *batchTx, deltas []*txDelta) error {
	for _, t := range deltas {
		if err := applyDelta(b, &t.d); err != nil {
			return err
		}
	}
	return nil
}

// recoverSummaries runs at Open, before the writer starts: it counts in their rows the
// stored steps a crash left uncounted (see the comment at the top of this file) and sets
// the mark to the newest seq.
func (db *DB) recoverSummaries(ctx context.Context) error {
	// Nothing is written when nothing needs to be: a database that refuses writes still
	// opens for reading. One a crash left behind (summaries to catch up, like journaled
	// steps to replay) does not: Open fails naming why it may not write.
	var mark, high int64
	var behind bool
	if err := db.w.QueryRowContext(ctx, `SELECT m.seq, (SELECT coalesce(max(seq), 0) FROM events),
		EXISTS (SELECT 1 FROM steps st LEFT JOIN sessions s ON s.id = st.session_id
			WHERE st.seq > m.seq AND st.seq > coalesce(s.last_seq, 0))
		FROM summary_mark m WHERE m.id = 1`).Scan(&mark, &high, &behind); err != nil {
		return fmt.Errorf("read summary mark: %w", err)
	}
	if !behind {
		db.owed.mark, db.owed.high = mark, high
		return nil
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	b := &batchTx{tx: tx, stmts: &db.stmts, bound: make(map[*sql.Stmt]*sql.Stmt, 2)}
	sessions, steps, err := catchUp(ctx, b)
	if err != nil {
		return err
	}
	high, err = markNewest(ctx, b)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if steps > 0 {
		db.log.Info("storage: session summaries caught up with steps stored before a crash",
			"sessions", sessions, "steps", steps)
	}
	db.owed.mark, db.owed.high = high, high
	return nil
}

// catchUp counts in their rows, in b, the stored steps that their rows do not count yet.
func catchUp(ctx context.Context, b *batchTx) (sessions, steps int, err error) {
	var mark int64
	if err := b.tx.QueryRowContext(ctx, `SELECT seq FROM summary_mark WHERE id = 1`).Scan(&mark); err != nil {
		return 0, 0, fmt.Errorf("read summary mark: %w", err)
	}
	deltas, steps, err := uncounted(ctx, b.tx, mark)
	if err != nil {
		return 0, 0, err
	}
	if err := applyDeltas(b, deltas); err != nil {
		return 0, 0, err
	}
	return len(deltas), steps, nil
}

// markNewest sets the mark, in b, to the newest seq, which every row then counts.
func markNewest(ctx context.Context, b *batchTx) (int64, error) {
	high, err := lastSeq(ctx, b.tx)
	if err != nil {
		return 0, err
	}
	if _, err := b.tx.ExecContext(ctx, sqlSetSummaryMark, high); err != nil {
		return 0, fmt.Errorf("set summary mark: %w", err)
	}
	return high, nil
}

// uncounted sums, by session, the stored steps past mark that their session's row does not
// count, in the order of their first seq.
func uncounted(ctx context.Context, tx *sql.Tx, mark int64) ([]*txDelta, int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT st.seq, st.session_id, st.agent_id, st.agent_name,
		st.user_id, st.key_id, st.method, st.decision, st.received_at, st.peers
		FROM steps st LEFT JOIN sessions s ON s.id = st.session_id
		WHERE st.seq > ? AND st.seq > coalesce(s.last_seq, 0) ORDER BY st.seq`, mark)
	if err != nil {
		return nil, 0, fmt.Errorf("read uncounted steps: %w", err)
	}
	defer rows.Close()
	byID := map[string]*txDelta{}
	var out []*txDelta
	n := 0
	for rows.Next() {
		var (
			seq   int64
			s     storage.SessionStep
			peers string
		)
		if err := rows.Scan(&seq, &s.SessionID, &s.AgentID, &s.AgentName, &s.UserID, &s.KeyID,
			&s.Method, &s.Decision, &s.ReceivedAt, &peers); err != nil {
			return nil, 0, fmt.Errorf("read uncounted steps: %w", err)
		}
		if peers != "" {
			var p stepPeers
			if err := json.Unmarshal([]byte(peers), &p); err != nil {
				return nil, 0, fmt.Errorf("read uncounted step %d: peers: %w", seq, err)
			}
			rec := record.StepRecord{Client: p.Client, Server: p.Server}
			named := storage.SessionStepOf(&rec)
			s.ClientName, s.ClientVersion = named.ClientName, named.ClientVersion
			s.ServerName, s.ServerVersion = named.ServerName, named.ServerVersion
		}
		t := byID[s.SessionID]
		if t == nil {
			t = &txDelta{first: seq}
			byID[s.SessionID] = t
			out = append(out, t)
		}
		t.d.Add(&s, seq)
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read uncounted steps: %w", err)
	}
	return out, n, nil
}
