package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrBackupExists is returned by Backup when the destination exists and overwriting was
// not asked for.
var ErrBackupExists = errors.New("backup destination exists")

// DestinationError is returned by Backup when dest cannot take a copy at all, whatever the
// database holds: it is empty, the database itself or one of its files, a directory or
// another file that is not a regular file, or in a directory that does not exist. Backup
// finds that before it reads or writes anything, so callers can treat it as bad usage.
type DestinationError struct {
	// Dest is the destination as the caller gave it.
	Dest string
	// Err says what is wrong with it.
	Err error
}

func (e *DestinationError) Error() string {
	return fmt.Sprintf("storage: backup: destination %q: %v", e.Dest, e.Err)
}

func (e *DestinationError) Unwrap() error { return e.Err }

// BackupResult describes a finished backup.
type BackupResult struct {
	// Path is the absolute path of the copy.
	Path string
	// Bytes is the copy's size.
	Bytes int64
}

// Backup writes a consistent copy of the Vigil database at src to dest and verifies it.
//
// The copy is made with VACUUM INTO on a connection of its own: one read transaction, so
// the copy is the database as of one commit, while the guardian keeps writing (WAL lets the
// writer go on beside a reader); the copy is compact and holds no WAL. It is written next to
// dest under a temporary name, synced, checked with PRAGMA integrity_check, and only then
// renamed to dest, so dest is either the complete, checked copy or untouched. An existing
// dest is replaced only when overwrite is true; otherwise Backup fails with ErrBackupExists.
// A symbolic link at dest is replaced itself, not followed. A dest that cannot take a copy
// fails with a *DestinationError.
func Backup(ctx context.Context, src, dest string, overwrite bool) (BackupResult, error) {
	srcAbs, err := filepath.Abs(src)
	if err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: resolve %q: %w", src, err)
	}
	destAbs, err := checkDestination(srcAbs, dest, overwrite)
	if err != nil {
		return BackupResult{}, err
	}
	// Validates src (exists, a Vigil schema) without ever creating or migrating it.
	ro, err := OpenReadOnly(ctx, srcAbs)
	if err != nil {
		return BackupResult{}, err
	}
	if err := ro.Close(); err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: %w", err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(destAbs), "."+filepath.Base(destAbs)+".*.tmp")
	if err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: %w", err)
	}
	tmpPath := tmp.Name()
	_ = tmp.Close() // VACUUM INTO accepts an existing empty file
	keep := false
	defer func() {
		if !keep {
			removeCopy(tmpPath)
		}
	}()

	// The journal is read before the copy is made: a step copied from it into the tables
	// meanwhile is then in the copy, and one still journaled is in what was read.
	journaled, err := journaledSteps(srcAbs)
	if err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: %w", err)
	}
	if err := vacuumInto(ctx, srcAbs, tmpPath); err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup %s: %w", srcAbs, err)
	}
	if err := storeJournaled(ctx, tmpPath, journaled); err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: add journaled steps: %w", err)
	}
	if err := syncFile(tmpPath); err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: %w", err)
	}
	if err := IntegrityCheck(ctx, tmpPath); err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: verify copy: %w", err)
	}
	if err := place(tmpPath, destAbs, overwrite); err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: %w", err)
	}
	keep = true
	_ = syncDir(filepath.Dir(destAbs)) // the rename's durability; not all systems allow it
	st, err := os.Stat(destAbs)
	if err != nil {
		return BackupResult{}, fmt.Errorf("storage: backup: %w", err)
	}
	return BackupResult{Path: destAbs, Bytes: st.Size()}, nil
}

// checkDestination returns dest made absolute once it is known to be able to take a copy
// of the database at srcAbs (see DestinationError) and, without overwrite, not to exist.
func checkDestination(srcAbs, dest string, overwrite bool) (string, error) {
	if dest == "" {
		return "", &DestinationError{Dest: dest, Err: errors.New("empty path")}
	}
	destAbs, err := filepath.Abs(dest)
	if err != nil {
		return "", fmt.Errorf("storage: backup: resolve %q: %w", dest, err)
	}
	// Compared as files, not only as paths: another spelling, a symbolic or a hard link of
	// the database would otherwise have it (or its WAL) replaced by a copy of itself.
	file, err := FindDatabaseFile(srcAbs, destAbs)
	if err != nil {
		return "", fmt.Errorf("storage: backup: %w", err)
	}
	switch file {
	case "":
	case srcAbs:
		return "", &DestinationError{Dest: dest, Err: errors.New("is the database itself")}
	default:
		return "", &DestinationError{Dest: dest, Err: fmt.Errorf("is %s, which belongs to the database", file)}
	}
	st, err := os.Lstat(destAbs)
	switch {
	case err == nil && st.IsDir():
		return "", &DestinationError{Dest: dest, Err: errors.New("is a directory")}
	case err == nil && !st.Mode().IsRegular() && st.Mode()&fs.ModeSymlink == 0:
		return "", &DestinationError{Dest: dest, Err: errors.New("is not a regular file")}
	case err == nil && !overwrite:
		return "", fmt.Errorf("storage: backup: %s: %w", destAbs, ErrBackupExists)
	case err == nil:
		return destAbs, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("storage: backup: %w", err)
	}
	dir := filepath.Dir(destAbs)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", &DestinationError{Dest: dest, Err: fmt.Errorf("directory %s does not exist", dir)}
	}
	return destAbs, nil
}

// removeCopy deletes an unfinished copy with the files SQLite may have left beside it: a
// write that fails (a full disk) can leave the rollback journal of the transaction that
// added the journaled steps, and a WAL and its index are removed for good measure.
func removeCopy(path string) {
	for _, p := range []string{path, path + "-journal", path + "-wal", path + "-shm"} {
		_ = os.Remove(p)
	}
}

// vacuumInto copies the database at src into the empty file dest. Its connection reads
// only; it is not query_only because SQLite counts VACUUM INTO as a write statement.
func vacuumInto(ctx context.Context, src, dest string) error {
	db, err := sql.Open("sqlite", readOnlyDSN(src, 5*time.Second, false))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dest); err != nil {
		return fmt.Errorf("vacuum into %s: %w", dest, err)
	}
	return db.Close()
}

// storeJournaled adds to the database at path the journaled steps it does not hold: those
// after its newest seq.
func storeJournaled(ctx context.Context, path string, steps []record.StepRecord) (err error) {
	db, err := sql.Open("sqlite", readOnlyDSN(path, 5*time.Second, false)+"&_pragma=foreign_keys(1)")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	db.SetMaxOpenConns(1)
	// Backup copies a database as it is, never migrated: one an older Vigil wrote has no
	// summary_mark, and its summaries count their steps already (they were written with them).
	var marked bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_schema
		WHERE type = 'table' AND name = 'summary_mark')`).Scan(&marked); err != nil {
		return fmt.Errorf("read schema: %w", err)
	}
	if !marked && len(steps) == 0 {
		return nil
	}
	// Only the statements the copy runs: the others may name what its schema lacks.
	var stmts writeStmts
	if err := prepareAll(ctx, db, stmts.close, []stmtSpec{
		{&stmts.insertStepEvent, sqlInsertStepEvent},
		{&stmts.insertStep, sqlInsertStep},
		{&stmts.upsertSession, sqlUpsertSession},
	}); err != nil {
		return err
	}
	defer stmts.close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	last, err := lastSeq(ctx, tx)
	if err != nil {
		return err
	}
	var add []pendingStep
	for i := range steps {
		if steps[i].Seq <= last {
			continue
		}
		a, err := newStepArgs(&steps[i])
		if err != nil {
			return err
		}
		add = append(add, pendingStep{seq: steps[i].Seq, args: a})
	}
	// The copy's summaries first count what the guardian still owed them (summaries.go),
	// then the journaled steps, as the writer stores them: rows, then one summary update
	// per session and decision.
	b := &batchTx{tx: tx, stmts: &stmts, bound: make(map[*sql.Stmt]*sql.Stmt, 4)}
	if marked {
		if _, _, err := catchUp(ctx, b); err != nil {
			return err
		}
	}
	deltas, err := ingestTx(b, add)
	if err != nil {
		return err
	}
	if err := applyDeltas(b, deltas); err != nil {
		return err
	}
	if marked {
		if _, err := markNewest(ctx, b); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// place moves tmp to dest: with overwrite by rename; without, by a hard link that fails if
// dest appeared meanwhile, falling back to a checked rename where links are not supported.
func place(tmp, dest string, overwrite bool) error {
	if overwrite {
		return os.Rename(tmp, dest)
	}
	err := os.Link(tmp, dest)
	switch {
	case err == nil:
		return os.Remove(tmp)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s: %w", dest, ErrBackupExists)
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("%s: %w", dest, ErrBackupExists)
	}
	return os.Rename(tmp, dest)
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// IntegrityCheck runs PRAGMA integrity_check on the database file at path, on a read-only
// connection of its own, and returns nil when SQLite answers "ok", otherwise an error
// listing the first problems found. It is safe while a guardian writes the database.
func IntegrityCheck(ctx context.Context, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("storage: integrity check: resolve %q: %w", path, err)
	}
	if err := checkFile(abs); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", readOnlyDSN(abs, 5*time.Second, true))
	if err != nil {
		return fmt.Errorf("storage: integrity check %s: %w", abs, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	const maxProblems = 20
	rows, err := db.QueryContext(ctx, fmt.Sprintf("PRAGMA integrity_check(%d)", maxProblems))
	if err != nil {
		return fmt.Errorf("storage: integrity check %s: %w", abs, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("storage: integrity check %s: %w", abs, err)
		}
		problems = append(problems, line)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("storage: integrity check %s: %w", abs, err)
	}
	if len(problems) == 1 && problems[0] == "ok" {
		return nil
	}
	if len(problems) == 0 {
		return fmt.Errorf("storage: integrity check %s: no answer", abs)
	}
	return fmt.Errorf("storage: integrity check %s failed: %s", abs, strings.Join(problems, "; "))
}
