package storage

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// stepByStep is the summary writing steps one by one in seq order leaves, the way the
// backends' upserts define it: the owners are the first named, the name, user, client and
// server the last named, the method the newest step's.
func stepByStep(steps []SessionStep) SessionDelta {
	var want SessionDelta
	counts := map[string]int64{}
	for i, s := range steps {
		seq := int64(i + 1)
		if i == 0 {
			want.ID, want.First, want.Last = s.SessionID, s.ReceivedAt, s.ReceivedAt
		}
		want.Steps++
		want.First, want.Last = min(want.First, s.ReceivedAt), max(want.Last, s.ReceivedAt)
		want.LastSeq, want.LastMethod = seq, s.Method
		if want.AgentID == "" {
			want.AgentID = s.AgentID
		}
		if want.KeyID == "" {
			want.KeyID = s.KeyID
		}
		if s.AgentName != "" {
			want.AgentName = s.AgentName
		}
		if s.UserID != "" {
			want.UserID = s.UserID
		}
		if s.ClientName != "" {
			want.ClientName, want.ClientVersion = s.ClientName, s.ClientVersion
		}
		if s.ServerName != "" {
			want.ServerName, want.ServerVersion = s.ServerName, s.ServerVersion
		}
		counts[s.Decision]++
	}
	for d, n := range counts {
		want.Decisions = append(want.Decisions, DecisionCount{d, n})
	}
	return want
}

// A delta is the same whatever order a batch's steps are added in, and equals writing them
// one by one in seq order.
func TestSessionDeltaIsStepByStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		steps := randomSteps(rng)
		want := stepByStep(steps)
		var got SessionDelta
		for _, i := range rng.Perm(len(steps)) {
			got.Add(&steps[i], int64(i+1))
		}
		require.ElementsMatch(t, want.Decisions, got.Decisions, "%+v", steps)
		want.Decisions, got.Decisions = nil, nil
		got.agentSeq, got.keySeq, got.nameSeq, got.userSeq, got.clientSeq, got.serverSeq = 0, 0, 0, 0, 0, 0
		require.Equal(t, want, got, "%+v", steps)
	}
}

// randomSteps is one to eight steps of session "s" naming owners, names, peers and
// decisions at random, in seq order (seq i+1 for steps[i]).
func randomSteps(rng *rand.Rand) []SessionStep {
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	steps := make([]SessionStep, 1+rng.IntN(8))
	for i := range steps {
		steps[i] = SessionStep{
			SessionID: "s", AgentID: pick("", "", "agent-a", "agent-b"), KeyID: pick("", "", "key_a", "key_b"),
			AgentName: pick("", "", "A", "B"), UserID: pick("", "u1", "u2"),
			Method: pick("steps/message", "steps/toolCallRequest", "ping"), Decision: pick("allow", "deny", "hold"),
			ReceivedAt: rng.Int64N(10), ClientName: pick("", "", "c1", "c2"), ServerName: pick("", "", "s1", "s2"),
		}
		if steps[i].ClientName != "" {
			steps[i].ClientVersion = pick("", "1", "2")
		}
		if steps[i].ServerName != "" {
			steps[i].ServerVersion = pick("", "1", "2")
		}
	}
	return steps
}

// Deltas of consecutive runs of a session's steps merge, in any order, into the delta of
// them all; applied one after the other to a summary they leave what the steps one by one
// would. A guardian writes a session's summary behind its steps by these two.
func TestSessionDeltaMergeAndApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		steps := randomSteps(rng)
		var all SessionDelta
		for i := range steps {
			all.Add(&steps[i], int64(i+1))
		}
		// Cut the steps into runs, a delta each.
		var runs []SessionDelta
		for i := 0; i < len(steps); {
			n := 1 + rng.IntN(len(steps)-i)
			var d SessionDelta
			for j := i; j < i+n; j++ {
				d.Add(&steps[j], int64(j+1))
			}
			runs = append(runs, d)
			i += n
		}
		var merged SessionDelta
		for _, k := range rng.Perm(len(runs)) {
			r := runs[k].Clone()
			merged.Merge(&r)
		}
		require.ElementsMatch(t, all.Decisions, merged.Decisions, "%+v", steps)
		a, m := all, merged
		a.Decisions, m.Decisions = nil, nil
		require.Equal(t, a, m, "%+v", steps)

		// Applied run after run (the stored summary, then what was owed), and at once.
		want := stepByStep(steps)
		var bySteps, byRuns record.Session
		for i := range steps {
			var one SessionDelta
			one.Add(&steps[i], int64(i+1))
			one.ApplyTo(&bySteps)
		}
		for i := range runs {
			runs[i].ApplyTo(&byRuns)
		}
		require.Equal(t, bySteps, byRuns)
		require.Equal(t, want.Steps, byRuns.Steps)
		require.Equal(t, want.LastSeq, byRuns.LastSeq)
		require.Equal(t, want.AgentID, byRuns.AgentID)
		require.Equal(t, want.AgentName, byRuns.AgentName)
		require.Equal(t, time.Unix(0, want.First).UTC(), byRuns.FirstSeen)
		for _, c := range want.Decisions {
			require.Equal(t, c.N, byRuns.Decisions[c.Decision])
		}
	}
}

func TestSessionStepOf(t *testing.T) {
	at := time.Date(2026, 11, 24, 8, 0, 0, 5, time.UTC)
	for _, c := range []struct {
		name           string
		client, server *record.Peer
		want           [4]string // client name, version, server name, version
	}{
		{"no peers", nil, nil, [4]string{}},
		{"both named", &record.Peer{Name: "inspector", Version: "1.0"}, &record.Peer{Name: "everything", Version: "2.0"},
			[4]string{"inspector", "1.0", "everything", "2.0"}},
		{"a peer without a name names nothing", &record.Peer{Version: "9"}, &record.Peer{Name: "srv"},
			[4]string{"", "", "srv", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := record.StepRecord{SessionID: "s", AgentID: "a", AgentName: "A", UserID: "u", KeyID: "k",
				Method: "steps/message", Decision: "deny", ReceivedAt: at, Client: c.client, Server: c.server}
			s := SessionStepOf(&rec)
			require.Equal(t, SessionStep{SessionID: "s", AgentID: "a", AgentName: "A", UserID: "u", KeyID: "k",
				Method: "steps/message", Decision: "deny", ReceivedAt: at.UnixNano(),
				ClientName: c.want[0], ClientVersion: c.want[1], ServerName: c.want[2], ServerVersion: c.want[3]}, s)
		})
	}
}
