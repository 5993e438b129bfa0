package live

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

func TestEncodeEventMatchesJSONMarshal(t *testing.T) {
	at := time.Date(2025, 6, 7, 8, 9, 10, 123456789, time.UTC)
	tests := []struct {
		name string
		ev   record.Event
	}{
		{"step", record.Event{Seq: 42, Type: "step", SessionID: "s1", At: at, Payload: json.RawMessage(`{"seq":42,"decision":"deny"}`)}},
		{"stats without session", record.Event{Type: "stats", At: at, Payload: json.RawMessage(`{"steps":3}`)}},
		{"nil payload", record.Event{Seq: 1, Type: "rule.changed", At: at}},
		{"zero time", record.Event{Seq: 2, Type: "audit", Payload: json.RawMessage(`[]`)}},
		{"offset time", record.Event{Seq: 3, Type: "step", At: time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600)), Payload: json.RawMessage(`1`)}},
		{"escaped strings", record.Event{Seq: 4, Type: "a\"b\\c<d>&\n", SessionID: "sé\x01\xff", At: at, Payload: json.RawMessage(`"<tag>"`)}},
		{"spaced payload", record.Event{Seq: 5, Type: "step", At: at, Payload: json.RawMessage("{ \"a\" : [1, 2] }")}},
		{"large seq", record.Event{Seq: 1<<62 + 7, Type: "step", At: at, Payload: json.RawMessage(`{}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(tt.ev)
			require.NoError(t, err)
			got := encodeEvent(tt.ev)
			require.JSONEq(t, string(want), string(got))
			var back record.Event
			require.NoError(t, json.Unmarshal(got, &back))
			require.Equal(t, tt.ev.Seq, back.Seq)
			require.Equal(t, tt.ev.SessionID != "", back.SessionID != "")
			require.True(t, tt.ev.At.Equal(back.At))
		})
	}
}

// A step's frame is the frame of its event with the record as payload.
func TestEncodeStepMatchesEncodeEvent(t *testing.T) {
	at := time.Date(2025, 6, 7, 8, 9, 10, 123456789, time.UTC)
	for _, rec := range []*record.StepRecord{
		{Seq: 9, SessionID: "s1", Method: "steps/message", Kind: "message", Decision: "allow", ReceivedAt: at,
			Request: json.RawMessage(`{"jsonrpc":"2.0","id":1}`), Response: json.RawMessage(`{"result":{}}`),
			MatchedRules: []record.RuleMatch{}},
		{Seq: 10, SessionID: "sé<\x01>", Method: "m", Decision: "deny", ReceivedAt: at, Text: "a\nb", Held: true,
			MatchedRules: []record.RuleMatch{{RuleID: "r", Action: "deny", Mode: "enforce", Error: "x&y"}}},
	} {
		payload, err := json.Marshal(rec)
		require.NoError(t, err)
		ev := record.Event{Seq: rec.Seq, Type: record.EventStep, SessionID: rec.SessionID, At: rec.ReceivedAt, Payload: payload}
		require.Equal(t, string(encodeEvent(ev)), string(encodeStep(rec)))
		want, err := json.Marshal(ev)
		require.NoError(t, err)
		require.Equal(t, string(want), string(encodeStep(rec)))
	}
}
