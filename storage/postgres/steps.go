package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// stepArgs is a step validated and encoded on the caller's goroutine, so the committers
// only send it.
type stepArgs struct {
	storage.SessionStep
	turnID, stepID, kind, tool string
	request, response          *string
	matchedRules               string
	latencyMicros              int64
	text                       string
	held                       bool
	search                     string
	// peers is the JSON of the step's client and server, "" for none.
	peers string
}

type stepReq struct {
	a    *stepArgs
	seq  int64
	err  error
	done chan struct{}
}

// cleanStep makes rec's text storable in PostgreSQL, whose text refuses NUL bytes and
// invalid UTF-8 (SQLite stores any bytes): they become U+FFFD, in rec too, so that rec
// stays what a read returns. Valid text, the usual case, is left as it is.
func cleanStep(rec *record.StepRecord) {
	for _, f := range []*string{&rec.SessionID, &rec.TurnID, &rec.StepID, &rec.Method, &rec.Kind,
		&rec.AgentID, &rec.AgentName, &rec.UserID, &rec.KeyID, &rec.Tool, &rec.Text} {
		*f = cleanText(*f)
	}
	rec.Request, rec.Response = cleanJSON(rec.Request), cleanJSON(rec.Response)
	for i := range rec.MatchedRules {
		m := &rec.MatchedRules[i]
		m.RuleID, m.Action, m.Mode, m.ReasonCode, m.Error = cleanText(m.RuleID), cleanText(m.Action),
			cleanText(m.Mode), cleanText(m.ReasonCode), cleanText(m.Error)
	}
	rec.Client, rec.Server = cleanPeer(rec.Client), cleanPeer(rec.Server)
}

// cleanPeer is cleanText for a peer. A peer that needs it is copied, not changed in
// place: the gateway hands the same *Peer to every step of a session.
func cleanPeer(p *record.Peer) *record.Peer {
	if p == nil {
		return nil
	}
	name, version := cleanText(p.Name), cleanText(p.Version)
	if name == p.Name && version == p.Version {
		return p
	}
	return &record.Peer{Name: name, Version: version}
}

// stepPeers is the steps.peers column, as the SQLite backend writes it.
type stepPeers struct {
	Client *record.Peer `json:"client,omitempty"`
	Server *record.Peer `json:"server,omitempty"`
}

// setPeers sets a's peers to the JSON of rec's client and server that a read returns.
func (a *stepArgs) setPeers(rec *record.StepRecord) error {
	if rec.Client != nil || rec.Server != nil {
		b, err := json.Marshal(stepPeers{Client: rec.Client, Server: rec.Server})
		if err != nil {
			return fmt.Errorf("storage: encode peers: %w", err)
		}
		a.peers = string(b)
	}
	return nil
}

// SaveStep stores rec, its "step" event and its session's summary, sets rec.Seq, and
// returns once the transaction that holds it committed. Concurrent calls share one
// transaction. rec is normalised as the SQLite backend does (UTC nanosecond ReceivedAt, now
// when zero; non-nil MatchedRules; invalid JSON stored as a JSON string).
func (db *DB) SaveStep(ctx context.Context, rec *record.StepRecord) error {
	if err := rec.CheckNew(); err != nil {
		return err
	}
	if rec.ReceivedAt.IsZero() {
		rec.ReceivedAt = time.Now()
	}
	rec.ReceivedAt = time.Unix(0, rec.ReceivedAt.UnixNano()).UTC()
	if rec.MatchedRules == nil {
		rec.MatchedRules = []record.RuleMatch{}
	}
	rec.Request = storage.StoredJSON(rec.Request, rec.TrustedJSON)
	rec.Response = storage.StoredJSON(rec.Response, rec.TrustedJSON)
	cleanStep(rec)
	rules, err := json.Marshal(rec.MatchedRules)
	if err != nil {
		return fmt.Errorf("storage: encode matched rules: %w", err)
	}
	a := &stepArgs{
		SessionStep: storage.SessionStepOf(rec), turnID: rec.TurnID, stepID: rec.StepID,
		kind: rec.Kind, tool: rec.Tool, request: nullText(rec.Request),
		response: nullText(rec.Response), matchedRules: string(rules),
		latencyMicros: rec.LatencyMicros, text: rec.Text, held: rec.Held,
		search: searchDoc(rec),
	}
	if err := a.setPeers(rec); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	db.inflight.Add(1)
	db.mu.RUnlock()
	defer db.inflight.Done()
	req := &stepReq{a: a, done: make(chan struct{})}
	select {
	case db.stepq <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		// The step may still commit; the caller is told it gave up waiting.
		return ctx.Err()
	}
	if req.err != nil {
		return req.err
	}
	rec.Seq = req.seq
	return nil
}

// committer takes the queued steps, up to MaxBatch at a time, and commits each batch in one
// transaction, until Close.
func (db *DB) committer() {
	batch := make([]*stepReq, 0, db.opts.MaxBatch)
	for {
		var first *stepReq
		select {
		case first = <-db.stepq:
		case <-db.stop:
			return
		}
		batch = append(batch[:0], first)
	gather:
		for len(batch) < db.opts.MaxBatch {
			select {
			case r := <-db.stepq:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		db.commitBatch(batch)
	}
}

// commitBatch commits batch and answers its callers. A batch the database refuses is
// retried step by step, so that one step it refuses does not fail the others.
func (db *DB) commitBatch(batch []*stepReq) {
	err := db.commitSteps(batch)
	// Only an error of the server's about the data (not a lost connection, which every
	// step would meet again, one timeout after the other) is worth retrying step by step.
	if err != nil && len(batch) > 1 && pgCode(err) != "" && !retryable(err) {
		for _, r := range batch {
			db.commitBatch([]*stepReq{r})
		}
		return
	}
	for _, r := range batch {
		if err != nil {
			r.err = fmt.Errorf("storage: save step: %w", err)
		}
		close(r.done)
	}
}

// commitSteps writes batch in one transaction and sets each request's seq.
func (db *DB) commitSteps(batch []*stepReq) (err error) {
	// Not the callers' contexts: the batch is theirs together, and a step whose caller gave
	// up is still stored whole or not at all. Bounded, so a stalled database fails the
	// batch's steps (their agents get an error) rather than holding them.
	ctx, done := db.bound(context.Background())
	defer done(&err)
	n := len(batch)
	var (
		sids, turns, stepIDs, methods, kinds         = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		agents, names, users, keys, tools, decisions = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		received, latency                            = make([]int64, n), make([]int64, n)
		requests, responses                          = make([]*string, n), make([]*string, n)
		rules, texts, docs, peers                    = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		held                                         = make([]bool, n)
	)
	for i, r := range batch {
		a := r.a
		sids[i], turns[i], stepIDs[i], methods[i], kinds[i] = a.SessionID, a.turnID, a.stepID, a.Method, a.kind
		agents[i], names[i], users[i], keys[i], tools[i], decisions[i] = a.AgentID, a.AgentName, a.UserID, a.KeyID, a.tool, a.Decision
		received[i], latency[i] = a.ReceivedAt, a.latencyMicros
		requests[i], responses[i] = a.request, a.response
		rules[i], texts[i], docs[i], held[i], peers[i] = a.matchedRules, a.text, a.search, a.held, a.peers
	}
	ords := make([]int64, n)
	for i := range ords {
		ords[i] = int64(i) + 1
	}
	// One batch, one round trip: pgx sends it as a pipeline that PostgreSQL runs as one
	// implicit transaction, so the seq row is locked only while the server executes it.
	// Seqs are base+1..base+n, base being the counter before this batch's UPDATE.
	b := &pgx.Batch{}
	var base int64
	b.Queue(`UPDATE vigil_seq SET seq = seq + $1 WHERE id = 1 RETURNING seq - $1`, n).QueryRow(func(row pgx.Row) error {
		return row.Scan(&base)
	})
	b.Queue(`WITH c AS (SELECT seq - $1 AS base FROM vigil_seq WHERE id = 1)
		INSERT INTO events (seq, type, session_id, at)
		SELECT c.base + u.ord, 'step', u.sid, u.at
		FROM c, unnest($2::int8[], $3::text[], $4::int8[]) AS u(ord, sid, at)`,
		n, ords, sids, received)
	b.Queue(`WITH c AS (SELECT seq - $1 AS base FROM vigil_seq WHERE id = 1)
		INSERT INTO steps (seq, session_id, turn_id, step_id, method, kind, agent_id,
			agent_name, user_id, key_id, tool, decision, received_at, request, response,
			matched_rules, latency_micros, text, held, search, peers)
		SELECT c.base + u.ord, u.sid, u.turn, u.step, u.method, u.kind, u.agent, u.name, u.usr,
			u.key, u.tool, u.decision, u.received, u.request, u.response, u.rules,
			u.latency, u.text, u.held, to_tsvector('simple', u.doc), u.peers
		FROM c, unnest($2::int8[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[],
			$14::int8[], $15::text[], $16::text[], $17::text[], $18::int8[], $19::text[],
			$20::bool[], $21::text[], $22::text[])
		AS u(ord, sid, turn, step, method, kind, agent, name, usr, key, tool, decision,
			received, request, response, rules, latency, text, held, doc, peers)`,
		n, ords, sids, turns, stepIDs, methods, kinds, agents, names, users, keys, tools,
		decisions, received, requests, responses, rules, latency, texts, held, docs, peers)
	queueSessions(b, batch, ords, n)
	b.Queue(`SELECT pg_notify($1, seq::text) FROM vigil_seq WHERE id = 1`, NotifyChannel)
	for attempt := 0; ; attempt++ {
		err := db.pool.SendBatch(ctx, b).Close()
		if err == nil {
			db.batches.Add(1)
			db.batchedSteps.Add(int64(n))
			for i, r := range batch {
				r.seq = base + int64(i) + 1
			}
			return nil
		}
		if attempt >= 3 || !retryable(err) {
			return err
		}
	}
}

// queueSessions queues one upsert of every session the batch's steps belong to. Rows go in
// id order, so that two transactions locking the same sessions lock them in one order.
// seqs are relative to the batch (1..n); the statement adds the batch's base.
func queueSessions(b *pgx.Batch, batch []*stepReq, seqs []int64, n int) {
	deltas := map[string]*storage.SessionDelta{}
	for i, r := range batch {
		d := deltas[r.a.SessionID]
		if d == nil {
			d = &storage.SessionDelta{}
			deltas[r.a.SessionID] = d
		}
		d.Add(&r.a.SessionStep, seqs[i])
	}
	ids := make([]string, 0, len(deltas))
	for id := range deltas {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	k := len(ids)
	var (
		agents, keys, names, users, methods, decisions = make([]string, k), make([]string, k), make([]string, k), make([]string, k), make([]string, k), make([]string, k)
		first, last, lastSeq, steps                    = make([]int64, k), make([]int64, k), make([]int64, k), make([]int64, k)
		clients, clientVersions                        = make([]string, k), make([]string, k)
		servers, serverVersions                        = make([]string, k), make([]string, k)
	)
	for i, id := range ids {
		d := deltas[id]
		agents[i], keys[i], names[i], users[i], methods[i] = d.AgentID, d.KeyID, d.AgentName, d.UserID, d.LastMethod
		clients[i], clientVersions[i], servers[i], serverVersions[i] = d.ClientName, d.ClientVersion, d.ServerName, d.ServerVersion
		first[i], last[i], lastSeq[i], steps[i] = d.First, d.Last, d.LastSeq, d.Steps
		counts := make(map[string]int64, len(d.Decisions))
		for _, c := range d.Decisions {
			counts[c.Decision] = c.N
		}
		js, _ := json.Marshal(counts) // a map of strings to ints always marshals
		decisions[i] = string(js)
	}
	b.Queue(sqlUpsertSessions, ids, agents, keys, names, users, first, last, lastSeq, steps, methods, decisions, n,
		clients, clientVersions, servers, serverVersions)
}

// sqlUpsertSessions adds a batch's steps to their sessions' summaries. The agent and key
// are the session's owners: set by the first step that carries one, never changed after.
// The agent name and user are overwritten only by steps that carry them. last_seen never
// moves back. A row without steps (made by a session control) takes its times from them.
// The client and the server (name and version together) are, like the agent name, those of
// the newest step naming one.
const sqlUpsertSessions = `WITH c AS (SELECT seq - $12 AS base FROM vigil_seq WHERE id = 1)
	INSERT INTO sessions AS s (id, agent_id, key_id, agent_name, user_id,
	first_seen, last_seen, last_seq, steps, last_method, decisions,
	client_name, client_version, server_name, server_version)
	SELECT u.id, u.agent, u.key, u.name, u.usr, u.first, u.last, c.base + u.lastseq, u.steps, u.method, u.dec::jsonb,
		u.client, u.clientv, u.server, u.serverv
	FROM c, unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[],
		$8::int8[], $9::int8[], $10::text[], $11::text[], $13::text[], $14::text[], $15::text[], $16::text[])
	AS u(id, agent, key, name, usr, first, last, lastseq, steps, method, dec, client, clientv, server, serverv)
	ON CONFLICT (id) DO UPDATE SET
		client_name    = CASE WHEN excluded.client_name <> '' THEN excluded.client_name    ELSE s.client_name    END,
		client_version = CASE WHEN excluded.client_name <> '' THEN excluded.client_version ELSE s.client_version END,
		server_name    = CASE WHEN excluded.server_name <> '' THEN excluded.server_name    ELSE s.server_name    END,
		server_version = CASE WHEN excluded.server_name <> '' THEN excluded.server_version ELSE s.server_version END,
		agent_id    = CASE WHEN s.agent_id = '' THEN excluded.agent_id ELSE s.agent_id END,
		key_id      = CASE WHEN s.key_id   = '' THEN excluded.key_id   ELSE s.key_id   END,
		agent_name  = CASE WHEN excluded.agent_name <> '' THEN excluded.agent_name ELSE s.agent_name END,
		user_id     = CASE WHEN excluded.user_id    <> '' THEN excluded.user_id    ELSE s.user_id    END,
		first_seen  = CASE WHEN s.steps = 0 THEN excluded.first_seen
			ELSE least(s.first_seen, excluded.first_seen) END,
		last_seen   = CASE WHEN s.steps = 0 THEN excluded.last_seen
			ELSE greatest(s.last_seen, excluded.last_seen) END,
		last_method = CASE WHEN excluded.last_seq > s.last_seq THEN excluded.last_method
			ELSE s.last_method END,
		last_seq    = greatest(s.last_seq, excluded.last_seq),
		steps       = s.steps + excluded.steps,
		decisions   = vigil_add_counts(s.decisions, excluded.decisions)`

// stepColumns is the column list every step query scans with scanStep.
const stepColumns = `seq, session_id, turn_id, step_id, method, kind, agent_id, agent_name,
	user_id, tool, decision, received_at, request, response, matched_rules, latency_micros,
	text, held, key_id, peers`

// historyColumns reads a step as RecentSteps returns it, in the shape of stepColumns: no
// request, response or matched rules, the text's first storage.HistoryText characters.
var historyColumns = fmt.Sprintf(`seq, session_id, turn_id, step_id, method, kind, agent_id, agent_name,
	user_id, tool, decision, received_at, NULL::text, NULL::text, '[]'::text, latency_micros,
	left(text, %d), held, key_id, peers`, storage.HistoryText)

// scanStep reads one row of stepColumns (plus extra destinations after them).
func scanStep(row pgx.Row, extra ...any) (record.StepRecord, error) {
	var (
		rec        record.StepRecord
		receivedAt int64
		req, resp  *string
		rules      string
		peers      string
	)
	dest := append([]any{&rec.Seq, &rec.SessionID, &rec.TurnID, &rec.StepID, &rec.Method,
		&rec.Kind, &rec.AgentID, &rec.AgentName, &rec.UserID, &rec.Tool, &rec.Decision,
		&receivedAt, &req, &resp, &rules, &rec.LatencyMicros, &rec.Text, &rec.Held, &rec.KeyID, &peers}, extra...)
	if err := row.Scan(dest...); err != nil {
		return record.StepRecord{}, err
	}
	if peers != "" {
		var p stepPeers
		if err := json.Unmarshal([]byte(peers), &p); err != nil {
			return record.StepRecord{}, fmt.Errorf("decode peers of step %d: %w", rec.Seq, err)
		}
		rec.Client, rec.Server = p.Client, p.Server
	}
	rec.ReceivedAt = time.Unix(0, receivedAt).UTC()
	if req != nil {
		rec.Request = json.RawMessage(*req)
	}
	if resp != nil {
		rec.Response = json.RawMessage(*resp)
	}
	rec.MatchedRules = []record.RuleMatch{}
	if err := json.Unmarshal([]byte(rules), &rec.MatchedRules); err != nil {
		return record.StepRecord{}, fmt.Errorf("decode matched rules of step %d: %w", rec.Seq, err)
	}
	if rec.MatchedRules == nil {
		rec.MatchedRules = []record.RuleMatch{}
	}
	return rec, nil
}

func (db *DB) querySteps(ctx context.Context, capacity int, query string, args ...any) ([]record.StepRecord, error) {
	return db.queryStepsBytes(ctx, capacity, 0, query, args...)
}

// queryStepsBytes is querySteps stopping after the step that brings the steps' size to
// maxBytes or past it, when maxBytes is positive.
func (db *DB) queryStepsBytes(ctx context.Context, capacity, maxBytes int, query string, args ...any) ([]record.StepRecord, error) {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	steps := make([]record.StepRecord, 0, min(capacity, 64))
	size := 0
	for rows.Next() {
		rec, err := scanStep(rows)
		if err != nil {
			return nil, err
		}
		steps = append(steps, rec)
		if size += storage.StepBytes(&rec); maxBytes > 0 && size >= maxBytes {
			break
		}
	}
	return steps, rows.Err()
}

// Step returns the step with the given seq, or ErrNotFound.
func (db *DB) Step(ctx context.Context, seq int64) (_ record.StepRecord, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	rec, err := scanStep(db.pool.QueryRow(ctx, `SELECT `+stepColumns+` FROM steps WHERE seq = $1`, seq))
	if errors.Is(err, pgx.ErrNoRows) {
		return record.StepRecord{}, fmt.Errorf("storage: step %d: %w", seq, record.ErrNotFound)
	}
	if err != nil {
		return record.StepRecord{}, fmt.Errorf("storage: step %d: %w", seq, err)
	}
	return rec, nil
}

// Steps pages through a session's steps in arrival (seq) order after q.After. Limit is
// clamped to 1..1000 (default 200).
func (db *DB) Steps(ctx context.Context, q record.StepQuery) (_ []record.StepRecord, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	limit := storage.ClampLimit(q.Limit, 200, 1000)
	steps, err := db.queryStepsBytes(ctx, limit, q.MaxBytes, `SELECT `+stepColumns+` FROM steps
		WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, q.SessionID, q.After, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: steps of session %q: %w", q.SessionID, err)
	}
	return steps, nil
}

// RecentSteps returns up to limit (at most 1000) of a session's newest steps, oldest first.
func (db *DB) RecentSteps(ctx context.Context, sessionID string, limit int) (_ []record.StepRecord, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if limit <= 0 {
		return []record.StepRecord{}, nil
	}
	limit = min(limit, 1000)
	steps, err := db.querySteps(ctx, limit, `SELECT `+historyColumns+` FROM steps
		WHERE session_id = $1 ORDER BY seq DESC LIMIT $2`, sessionID, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: recent steps of session %q: %w", sessionID, err)
	}
	slices.Reverse(steps)
	return steps, nil
}

// StepsIn returns up to r.Limit (default 200, at most 1000) steps of every session with
// r.After < seq < r.Before (Before 0: no bound), oldest first, ending early at r.MaxBytes.
func (db *DB) StepsIn(ctx context.Context, r record.StepRange) (_ []record.StepRecord, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	limit := storage.ClampLimit(r.Limit, 200, 1000)
	before := r.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	steps, err := db.queryStepsBytes(ctx, limit, r.MaxBytes, `SELECT `+stepColumns+` FROM steps
		WHERE seq > $1 AND seq < $2 ORDER BY seq LIMIT $3`, r.After, before, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: steps after %d: %w", r.After, err)
	}
	return steps, nil
}

// StepWindow returns the window of the newest n steps (default 1000, at most 10000) with
// seq < before (0: no bound): they are the steps with after < seq <= last; both are 0 when
// there are no such steps, after is 0 when there are no more than n.
func (db *DB) StepWindow(ctx context.Context, before int64, n int) (after, last int64, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	n = storage.ClampLimit(n, 1000, 10000)
	if before <= 0 {
		before = math.MaxInt64
	}
	err = db.pool.QueryRow(ctx, `SELECT
		coalesce((SELECT seq FROM steps WHERE seq < $1 ORDER BY seq DESC LIMIT 1 OFFSET $2), 0),
		coalesce((SELECT seq FROM steps WHERE seq < $1 ORDER BY seq DESC LIMIT 1), 0)`,
		before, n).Scan(&after, &last)
	if err != nil {
		return 0, 0, fmt.Errorf("storage: window of %d steps before %d: %w", n, before, err)
	}
	return after, last, nil
}

// SessionStepsBefore returns up to limit (default 200, at most 1000) of a session's newest
// steps with seq < before (0: no bound), oldest first, as RecentSteps returns them.
func (db *DB) SessionStepsBefore(ctx context.Context, sessionID string, before int64, limit int) (_ []record.StepRecord, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	limit = storage.ClampLimit(limit, 200, 1000)
	if before <= 0 {
		before = math.MaxInt64
	}
	steps, err := db.querySteps(ctx, limit, `SELECT `+historyColumns+` FROM steps
		WHERE session_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`, sessionID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: steps of session %q before %d: %w", sessionID, before, err)
	}
	slices.Reverse(steps)
	return steps, nil
}
