-- Identifiers sort bytewise (COLLATE "C"), as in SQLite, whatever the database's locale.
-- The whole schema of the PostgreSQL backend: the SQLite schema's tables with the same
-- columns. Times are bigint unix nanoseconds (UTC), 0 when unset, as in SQLite, so that
-- `vigil migrate` copies values unchanged and both backends read them the same way. JSON
-- that is returned as stored (requests, responses, payloads, rules) is text, not jsonb:
-- jsonb would reorder keys and change the bytes clients have already seen.

-- The one counter every event takes its seq from. A writer locks the row (SELECT … FOR
-- UPDATE) before it writes any event and sets the new value before it commits, so seqs are
-- handed out in commit order: a transaction that takes seqs after another waits for that
-- one to commit first. A plain SEQUENCE would let a later seq commit before an earlier one,
-- and a reader that had seen the later one could miss the earlier one for good.
CREATE TABLE vigil_seq (
    id  integer PRIMARY KEY CHECK (id = 1),
    seq bigint  NOT NULL
);
INSERT INTO vigil_seq (id, seq) VALUES (1, 0);

CREATE TABLE events (
    seq        bigint PRIMARY KEY,
    type       text   NOT NULL,
    session_id text   NOT NULL DEFAULT '',
    at         bigint NOT NULL,
    -- JSON body as published live; NULL for type 'step' (the steps row is the payload).
    payload    text
);

CREATE TABLE sessions (
    id          text   COLLATE "C" PRIMARY KEY,
    agent_id    text   NOT NULL DEFAULT '',
    key_id      text   NOT NULL DEFAULT '',
    agent_name  text   NOT NULL DEFAULT '',
    user_id     text   NOT NULL DEFAULT '',
    first_seen  bigint NOT NULL,
    last_seen   bigint NOT NULL,
    last_seq    bigint NOT NULL,
    steps       bigint NOT NULL DEFAULT 0,
    last_method text   NOT NULL DEFAULT '',
    -- Tally of the session's steps by decision: {"allow":3,"deny":1,…}.
    decisions   jsonb  NOT NULL DEFAULT '{}',
    control     text   NOT NULL DEFAULT 'active'
);
CREATE INDEX sessions_recent ON sessions (last_seen, id);

-- A step's seq is its "step" event's seq; retention deletes both together.
CREATE TABLE steps (
    seq            bigint  PRIMARY KEY,
    session_id     text    NOT NULL,
    turn_id        text    NOT NULL DEFAULT '',
    step_id        text    NOT NULL DEFAULT '',
    method         text    NOT NULL,
    kind           text    NOT NULL DEFAULT '',
    agent_id       text    NOT NULL DEFAULT '',
    agent_name     text    NOT NULL DEFAULT '',
    user_id        text    NOT NULL DEFAULT '',
    key_id         text    NOT NULL DEFAULT '',
    tool           text    COLLATE "C" NOT NULL DEFAULT '',
    decision       text    NOT NULL,
    received_at    bigint  NOT NULL,
    request        text,
    response       text,
    matched_rules  text    NOT NULL DEFAULT '[]',
    latency_micros bigint  NOT NULL DEFAULT 0,
    text           text    NOT NULL DEFAULT '',
    held           boolean NOT NULL DEFAULT false,
    -- Search terms: the step's words, case and accents folded by the guardian before they
    -- get here (search.go), so that queries and documents fold the same way whatever the
    -- server's locale and extensions.
    search         tsvector NOT NULL DEFAULT ''
);
CREATE INDEX steps_session ON steps (session_id, seq);
CREATE INDEX steps_received ON steps (received_at);
CREATE INDEX steps_search ON steps USING gin (search);

CREATE TABLE rules (
    id         text    COLLATE "C" PRIMARY KEY,
    version    integer NOT NULL,
    enabled    boolean NOT NULL,
    rule       text    NOT NULL,
    updated_at bigint  NOT NULL
);

-- Every save is a new version, never rewritten; a delete is a version too.
CREATE TABLE rule_versions (
    rule_id  text    COLLATE "C" NOT NULL,
    version  integer NOT NULL,
    rule     text    NOT NULL,
    saved_at bigint  NOT NULL,
    operator text    NOT NULL DEFAULT '',
    op       text    NOT NULL,
    PRIMARY KEY (rule_id, version)
);

CREATE TABLE holds (
    id         text   COLLATE "C" PRIMARY KEY,
    seq        bigint NOT NULL DEFAULT 0,
    session_id text   NOT NULL,
    agent_id   text   NOT NULL DEFAULT '',
    method     text   NOT NULL,
    kind       text   NOT NULL DEFAULT '',
    tool       text   NOT NULL DEFAULT '',
    rule_id    text   NOT NULL DEFAULT '',
    message    text   NOT NULL DEFAULT '',
    request    text,
    created_at bigint NOT NULL,
    deadline   bigint NOT NULL,
    on_timeout text   NOT NULL,
    status     text   NOT NULL DEFAULT 'pending',
    decision   text   NOT NULL DEFAULT '',
    decided_by text   NOT NULL DEFAULT '',
    decided_at bigint NOT NULL DEFAULT 0,
    note       text   NOT NULL DEFAULT '',
    params     text
);
CREATE INDEX holds_pending ON holds (created_at) WHERE status = 'pending';
CREATE INDEX holds_pending_session ON holds (session_id) WHERE status = 'pending';
CREATE INDEX holds_status ON holds (status, created_at);
CREATE INDEX holds_seq ON holds (seq) WHERE seq > 0;

CREATE TABLE audit (
    id         bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    seq        bigint NOT NULL UNIQUE,
    at         bigint NOT NULL,
    type       text   NOT NULL,
    operator   text   NOT NULL DEFAULT '',
    session_id text   NOT NULL DEFAULT '',
    hold_id    text   NOT NULL DEFAULT '',
    rule_id    text   NOT NULL DEFAULT '',
    decision   text   NOT NULL DEFAULT '',
    note       text   NOT NULL DEFAULT '',
    diff       text,
    detail     text
);
CREATE INDEX audit_type ON audit (type, id);
CREATE INDEX audit_session ON audit (session_id, id);
CREATE INDEX audit_operator ON audit (operator, id);
CREATE INDEX audit_hold ON audit (hold_id, id);

CREATE TABLE api_keys (
    id           text   COLLATE "C" PRIMARY KEY,
    name         text   NOT NULL DEFAULT '',
    agent_id     text   NOT NULL DEFAULT '',
    hash         bytea  NOT NULL UNIQUE,
    prefix       text   NOT NULL DEFAULT '',
    created_at   bigint NOT NULL,
    created_by   text   NOT NULL DEFAULT '',
    expires_at   bigint NOT NULL DEFAULT 0,
    revoked_at   bigint NOT NULL DEFAULT 0,
    last_used_at bigint NOT NULL DEFAULT 0
);

-- Names compare without case (SQLite's COLLATE NOCASE): one account per lower(name).
CREATE TABLE users (
    name          text   COLLATE "C" PRIMARY KEY,
    role          text   NOT NULL CHECK (role IN ('viewer', 'reviewer', 'admin')),
    password_hash text   NOT NULL,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL
);
CREATE UNIQUE INDEX users_lower_name ON users (lower(name));

CREATE TABLE auth_sessions (
    token_hash bytea  PRIMARY KEY,
    user_name  text   COLLATE "C" NOT NULL REFERENCES users (name) ON DELETE CASCADE ON UPDATE CASCADE,
    csrf_token text   NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX auth_sessions_user ON auth_sessions (user_name);
CREATE INDEX auth_sessions_expiry ON auth_sessions (expires_at);

-- Adds two decision tallies: the session summary's update for a batch of steps.
CREATE FUNCTION vigil_add_counts(a jsonb, b jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_object_agg(k, n), '{}'::jsonb) FROM (
        SELECT key AS k, sum(value::bigint) AS n
        FROM (SELECT * FROM jsonb_each_text(a) UNION ALL SELECT * FROM jsonb_each_text(b)) AS t
        GROUP BY key) AS s
$$;
