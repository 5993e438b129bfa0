-- Which API key sent each step, and which key and agent own each session.
-- key_id is the id of the API key the step's request authenticated with ('' without one).
-- A session's key_id and agent_id are those of the first step that carried one: the
-- guardian refuses steps of other keys and agents into it (sessions.agent_id was the newest
-- step's agent before; from now on it no longer changes once set).
ALTER TABLE steps ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
