package storage

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		vals []int64
		p    int
		want int64
	}{
		{nil, 50, 0},
		{[]int64{7}, 50, 7},
		{[]int64{7}, 99, 7},
		{[]int64{1, 2}, 50, 1},
		{[]int64{1, 2, 3, 4}, 99, 4},
		{[]int64{1, 2, 3, 4}, 50, 2},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Percentile(tc.vals, tc.p), "%v p%d", tc.vals, tc.p)
	}
}

func TestWordlessID(t *testing.T) {
	tests := []struct {
		name string
		v    string
		want IDMatch
		ok   bool
	}{
		{"not set", "", IDMatch{}, false},
		{"a word: the index answers it", "sess-4", IDMatch{}, false},
		{"a digit is a word", "-7-", IDMatch{}, false},
		{"a letter of any script is a word", "日", IDMatch{}, false},
		{"separators only: the id as typed", "---", IDMatch{Value: "---"}, true},
		{"one separator", "/", IDMatch{Value: "/"}, true},
		{"symbols, short: the whole id squashed", "%", IDMatch{Value: "%", Squashed: true}, true},
		{"symbols: from the start once three are typed", "🙂🙂🙂", IDMatch{Value: "🙂🙂🙂", Squashed: true, Prefix: true}, true},
		{"separators in symbols are ignored", "🙂-🙂", IDMatch{Value: "🙂🙂", Squashed: true}, true},
		{"LIKE wildcards are kept as they are", "%_%", IDMatch{Value: "%%", Squashed: true}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := WordlessID(tc.v, 3)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestAsHistory(t *testing.T) {
	rec := record.StepRecord{Seq: 7, Tool: "shell", Request: []byte(`{}`), Response: []byte(`{}`),
		MatchedRules: []record.RuleMatch{{RuleID: "r"}}}
	for _, c := range []struct {
		text, want string
	}{
		{"", ""},
		{"short", "short"},
		{strings.Repeat("é", HistoryText), strings.Repeat("é", HistoryText)},
		{strings.Repeat("é", HistoryText+1), strings.Repeat("é", HistoryText)},
		{strings.Repeat("a", 1<<20), strings.Repeat("a", HistoryText)},
	} {
		buf := []byte(c.text)
		rec.Text = ""
		if len(buf) > 0 {
			rec.Text = unsafe.String(&buf[0], len(buf))
		}
		h := AsHistory(rec)
		require.Nil(t, h.Request)
		require.Nil(t, h.Response)
		require.Equal(t, []record.RuleMatch{}, h.MatchedRules)
		require.Equal(t, "shell", h.Tool)
		require.Equal(t, c.want, h.Text)
		if len(c.text) > len(c.want) {
			copy(buf, strings.Repeat("X", len(buf)))
			require.Equal(t, c.want, h.Text, "a cut text is a copy, not a piece of the whole")
		}
	}
}
