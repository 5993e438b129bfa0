-- A held step's hold, for GET /api/steps/{seq}/hold: a lookup instead of a scan of every hold
-- (queries say "seq > 0" too, so that SQLite may use this partial index).
CREATE INDEX holds_seq ON holds (seq) WHERE seq > 0;
