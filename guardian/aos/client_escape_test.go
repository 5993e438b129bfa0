package aos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClientDoesNotEscapeHTML: the request carries <, > and & as they are. json.Marshal
// would send each as a 6-byte \u003c, so a step well under a hook's input limit could
// exceed the guardian's --max-body.
func TestClientDoesNotEscapeHTML(t *testing.T) {
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		bodies <- body
		w.Header().Set("Content-Type", "application/json")
		msgs, batch, perr := SplitBody(body)
		require.Nil(t, perr)
		var out []Response
		for _, m := range msgs {
			out = append(out, Response{JSONRPC: "2.0", ID: IDOf(m), Result: Result{Decision: Allow, Message: "ok"}})
		}
		if batch {
			_ = json.NewEncoder(w).Encode(out)
			return
		}
		_ = json.NewEncoder(w).Encode(out[0])
	}))
	defer srv.Close()
	c := NewClient(srv.URL)
	text := strings.Repeat("<p>&</p>", 1000) + "\u2028"
	sc := testContext()
	sc.Timestamp = "2026-01-02T15:04:05Z"
	params := ToolCallResultParams{Context: sc, ExecutionID: "e1",
		Result: ToolCallResult{Outputs: []TextPart{{Text: text}}}}

	tests := []struct {
		name string
		call func() error
	}{
		{"call", func() error {
			_, err := c.Call(context.Background(), MethodToolCallResult, params)
			return err
		}},
		{"batch", func() error {
			_, err := c.CallBatch(context.Background(), MethodToolCallResult, []any{params})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.call())
			body := <-bodies
			// A size check, not Contains: the failure message would print the whole body.
			require.Less(t, len(body), len(text)+1000, "no HTML escaping: <, > and & stay one byte each")
			require.True(t, bytes.Contains(body, []byte("<p>&</p>")))
			require.False(t, bytes.HasSuffix(body, []byte("\n")), "no trailing newline from the encoder")
			msgs, _, perr := SplitBody(body)
			require.Nil(t, perr)
			step, perr := ParseStep(msgs[0])
			require.Nil(t, perr)
			require.Equal(t, text, step.ToolResult.Result.Outputs[0].Text, "the text arrives unchanged")
		})
	}
}

// FuzzMarshal: whatever the text, the request encodes to valid JSON that reads back as the
// same text, with no HTML escapes left.
func FuzzMarshal(f *testing.F) {
	for _, s := range []string{"", "<p>&</p>", `\u003c`, `\\u003c`, "\\", "\u2028<\x00>", "\xff&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Marshal(map[string]any{"text": s, "part": TextPart{Text: s}})
		require.NoError(t, err)
		require.True(t, json.Valid(b), "%q", b)
		if !strings.Contains(s, `\`) {
			require.NotContains(t, string(b), `\u003c`)
		}
		var v struct {
			Text string `json:"text"`
			Part struct {
				Text string `json:"text"`
			} `json:"part"`
		}
		require.NoError(t, json.Unmarshal(b, &v))
		// Invalid UTF-8 comes back as json.Marshal would send it.
		var want string
		std, err := json.Marshal(s)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(std, &want))
		require.Equal(t, want, v.Text)
		require.Equal(t, want, v.Part.Text)
	})
}
