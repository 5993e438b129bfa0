package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/record"
)

// runExport implements `vigil export`: steps and audit entries as JSON Lines, read from the
// database file without disturbing a guardian that is running on it.
func runExport(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("export", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprint(stderr, `Usage: vigil export [flags]

Writes steps and audit entries as JSON Lines, one object per line, oldest first: the JSON
of GET /api/steps/{seq} and GET /api/audit, each with a leading "record":"step"|"audit".
Safe while the guardian runs.

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

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := exportTo(ctx, *db, *out, stdout, opts)
	if err != nil {
		fmt.Fprintf(stderr, "vigil export: %v\n", err)
		return 1
	}
	dest := "standard output"
	if *out != "-" {
		dest = *out
	}
	fmt.Fprintf(stderr, "vigil export: %d steps, %d audit entries to %s\n", res.Steps, res.Audit, dest)
	return 0
}

// exportTo writes the export to out ("-" for stdout). A file is written under a temporary
// name (mode 0600: steps carry agents' data) and renamed when complete, so a failed export
// never leaves a truncated file behind.
func exportTo(ctx context.Context, dbPath, out string, stdout io.Writer, opts record.ExportOptions) (record.ExportResult, error) {
	ro, err := openExporter(ctx, dbPath)
	if err != nil {
		return record.ExportResult{}, err
	}
	defer ro.Close()
	if out == "-" {
		return ro.Export(ctx, stdout, opts)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.tmp")
	if err != nil {
		return record.ExportResult{}, err
	}
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	res, err := ro.Export(ctx, f, opts)
	if err != nil {
		return res, err
	}
	if err := f.Sync(); err != nil {
		return res, err
	}
	if err := f.Close(); err != nil {
		return res, err
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return res, err
	}
	done = true
	return res, nil
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
