package agentapi

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A held-back message's segments and its completion, as the runtime streams them (the
// fields of testdata/stream-toolcall.sse).
func seg(fields string) string {
	return `{"sequence_number":3,"object":"content","status":"in_progress","error":null,"msg_id":"msg_z",` + fields + `}`
}

func TestAgrees(t *testing.T) {
	text := func(s string) []content { return []content{{Type: "text", Text: &s}} }
	call := []content{{Type: "data", Data: []byte(`{"call_id":"call_1","name":"delete_file","arguments":"{\"path\": \"/tmp/x\"}","n":12345678901234567890}`)}}
	tests := []struct {
		name   string
		events []string
		parts  []content
		want   bool
	}{
		{"deltas add up", []string{evMsgStart, seg(`"type":"text","index":0,"delta":true,"text":"Hello"`),
			seg(`"type":"text","index":0,"delta":true,"text":", world"`), seg(`"type":"text","index":0,"delta":false,"text":"Hello, world"`)},
			text("Hello, world"), true},
		// The protocol's own example: the deltas make a prefix of the completed text.
		{"deltas make a prefix", []string{seg(`"type":"text","index":0,"delta":true,"text":"Hello"`),
			seg(`"type":"text","index":0,"delta":true,"text":", world"`)}, text("Hello, world!"), true},
		{"nothing held", nil, text("x"), true},
		{"deltas say otherwise", []string{seg(`"type":"text","index":0,"delta":true,"text":"rm -rf /"`)}, text("ls"), false},
		{"deltas go past the text", []string{seg(`"type":"text","index":0,"delta":true,"text":"ls"`),
			seg(`"type":"text","index":0,"delta":true,"text":"; rm -rf /"`)}, text("ls"), false},
		{"a whole segment says otherwise", []string{seg(`"type":"text","index":0,"delta":false,"text":"rm -rf /"`)}, text("ls"), false},
		{"a whole segment after deltas restarts", []string{seg(`"type":"text","index":0,"delta":true,"text":"lx"`),
			seg(`"type":"text","index":0,"delta":false,"text":"ls"`)}, text("ls"), false},
		{"no index, one part", []string{seg(`"type":"text","index":null,"delta":true,"text":"l"`)}, text("ls"), true},
		{"no index, two parts", []string{seg(`"type":"text","index":null,"delta":true,"text":"l"`)},
			append(text("ls"), text("ls")...), false},
		{"index past the parts", []string{seg(`"type":"text","index":1,"delta":true,"text":"l"`)}, text("ls"), false},
		{"another type", []string{seg(`"type":"data","index":0,"delta":false,"data":{}`)}, text("ls"), false},
		{"a start with content", []string{strings.Replace(evMsgStart, `"content":null`, `[{"type":"text","text":"rm"}]`, 1)}, text("ls"), false},
		{"a case variant", []string{seg(`"type":"text","index":0,"Delta":true,"delta":true,"text":"l"`)}, text("ls"), false},
		{"an event of another object", []string{evCreated}, text("ls"), false},
		// A call's data as it is generated: its arguments grow.
		{"call arguments growing", []string{seg(`"type":"data","index":null,"delta":false,"data":{"call_id":"call_1","name":"delete_file","arguments":""}`),
			seg(`"type":"data","index":0,"delta":false,"data":{"call_id":"call_1","name":"delete_file","arguments":"{\"path\": \"/tmp/x\"}","n":12345678901234567890}`)},
			call, true},
		{"another call shown", []string{seg(`"type":"data","index":0,"delta":false,"data":{"call_id":"call_1","name":"wipe_disk","arguments":""}`)}, call, false},
		{"other arguments shown", []string{seg(`"type":"data","index":0,"delta":false,"data":{"arguments":"{\"path\": \"/\"}"}`)}, call, false},
		{"a member the call has not", []string{seg(`"type":"data","index":0,"delta":false,"data":{"sudo":true}`)}, call, false},
		{"a number past float precision", []string{seg(`"type":"data","index":0,"delta":false,"data":{"n":12345678901234567891}`)}, call, false},
		{"a data delta", []string{seg(`"type":"data","index":0,"delta":true,"data":{"name":"delete_file"}`)}, call, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs := make([][]byte, len(tt.events))
			for i, e := range tt.events {
				evs[i] = []byte(e)
			}
			require.Equal(t, tt.want, agrees(evs, tt.parts))
		})
	}
}

// Every message of the runtime's own stream agrees with its completion.
func TestAgreesWithTheRuntimesStream(t *testing.T) {
	held := map[string][][]byte{}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(sample(t, "stream-toolcall.sse")))
	for sc.Scan() {
		ev, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		ev = bytes.Clone(ev)
		var h head
		require.NoError(t, decodeExact(ev, &h))
		switch {
		case h.Object == "content":
			held[h.MsgID] = append(held[h.MsgID], ev)
		case h.Object == "message" && h.Status != statusCompleted:
			held[h.ID] = append(held[h.ID], ev)
		case h.Object == "message":
			m, err := readMessage(ev)
			require.NoError(t, err)
			parts, err := readParts(&m)
			require.NoError(t, err)
			require.True(t, agrees(held[h.ID], parts), h.ID)
			n++
		}
	}
	require.Equal(t, 3, n)
}

// A message streamed otherwise than it completed reaches the client as it was judged.
func TestStreamedMessageIsWhatWasJudged(t *testing.T) {
	delta := func(seq int, text string) string {
		return strings.Replace(seg(`"type":"text","index":0,"delta":true,"text":"`+text+`"`), `"sequence_number":3`, `"sequence_number":`+string(rune('0'+seq)), 1)
	}
	t.Run("otherwise", func(t *testing.T) {
		s := newStack(t, zebraRules, Config{})
		s.agent.answer = sseAnswer(evCreated, evInProgress, evMsgStart, delta(3, "zebra "), delta(4, "secret"),
			evMsgDone(5, "", textPart(`"text":"all fine"`)), evFinal(6, "["+evMsgDone(0, "", textPart(`"text":"all fine"`))+"]"))
		raw := s.streamBytes(userRequest("hello", true))
		require.NotContains(t, raw, "zebra")
		evs, _ := events(t, strings.NewReader(raw))
		requireNumbered(t, evs)
		var shown []string
		for _, e := range evs {
			if e["object"] == "content" {
				shown = append(shown, e["text"].(string))
				require.Equal(t, false, e["delta"])
			}
		}
		require.Equal(t, []string{"all fine"}, shown)
		require.Equal(t, []string{"all fine"}, texts(final(t, evs)["output"]))
	})
	t.Run("a start with content", func(t *testing.T) {
		s := newStack(t, zebraRules, Config{})
		start := strings.Replace(evMsgStart, `"content":null`, `"content":[{"type":"text","text":"zebra"}]`, 1)
		s.agent.answer = sseAnswer(evCreated, evInProgress, start, delta(3, "all fine"),
			evMsgDone(4, "", textPart(`"text":"all fine"`)), evFinal(5, "["+evMsgDone(0, "", textPart(`"text":"all fine"`))+"]"))
		raw := s.streamBytes(userRequest("hello", true))
		require.NotContains(t, raw, "zebra")
		evs, _ := events(t, strings.NewReader(raw))
		requireNumbered(t, evs)
		require.Equal(t, []string{"all fine"}, texts(final(t, evs)["output"]))
	})
	t.Run("as judged", func(t *testing.T) {
		// The deltas are what the client gets when they add up to the judged text.
		s := newStack(t, zebraRules, Config{})
		s.agent.answer = sseAnswer(evCreated, evInProgress, evMsgStart, delta(3, "all "), delta(4, "fine"),
			evMsgDone(5, "", textPart(`"text":"all fine"`)), evFinal(6, "["+evMsgDone(0, "", textPart(`"text":"all fine"`))+"]"))
		evs, _ := events(t, strings.NewReader(s.streamBytes(userRequest("hello", true))))
		requireNumbered(t, evs)
		var shown []string
		for _, e := range evs {
			if e["object"] == "content" {
				shown = append(shown, e["text"].(string))
			}
		}
		require.Equal(t, []string{"all ", "fine"}, shown)
	})
}
