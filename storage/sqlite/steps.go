package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

const sqlInsertStep = `INSERT INTO steps (seq, session_id, turn_id, step_id, method, kind,
	agent_id, agent_name, user_id, tool, decision, received_at, request, response,
	matched_rules, latency_micros, text, held, key_id, peers)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// sqlUpsertSession adds a group of steps of one session with one decision (?8 of them) to
// its summary. The agent id and key id are the session's owners: set by the first step
// that carries one, never changed after (the guardian refuses steps of other owners). The
// agent name and user are overwritten only by steps that carry them, so a session keeps
// them when later steps (MCP, A2A) do not name them. last_seen never moves back when a
// step received earlier is stored later. A row without steps (created by a session control
// before the first step) takes its times from the first steps. The client and the server
// (name and version together) are, like the agent name, those of the newest step naming one.
const sqlUpsertSession = `INSERT INTO sessions (id, agent_id, agent_name, user_id,
	first_seen, last_seen, last_seq, steps, last_method, decisions, key_id,
	client_name, client_version, server_name, server_version)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, json_object(?10, ?8), ?12, ?13, ?14, ?15, ?16)
	ON CONFLICT (id) DO UPDATE SET
		client_version = CASE WHEN excluded.client_name <> '' THEN excluded.client_version ELSE client_version END,
		client_name    = CASE WHEN excluded.client_name <> '' THEN excluded.client_name    ELSE client_name    END,
		server_version = CASE WHEN excluded.server_name <> '' THEN excluded.server_version ELSE server_version END,
		server_name    = CASE WHEN excluded.server_name <> '' THEN excluded.server_name    ELSE server_name    END,
		agent_id    = CASE WHEN agent_id = '' THEN excluded.agent_id ELSE agent_id END,
		key_id      = CASE WHEN key_id   = '' THEN excluded.key_id   ELSE key_id   END,
		agent_name  = CASE WHEN excluded.agent_name <> '' THEN excluded.agent_name ELSE agent_name END,
		user_id     = CASE WHEN excluded.user_id    <> '' THEN excluded.user_id    ELSE user_id    END,
		first_seen  = CASE WHEN steps = 0 THEN excluded.first_seen
			ELSE min(first_seen, excluded.first_seen) END,
		last_seen   = CASE WHEN steps = 0 THEN excluded.last_seen
			ELSE max(last_seen, excluded.last_seen) END,
		last_method = CASE WHEN excluded.last_seq > last_seq THEN excluded.last_method
			ELSE last_method END,
		last_seq    = max(last_seq, excluded.last_seq),
		steps       = steps + excluded.steps,
		decisions   = json_set(decisions, ?11, coalesce(json_extract(decisions, ?11), 0) + excluded.steps)`

// stepColumns is the column list every step query scans with scanStep.
const stepColumns = `seq, session_id, turn_id, step_id, method, kind, agent_id, agent_name,
	user_id, tool, decision, received_at, request, response, matched_rules, latency_micros,
	text, held, key_id, peers`

// historyColumns reads a step as RecentSteps returns it, in the shape of stepColumns: no
// request, response or matched rules, the text's first storage.HistoryText characters.
var historyColumns = fmt.Sprintf(`seq, session_id, turn_id, step_id, method, kind, agent_id, agent_name,
	user_id, tool, decision, received_at, NULL, NULL, '[]', latency_micros,
	substr(text, 1, %d), held, key_id, peers`, storage.HistoryText)

// stepArgs is a step prepared for the writer: validated, encoded and copied, so that the
// writer never touches the caller's record and the JSON work happens on the caller's
// goroutine, in parallel, rather than on the single writer.
type stepArgs struct {
	storage.SessionStep
	turnID, stepID, kind, tool string
	request, response          any // string or nil (NULL)
	matchedRules               string
	latencyMicros              int64
	text                       string
	held                       bool
	// peers is the JSON of the step's client and server, "" for none.
	peers string
}

// SaveStep stores rec and its "step" event, updates the session summary, sets rec.Seq and
// returns once the step is durable: in the step journal, from which it
// reaches the tables shortly after (queries wait for that, so they always see it). It
// normalises rec to what a read returns (UTC ReceivedAt, non-nil MatchedRules), so rec
// marshals to the same JSON as GET /api/steps/{seq}. A zero ReceivedAt is set to now. A
// Request or Response that is not valid JSON is stored as a JSON string holding its bytes,
// so nothing is lost and every read stays valid JSON.
func (db *DB) SaveStep(ctx context.Context, rec *record.StepRecord) error {
	if db.beside {
		return errBesideSteps
	}
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
	rec.Client, rec.Server = validPeer(rec.Client), validPeer(rec.Server)
	a, err := stepArgsOf(rec)
	if err != nil {
		return err
	}
	// The JSON is built here, in parallel with other callers; under the journal's lock
	// only the seq is put in front.
	fields, reqAt, respAt := record.AppendStepFieldsAt(
		make([]byte, stepHeadroom, stepHeadroom+512+len(rec.Request)+len(rec.Response)), rec)
	// The request and response are bound from the journal record rather than from copies:
	// nothing writes to those bytes once the record is built (the journal fills in only its
	// headroom), and the record is kept until the step is in SQLite.
	a.request, a.response = textAt(fields, reqAt, len(rec.Request)), textAt(fields, respAt, len(rec.Response))
	if err := ctx.Err(); err != nil {
		return err
	}
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	db.steps.Add(1) // Close waits for it
	db.mu.RUnlock()
	seq, err := db.journalStep(a, fields)
	db.steps.Done()
	if err != nil {
		return err
	}
	rec.Seq = seq
	if db.minutes != nil {
		db.minutes.add(rec.ReceivedAt, outcome(rec.Decision, rec.Held))
	}
	return nil
}

// newStepArgs copies a normalised record into the form the writer inserts.
func newStepArgs(rec *record.StepRecord) (*stepArgs, error) {
	a, err := stepArgsOf(rec)
	if err != nil {
		return nil, err
	}
	a.request, a.response = nullableText(rec.Request), nullableText(rec.Response)
	return a, nil
}

// stepArgsOf is newStepArgs without the request and response, which the caller sets.
func stepArgsOf(rec *record.StepRecord) (*stepArgs, error) {
	rules, err := json.Marshal(rec.MatchedRules)
	if err != nil {
		return nil, fmt.Errorf("storage: encode matched rules: %w", err)
	}
	a := &stepArgs{
		SessionStep: storage.SessionStepOf(rec), turnID: rec.TurnID, stepID: rec.StepID,
		kind: rec.Kind, tool: rec.Tool, matchedRules: string(rules),
		latencyMicros: rec.LatencyMicros, text: rec.Text, held: rec.Held,
	}
	if rec.Client != nil || rec.Server != nil {
		b, err := json.Marshal(stepPeers{Client: rec.Client, Server: rec.Server})
		if err != nil {
			return nil, fmt.Errorf("storage: encode peers: %w", err)
		}
		a.peers = string(b)
	}
	return a, nil
}

// validPeer returns p with invalid UTF-8 as U+FFFD, as the JSON of the steps.peers column
// stores it, so that rec, its session and a read of the step all name the same peer. A peer
// that needs it is copied, not changed in place: the gateway hands the same *Peer to every
// step of a session.
func validPeer(p *record.Peer) *record.Peer {
	if p == nil || utf8.ValidString(p.Name) && utf8.ValidString(p.Version) {
		return p
	}
	return &record.Peer{Name: strings.ToValidUTF8(p.Name, "\uFFFD"), Version: strings.ToValidUTF8(p.Version, "\uFFFD")}
}

// stepPeers is the steps.peers column.
type stepPeers struct {
	Client *record.Peer `json:"client,omitempty"`
	Server *record.Peer `json:"server,omitempty"`
}

// insertRow writes the step's event and row, leaving the session summary to a SessionDelta.
func (a *stepArgs) insertRow(b *batchTx, seq int64) error {
	if _, err := b.stmt(b.stmts.insertStepEvent).Exec(seq, a.SessionID, a.ReceivedAt); err != nil {
		return fmt.Errorf("storage: insert step event %d: %w", seq, err)
	}
	if _, err := b.stmt(b.stmts.insertStep).Exec(seq, a.SessionID, a.turnID, a.stepID,
		a.Method, a.kind, a.AgentID, a.AgentName, a.UserID, a.tool, a.Decision, a.ReceivedAt,
		a.request, a.response, a.matchedRules, a.latencyMicros, a.text, a.held, a.KeyID, a.peers); err != nil {
		return fmt.Errorf("storage: insert step %d: %w", seq, err)
	}
	return nil
}

// applyDelta writes steps of one session into its summary: one upsert per
// decision, since each adds to its own count in the decisions JSON.
func applyDelta(b *batchTx, d *storage.SessionDelta) error {
	for _, c := range d.Decisions {
		if _, err := b.stmt(b.stmts.upsertSession).Exec(d.ID, d.AgentID, d.AgentName, d.UserID,
			d.First, d.Last, d.LastSeq, c.N, d.LastMethod, c.Decision, `$."`+c.Decision+`"`, d.KeyID,
			d.ClientName, d.ClientVersion, d.ServerName, d.ServerVersion); err != nil {
			return fmt.Errorf("storage: update session %q: %w", d.ID, err)
		}
	}
	return nil
}

// textAt is nullableText for the n bytes of b at i, without copying them: b must never
// change afterwards.
func textAt(b []byte, i, n int) any {
	if n == 0 {
		return nil
	}
	return unsafe.String(&b[i], n)
}

// nullableText stores JSON as TEXT (so SQLite's JSON functions read it as text, not JSONB)
// and an absent value as NULL.
func nullableText(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// Step returns the step with the given seq, or ErrNotFound.
func (db *DB) Step(ctx context.Context, seq int64) (record.StepRecord, error) {
	if err := db.flushSteps(ctx); err != nil {
		return record.StepRecord{}, fmt.Errorf("storage: step %d: %w", seq, err)
	}
	row := db.r.QueryRowContext(ctx, `SELECT `+stepColumns+` FROM steps WHERE seq = ?`, seq)
	rec, err := scanStep(row)
	if errors.Is(err, sql.ErrNoRows) {
		return record.StepRecord{}, fmt.Errorf("storage: step %d: %w", seq, record.ErrNotFound)
	}
	if err != nil {
		return record.StepRecord{}, fmt.Errorf("storage: step %d: %w", seq, err)
	}
	return rec, nil
}

// Steps pages through a session's steps in arrival (seq) order, starting after q.After.
// Limit is clamped to 1..1000 and defaults to 200. An unknown session has no steps.
func (db *DB) Steps(ctx context.Context, q record.StepQuery) ([]record.StepRecord, error) {
	limit := storage.ClampLimit(q.Limit, 200, 1000)
	if err := db.flushSession(ctx, q.SessionID); err != nil {
		return nil, fmt.Errorf("storage: steps of session %q: %w", q.SessionID, err)
	}
	rows, err := db.r.QueryContext(ctx, `SELECT `+stepColumns+` FROM steps
		WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`, q.SessionID, q.After, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: steps of session %q: %w", q.SessionID, err)
	}
	steps, err := collectSteps(rows, limit, q.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("storage: steps of session %q: %w", q.SessionID, err)
	}
	return steps, nil
}

// StepsIn returns up to r.Limit (clamped to 1..1000, default 200) steps of every session
// with r.After < seq < r.Before (Before 0: no bound), oldest first, ending early at
// r.MaxBytes.
func (db *DB) StepsIn(ctx context.Context, r record.StepRange) ([]record.StepRecord, error) {
	limit := storage.ClampLimit(r.Limit, 200, 1000)
	before := r.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	if err := db.flushSteps(ctx); err != nil {
		return nil, fmt.Errorf("storage: steps after %d: %w", r.After, err)
	}
	rows, err := db.r.QueryContext(ctx, `SELECT `+stepColumns+` FROM steps
		WHERE seq > ? AND seq < ? ORDER BY seq LIMIT ?`, r.After, before, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: steps after %d: %w", r.After, err)
	}
	steps, err := collectSteps(rows, limit, r.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("storage: steps after %d: %w", r.After, err)
	}
	return steps, nil
}

// StepWindow returns the window of the newest n steps (clamped to 1..10000) with seq <
// before (0: no bound): they are the steps with after < seq <= last; both are 0 when there
// are no such steps, after is 0 when there are no more than n.
func (db *DB) StepWindow(ctx context.Context, before int64, n int) (after, last int64, err error) {
	n = storage.ClampLimit(n, 1000, 10000)
	if before <= 0 {
		before = math.MaxInt64
	}
	if err := db.flushSteps(ctx); err != nil {
		return 0, 0, fmt.Errorf("storage: window of %d steps before %d: %w", n, before, err)
	}
	// The (n+1)th newest is the one just before the window; a missing row is a zero seq.
	err = db.r.QueryRowContext(ctx, `SELECT
		coalesce((SELECT seq FROM steps WHERE seq < ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2), 0),
		coalesce((SELECT seq FROM steps WHERE seq < ?1 ORDER BY seq DESC LIMIT 1), 0)`,
		before, n).Scan(&after, &last)
	if err != nil {
		return 0, 0, fmt.Errorf("storage: window of %d steps before %d: %w", n, before, err)
	}
	return after, last, nil
}

// RecentSteps returns up to limit (clamped to 1000) of a session's newest steps, oldest
// first: the history a rule sees.
func (db *DB) RecentSteps(ctx context.Context, sessionID string, limit int) ([]record.StepRecord, error) {
	if limit <= 0 {
		return []record.StepRecord{}, nil
	}
	limit = min(limit, 1000)
	if err := db.flushSession(ctx, sessionID); err != nil {
		return nil, fmt.Errorf("storage: recent steps of session %q: %w", sessionID, err)
	}
	rows, err := db.reads.recentSteps.QueryContext(ctx, sessionID, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: recent steps of session %q: %w", sessionID, err)
	}
	steps, err := collectSteps(rows, limit, 0)
	if err != nil {
		return nil, fmt.Errorf("storage: recent steps of session %q: %w", sessionID, err)
	}
	slices.Reverse(steps)
	return steps, nil
}

// collectSteps reads rows of stepColumns, stopping after the step that brings their size
// to maxBytes or past it when maxBytes is positive.
func collectSteps(rows *sql.Rows, capacity, maxBytes int) ([]record.StepRecord, error) {
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
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return steps, nil
}

type scanner = storage.Scanner

// scanStep reads one row of stepColumns. It is the only way a step is read back, so every
// query (and EventsAfter's payloads) yields the same record for the same seq.
func scanStep(s scanner) (record.StepRecord, error) {
	var (
		rec        record.StepRecord
		receivedAt int64
		req, resp  sql.NullString
		rules      string
		peers      string
	)
	if err := s.Scan(&rec.Seq, &rec.SessionID, &rec.TurnID, &rec.StepID, &rec.Method,
		&rec.Kind, &rec.AgentID, &rec.AgentName, &rec.UserID, &rec.Tool, &rec.Decision,
		&receivedAt, &req, &resp, &rules, &rec.LatencyMicros, &rec.Text, &rec.Held, &rec.KeyID, &peers); err != nil {
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
	if req.Valid {
		rec.Request = json.RawMessage(req.String)
	}
	if resp.Valid {
		rec.Response = json.RawMessage(resp.String)
	}
	rec.MatchedRules = []record.RuleMatch{}
	if err := json.Unmarshal([]byte(rules), &rec.MatchedRules); err != nil {
		return record.StepRecord{}, fmt.Errorf("decode matched rules of step %d: %w", rec.Seq, err)
	}
	if rec.MatchedRules == nil { // stored as JSON null
		rec.MatchedRules = []record.RuleMatch{}
	}
	return rec, nil
}
