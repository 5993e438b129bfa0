-- The client and server of a gateway session as they name themselves (an MCP session's
-- clientInfo and serverInfo), as SQLite's migration 008 stores them: the session keeps the
-- newest a step named, name and version together ('' for none), so the console lists them
-- without reading any step.
ALTER TABLE sessions
    ADD COLUMN client_name    text NOT NULL DEFAULT '',
    ADD COLUMN client_version text NOT NULL DEFAULT '',
    ADD COLUMN server_name    text NOT NULL DEFAULT '',
    ADD COLUMN server_version text NOT NULL DEFAULT '';
-- Each step keeps them too, as {"client":{…},"server":{…}} ('' for none), so a step reads
-- back exactly as it was published live. Text, not jsonb, as the other JSON the API returns.
ALTER TABLE steps ADD COLUMN peers text NOT NULL DEFAULT '';
