package postgres

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// exportPage is how many rows one export query reads.
const exportPage = 1000

// Export writes steps (oldest first) then audit entries as JSON Lines, each object led by
// "record":"step"|"audit", as the SQLite backend does. It reads one REPEATABLE READ snapshot
// a page at a time, so a long export neither holds every row nor sees later writes.
func (db *DB) Export(ctx context.Context, w io.Writer, opts record.ExportOptions) (record.ExportResult, error) {
	var res record.ExportResult
	bw := bufio.NewWriterSize(w, 64<<10)
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if opts.Steps {
			var after int64
			for {
				where, args := exportFilter(opts, "seq", "received_at", after)
				rows, err := tx.Query(ctx, `SELECT `+stepColumns+` FROM steps WHERE `+where+
					` ORDER BY seq LIMIT `+fmt.Sprint(exportPage), args...)
				if err != nil {
					return fmt.Errorf("storage: export steps: %w", err)
				}
				n := 0
				for rows.Next() {
					rec, err := scanStep(rows)
					if err != nil {
						rows.Close()
						return fmt.Errorf("storage: export steps: %w", err)
					}
					if err := storage.WriteExportRecord(bw, record.RecordStep, &rec); err != nil {
						rows.Close()
						return fmt.Errorf("storage: export step %d: %w", rec.Seq, err)
					}
					res.Steps++
					n++
					after = rec.Seq
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return fmt.Errorf("storage: export steps: %w", err)
				}
				if n < exportPage {
					break
				}
			}
		}
		if opts.Audit {
			var after int64
			for {
				where, args := exportFilter(opts, "id", "at", after)
				rows, err := tx.Query(ctx, `SELECT `+auditColumns+` FROM audit WHERE `+where+
					` ORDER BY id LIMIT `+fmt.Sprint(exportPage), args...)
				if err != nil {
					return fmt.Errorf("storage: export audit: %w", err)
				}
				n := 0
				for rows.Next() {
					e, err := scanAudit(rows)
					if err != nil {
						rows.Close()
						return fmt.Errorf("storage: export audit: %w", err)
					}
					if err := storage.WriteExportRecord(bw, record.RecordAudit, &e); err != nil {
						rows.Close()
						return fmt.Errorf("storage: export audit entry %d: %w", e.ID, err)
					}
					res.Audit++
					n++
					after = e.ID
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return fmt.Errorf("storage: export audit: %w", err)
				}
				if n < exportPage {
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if err := bw.Flush(); err != nil {
		return res, fmt.Errorf("storage: export: write: %w", err)
	}
	return res, nil
}

func exportFilter(o record.ExportOptions, key, timeCol string, after int64) (string, []any) {
	where := []string{key + " > $1"}
	args := []any{after}
	if !o.Since.IsZero() {
		args = append(args, o.Since.UnixNano())
		where = append(where, fmt.Sprintf("%s >= $%d", timeCol, len(args)))
	}
	if o.SessionID != "" {
		args = append(args, o.SessionID)
		where = append(where, fmt.Sprintf("session_id = $%d", len(args)))
	}
	return strings.Join(where, " AND "), args
}
