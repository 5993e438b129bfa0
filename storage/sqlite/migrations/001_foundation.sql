-- Foundation: the shared event sequence, session summaries and stored steps.
-- Times are INTEGER unix nanoseconds (UTC) everywhere.

-- Every stored event takes its seq from this table: steps, holds, rule changes, session
-- controls, audit entries. A new seq is max(seq)+1; seqs are never reused because retention
-- never deletes the newest event, so a live client resuming with ?after=SEQ cannot miss or
-- repeat an event. (AUTOINCREMENT would guarantee the same at the cost of one more page
-- written per commit, in sqlite_sequence: about a tenth of the guardian's throughput.)
CREATE TABLE events (
    seq        INTEGER PRIMARY KEY,
    type       TEXT    NOT NULL,
    session_id TEXT    NOT NULL DEFAULT '',
    at         INTEGER NOT NULL,
    -- JSON body as published live. NULL for type 'step': the steps row is the payload,
    -- so a step's request and response are stored once.
    payload    TEXT
);

CREATE TABLE sessions (
    id          TEXT    NOT NULL PRIMARY KEY,
    agent_id    TEXT    NOT NULL DEFAULT '',
    agent_name  TEXT    NOT NULL DEFAULT '',
    user_id     TEXT    NOT NULL DEFAULT '',
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    steps       INTEGER NOT NULL DEFAULT 0,
    last_method TEXT    NOT NULL DEFAULT '',
    -- Tally of the session's steps by decision: {"allow":3,"deny":1,…}.
    decisions   TEXT    NOT NULL DEFAULT '{}',
    control     TEXT    NOT NULL DEFAULT 'active'
) WITHOUT ROWID;

-- Newest first with keyset pagination on (last_seen, id).
CREATE INDEX sessions_recent ON sessions (last_seen, id);

-- A step's seq is its "step" event's seq; deleting the event deletes the step.
CREATE TABLE steps (
    seq            INTEGER PRIMARY KEY REFERENCES events (seq) ON DELETE CASCADE,
    session_id     TEXT    NOT NULL,
    turn_id        TEXT    NOT NULL DEFAULT '',
    step_id        TEXT    NOT NULL DEFAULT '',
    method         TEXT    NOT NULL,
    kind           TEXT    NOT NULL DEFAULT '',
    agent_id       TEXT    NOT NULL DEFAULT '',
    agent_name     TEXT    NOT NULL DEFAULT '',
    user_id        TEXT    NOT NULL DEFAULT '',
    tool           TEXT    NOT NULL DEFAULT '',
    decision       TEXT    NOT NULL,
    received_at    INTEGER NOT NULL,
    request        TEXT,
    response       TEXT,
    matched_rules  TEXT    NOT NULL DEFAULT '[]',
    latency_micros INTEGER NOT NULL DEFAULT 0,
    text           TEXT    NOT NULL DEFAULT '',
    held           INTEGER NOT NULL DEFAULT 0
);

-- A session's steps in arrival order.
CREATE INDEX steps_session ON steps (session_id, seq);
-- Per-minute decision counts for /api/stats; covering, so no table lookups.
CREATE INDEX steps_received ON steps (received_at, decision);

-- Pending holds per session, read by the session and stats queries. The holds migration
-- replaces this view with one over its table; until then no session has pending holds.
CREATE VIEW session_pending_holds (session_id, pending) AS
    SELECT '', 0 WHERE 0;
