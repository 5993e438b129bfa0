-- The Agent API gateway's verdicts on the approval requests it judged with
-- --agentapi-approvals client: a client may answer only a request Vigil let through to it,
-- once. Kept here rather than in the gateway's memory so that an answer is still known after
-- a restart. key is the SHA-256 of the request's session, API key and id; state is 1
-- (allowed, not answered yet), 2 (denied) or 3 (answered); at is when Vigil last judged it,
-- in unix nanoseconds. Rows older than an hour count as unknown and are pruned.
CREATE TABLE approvals (
    key   BLOB    NOT NULL PRIMARY KEY,
    state INTEGER NOT NULL CHECK (state IN (1, 2, 3)),
    at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX approvals_at ON approvals (at);
