package sqlite

import (
	"context"
	"database/sql"
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
	return prepareAll(ctx, db, s.close, []stmtSpec{
		{&s.session, `SELECT ` + sessionColumns + ` FROM sessions s WHERE s.id = ?`},
		{&s.recentSteps, `SELECT ` + historyColumns + ` FROM steps
			WHERE session_id = ? ORDER BY seq DESC LIMIT ?`},
	})
}

func (s *readStmts) close() {
	for _, st := range []*sql.Stmt{s.session, s.recentSteps} {
		if st != nil {
			_ = st.Close()
		}
	}
}
