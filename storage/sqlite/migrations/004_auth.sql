-- Team mode: agents' API keys, operator accounts and their console sessions.
-- Times are INTEGER unix nanoseconds (UTC), 0 when unset.

-- An API key is stored as the SHA-256 of its text, never the text itself. prefix is the
-- key's first characters, enough for an operator to tell keys apart in a list.
CREATE TABLE api_keys (
    id           TEXT    NOT NULL PRIMARY KEY,
    name         TEXT    NOT NULL DEFAULT '',
    -- The only agent id the key may speak as; '' for any agent.
    agent_id     TEXT    NOT NULL DEFAULT '',
    hash         BLOB    NOT NULL UNIQUE,
    prefix       TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    created_by   TEXT    NOT NULL DEFAULT '',
    expires_at   INTEGER NOT NULL DEFAULT 0,
    revoked_at   INTEGER NOT NULL DEFAULT 0,
    -- Written in batches from memory, so it lags real use by up to a flush interval.
    last_used_at INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Names compare without case, so "Alice" and "alice" cannot be two accounts.
CREATE TABLE users (
    name          TEXT    NOT NULL PRIMARY KEY COLLATE NOCASE,
    role          TEXT    NOT NULL CHECK (role IN ('viewer', 'reviewer', 'admin')),
    -- bcrypt hash (includes its own salt and cost).
    password_hash TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;

-- A console session is found by the SHA-256 of its cookie token; removing a user or changing
-- their password ends their sessions.
CREATE TABLE auth_sessions (
    token_hash BLOB    NOT NULL PRIMARY KEY,
    user_name  TEXT    NOT NULL COLLATE NOCASE REFERENCES users (name) ON DELETE CASCADE ON UPDATE CASCADE,
    csrf_token TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX auth_sessions_user ON auth_sessions (user_name);
CREATE INDEX auth_sessions_expiry ON auth_sessions (expires_at);
