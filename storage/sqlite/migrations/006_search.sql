-- Full-text search over steps (GET /api/search): a step's session, agent, user, tool,
-- decision ("held" added for held steps), the rules that matched (ids and reason codes) and
-- the start of its text (message text, tool inputs as name=value, results).
-- Contentless: the steps table keeps the data and the index only its tokens. The guardian
-- indexes stored steps in the background (search_progress.upto is the last seq it has
-- looked at), so indexing never delays an agent's answer; deleting a step (retention)
-- removes it from the index in the same transaction.
CREATE VIRTUAL TABLE step_search USING fts5(
    session, agent, user, tool, decision, rules, body,
    content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TABLE search_progress (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    upto INTEGER NOT NULL
);
INSERT INTO search_progress (id, upto) VALUES (1, 0);

CREATE TRIGGER steps_search_delete AFTER DELETE ON steps
WHEN old.seq <= (SELECT upto FROM search_progress WHERE id = 1) BEGIN
    DELETE FROM step_search WHERE rowid = old.seq;
END;
