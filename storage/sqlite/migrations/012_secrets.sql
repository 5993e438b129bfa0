-- Small random secrets by name that the guardian must keep across restarts (storage.Secrets):
-- the AAP gateway's key for the list cursors it seals. Never exported, nor copied by
-- `vigil migrate`: a new key only makes the cursors sealed with the old one unreadable.
CREATE TABLE secrets (
    name  TEXT NOT NULL PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;
