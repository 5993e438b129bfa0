-- The Agent API gateway's verdicts on the approval requests it judged with
-- --agentapi-approvals client, as SQLite's migration 011 stores them: a client may answer
-- only a request Vigil let through to it, once, whichever replica let it through and
-- whichever receives the answer. key is the SHA-256 of the request's session, API key and
-- id; state is 1 (allowed, not answered yet), 2 (denied) or 3 (answered); at is when Vigil
-- last judged it, in unix nanoseconds. Rows older than an hour count as unknown and are
-- pruned. `vigil migrate` does not copy them: an answer to a request judged before the move
-- is refused as unknown, and the client asks the agent again.
CREATE TABLE approvals (
    key   bytea    PRIMARY KEY,
    state smallint NOT NULL CHECK (state IN (1, 2, 3)),
    at    bigint   NOT NULL
);
CREATE INDEX approvals_at ON approvals (at);
