-- A session's summary row is written a few seconds behind its steps (see summaries.go), so
-- that a session taking steps all the time is written once for many of them. The mark says
-- how far the rows are known to be whole: every step whose seq is at or below it is counted
-- in its session's row. After a crash the steps past it that their session's row does not
-- count yet (seq above the row's last_seq) are counted at the next start.
CREATE TABLE summary_mark (
    id  INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);
INSERT INTO summary_mark (id, seq) SELECT 1, coalesce(max(seq), 0) FROM events;
