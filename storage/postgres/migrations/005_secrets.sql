-- Small random secrets by name that every replica must agree on and keep across restarts
-- (storage.Secrets), as SQLite's migration 012 stores them: the AAP gateway's key for the
-- list cursors it seals, so that a cursor one replica gave out opens on any other. Never
-- exported, nor copied by `vigil migrate`: a new key only makes the cursors sealed with the
-- old one unreadable.
CREATE TABLE secrets (
    name  text  PRIMARY KEY,
    value bytea NOT NULL
);
