-- A held step's hold, for GET /api/steps/{seq}/hold: a lookup instead of a scan of every hold.
CREATE INDEX holds_seq ON holds (seq) WHERE seq > 0;
