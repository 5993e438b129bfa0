package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/storage/postgres"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// runBackup implements `vigil backup [--db PATH] [--force] DEST`: a consistent copy of the
// database, safe while the guardian runs, verified before it is put in place.
func runBackup(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("backup", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprint(stderr, `Usage: vigil backup [flags] DEST

Writes a consistent copy of the database to DEST while the guardian keeps running, checks
it with PRAGMA integrity_check, and prints its size. DEST is only replaced with --force.
SQLite only: back up a PostgreSQL database with pg_dump (restore with pg_restore).

Flags:
`)
		fset.PrintDefaults()
	}
	db := fset.String("db", dbFromEnv(), "SQLite database file (VIGIL_DB)")
	force := fset.Bool("force", false, "replace DEST if it exists")
	// Flags may also follow DEST (vigil backup copy.db --force).
	var dest []string
	for rest := args; ; {
		if err := fset.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fset.NArg() == 0 {
			break
		}
		dest = append(dest, fset.Arg(0))
		rest = fset.Args()[1:]
	}
	if len(dest) != 1 {
		fmt.Fprintln(stderr, "usage: vigil backup [--db PATH] [--force] DEST")
		return 2
	}

	if *db == "" {
		fmt.Fprintln(stderr, "vigil backup: --db: empty path")
		return 2
	}
	if postgres.IsURL(*db) {
		fmt.Fprintf(stderr, "vigil backup: %v\n", errPGBackup)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := sqlite.Backup(ctx, *db, dest[0], *force)
	// Backup checks DEST before it reads anything: a DEST no backup could go to is bad usage.
	var de *sqlite.DestinationError
	if errors.As(err, &de) {
		fmt.Fprintf(stderr, "vigil backup: DEST %q: %v\n", de.Dest, de.Err)
		return 2
	}
	if errors.Is(err, sqlite.ErrBackupExists) {
		fmt.Fprintf(stderr, "vigil backup: %s exists; pass --force to replace it\n", dest[0])
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "vigil backup: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "backup of %s written to %s: %s (%d bytes), integrity ok, %s\n",
		*db, res.Path, formatBytes(res.Bytes), res.Bytes, time.Since(start).Round(time.Millisecond))
	return 0
}

// byteSize is a flag value for sizes: a number of bytes with an optional unit, decimal
// (KB, MB, GB, TB) or binary (KiB, MiB, GiB, TiB), e.g. 500MB or 2GiB; 0 means none.
type byteSize int64

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
}

// parseByteSize reads a size such as "500MB", "1.5GiB" or "1048576".
func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult, ok := sizeUnits[unit]
	if !ok || num == "" {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (KB, MB, GB, KiB, MiB, GiB…)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative number", s)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// Set implements flag.Value.
func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// String implements flag.Value.
func (b *byteSize) String() string {
	if b == nil || *b == 0 {
		return "0"
	}
	return formatBytes(int64(*b))
}

// formatBytes prints n with a binary unit, e.g. "12.3 MiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
