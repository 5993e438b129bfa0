package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

var sessionCases = []testCase{
	{"SessionSummary", func(t *testing.T, db storage.Backend) {
		first := step("s1", "allow", 10*time.Second)
		first.AgentID, first.AgentName, first.UserID, first.KeyID = "agent-1", "Bot", "u1", "key-1"
		save(t, db, first)
		early := save(t, db, step("s1", "deny", 0))
		mcp := step("s1", "deny", 20*time.Second)
		mcp.Method, mcp.Kind = "protocols/MCP", "mcp"
		save(t, db, mcp)
		other := step("s1", "modify", 15*time.Second)
		other.AgentID, other.KeyID = "agent-2", "key-2" // owners are the first to claim
		save(t, db, other)
		last := step("s1", "hold", 5*time.Second)
		last.Method = "steps/message"
		save(t, db, last)
		save(t, db, step("s2", "allow", time.Hour))

		s, err := db.Session(bg(), "s1")
		require.NoError(t, err)
		require.Equal(t, record.Session{
			ID: "s1", AgentID: "agent-1", KeyID: "key-1", AgentName: "Bot", UserID: "u1",
			FirstSeen: early.ReceivedAt, LastSeen: mcp.ReceivedAt, LastSeq: last.Seq, Steps: 5,
			Decisions:  map[string]int64{"allow": 1, "deny": 2, "modify": 1, "hold": 1},
			LastMethod: "steps/message", Control: "active",
		}, s)

		renamed := step("s1", "allow", 30*time.Second)
		renamed.AgentName = "Bot v2"
		save(t, db, renamed)
		for _, d := range []string{"hold.timeout", "x:y", "hold.timeout"} {
			save(t, db, step("s1", d, 40*time.Second))
		}
		s, err = db.Session(bg(), "s1")
		require.NoError(t, err)
		require.Equal(t, "Bot v2", s.AgentName)
		require.Equal(t, "agent-1", s.AgentID)
		require.Equal(t, int64(9), s.Steps)
		require.Equal(t, map[string]int64{"allow": 2, "deny": 2, "modify": 1, "hold": 1, "hold.timeout": 2, "x:y": 1}, s.Decisions)

		_, err = db.Session(bg(), "missing")
		require.ErrorIs(t, err, record.ErrNotFound)
	}},
	{"SessionsNewestFirstWithCursorPaging", func(t *testing.T, db storage.Backend) {
		const n = 23
		for i := range n {
			// Two sessions share each last-seen time: ties go by id, descending.
			save(t, db, step(fmt.Sprintf("s%02d", i), "allow", time.Duration(i/2)*time.Second))
		}
		// The expected order: last_seen descending, then id descending.
		expect := make([]string, 0, n)
		for sec := (n - 1) / 2; sec >= 0; sec-- {
			for i := n - 1; i >= 0; i-- {
				if i/2 == sec {
					expect = append(expect, fmt.Sprintf("s%02d", i))
				}
			}
		}
		var got []string
		cursor := ""
		pages := 0
		for {
			page, err := db.Sessions(bg(), record.SessionQuery{Before: cursor, Limit: 5})
			require.NoError(t, err)
			pages++
			require.LessOrEqual(t, len(page.Sessions), 5)
			for _, s := range page.Sessions {
				got = append(got, s.ID)
			}
			if page.Next == "" {
				break
			}
			require.Equal(t, record.SessionCursor(page.Sessions[len(page.Sessions)-1]), page.Next)
			cursor = page.Next
		}
		require.Equal(t, expect, got)
		require.Equal(t, 5, pages)

		page, err := db.Sessions(bg(), record.SessionQuery{})
		require.NoError(t, err)
		require.Len(t, page.Sessions, n, "default limit is at least 50")
		require.Empty(t, page.Next)
	}},
	{"SessionsSearch", func(t *testing.T, db storage.Backend) {
		a := step("alpha-1", "allow", 0)
		a.AgentID = "Mailer"
		save(t, db, a)
		b := step("beta-2", "allow", time.Second)
		b.UserID = "carol_x"
		save(t, db, b)
		c := step("gamma", "allow", 2*time.Second)
		c.AgentName = "Helpful 100%"
		save(t, db, c)
		for _, tc := range []struct {
			search string
			want   []string
		}{
			{"alpha", []string{"alpha-1"}},
			{"MAIL", []string{"alpha-1"}},
			{"carol_", []string{"beta-2"}},
			{"_", []string{"beta-2"}},
			{"100%", []string{"gamma"}},
			{"%", []string{"gamma"}},
			{"a", []string{"gamma", "beta-2", "alpha-1"}},
			{"nothing", nil},
		} {
			page, err := db.Sessions(bg(), record.SessionQuery{Search: tc.search})
			require.NoError(t, err)
			var ids []string
			for _, s := range page.Sessions {
				ids = append(ids, s.ID)
			}
			require.Equal(t, tc.want, ids, tc.search)
		}
	}},
	{"SessionsRejectsForeignCursor", func(t *testing.T, db storage.Backend) {
		for _, c := range []string{"garbage!", "bm90IGpzb24", record.EncodeCursor(0, "x")[:5]} {
			_, err := db.Sessions(bg(), record.SessionQuery{Before: c})
			require.ErrorIs(t, err, record.ErrInvalidCursor, c)
		}
	}},
	{"SessionControlBeforeFirstStep", func(t *testing.T, db storage.Backend) {
		audit := &record.AuditEntry{Type: record.AuditSessionPause}
		events, err := db.SetSessionControl(bg(), record.SessionControl{SessionID: "new", Control: record.ControlPause,
			Operator: "ann", Note: "wait", At: t0}, audit)
		require.NoError(t, err)
		require.Len(t, events, 2)
		require.Equal(t, record.EventSessionControl, events[0].Type)
		require.Equal(t, record.EventAudit, events[1].Type)
		require.Equal(t, "new", audit.SessionID, "audit filled from the control")
		require.Equal(t, "ann", audit.Operator)
		require.Equal(t, "wait", audit.Note)
		require.Equal(t, events[1].Seq, audit.Seq)
		s, err := db.Session(bg(), "new")
		require.NoError(t, err)
		require.Equal(t, record.ControlPaused, s.Control)
		require.Zero(t, s.Steps)

		rec := save(t, db, step("new", "allow", time.Hour))
		s, err = db.Session(bg(), "new")
		require.NoError(t, err)
		require.Equal(t, record.ControlPaused, s.Control)
		require.Equal(t, rec.ReceivedAt, s.FirstSeen, "the first step sets the times")
		require.Equal(t, rec.ReceivedAt, s.LastSeen)
		require.Equal(t, int64(1), s.Steps)

		_, err = db.SetSessionControl(bg(), record.SessionControl{SessionID: "other", Control: record.ControlBlock}, nil)
		require.NoError(t, err)
		controls, err := db.SessionControls(bg())
		require.NoError(t, err)
		require.Equal(t, map[string]string{"new": record.ControlPaused, "other": record.ControlBlocked}, controls)
		_, err = db.SetSessionControl(bg(), record.SessionControl{SessionID: "new", Control: record.ControlResume}, nil)
		require.NoError(t, err)
		controls, err = db.SessionControls(bg())
		require.NoError(t, err)
		require.Equal(t, map[string]string{"other": record.ControlBlocked}, controls)

		for name, c := range map[string]record.SessionControl{
			"bad control": {SessionID: "x", Control: "stop"},
			"no session":  {Control: record.ControlPause},
		} {
			_, err := db.SetSessionControl(bg(), c, nil)
			require.Error(t, err, name)
		}
	}},
}
