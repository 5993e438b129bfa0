package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/postgres"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// runMigrate implements `vigil migrate --from vigil.db --to postgres://…`: a SQLite
// installation copied into an empty PostgreSQL database, for moving to replicas.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprint(stderr, `Usage: vigil migrate --from FILE --to postgres://USER:PASSWORD@HOST:PORT/DB

Copies a SQLite installation into an empty PostgreSQL database, in one transaction: steps
with their seqs, events, sessions (with their pause/block controls and MCP client and
server), holds, the audit log, rules with every version, API keys and operator accounts
(console sign-ins are not copied: operators sign in again; nor are the Agent API
gateway's verdicts on approval requests, kept an hour: a client asks the agent again).
Refuses a database that
already holds data, and a SQLite file a running guardian holds: stop the guardian first.

Flags:
`)
		fset.PrintDefaults()
	}
	from := fset.String("from", dbFromEnv(), "SQLite database file to copy (VIGIL_DB)")
	to := fset.String("to", "", "PostgreSQL URL to copy into (postgres://…), an empty database")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "vigil migrate: unexpected argument %q\n", fset.Arg(0))
		return 2
	}
	if !postgres.IsURL(*to) {
		fmt.Fprintln(stderr, "vigil migrate: --to must be a postgres:// or postgresql:// URL")
		return 2
	}
	if postgres.IsURL(*from) {
		fmt.Fprintln(stderr, "vigil migrate: --from must be a SQLite database file")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	c, err := migrateSQLite(ctx, *from, *to, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Fprintf(stderr, "vigil migrate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "migrated %s to %s: %s; counts verified, %s\n", *from, redactDSN(*to), c,
		time.Since(start).Round(time.Millisecond))
	return 0
}

// migratePage is how many records are read from SQLite at a time; migratePageBytes bounds a
// page of steps, which may each be megabytes.
const (
	migratePage      = 1000
	migratePageBytes = 16 << 20
)

// migrateSQLite copies the SQLite database at from into the empty PostgreSQL database to,
// and checks that the copy holds as many records of each kind as the source.
func migrateSQLite(ctx context.Context, from, to string, log *slog.Logger) (postgres.Counts, error) {
	if _, err := os.Stat(from); err != nil {
		return postgres.Counts{}, fmt.Errorf("source: %w", err)
	}
	// Open (not read-only): it brings the schema up to date and stores the steps its journal
	// holds, so nothing durable is left behind. No background indexing: the copy is all it
	// is opened for.
	src, err := sqlite.Open(ctx, from, sqlite.Options{Logger: log, ManualIndex: true})
	if err != nil {
		return postgres.Counts{}, fmt.Errorf("source: %w", err)
	}
	defer src.Close()
	if err := src.Flush(ctx); err != nil {
		return postgres.Counts{}, fmt.Errorf("source: %w", err)
	}
	want, err := sqliteCounts(ctx, src.Reader())
	if err != nil {
		return postgres.Counts{}, fmt.Errorf("source: %w", err)
	}
	dst, err := postgres.Open(ctx, to, postgres.Options{Logger: log, MaxConns: 2, Committers: 1})
	if err != nil {
		return postgres.Counts{}, fmt.Errorf("destination: %w", err)
	}
	defer dst.Close()
	got, err := dst.Load(ctx, func(l *postgres.Loader) error { return copySQLite(ctx, src, l) })
	if err != nil {
		return postgres.Counts{}, err
	}
	if got != want {
		return got, fmt.Errorf("copied %s, but the source holds %s", got, want)
	}
	// Verified again from a new read, after the commit.
	after, err := dst.Count(ctx)
	if err != nil {
		return got, fmt.Errorf("verify: %w", err)
	}
	if after != want {
		return got, fmt.Errorf("verify: the destination holds %s, the source %s", after, want)
	}
	return got, nil
}

func sqliteCounts(ctx context.Context, r *sql.DB) (postgres.Counts, error) {
	var c postgres.Counts
	err := r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM steps), (SELECT count(*) FROM events),
		(SELECT count(*) FROM sessions), (SELECT count(*) FROM holds), (SELECT count(*) FROM audit),
		(SELECT count(*) FROM rules), (SELECT count(*) FROM rule_versions),
		(SELECT count(*) FROM api_keys), (SELECT count(*) FROM users)`).Scan(&c.Steps, &c.Events,
		&c.Sessions, &c.Holds, &c.Audit, &c.Rules, &c.RuleVersions, &c.APIKeys, &c.Users)
	if err != nil {
		return c, fmt.Errorf("count rows: %w", err)
	}
	return c, nil
}

// copySQLite hands every record of src to l, a page at a time. Records are read through
// the backend's API where it returns them whole, and from the tables where it has no
// listing of everything (events, holds, ids of deleted rules).
func copySQLite(ctx context.Context, src *sqlite.DB, l *postgres.Loader) error {
	// Steps, oldest first, a page of at most migratePage steps or migratePageBytes at a time.
	var from int64
	for {
		steps, err := src.StepsIn(ctx, record.StepRange{After: from, Limit: migratePage, MaxBytes: migratePageBytes})
		if err != nil {
			return err
		}
		if len(steps) == 0 {
			break
		}
		if err := l.Steps(steps); err != nil {
			return err
		}
		from = steps[len(steps)-1].Seq
	}
	// Events other than steps'.
	var after int64
	for {
		events, err := queryRows(ctx, src.Reader(), func(rows *sql.Rows) (record.Event, error) {
			var (
				ev      record.Event
				at      int64
				payload sql.NullString
			)
			err := rows.Scan(&ev.Seq, &ev.Type, &ev.SessionID, &at, &payload)
			ev.At = time.Unix(0, at).UTC()
			if payload.Valid {
				ev.Payload = json.RawMessage(payload.String)
			}
			return ev, err
		}, `SELECT seq, type, session_id, at, payload FROM events WHERE type <> 'step' AND seq > ? ORDER BY seq LIMIT ?`,
			after, migratePage)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if len(events) == 0 {
			break
		}
		if err := l.Events(events); err != nil {
			return err
		}
		after = events[len(events)-1].Seq
	}
	// Sessions, through the cursor.
	cursor := ""
	for {
		page, err := src.Sessions(ctx, record.SessionQuery{Before: cursor, Limit: 500})
		if err != nil {
			return err
		}
		if err := l.Sessions(page.Sessions); err != nil {
			return err
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	// Holds, by id.
	ids, err := queryRows(ctx, src.Reader(), func(rows *sql.Rows) (string, error) {
		var id string
		return id, rows.Scan(&id)
	}, `SELECT id FROM holds ORDER BY id`)
	if err != nil {
		return fmt.Errorf("read holds: %w", err)
	}
	holds := make([]record.Hold, 0, min(len(ids), migratePage))
	for _, id := range ids {
		h, err := src.GetHold(ctx, id)
		if err != nil {
			return err
		}
		if holds = append(holds, h); len(holds) == migratePage {
			if err := l.Holds(holds); err != nil {
				return err
			}
			holds = holds[:0]
		}
	}
	if err := l.Holds(holds); err != nil {
		return err
	}
	// The audit log, newest page first.
	var beforeID int64
	for {
		entries, err := src.ListAudit(ctx, record.AuditQuery{Limit: migratePage, Before: beforeID})
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			break
		}
		if err := l.Audit(entries); err != nil {
			return err
		}
		beforeID = entries[len(entries)-1].ID
	}
	// Rules, and every version of every rule ever saved (deleted ones too).
	rs, err := src.ListRules(ctx)
	if err != nil {
		return err
	}
	if err := l.Rules(rs); err != nil {
		return err
	}
	ruleIDs, err := queryRows(ctx, src.Reader(), func(rows *sql.Rows) (string, error) {
		var id string
		return id, rows.Scan(&id)
	}, `SELECT DISTINCT rule_id FROM rule_versions ORDER BY rule_id`)
	if err != nil {
		return fmt.Errorf("read rule versions: %w", err)
	}
	for _, id := range ruleIDs {
		vs, err := src.RuleVersions(ctx, id)
		if err != nil {
			return err
		}
		if err := l.RuleVersions(vs); err != nil {
			return err
		}
	}
	keys, err := src.APIKeys(ctx)
	if err != nil {
		return err
	}
	if err := l.APIKeys(keys); err != nil {
		return err
	}
	users, err := src.Users(ctx)
	if err != nil {
		return err
	}
	return l.Users(users)
}

func queryRows[T any](ctx context.Context, db *sql.DB, scan func(*sql.Rows) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
