package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// readStmts are the reads the guardian runs on a step's path, prepared once on the read
// pool (database/sql prepares each on a connection the first time that connection runs it
// and keeps it). The driver has no statement cache: a session's first step looked its
// session up with a query parsed anew, and parsing it (the pending-holds subquery
// included) cost more than running it, 3 % of the guardian's CPU at 32 agents in
// sessions of 20 steps.
type readStmts struct {
	session, recentSteps *sql.Stmt
}

func (s *readStmts) prepare(ctx context.Context, db *sql.DB) error {
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.session, `SELECT ` + sessionColumns + ` FROM sessions s WHERE s.id = ?`},
		{&s.recentSteps, `SELECT ` + historyColumns + ` FROM steps
			WHERE session_id = ? ORDER BY seq DESC LIMIT ?`},
	} {
		st, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			s.close()
			return fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.dst = st
	}
	return nil
}

func (s *readStmts) close() {
	for _, st := range []*sql.Stmt{s.session, s.recentSteps} {
		if st != nil {
			_ = st.Close()
		}
	}
}
