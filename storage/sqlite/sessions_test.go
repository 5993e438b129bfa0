package sqlite

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

func TestSessionSummary(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()

	first := step("s1", "allow", 10*time.Second)
	first.AgentID, first.AgentName, first.UserID = "agent-1", "Bot", "u1"
	save(t, db, first)
	// A step received earlier but stored later must not move last_seen back, but does move
	// first_seen back.
	early := save(t, db, step("s1", "deny", 0))
	// An MCP step names no agent or user: the session keeps what it knew.
	mcp := step("s1", "deny", 20*time.Second)
	mcp.Method, mcp.Kind = "protocols/MCP", "mcp"
	save(t, db, mcp)
	save(t, db, step("s1", "modify", 15*time.Second))
	last := step("s1", "hold", 5*time.Second)
	last.Method = "steps/message"
	last = save(t, db, last)
	save(t, db, step("s2", "allow", time.Hour))

	s, err := db.Session(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, record.Session{
		ID:         "s1",
		AgentID:    "agent-1",
		AgentName:  "Bot",
		UserID:     "u1",
		FirstSeen:  early.ReceivedAt,
		LastSeen:   mcp.ReceivedAt,
		LastSeq:    last.Seq,
		Steps:      5,
		Decisions:  map[string]int64{"allow": 1, "deny": 2, "modify": 1, "hold": 1},
		LastMethod: "steps/message",
		Control:    "active",
	}, s)

	// A later step naming a different agent name updates it.
	renamed := step("s1", "allow", 30*time.Second)
	renamed.AgentName = "Bot v2"
	save(t, db, renamed)
	s, err = db.Session(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, "Bot v2", s.AgentName)
	require.Equal(t, "agent-1", s.AgentID)
	require.Equal(t, int64(2), s.Decisions["allow"])
	require.Equal(t, int64(6), s.Steps)

	// Any decision string the guardian uses is tallied under its own key.
	for _, d := range []string{"hold.timeout", "x:y", "hold.timeout"} {
		save(t, db, step("s1", d, 40*time.Second))
	}
	s, err = db.Session(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"allow": 2, "deny": 2, "modify": 1, "hold": 1,
		"hold.timeout": 2, "x:y": 1}, s.Decisions)

	_, err = db.Session(ctx, "missing")
	require.ErrorIs(t, err, record.ErrNotFound)
}

func TestSessionCreatedBeforeItsFirstStep(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	// A session control may create the row before any step (holds feature).
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO sessions (id, first_seen, last_seen, last_seq, steps, control)
			VALUES ('s', ?, ?, 0, 0, 'paused')`, t0.Add(time.Hour).UnixNano(), t0.Add(time.Hour).UnixNano())
		return err
	}))
	rec := save(t, db, step("s", "hold", 0))
	s, err := db.Session(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, rec.ReceivedAt, s.FirstSeen)
	require.Equal(t, rec.ReceivedAt, s.LastSeen)
	require.Equal(t, "paused", s.Control, "a step does not reset the control")
	require.Equal(t, int64(1), s.Steps)
}

func TestSessionsPaginationWalksEverySessionOnce(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	// 23 sessions over 5 distinct last_seen values: many ties.
	const n = 23
	for i := range n {
		save(t, db, step(fmt.Sprintf("s%02d", i), "allow", time.Duration(i%5)*time.Second))
	}
	for _, limit := range []int{1, 2, 4, 7, 23, 50} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			seen := map[string]bool{}
			var order []record.Session
			cursor := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, n+1, "pagination does not terminate")
				page, err := db.Sessions(ctx, record.SessionQuery{Before: cursor, Limit: limit})
				require.NoError(t, err)
				require.LessOrEqual(t, len(page.Sessions), limit)
				for _, s := range page.Sessions {
					require.False(t, seen[s.ID], "session %s seen twice", s.ID)
					seen[s.ID] = true
					order = append(order, s)
				}
				if page.Next == "" {
					break
				}
				cursor = page.Next
			}
			require.Len(t, seen, n)
			for i := 1; i < len(order); i++ {
				a, b := order[i-1], order[i]
				newer := a.LastSeen.After(b.LastSeen) || (a.LastSeen.Equal(b.LastSeen) && a.ID > b.ID)
				require.True(t, newer, "%s before %s", a.ID, b.ID)
			}
		})
	}
}

func TestSessionsLimitAndSearch(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	for i := range 3 {
		rec := step(fmt.Sprintf("alpha-%d", i), "allow", time.Duration(i))
		rec.AgentID = "mailer"
		save(t, db, rec)
	}
	rec := step("beta", "allow", 0)
	rec.UserID = "Carol_100%"
	rec.AgentName = "Research Bot"
	save(t, db, rec)

	tests := []struct {
		search string
		want   []string
	}{
		{"", []string{"alpha-2", "alpha-1", "beta", "alpha-0"}}, // ties by id, descending
		{"alpha", []string{"alpha-2", "alpha-1", "alpha-0"}},
		{"MAILER", []string{"alpha-2", "alpha-1", "alpha-0"}},
		{"research", []string{"beta"}},
		{"a_1", nil}, // '_' is literal, not a wildcard (it would match "alpha-1")
		{"ol_100%", []string{"beta"}},
		{"100%%", nil},
		{"nothing", nil},
	}
	for _, tc := range tests {
		t.Run(tc.search, func(t *testing.T) {
			page, err := db.Sessions(ctx, record.SessionQuery{Search: tc.search})
			require.NoError(t, err)
			var ids []string
			for _, s := range page.Sessions {
				ids = append(ids, s.ID)
			}
			require.Equal(t, tc.want, ids)
			require.Empty(t, page.Next)
		})
	}

	page, err := db.Sessions(ctx, record.SessionQuery{Search: "alpha", Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Sessions, 2)
	page, err = db.Sessions(ctx, record.SessionQuery{Search: "alpha", Limit: 2, Before: page.Next})
	require.NoError(t, err)
	require.Len(t, page.Sessions, 1)
	require.Equal(t, "alpha-0", page.Sessions[0].ID)
}

func TestSessionsDefaultAndMaxLimit(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 510)
			INSERT INTO sessions (id, first_seen, last_seen, last_seq, steps)
			SELECT 's' || i, i, i, i, 1 FROM k`)
		return err
	}))
	tests := []struct{ limit, want int }{{0, 50}, {-1, 50}, {3, 3}, {1000, 500}}
	for _, tc := range tests {
		page, err := db.Sessions(ctx, record.SessionQuery{Limit: tc.limit})
		require.NoError(t, err)
		require.Len(t, page.Sessions, tc.want)
		require.NotEmpty(t, page.Next)
	}
}

func TestSessionsRejectsForeignCursor(t *testing.T) {
	db := openTest(t)
	for _, c := range []string{"not base64!", "bm90IGpzb24", encodeCursorRaw(`[1]`), encodeCursorRaw(`["x","y"]`)} {
		_, err := db.Sessions(context.Background(), record.SessionQuery{Before: c})
		require.ErrorIs(t, err, record.ErrInvalidCursor, c)
	}
}

func encodeCursorRaw(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestSessionOwnersAreTheFirstToClaim(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)

	// The first steps name neither: the session has no owner yet.
	save(t, db, step("s", "allow", 0))
	s, err := db.Session(ctx, "s")
	require.NoError(t, err)
	require.Empty(t, s.AgentID)
	require.Empty(t, s.KeyID)

	// The first step naming an agent and a key claims the session; later ones change nothing.
	claim := step("s", "allow", time.Second)
	claim.AgentID, claim.KeyID = "agent-a", "key_a"
	save(t, db, claim)
	other := step("s", "allow", 2*time.Second)
	other.AgentID, other.KeyID, other.AgentName = "agent-b", "key_b", "B"
	save(t, db, other)
	s, err = db.Session(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "agent-a", s.AgentID)
	require.Equal(t, "key_a", s.KeyID)
	require.Equal(t, "B", s.AgentName)

	// The owners and each step's key survive a restart.
	require.NoError(t, db.Close())
	db, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	s, err = db.Session(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "key_a", s.KeyID)
	got, err := db.Step(ctx, other.Seq)
	require.NoError(t, err)
	require.Equal(t, "key_b", got.KeyID)
	page, err := db.Sessions(ctx, record.SessionQuery{})
	require.NoError(t, err)
	require.Len(t, page.Sessions, 1)
	require.Equal(t, "key_a", page.Sessions[0].KeyID)
}

// A session keeps the newest client and server its steps named, name and version together;
// steps that name none (or a peer without a name) change nothing, and each step reads back
// with its own.
func TestSessionPeers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)

	first := step("mcp", "allow", 0)
	first.Client, first.Server = &record.Peer{Name: "inspector", Version: "1.0"}, &record.Peer{Name: "everything", Version: "2.0"}
	save(t, db, first)
	save(t, db, step("mcp", "deny", time.Second))
	nameless := step("mcp", "allow", 2*time.Second)
	nameless.Client = &record.Peer{Version: "9"}
	save(t, db, nameless)
	s, err := db.Session(ctx, "mcp")
	require.NoError(t, err)
	require.Equal(t, &record.Peer{Name: "inspector", Version: "1.0"}, s.Client)
	require.Equal(t, &record.Peer{Name: "everything", Version: "2.0"}, s.Server)

	upgraded := step("mcp", "allow", 3*time.Second)
	upgraded.Server = &record.Peer{Name: "everything-next"}
	save(t, db, upgraded)
	page, err := db.Sessions(ctx, record.SessionQuery{})
	require.NoError(t, err)
	require.Len(t, page.Sessions, 1)
	require.Equal(t, &record.Peer{Name: "inspector", Version: "1.0"}, page.Sessions[0].Client)
	require.Equal(t, &record.Peer{Name: "everything-next"}, page.Sessions[0].Server, "the version goes with its name")

	// A session of other steps has neither, and everything survives a restart.
	save(t, db, step("plain", "allow", 0))
	require.NoError(t, db.Close())
	db, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	s, err = db.Session(ctx, "plain")
	require.NoError(t, err)
	require.Nil(t, s.Client)
	require.Nil(t, s.Server)
	s, err = db.Session(ctx, "mcp")
	require.NoError(t, err)
	require.Equal(t, "everything-next", s.Server.Name)
	got, err := db.Step(ctx, first.Seq)
	require.NoError(t, err)
	require.Equal(t, first.Client, got.Client)
	require.Equal(t, first.Server, got.Server)
	got, err = db.Step(ctx, upgraded.Seq)
	require.NoError(t, err)
	require.Nil(t, got.Client)
}
