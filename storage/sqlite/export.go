package sqlite

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"

	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A page of Export is one query: it ends after exportPage rows, or once its steps' request,
// response and text (record.StepBulk) add up to exportPageBytes, so that memory stays
// bounded by a page however large the database and its steps (a step bigger than that is
// a page alone), and no read transaction stays open for the whole export. Audit entries are
// paged the same way by their note, diff and detail.
const (
	exportPage      = 500
	exportPageBytes = 16 << 20
)

// querier is what Export reads through: a DB's reader pool or a ReadOnly handle.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Export writes steps and audit entries as JSON Lines to w: one object per line, the JSON
// the API returns for it (GET /api/steps/{seq}, GET /api/audit) with a leading "record"
// field, "step" or "audit", so that one stream can carry both. Records come oldest first
// (steps by seq, audit entries by id), up to the newest that existed when Export started.
// It streams: rows are read a page at a time, each page its own short read, so it can run
// against a database the guardian is writing.
func (db *DB) Export(ctx context.Context, w io.Writer, opts record.ExportOptions) (record.ExportResult, error) {
	if err := db.flushSteps(ctx); err != nil {
		return record.ExportResult{}, fmt.Errorf("storage: export: %w", err)
	}
	return export(ctx, db.r, nil, w, opts)
}

// ReadOnly is a read-only handle on a Vigil database file, for tools (export, checks) that
// run beside a guardian that has the same file open. It never changes the database's
// content, never migrates it, and holds no lock the guardian's writer could wait for (WAL
// readers do not block the writer).
type ReadOnly struct {
	path string
	db   *sql.DB
}

// OpenReadOnly opens the Vigil database at path for reading. The file must exist and carry
// a schema this version knows (created or migrated by Vigil, not newer).
func OpenReadOnly(ctx context.Context, path string) (*ReadOnly, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("storage: resolve %q: %w", path, err)
	}
	if err := checkFile(abs); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", readOnlyDSN(abs, 5*time.Second, true))
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", abs, err)
	}
	db.SetMaxOpenConns(2)
	ro := &ReadOnly{path: abs, db: db}
	if err := ro.checkSchema(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return ro, nil
}

// checkFile requires abs to be an existing regular file, so that nothing creates it.
func checkFile(abs string) error {
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("storage: %s: %w", abs, fs.ErrNotExist)
	case err != nil:
		return fmt.Errorf("storage: %w", err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("storage: %s is not a regular file", abs)
	}
	return nil
}

// readOnlyDSN opens an existing file (mode=rw never creates one), with query_only set when
// asked, and without the journal_mode pragma the guardian's connections set: a database
// that is not in WAL mode (a backup copy) is read as it is, not converted.
func readOnlyDSN(abs string, busy time.Duration, queryOnly bool) string {
	q := url.Values{}
	q.Set("mode", "rw")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	if queryOnly {
		q.Add("_pragma", "query_only(1)")
	}
	return fileURI(abs, q)
}

func (ro *ReadOnly) checkSchema(ctx context.Context) error {
	var version int
	if err := ro.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("storage: open %s: %w", ro.path, err)
	}
	ms, err := loadMigrations(migrationFiles)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	switch {
	case version == 0:
		return fmt.Errorf("storage: %s is not a Vigil database (no schema)", ro.path)
	case version > len(ms):
		return fmt.Errorf("storage: %s: schema version %d, this Vigil knows up to %d: %w",
			ro.path, version, len(ms), ErrSchemaTooNew)
	}
	return nil
}

// Path is the absolute path of the database file.
func (ro *ReadOnly) Path() string { return ro.path }

// Close closes the handle.
func (ro *ReadOnly) Close() error {
	if err := ro.db.Close(); err != nil {
		return fmt.Errorf("storage: close %s: %w", ro.path, err)
	}
	return nil
}

// Export writes records as DB.Export does.
func (ro *ReadOnly) Export(ctx context.Context, w io.Writer, opts record.ExportOptions) (record.ExportResult, error) {
	// Read before the tables: a step copied from the journal meanwhile is then in the
	// tables, and one still journaled is in what was read.
	journaled, err := journaledSteps(ro.path)
	if err != nil {
		return record.ExportResult{}, err
	}
	return export(ctx, ro.db, journaled, w, opts)
}

// Step returns the step with the given seq, or ErrNotFound.
func (ro *ReadOnly) Step(ctx context.Context, seq int64) (record.StepRecord, error) {
	rec, err := scanStep(ro.db.QueryRowContext(ctx, `SELECT `+stepColumns+` FROM steps WHERE seq = ?`, seq))
	if errors.Is(err, sql.ErrNoRows) {
		// Answered by a running guardian but not yet in the tables?
		journaled, jerr := journaledSteps(ro.path)
		if jerr != nil {
			return record.StepRecord{}, jerr
		}
		for _, j := range journaled {
			if j.Seq == seq {
				return j, nil
			}
		}
		return record.StepRecord{}, fmt.Errorf("storage: step %d: %w", seq, record.ErrNotFound)
	}
	if err != nil {
		return record.StepRecord{}, fmt.Errorf("storage: step %d: %w", seq, err)
	}
	return rec, nil
}

// export writes what q holds, followed by the journaled steps not in the tables yet.
func export(ctx context.Context, q querier, journaled []record.StepRecord, w io.Writer, opts record.ExportOptions) (record.ExportResult, error) {
	var res record.ExportResult
	bw := bufio.NewWriterSize(w, 64<<10)
	if opts.Steps {
		n, err := exportSteps(ctx, q, journaled, bw, opts)
		res.Steps = n
		if err != nil {
			return res, err
		}
	}
	if opts.Audit {
		n, err := exportAudit(ctx, q, bw, opts)
		res.Audit = n
		if err != nil {
			return res, err
		}
	}
	if err := bw.Flush(); err != nil {
		return res, fmt.Errorf("storage: export: write: %w", err)
	}
	return res, nil
}

// exportFilter builds the WHERE clause shared by the step and audit pages: key > after, up to
// last, and the options' time and session.
func exportFilter(o record.ExportOptions, key, timeCol string, after, last int64) (string, []any) {
	where := []string{key + " > ?", key + " <= ?"}
	args := []any{after, last}
	if !o.Since.IsZero() {
		where = append(where, timeCol+" >= ?")
		args = append(args, o.Since.UnixNano())
	}
	if o.SessionID != "" {
		where = append(where, "session_id = ?")
		args = append(args, o.SessionID)
	}
	return strings.Join(where, " AND "), args
}

func exportSteps(ctx context.Context, q querier, journaled []record.StepRecord, w *bufio.Writer, opts record.ExportOptions) (int64, error) {
	n, last, err := exportStoredSteps(ctx, q, w, opts)
	if err != nil {
		return n, err
	}
	// Journaled steps after the newest stored one were not in the tables when the export
	// started (the journal is copied in seq order, all at once).
	for i := range journaled {
		rec := &journaled[i]
		if rec.Seq <= last || rec.ReceivedAt.Before(opts.Since) ||
			(opts.SessionID != "" && rec.SessionID != opts.SessionID) {
			continue
		}
		if err := storage.WriteExportRecord(w, record.RecordStep, rec); err != nil {
			return n, fmt.Errorf("storage: export step %d: %w", rec.Seq, err)
		}
		n++
	}
	return n, nil
}

// exportStoredSteps writes the steps in the tables and returns how many, and the newest seq.
func exportStoredSteps(ctx context.Context, q querier, w *bufio.Writer, opts record.ExportOptions) (int64, int64, error) {
	var last int64
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM steps`).Scan(&last); err != nil {
		return 0, last, fmt.Errorf("storage: export steps: %w", err)
	}
	var n, after int64
	if !opts.Since.IsZero() {
		// Skip the older steps through the received_at index rather than reading their rows;
		// the filter below still applies to steps that arrived out of order.
		var first sql.NullInt64
		if err := q.QueryRowContext(ctx, `SELECT min(seq) FROM steps WHERE received_at >= ?`,
			opts.Since.UnixNano()).Scan(&first); err != nil {
			return 0, last, fmt.Errorf("storage: export steps: %w", err)
		}
		if !first.Valid {
			return 0, last, nil
		}
		after = first.Int64 - 1
	}
	for {
		where, args := exportFilter(opts, "seq", "received_at", after, last)
		rows, err := q.QueryContext(ctx, `SELECT `+stepColumns+` FROM steps WHERE `+where+
			` ORDER BY seq LIMIT ?`, append(args, exportPage)...)
		if err != nil {
			return n, last, fmt.Errorf("storage: export steps: %w", err)
		}
		page, more, err := collectPage(rows, scanStep, record.StepBulk)
		if err != nil {
			return n, last, fmt.Errorf("storage: export steps: %w", err)
		}
		for i := range page {
			if err := storage.WriteExportRecord(w, record.RecordStep, &page[i]); err != nil {
				return n, last, fmt.Errorf("storage: export step %d: %w", page[i].Seq, err)
			}
			n++
		}
		if !more {
			return n, last, nil
		}
		after = page[len(page)-1].Seq
	}
}

// collectPage reads rows with scan until they end, exportPage have been read, or the
// sizes of those read add up to exportPageBytes; more reports that it stopped before the
// rows ended. It closes rows, which ends the page's read.
func collectPage[T any](rows *sql.Rows, scan func(scanner) (T, error), size func(*T) int) (page []T, more bool, err error) {
	defer rows.Close()
	bytes := 0
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, false, err
		}
		page = append(page, v)
		bytes += size(&page[len(page)-1])
		if len(page) == exportPage || bytes >= exportPageBytes {
			return page, true, nil
		}
	}
	return page, false, rows.Err()
}

func exportAudit(ctx context.Context, q querier, w *bufio.Writer, opts record.ExportOptions) (int64, error) {
	var last int64
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM audit`).Scan(&last); err != nil {
		return 0, fmt.Errorf("storage: export audit: %w", err)
	}
	var n, after int64
	for {
		where, args := exportFilter(opts, "id", "at", after, last)
		rows, err := q.QueryContext(ctx, `SELECT `+auditColumns+` FROM audit WHERE `+where+
			` ORDER BY id LIMIT ?`, append(args, exportPage)...)
		if err != nil {
			return n, fmt.Errorf("storage: export audit: %w", err)
		}
		page, more, err := collectPage(rows, scanAudit, auditBulk)
		if err != nil {
			return n, fmt.Errorf("storage: export audit: %w", err)
		}
		for i := range page {
			if err := storage.WriteExportRecord(w, record.RecordAudit, &page[i]); err != nil {
				return n, fmt.Errorf("storage: export audit entry %d: %w", page[i].ID, err)
			}
			n++
		}
		if !more {
			return n, nil
		}
		after = page[len(page)-1].ID
	}
}

// scanAudit reads a row of auditColumns the way ListAudit does.
func scanAudit(s scanner) (record.AuditEntry, error) {
	var (
		e            record.AuditEntry
		at           int64
		diff, detail sql.NullString
	)
	if err := s.Scan(&e.ID, &e.Seq, &at, &e.Type, &e.Operator, &e.SessionID, &e.HoldID,
		&e.RuleID, &e.Decision, &e.Note, &diff, &detail); err != nil {
		return record.AuditEntry{}, err
	}
	e.At = time.Unix(0, at).UTC()
	if diff.Valid {
		e.Diff = json.RawMessage(diff.String)
	}
	if detail.Valid {
		e.Detail = json.RawMessage(detail.String)
	}
	return e, nil
}

// auditBulk is the size of an audit entry's fields that can be large (edited params).
func auditBulk(e *record.AuditEntry) int {
	return len(e.Note) + len(e.Diff) + len(e.Detail)
}
