-- Audit entries of writes made beside a running guardian (the keys and users commands while
-- it serves): that process cannot take seqs, which the guardian hands out from its step
-- journal, so the guardian stores these as audit events itself and deletes them here.
CREATE TABLE audit_outbox (
    id    INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The prepared record.AuditEntry as JSON.
    entry TEXT NOT NULL
);
