package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSaveStepRoundTripsEveryField(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	local := time.FixedZone("CEST", 2*3600)
	rec := &record.StepRecord{
		SessionID:  "sess-1",
		TurnID:     "turn-1",
		StepID:     "step-1",
		Method:     "steps/toolCallRequest",
		Kind:       "toolCall",
		AgentID:    "agent-7",
		AgentName:  "Mail bot",
		UserID:     "user@corp.example",
		KeyID:      "key_0123456789abcdef",
		Client:     &record.Peer{Name: "claude-ai", Version: "0.1.0"},
		Server:     &record.Peer{Name: "mcp-servers/everything"},
		Tool:       "send_email",
		Decision:   "modify",
		ReceivedAt: time.Date(2025, 1, 2, 3, 4, 5, 123456789, local),
		Request:    json.RawMessage(`{"jsonrpc":"2.0","id":"a","params":{"x":"ünïcode ✓","unknown":[1,2]}}`),
		Response:   json.RawMessage(`{"jsonrpc":"2.0","id":"a","result":{"decision":"modify"}}`),
		MatchedRules: []record.RuleMatch{
			{RuleID: "redact", Action: "modify", Mode: "enforce", ReasonCode: "PII"},
			{RuleID: "broken", Action: "deny", Mode: "monitor", Error: "boom"},
		},
		LatencyMicros: 1234,
		Text:          "send an email to bob",
		Held:          true,
	}
	in := *rec
	require.NoError(t, db.SaveStep(ctx, rec))
	require.Positive(t, rec.Seq)
	require.Equal(t, time.UTC, rec.ReceivedAt.Location(), "normalised to UTC")
	require.True(t, in.ReceivedAt.Equal(rec.ReceivedAt))

	got, err := db.Step(ctx, rec.Seq)
	require.NoError(t, err)
	require.Equal(t, *rec, got)

	want := in
	want.Seq = rec.Seq
	want.ReceivedAt = in.ReceivedAt.UTC()
	require.Equal(t, want, got)

	// The caller's record marshals exactly as the stored one: what is published live is
	// what GET /api/steps/{seq} returns.
	a, err := json.Marshal(rec)
	require.NoError(t, err)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, string(a), string(b))
	require.Equal(t, string(a), string(b))
}

func TestSaveStepNormalisesEdgeValues(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	tests := []struct {
		name                  string
		request, response     json.RawMessage
		wantRequest, wantResp json.RawMessage
	}{
		{"notification has no response", json.RawMessage(`{"a":1}`), nil, json.RawMessage(`{"a":1}`), nil},
		{"empty is null", json.RawMessage{}, json.RawMessage{}, nil, nil},
		{"invalid JSON kept as a string", json.RawMessage(`{"a":`), json.RawMessage("\xff"),
			json.RawMessage(`"{\"a\":"`), json.RawMessage(`"\ufffd"`)},
		{"literal null kept", json.RawMessage(`null`), json.RawMessage(`null`), json.RawMessage(`null`), json.RawMessage(`null`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := step("edge", "allow", 0)
			rec.Request, rec.Response, rec.MatchedRules = tc.request, tc.response, nil
			// Trusting valid JSON changes nothing; empty values are normalised either way.
			rec.TrustedJSON = tc.name != "invalid JSON kept as a string"
			rec.ReceivedAt = time.Time{}
			before := time.Now()
			require.NoError(t, db.SaveStep(ctx, rec))

			got, err := db.Step(ctx, rec.Seq)
			require.NoError(t, err)
			require.Equal(t, tc.wantRequest, got.Request)
			require.Equal(t, tc.wantResp, got.Response)
			require.Equal(t, []record.RuleMatch{}, got.MatchedRules)
			want := *rec
			want.TrustedJSON = false // a hint to SaveStep, not stored
			require.Equal(t, want, got)
			require.False(t, got.ReceivedAt.Before(before.Truncate(time.Nanosecond)), "zero time set to now")
			_, err = json.Marshal(got)
			require.NoError(t, err)
		})
	}
}

func TestSaveStepRejectsIncompleteRecords(t *testing.T) {
	db := openTest(t)
	tests := []struct {
		name string
		edit func(*record.StepRecord)
	}{
		{"no session", func(r *record.StepRecord) { r.SessionID = "" }},
		{"no method", func(r *record.StepRecord) { r.Method = "" }},
		{"no decision", func(r *record.StepRecord) { r.Decision = "" }},
		{"decision with a quote", func(r *record.StepRecord) { r.Decision = `al"low` }},
		{"decision with a space", func(r *record.StepRecord) { r.Decision = "allow all" }},
		{"decision too long", func(r *record.StepRecord) { r.Decision = strings.Repeat("a", 65) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := step("s", "allow", 0)
			tc.edit(rec)
			require.Error(t, db.SaveStep(context.Background(), rec))
			require.Zero(t, rec.Seq)
		})
	}
	require.Zero(t, countRows(t, db, "steps"))
}

func TestStepNotFound(t *testing.T) {
	db := openTest(t)
	_, err := db.Step(context.Background(), 42)
	require.ErrorIs(t, err, record.ErrNotFound)
}

func TestStepsInArrivalOrder(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	var seqs []int64
	for i := range 25 {
		// Interleave another session and give receivedAt out of order: order is by arrival.
		save(t, db, step("other", "allow", time.Duration(i)))
		rec := save(t, db, step("s", "allow", -time.Duration(i)*time.Second))
		seqs = append(seqs, rec.Seq)
	}

	all, err := db.Steps(ctx, record.StepQuery{SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, seqs, seqsOf(all))

	// Walk in pages of 10 with After.
	var walked []int64
	after := int64(0)
	for {
		page, err := db.Steps(ctx, record.StepQuery{SessionID: "s", After: after, Limit: 10})
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 10)
		if len(page) == 0 {
			break
		}
		walked = append(walked, seqsOf(page)...)
		after = page[len(page)-1].Seq
	}
	require.Equal(t, seqs, walked)

	none, err := db.Steps(ctx, record.StepQuery{SessionID: "nobody"})
	require.NoError(t, err)
	require.NotNil(t, none)
	require.Empty(t, none)
}

func TestStepsLimitIsClamped(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	bulkSteps(t, db, "s", "", 1205)
	tests := []struct {
		limit, want int
	}{{0, 200}, {-5, 200}, {1, 1}, {5000, 1000}}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			got, err := db.Steps(ctx, record.StepQuery{SessionID: "s", Limit: tc.limit})
			require.NoError(t, err)
			require.Len(t, got, tc.want)
		})
	}
}

func TestRecentSteps(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	var seqs []int64
	for i := range 8 {
		seqs = append(seqs, save(t, db, step("s", "allow", time.Duration(i))).Seq)
		save(t, db, step("other", "deny", time.Duration(i)))
	}
	tests := []struct {
		limit int
		want  []int64
	}{
		{3, seqs[5:]},
		{8, seqs},
		{100, seqs},
		{0, []int64{}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			got, err := db.RecentSteps(ctx, "s", tc.limit)
			require.NoError(t, err)
			require.Equal(t, tc.want, seqsOf(got))
		})
	}
}

func seqsOf(steps []record.StepRecord) []int64 {
	out := make([]int64, 0, len(steps))
	for _, s := range steps {
		out = append(out, s.Seq)
	}
	return out
}
