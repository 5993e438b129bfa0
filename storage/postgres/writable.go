package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/vigil-guardian/vigil/storage"
)

// writableQuery tells, in one round trip and without touching Vigil's tables, why writes
// would fail: a server in recovery (a hot standby) takes none; a connection whose
// transaction_read_only is on (default_transaction_read_only in the server's
// configuration, in the URL's options, or set for the database or role when it connected)
// takes none; and a default_transaction_read_only set since with ALTER DATABASE or ALTER
// ROLE is what every connection the pool opens from now on gets, while this one, opened
// before, still writes. The last is read from pg_db_role_setting (readable by any role)
// with PostgreSQL's precedence: role in database, then role, then database, then all roles.
// Last, whether the role may write what every step writes (a grant revoked since the
// guardian started would fail every step while reads still answer); a table not there yet
// counts as writable: the migrations create it.
const writableQuery = `SELECT pg_is_in_recovery(),
	current_setting('transaction_read_only')::bool,
	coalesce((
		SELECT split_part(c, '=', 2)::bool
		FROM pg_db_role_setting s, unnest(s.setconfig) AS c
		WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
			AND s.setrole IN (0, (SELECT oid FROM pg_roles WHERE rolname = session_user))
			AND lower(split_part(c, '=', 1)) = 'default_transaction_read_only'
		ORDER BY s.setrole <> 0 DESC, s.setdatabase <> 0 DESC
		LIMIT 1), false),
	coalesce(has_table_privilege(to_regclass('steps'), 'INSERT'), true)
		AND coalesce(has_table_privilege(to_regclass('events'), 'INSERT'), true)
		AND coalesce(has_table_privilege(to_regclass('sessions'), 'INSERT, UPDATE'), true)
		AND coalesce(has_table_privilege(to_regclass('holds'), 'INSERT, UPDATE'), true)
		AND coalesce(has_table_privilege(to_regclass('vigil_seq'), 'UPDATE'), true)`

// CheckWritable reports whether the database takes writes (see storage.Steps), reading
// the server's state only: whether it is in recovery, and the read-only setting of a
// pooled connection and of the connections it will open.
func (db *DB) CheckWritable(ctx context.Context) (err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	var recovery, readOnly, newReadOnly, granted bool
	if err := db.pool.QueryRow(ctx, writableQuery).Scan(&recovery, &readOnly, &newReadOnly, &granted); err != nil {
		return fmt.Errorf("storage: check writable: %w", err)
	}
	var why []string
	if recovery {
		why = append(why, "the server is in recovery (a standby)")
	}
	if readOnly && !recovery {
		why = append(why, "transaction_read_only is on")
	}
	if newReadOnly {
		why = append(why, "default_transaction_read_only is on for new connections (ALTER DATABASE or ALTER ROLE)")
	}
	if !granted {
		why = append(why, "the role may not write Vigil's tables (INSERT or UPDATE revoked)")
	}
	if len(why) > 0 {
		return fmt.Errorf("storage: %s: %w: %s", db.desc, storage.ErrReadOnly, strings.Join(why, "; "))
	}
	return nil
}
