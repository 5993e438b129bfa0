package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/vigil-guardian/vigil/record"
)

// outboxInterval is how often the process holding the database stores the audit entries
// written beside it; the guardian re-reads keys and accounts as often (auth's refresh), so
// a key created by `vigil keys create` beside it is usable, and audited, within seconds.
const outboxInterval = time.Second

// queueAuditTx leaves an audit entry for the holder to store: beside it, this process can
// take no seq (see Options.Beside). The entry is in the same transaction as the change it
// audits, so neither is kept without the other.
func queueAuditTx(tx *sql.Tx, e *record.AuditEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("storage: encode audit %s: %w", e.Type, err)
	}
	if _, err := tx.Exec(`INSERT INTO audit_outbox (entry) VALUES (?)`, string(b)); err != nil {
		return fmt.Errorf("storage: queue audit %s: %w", e.Type, err)
	}
	return nil
}

// drainOutbox stores the queued audit entries every outboxInterval until stop closes.
func (db *DB) drainOutbox(stop <-chan struct{}) {
	t := time.NewTicker(outboxInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if db.FileLost() {
				// The file was deleted or replaced: no command can reach this database, and
				// a reader connection opened now would make a new, empty file at its path.
				continue
			}
			if _, err := db.StoreOutbox(context.Background()); err != nil {
				db.log.Error("storage: audit entries written beside the guardian not stored; will retry", "err", err)
			}
		}
	}
}

// StoreOutbox stores the audit entries written beside this process as audit events, in
// the order they were written, and returns how many. A cheap read finds none most of the
// time; the write goes through the writer like any other.
func (db *DB) StoreOutbox(ctx context.Context) (int, error) {
	var waiting bool
	if err := db.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM audit_outbox)`).Scan(&waiting); err != nil {
		return 0, fmt.Errorf("storage: read audit outbox: %w", err)
	}
	if !waiting {
		return 0, nil
	}
	n := 0
	err := db.Exec(ctx, func(tx *sql.Tx) error {
		n = 0
		rows, err := tx.Query(`SELECT id, entry FROM audit_outbox ORDER BY id LIMIT 1000`)
		if err != nil {
			return fmt.Errorf("read audit outbox: %w", err)
		}
		type queued struct {
			id    int64
			entry string
		}
		var qs []queued
		for rows.Next() {
			var q queued
			if err := rows.Scan(&q.id, &q.entry); err != nil {
				rows.Close()
				return fmt.Errorf("read audit outbox: %w", err)
			}
			qs = append(qs, q)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read audit outbox: %w", err)
		}
		for _, q := range qs {
			var a auditArgs
			if err := json.Unmarshal([]byte(q.entry), &a.entry); err != nil {
				// Written by this code's own encoder: an entry that does not read is kept
				// out of the log rather than stopping the others, and said so.
				db.log.Error("storage: unreadable audit entry in the outbox; dropped", "id", q.id, "err", err)
			} else if _, err := db.appendAuditTx(tx, &a); err != nil {
				return err
			}
			if _, err := tx.Exec(`DELETE FROM audit_outbox WHERE id = ?`, q.id); err != nil {
				return fmt.Errorf("delete from audit outbox: %w", err)
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("storage: store audit outbox: %w", err)
	}
	return n, nil
}
