-- The client and server of a gateway session as they name themselves: an MCP session's
-- clientInfo and serverInfo (name and version). Steps carry them in their request; the
-- session keeps the newest, so the console can list them without reading any step.
ALTER TABLE sessions ADD COLUMN client_name    TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN client_version TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN server_name    TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN server_version TEXT NOT NULL DEFAULT '';
-- Each step keeps them too, as {"client":{…},"server":{…}} ('' for none), so a step reads
-- back exactly as it was published live.
ALTER TABLE steps ADD COLUMN peers TEXT NOT NULL DEFAULT '';
