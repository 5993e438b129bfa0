-- Rules: the current set, and every saved version of every rule.
-- Times are INTEGER unix nanoseconds (UTC), as everywhere.

-- One row per live rule. rule is the rule's JSON as the API returns it; version, enabled
-- and updated_at repeat fields of it for queries and are authoritative on read.
CREATE TABLE rules (
    id         TEXT    NOT NULL PRIMARY KEY,
    version    INTEGER NOT NULL,
    enabled    INTEGER NOT NULL,
    rule       TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Every save is a new version; versions are never rewritten. A delete is recorded as a
-- version too (op 'delete', holding the rule as it was), and no foreign key ties versions to
-- rules, so a deleted rule keeps its history and can be restored. A rule created again under
-- the same id continues the numbering.
CREATE TABLE rule_versions (
    rule_id  TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    rule     TEXT    NOT NULL,
    saved_at INTEGER NOT NULL,
    operator TEXT    NOT NULL DEFAULT '',
    op       TEXT    NOT NULL,
    PRIMARY KEY (rule_id, version)
) WITHOUT ROWID;
