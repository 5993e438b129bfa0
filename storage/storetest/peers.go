package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// peerCases: the client and server of a gateway session (an MCP session's clientInfo and
// serverInfo), kept by each step as published and by its session as the newest named.
var peerCases = []testCase{
	{"StepPeersReadBackEverywhere", func(t *testing.T, db storage.Backend) {
		rec := step("mcp", "allow", 0)
		rec.Client = &record.Peer{Name: "inspector", Version: "0.16.2"}
		rec.Server = &record.Peer{Name: "mcp-servers/everything"} // no version
		save(t, db, rec)
		clientOnly := step("mcp", "deny", time.Second)
		clientOnly.Client = &record.Peer{Name: "inspector", Version: "0.16.2"}
		save(t, db, clientOnly)
		// A big step, which an events page truncates: it keeps its peers.
		big := step("mcp", "allow", 2*time.Second)
		big.Client, big.Server = rec.Client, &record.Peer{Name: "everything", Version: "2"}
		big.Text = strings.Repeat("x", 20000)
		save(t, db, big)
		plain := save(t, db, step("mcp", "allow", 3*time.Second))
		recs := []*record.StepRecord{rec, clientOnly, big, plain}

		wantJSON := make([]string, len(recs))
		for i, r := range recs {
			got, err := db.Step(bg(), r.Seq)
			require.NoError(t, err)
			require.Equal(t, *r, got)
			b, err := json.Marshal(r)
			require.NoError(t, err)
			wantJSON[i] = string(b)
		}
		require.Contains(t, wantJSON[0], `"client":{"name":"inspector","version":"0.16.2"},"server":{"name":"mcp-servers/everything"}`)
		require.NotContains(t, wantJSON[1], `"server"`)
		require.NotContains(t, wantJSON[3], `"client"`)

		requireSame := func(name string, got []record.StepRecord) {
			t.Helper()
			require.Len(t, got, len(recs), name)
			for i, r := range recs {
				require.Equal(t, *r, got[i], name)
			}
		}
		steps, err := db.Steps(bg(), record.StepQuery{SessionID: "mcp"})
		require.NoError(t, err)
		requireSame("Steps", steps)
		requireHistory := func(name string, got []record.StepRecord) {
			t.Helper()
			require.Len(t, got, len(recs), name)
			for i, r := range recs {
				// History: the peers, without the request and answer.
				require.Equal(t, storage.AsHistory(*r), got[i], name)
			}
		}
		steps, err = db.RecentSteps(bg(), "mcp", 10)
		require.NoError(t, err)
		requireHistory("RecentSteps", steps)
		steps, err = db.StepsIn(bg(), record.StepRange{Limit: 10})
		require.NoError(t, err)
		requireSame("StepsIn", steps)
		steps, err = db.SessionStepsBefore(bg(), "mcp", 0, 10)
		require.NoError(t, err)
		requireHistory("SessionStepsBefore", steps)

		// A live client gets each step as it was published.
		events := allEvents(t, db)
		require.Len(t, events, len(recs))
		for i := range recs {
			require.JSONEq(t, wantJSON[i], string(events[i].Payload), "EventsAfter %d", i)
		}
		events, err = db.EventsPage(bg(), 0, record.EventPage{MaxBytes: 1 << 20})
		require.NoError(t, err)
		require.Len(t, events, len(recs))
		for i := range recs {
			require.JSONEq(t, wantJSON[i], string(events[i].Payload), "EventsPage %d", i)
		}
		events, err = db.EventsPage(bg(), 0, record.EventPage{MaxStepBulk: 1000})
		require.NoError(t, err)
		require.Len(t, events, len(recs))
		var truncated record.StepRecord
		require.NoError(t, json.Unmarshal(events[2].Payload, &truncated))
		require.True(t, truncated.Truncated)
		require.Equal(t, big.Client, truncated.Client, "a truncated step keeps its peers")
		require.Equal(t, big.Server, truncated.Server)
		require.JSONEq(t, wantJSON[0], string(events[0].Payload), "small steps whole")

		// An export line is the API's record.
		var buf bytes.Buffer
		_, err = db.Export(bg(), &buf, record.ExportOptions{Steps: true})
		require.NoError(t, err)
		lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
		require.Len(t, lines, len(recs))
		for i := range recs {
			var line map[string]any
			require.NoError(t, json.Unmarshal(lines[i], &line))
			delete(line, "record")
			var want map[string]any
			require.NoError(t, json.Unmarshal([]byte(wantJSON[i]), &want))
			require.Equal(t, want, line, "export %d", i)
		}
	}},
	{"SessionKeepsNewestPeers", func(t *testing.T, db storage.Backend) {
		inspector := &record.Peer{Name: "inspector", Version: "1.0"}
		everything := &record.Peer{Name: "everything", Version: "2.0"}
		first := step("mcp", "allow", 0)
		first.Client, first.Server = inspector, everything
		save(t, db, first)
		save(t, db, step("plain", "allow", 0))

		// Later steps that name none, or a peer without a name, change nothing.
		save(t, db, step("mcp", "deny", time.Second))
		nameless := step("mcp", "allow", 2*time.Second)
		nameless.Client = &record.Peer{Version: "9"}
		nameless.Server = &record.Peer{}
		save(t, db, nameless)
		requireSessionPeers(t, db, "mcp", inspector, everything)
		requireSessionPeers(t, db, "plain", nil, nil)

		// A newer server replaces name and version together; the client stays.
		next := &record.Peer{Name: "everything-next"}
		upgraded := step("mcp", "allow", 3*time.Second)
		upgraded.Server = next
		save(t, db, upgraded)
		requireSessionPeers(t, db, "mcp", inspector, next)
		// Received earlier but stored later: newest is by arrival, as for the agent name.
		late := step("mcp", "allow", -time.Hour)
		late.Client = &record.Peer{Name: "cli", Version: "3"}
		save(t, db, late)
		requireSessionPeers(t, db, "mcp", late.Client, next)

		// A session control before the first step, then a step naming them.
		_, err := db.SetSessionControl(bg(), record.SessionControl{SessionID: "ctl", Control: record.ControlPause}, nil)
		require.NoError(t, err)
		requireSessionPeers(t, db, "ctl", nil, nil)
		named := step("ctl", "allow", 0)
		named.Server = everything
		save(t, db, named)
		requireSessionPeers(t, db, "ctl", nil, everything)
	}},
	{"SessionPeersOfConcurrentSteps", func(t *testing.T, db storage.Backend) {
		// Steps saved together may be stored together (one batch or transaction): the
		// session still keeps the peers of the newest step (by seq) naming each.
		const n = 40
		recs := make([]*record.StepRecord, n)
		for i := range recs {
			rec := step("burst", "allow", time.Duration(i))
			switch i % 4 {
			case 0:
				rec.Client = &record.Peer{Name: fmt.Sprint("client-", i), Version: fmt.Sprint(i)}
			case 1:
				rec.Server = &record.Peer{Name: fmt.Sprint("server-", i), Version: fmt.Sprint(i)}
			case 2:
				rec.Client = &record.Peer{Version: "nameless"}
			}
			recs[i] = rec
		}
		var wg sync.WaitGroup
		for _, rec := range recs {
			wg.Go(func() {
				if err := db.SaveStep(bg(), rec); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		require.False(t, t.Failed())
		var client, server *record.Peer
		var clientSeq, serverSeq int64
		for _, rec := range recs {
			if rec.Client != nil && rec.Client.Name != "" && rec.Seq > clientSeq {
				client, clientSeq = rec.Client, rec.Seq
			}
			if rec.Server != nil && rec.Server.Name != "" && rec.Seq > serverSeq {
				server, serverSeq = rec.Server, rec.Seq
			}
		}
		requireSessionPeers(t, db, "burst", client, server)
	}},
	{"SessionsSearchPeers", func(t *testing.T, db storage.Backend) {
		// Search finds a session by its client or server name too, as by its ids: a
		// case-insensitive substring, with LIKE's wildcards taken literally. Versions are
		// not names and do not match.
		plain := step("plain", "allow", 0)
		plain.AgentID = "agent"
		save(t, db, plain)
		viaClient := step("s-client", "allow", time.Second)
		viaClient.Client = &record.Peer{Name: "Inspector_v2", Version: "0.16.2"}
		save(t, db, viaClient)
		viaServer := step("s-server", "allow", 2*time.Second)
		viaServer.Server = &record.Peer{Name: "mcp-servers/100%files", Version: "7.7"}
		save(t, db, viaServer)
		for _, tc := range []struct {
			search string
			want   []string
		}{
			{"inspector", []string{"s-client"}},
			{"R_V2", []string{"s-client"}},
			{"_", []string{"s-client"}},
			{"100%", []string{"s-server"}},
			{"%", []string{"s-server"}},
			{"SERVERS/", []string{"s-server"}},
			{"0.16", nil},
			{"7.7", nil},
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
}

// requireSessionPeers checks a session's client and server through Session and Sessions.
func requireSessionPeers(t *testing.T, db storage.Backend, id string, client, server *record.Peer) {
	t.Helper()
	s, err := db.Session(bg(), id)
	require.NoError(t, err)
	require.Equal(t, client, s.Client, "client of %s", id)
	require.Equal(t, server, s.Server, "server of %s", id)
	page, err := db.Sessions(bg(), record.SessionQuery{Search: id})
	require.NoError(t, err)
	for _, s := range page.Sessions {
		if s.ID == id {
			require.Equal(t, client, s.Client, "client of %s in Sessions", id)
			require.Equal(t, server, s.Server, "server of %s in Sessions", id)
			return
		}
	}
	t.Fatalf("Sessions does not list %s", id)
}
