package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/postgres"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// runExport implements `vigil export`: steps and audit entries as JSON Lines, read from the
// database (a SQLite file or a PostgreSQL URL) without disturbing a guardian that is running
// on it, and without creating or migrating it (openExporter).
func runExport(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("export", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprint(stderr, `Usage: vigil export [flags]

Writes steps and audit entries as JSON Lines, one object per line, oldest first: the JSON
of GET /api/steps/{seq} and GET /api/audit, each with a leading "record":"step"|"audit".
Safe while the guardian runs. Only reads: never creates or migrates the database, and
refuses one without Vigil's schema or with a newer one (on PostgreSQL also an older one:
start this version's guardian on it first).

Flags:
`)
		fset.PrintDefaults()
	}
	db := fset.String("db", dbFromEnv(), "SQLite database file or postgres:// URL (VIGIL_DB)")
	since := fset.String("since", "", "only records at or after this time: RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02, UTC) or a duration back from now (24h)")
	session := fset.String("session", "", "only this session's steps and audit entries")
	what := fset.String("what", "all", "what to export: steps, audit or all")
	out := fset.String("out", "-", "output file; - for standard output")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "vigil export: unexpected argument %q\n", fset.Arg(0))
		return 2
	}
	opts := record.ExportOptions{SessionID: *session}
	switch *what {
	case "steps":
		opts.Steps = true
	case "audit":
		opts.Audit = true
	case "all":
		opts.Steps, opts.Audit = true, true
	default:
		fmt.Fprintf(stderr, "vigil export: -what: must be steps, audit or all, got %q\n", *what)
		return 2
	}
	if *since != "" {
		t, err := parseSince(*since, time.Now())
		if err != nil {
			fmt.Fprintf(stderr, "vigil export: -since: %v\n", err)
			return 2
		}
		opts.Since = t
	}

	if *db == "" {
		fmt.Fprintln(stderr, "vigil export: --db: empty path")
		return 2
	}
	// The output is checked before anything is read: a wrong --out is found at once, not
	// after a long export, and never replaces the database.
	dest, err := exportDestination(*out, *db)
	if err != nil {
		fmt.Fprintf(stderr, "vigil export: --out %q: %v\n", *out, err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := exportTo(ctx, *db, dest, stdout, opts)
	if err != nil {
		fmt.Fprintf(stderr, "vigil export: %v\n", err)
		return 1
	}
	where := "standard output"
	if dest.path != "" {
		where = *out
	}
	fmt.Fprintf(stderr, "vigil export: %d steps, %d audit entries to %s\n", res.Steps, res.Audit, where)
	return 0
}

// exportDest is where an export goes: standard output (path ""), a regular file written
// under a temporary name and renamed to path when complete, or a file that is not a regular
// file (a FIFO, a device such as /dev/null) written in place, since renaming over it would
// replace it with a regular file.
type exportDest struct {
	path    string
	inPlace bool
}

// exportDestination decides where --out goes. "-" and /dev/stdout are standard output. A
// symbolic link is followed and the rules apply to its target: a regular file is replaced
// (the link stays), a missing one created, anything else written in place. The database and
// the files beside it, a directory, and a path whose directory does not exist are refused.
func exportDestination(out, db string) (exportDest, error) {
	switch out {
	case "":
		return exportDest{}, errors.New("empty path (- is standard output)")
	case "-", "/dev/stdout":
		return exportDest{}, nil
	}
	if !postgres.IsURL(db) {
		file, err := sqlite.FindDatabaseFile(db, out)
		if err != nil {
			return exportDest{}, err
		}
		switch file {
		case "":
		case db:
			return exportDest{}, fmt.Errorf("is the database %s itself", db)
		default:
			return exportDest{}, fmt.Errorf("is %s, which belongs to the database", file)
		}
	}
	// Stat, not the resolved path, classifies: the kernel follows links such as /dev/stderr
	// (to /proc/self/fd/2, whose target may be "pipe:[…]") that no path names.
	st, err := os.Stat(out)
	switch {
	case err == nil && st.IsDir():
		return exportDest{}, errors.New("is a directory")
	case err == nil && !st.Mode().IsRegular():
		return exportDest{path: out, inPlace: true}, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return exportDest{}, err
	}
	path, err := sqlite.ResolvePath(out)
	if err != nil {
		return exportDest{}, err
	}
	if st != nil {
		if pst, perr := os.Stat(path); perr != nil || !os.SameFile(st, pst) {
			return exportDest{}, errors.New("cannot tell which file it names")
		}
		return exportDest{path: path}, nil
	}
	dir := filepath.Dir(path)
	if dst, err := os.Stat(dir); err != nil || !dst.IsDir() {
		return exportDest{}, fmt.Errorf("directory %s does not exist", dir)
	}
	return exportDest{path: path}, nil
}

// exportTo writes the export to dest. A regular file is written under a temporary name
// (mode 0600: steps carry agents' data) and renamed when complete, so a failed export never
// leaves a truncated file behind.
func exportTo(ctx context.Context, dbPath string, dest exportDest, stdout io.Writer, opts record.ExportOptions) (record.ExportResult, error) {
	ro, err := openExporter(ctx, dbPath)
	if err != nil {
		return record.ExportResult{}, err
	}
	defer ro.Close()
	switch {
	case dest.path == "":
		return ro.Export(ctx, stdout, opts)
	case dest.inPlace:
		return exportInPlace(ctx, ro, dest.path, opts)
	}
	dir := filepath.Dir(dest.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(dest.path)+".*.tmp")
	if err != nil {
		return record.ExportResult{}, fmt.Errorf("cannot create a file in %s: %w", dir, pathErr(err))
	}
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	res, err := ro.Export(ctx, f, opts)
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == f.Name() {
		return res, fmt.Errorf("write %s: %w", dest.path, pe.Err) // the user's name, not the temporary one
	}
	if err != nil {
		return res, err
	}
	if err := f.Sync(); err != nil {
		return res, fmt.Errorf("write %s: %w", dest.path, pathErr(err))
	}
	if err := f.Close(); err != nil {
		return res, fmt.Errorf("write %s: %w", dest.path, pathErr(err))
	}
	if err := os.Rename(f.Name(), dest.path); err != nil {
		return res, fmt.Errorf("replace %s: %w", dest.path, pathErr(err))
	}
	done = true
	return res, nil
}

// exportInPlace writes the export straight into path, a FIFO or a device. Opening a FIFO
// waits for a reader, so the open runs aside and an interrupt still ends the command.
func exportInPlace(ctx context.Context, ro exporter, path string, opts record.ExportOptions) (record.ExportResult, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		ch <- opened{f, err}
	}()
	var f *os.File
	select {
	case o := <-ch:
		if o.err != nil {
			return record.ExportResult{}, fmt.Errorf("open %s: %w", path, pathErr(o.err))
		}
		f = o.f
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.f != nil {
				_ = o.f.Close()
			}
		}()
		return record.ExportResult{}, fmt.Errorf("open %s: %w", path, ctx.Err())
	}
	// Checked on what was opened: a regular file put there since would be overwritten
	// from its start instead of replaced whole.
	st, err := f.Stat()
	if err == nil && st.Mode().IsRegular() {
		err = errors.New("it became a regular file meanwhile")
	}
	if err != nil {
		_ = f.Close()
		return record.ExportResult{}, fmt.Errorf("open %s: %w", path, pathErr(err))
	}
	res, err := ro.Export(ctx, f, opts)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write %s: %w", path, pathErr(cerr))
	}
	return res, err
}

// pathErr is the cause of a file system error without the path it names: the messages
// here name the user's path, not a temporary file's.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// parseSince reads an RFC 3339 time, a date (midnight UTC), or a duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time, a date (YYYY-MM-DD) nor a duration (e.g. 24h)", s)
	}
	if d < 0 {
		return time.Time{}, fmt.Errorf("%q: a duration back from now must not be negative", s)
	}
	return now.Add(-d), nil
}

// dbFromEnv is the --db default of the offline commands: VIGIL_DB, as for serve, else the
// default database file.
func dbFromEnv() string {
	if v := strings.TrimSpace(os.Getenv("VIGIL_DB")); v != "" {
		return v
	}
	return defaultDBPath()
}
