-- Retention by size (--retain-size) must see the steps' data shrink when it deletes steps.
-- PostgreSQL's relation sizes do not: a table keeps its files after a DELETE (vacuum makes
-- the space reusable, it does not give it back), so a pass that measured them would find
-- the database as large as before and delete again, every pass, until hardly any step was
-- left. The database therefore keeps a total of the steps' size on the counter row.
--
-- A step counts the stored size of its large columns (request, response, matched rules,
-- text, search terms, peers; pg_column_size: after compression, values kept out of line
-- included, read from the stored row without fetching them) plus a tenth, and 700 bytes
-- for its row header, short and fixed-size columns, "step" event and index entries.
-- Measured against the tables after VACUUM FULL, with steps of 0.7 to 50 KB, that is
-- within about 10 % of what the steps and their events take.
--
-- step_bytes is the size of the steps with seq <= step_bytes_upto. Writing a step costs
-- nothing more: the retention pass counts the steps written since the last one, a few
-- thousand seqs per short transaction under the counter's lock (UsedBytes), so its cost
-- follows the new steps, not the table. Deleting a counted step subtracts it (a trigger,
-- whoever deletes: retention, an administrator), reading the stored row as the count did,
-- so the total does not drift. No scan of the existing steps here: the first pass counts
-- them, a chunk at a time.
ALTER TABLE vigil_seq
    ADD COLUMN step_bytes      bigint NOT NULL DEFAULT 0,
    ADD COLUMN step_bytes_upto bigint NOT NULL DEFAULT 0;

-- The size a step counts, from its stored columns. The short ones (ids, names, the
-- method) are in the 700 bytes.
CREATE FUNCTION vigil_step_bytes(request text, response text, matched_rules text, txt text,
    search tsvector, peers text) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT c + c / 10 + 700 FROM (SELECT (coalesce(pg_column_size(request), 0)
        + coalesce(pg_column_size(response), 0) + coalesce(pg_column_size(matched_rules), 0)
        + coalesce(pg_column_size(txt), 0) + coalesce(pg_column_size(search), 0)
        + coalesce(pg_column_size(peers), 0))::bigint) AS t(c)
$$;

-- Takes the counted steps a statement deletes (or changes) out of the total.
CREATE FUNCTION vigil_uncount_step_bytes() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    upto    bigint;
    added   bigint := 0;
    removed bigint := 0;
BEGIN
    -- Locked, as the counting does, so the two never interleave.
    SELECT step_bytes_upto INTO upto FROM vigil_seq WHERE id = 1 FOR UPDATE;
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE vigil_seq SET step_bytes = 0 WHERE id = 1;
        RETURN NULL;
    END IF;
    SELECT coalesce(sum(vigil_step_bytes(s.request, s.response, s.matched_rules, s.text, s.search, s.peers)), 0)
        INTO removed FROM old_rows s WHERE s.seq <= upto;
    IF TG_OP = 'UPDATE' THEN
        -- Read back from the table: the transition table holds the rows as given, before
        -- compression.
        SELECT coalesce(sum(vigil_step_bytes(s.request, s.response, s.matched_rules, s.text, s.search, s.peers)), 0)
            INTO added FROM steps s WHERE s.seq <= upto AND s.seq IN (SELECT seq FROM new_rows);
    END IF;
    IF added <> removed THEN
        UPDATE vigil_seq SET step_bytes = greatest(step_bytes + added - removed, 0) WHERE id = 1;
    END IF;
    RETURN NULL;
END
$$;

-- A trigger with transition tables serves one event, hence one per event. Steps are
-- never updated by Vigil; an administrator's update is counted all the same.
CREATE TRIGGER steps_uncount_delete AFTER DELETE ON steps
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION vigil_uncount_step_bytes();
CREATE TRIGGER steps_uncount_update AFTER UPDATE ON steps
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION vigil_uncount_step_bytes();
CREATE TRIGGER steps_uncount_truncate AFTER TRUNCATE ON steps
    FOR EACH STATEMENT EXECUTE FUNCTION vigil_uncount_step_bytes();
