-- Holds (steps parked for an operator) and the audit log of hold and session-control actions.
-- Times are INTEGER unix nanoseconds (UTC), 0 when unset.

CREATE TABLE holds (
    id         TEXT    NOT NULL PRIMARY KEY,
    -- The held step's seq once the step is stored (after its decision); 0 before.
    seq        INTEGER NOT NULL DEFAULT 0,
    session_id TEXT    NOT NULL,
    agent_id   TEXT    NOT NULL DEFAULT '',
    method     TEXT    NOT NULL,
    kind       TEXT    NOT NULL DEFAULT '',
    tool       TEXT    NOT NULL DEFAULT '',
    rule_id    TEXT    NOT NULL DEFAULT '',
    message    TEXT    NOT NULL DEFAULT '',
    request    TEXT,
    created_at INTEGER NOT NULL,
    deadline   INTEGER NOT NULL,
    on_timeout TEXT    NOT NULL,
    status     TEXT    NOT NULL DEFAULT 'pending',
    -- The answer the agent got (allow, deny, modify); '' while pending.
    decision   TEXT    NOT NULL DEFAULT '',
    decided_by TEXT    NOT NULL DEFAULT '',
    decided_at INTEGER NOT NULL DEFAULT 0,
    note       TEXT    NOT NULL DEFAULT '',
    -- The operator's edited params of a modified hold.
    params     TEXT
);

-- The review queue (pending, oldest first) stays small and is read constantly.
CREATE INDEX holds_pending ON holds (created_at) WHERE status = 'pending';
CREATE INDEX holds_pending_session ON holds (session_id) WHERE status = 'pending';
CREATE INDEX holds_status ON holds (status, created_at);

-- The audit log is kept apart from events: events may be pruned, the audit log is not.
CREATE TABLE audit (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The seq of the "audit" event that carried this entry live.
    seq        INTEGER NOT NULL UNIQUE,
    at         INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    operator   TEXT    NOT NULL DEFAULT '',
    session_id TEXT    NOT NULL DEFAULT '',
    hold_id    TEXT    NOT NULL DEFAULT '',
    rule_id    TEXT    NOT NULL DEFAULT '',
    decision   TEXT    NOT NULL DEFAULT '',
    note       TEXT    NOT NULL DEFAULT '',
    diff       TEXT,
    detail     TEXT
);

CREATE INDEX audit_type ON audit (type, id);
CREATE INDEX audit_session ON audit (session_id, id);
CREATE INDEX audit_operator ON audit (operator, id);
CREATE INDEX audit_hold ON audit (hold_id, id);

-- One row per pending hold (the session queries sum them); without GROUP BY the view
-- flattens into the caller's query and uses holds_pending_session.
DROP VIEW session_pending_holds;
CREATE VIEW session_pending_holds (session_id, pending) AS
    SELECT session_id, 1 FROM holds WHERE status = 'pending';
