package aos

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An empty context.session.id names no session (AOS §3.9: a required unique identifier). Read
// as absent, it let the guardian file one agent's steps under the X-Vigil-Session header or
// "<kind>@<address>", so each step kind got a session of its own, and another agent then
// found itself refused from a session it never named.
func TestEmptyContextSessionIDRefused(t *testing.T) {
	for _, example := range []string{"agentTrigger", "message", "knowledgeRetrieval", "memoryStore",
		"memoryContextRetrieval", "toolCallRequest", "toolCallResult"} {
		t.Run(example, func(t *testing.T) {
			_, e := ParseStep(mutate(t, example, "params.context.session.id", ""))
			requireErr(t, e, CodeInvalidParams, "params.context.session.id", "must not be empty")
		})
	}
	// The header check and the decoder refuse the same ids.
	require.Contains(t, CheckSessionID(""), "must not be empty")
}

// A repeated member counts by its last value (as for "." and ".."): an empty id followed by
// a real one is the real one; a real one followed by an empty one is refused.
func TestRepeatedSessionIDLastCounts(t *testing.T) {
	body := string(mutate(t, "message", "params.context.session.id", "MARK"))
	s := parse(t, []byte(strings.Replace(body, `"id":"MARK"`, `"id":"","id":"y"`, 1)))
	require.Equal(t, "y", s.Context.Session.ID)
	_, e := ParseStep([]byte(strings.Replace(body, `"id":"MARK"`, `"id":"y","id":""`, 1)))
	requireErr(t, e, CodeInvalidParams, "params.context.session.id", "must not be empty")
}

// A step stored before empty session ids were refused still reads for backtests, rule tests
// by seq and comparisons: ParseStoredStep takes what the guardian took then.
func TestStoredStepWithEmptySessionIDStillParses(t *testing.T) {
	req := mutate(t, "toolCallRequest", "params.context.session.id", "")
	_, e := ParseStep(req)
	require.NotNil(t, e)
	s, e := ParseStoredStep(req)
	require.Nil(t, e)
	require.Equal(t, "", s.Context.Session.ID)
	require.Equal(t, KindToolCall, s.Kind)
}

// RFC 3339 §5.6 allows "t" and "z" in lower case; they read as "T" and "Z".
func TestLowercaseTimestamps(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time
	}{
		{"2026-01-01t00:00:00z", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-01-01T00:00:00z", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-01-01t00:00:00Z", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-01-01t08:30:00.25+02:00", time.Date(2026, 1, 1, 6, 30, 0, 250e6, time.UTC)},
		{"2026-01-01t08:30:00+0200", time.Date(2026, 1, 1, 6, 30, 0, 0, time.UTC)},
		{"2026-01-01t08:30:00", time.Date(2026, 1, 1, 8, 30, 0, 0, time.UTC)},
		{"2026-01-01t08:30z", time.Date(2026, 1, 1, 8, 30, 0, 0, time.UTC)},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			s := parse(t, mutate(t, "message", "params.context.timestamp", tc.in))
			require.Equal(t, tc.in, s.Context.Timestamp, "kept as sent")
			require.True(t, tc.want.Equal(s.Context.Time), "got %s", s.Context.Time)
		})
	}
	// Only T and Z have a lower-case form: other letters are still refused.
	for _, bad := range []string{"2026-01-01x00:00:00z", "2026-01-01t00:00:00y", "t"} {
		_, e := ParseStep(mutate(t, "message", "params.context.timestamp", bad))
		requireErr(t, e, CodeInvalidParams, "params.context.timestamp", "ISO 8601")
	}
}

// The usual upper-case timestamp costs what it did: it is parsed by the first layout,
// without a copy.
func TestUppercaseTimestampDoesNotAllocate(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := parseTimestamp("2026-01-01T08:30:00.123Z"); !ok {
			t.Fatal("not parsed")
		}
	})
	require.Zero(t, allocs)
}
