package webhooks

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// Slack refuses a message whose texts pass its limits (400 invalid_blocks, which is not
// retried), and escaping makes a text longer: the limits hold for the escaped texts, and a
// cut never leaves half an entity.
func TestSlackTextsFitAfterEscaping(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
	}{
		{name: "ampersands", text: strings.Repeat("&", 4000)},
		{name: "angle brackets", text: strings.Repeat("<>", 2000)},
		{name: "mixed", text: strings.Repeat("a&b<c>", 1000)},
		{name: "astral", text: strings.Repeat("😀&", 2000)},
		{name: "plain", text: strings.Repeat("x", 4000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Payload{Type: EventHoldCreated, URL: "https://vigil.example/#/held?hold=h1", Hold: &HoldInfo{
				ID: "h1", SessionID: tc.text, AgentID: tc.text, RuleID: "r", Tool: tc.text, Message: tc.text,
				Deadline: time.Unix(0, 0), Status: record.HoldPending,
			}}
			m := slackMessage(p)
			checkSlackText(t, m.Text, 150+len("Vigil: "))
			require.LessOrEqual(t, utf16Len(m.Blocks[0].Text.Text), slackHeaderMax)
			require.Equal(t, "section", m.Blocks[1].Type)
			checkSlackText(t, m.Blocks[1].Text.Text, slackSectionMax)
			for _, f := range m.Blocks[2].Fields {
				checkSlackText(t, f.Text, 2000)
			}
		})
	}
}

// checkSlackText: at most n characters (UTF-16 units), and every "&" starts a whole entity.
func checkSlackText(t *testing.T, s string, n int) {
	t.Helper()
	require.LessOrEqual(t, utf16Len(s), n)
	for i := range len(s) {
		if s[i] == '&' {
			rest := s[i:]
			require.True(t, strings.HasPrefix(rest, "&amp;") || strings.HasPrefix(rest, "&lt;") || strings.HasPrefix(rest, "&gt;"),
				"a cut entity at %d: %q", i, rest[:min(len(rest), 8)])
		}
	}
}

func TestSlackEscapeClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{in: "a&b", n: 10, want: "a&amp;b"},
		{in: "a&b", n: 7, want: "a&amp;b"},
		{in: "a&bc", n: 7, want: "a&amp;…"},
		{in: "a&b", n: 6, want: "a…"},
		{in: "<<<", n: 9, want: "&lt;&lt;…"},
	} {
		require.Equal(t, tc.want, slackEscapeClip(tc.in, tc.n), "%q in %d", tc.in, tc.n)
	}
}

// A resolved hold's title says how it ended in words, not the stored status.
func TestSlackResolvedTitle(t *testing.T) {
	for status, want := range map[string]string{
		record.HoldApproved:    "Hold approved: pay",
		record.HoldDenied:      "Hold denied: pay",
		record.HoldModified:    "Hold modified: pay",
		record.HoldTimedOut:    "Hold timed out: pay",
		record.HoldAbandoned:   "Hold abandoned: pay",
		record.HoldInterrupted: "Hold interrupted: pay",
	} {
		m := slackMessage(&Payload{Type: EventHoldResolved, Hold: &HoldInfo{Tool: "pay", Status: status}})
		require.Equal(t, want, m.Blocks[0].Text.Text)
		require.Equal(t, "Vigil: "+want, m.Text)
	}
}
