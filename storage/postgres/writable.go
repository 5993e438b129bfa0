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
// Last, which of the privileges the guardian writes with (writtenTables, passed as $1 and
// $2: one table and one privilege per element) the role lacks, by their position in the
// arrays: a grant revoked since the guardian started would fail those writes while reads
// still answer. A table not there yet counts as writable: the migrations create it.
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
	current_user,
	ARRAY(SELECT w.n - 1
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS w(tbl, priv, n)
		WHERE NOT coalesce(has_table_privilege(to_regclass(w.tbl), w.priv), true)
		ORDER BY w.n)`

// tableWrites is one of Vigil's tables and the privileges the running guardian writes it
// with.
type tableWrites struct {
	table      string
	privileges []string
}

// writtenTables are the tables the running guardian writes and the privileges each
// statement of this package needs: INSERT, UPDATE (an upsert's ON CONFLICT DO UPDATE and a
// SELECT … FOR UPDATE need it too), DELETE. Not here: vigil_migrations and the tables
// `vigil migrate` loads, written once before the guardian serves; the sequence of
// audit.id, an identity column, which takes its values without the sequence's privileges;
// and the cluster's tables (guardian/cluster), which keep the replicas' state, not the
// data.
func writtenTables() []tableWrites {
	return []tableWrites{
		{"vigil_seq", []string{"UPDATE"}},                     // the counter every event takes its seq from
		{"events", []string{"INSERT", "DELETE"}},              // every step and change; retention
		{"steps", []string{"INSERT", "DELETE"}},               // every step; retention
		{"sessions", []string{"INSERT", "UPDATE", "DELETE"}},  // every step, session controls; retention
		{"holds", []string{"INSERT", "UPDATE"}},               // held steps and their decisions
		{"audit", []string{"INSERT"}},                         // operators' actions
		{"rules", []string{"INSERT", "UPDATE", "DELETE"}},     // rule edits
		{"rule_versions", []string{"INSERT"}},                 // each edit's version
		{"api_keys", []string{"INSERT", "UPDATE"}},            // keys created, revoked, last used
		{"users", []string{"INSERT", "UPDATE", "DELETE"}},     // operator accounts
		{"auth_sessions", []string{"INSERT", "DELETE"}},       // sign-ins and sign-outs, expiry
		{"approvals", []string{"INSERT", "UPDATE", "DELETE"}}, // the Agent API's approval requests
		{"secrets", []string{"INSERT"}},                       // the AAP gateway's cursor key, made once
	}
}

// CheckWritable reports whether the database takes writes (see storage.Steps), reading
// the server's state only: whether it is in recovery, the read-only setting of a pooled
// connection and of the connections it will open, and the role's privileges on the
// tables the guardian writes. The error names each privilege the role lacks, and on which
// table, for the operator to grant.
func (db *DB) CheckWritable(ctx context.Context) (err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	var tables, privileges []string
	for _, w := range writtenTables() {
		for _, p := range w.privileges {
			tables, privileges = append(tables, w.table), append(privileges, p)
		}
	}
	var recovery, readOnly, newReadOnly bool
	var role string
	var missing []int
	if err := db.pool.QueryRow(ctx, writableQuery, tables, privileges).
		Scan(&recovery, &readOnly, &newReadOnly, &role, &missing); err != nil {
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
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("the role %s may not write Vigil's tables as the guardian does: it lacks %s",
			role, lackedPrivileges(tables, privileges, missing)))
	}
	if len(why) > 0 {
		return fmt.Errorf("storage: %s: %w: %s", db.desc, storage.ErrReadOnly, strings.Join(why, "; "))
	}
	return nil
}

// lackedPrivileges names the privileges at the positions missing (ascending) of the
// parallel tables and privileges, grouped by table in their order: "UPDATE on holds, INSERT and DELETE on auth_sessions", what a GRANT would give back.
func lackedPrivileges(tables, privileges []string, missing []int) string {
	var parts []string
	for i := 0; i < len(missing); {
		table := tables[missing[i]]
		var privs []string
		for ; i < len(missing) && tables[missing[i]] == table; i++ {
			privs = append(privs, privileges[missing[i]])
		}
		list := privs[len(privs)-1]
		if len(privs) > 1 {
			list = strings.Join(privs[:len(privs)-1], ", ") + " and " + list
		}
		parts = append(parts, list+" on "+table)
	}
	return strings.Join(parts, ", ")
}
