package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScriptedTurns(t *testing.T) {
	srv := httptest.NewServer(handler())
	defer srv.Close()
	tests := []struct{ text, want string }{
		{"hello", `"You said: hello"`},
		{"read /tmp/notes.txt", `"type":"plugin_call_output"`},
		{"delete /tmp/notes.txt", `"type":"mcp_approval_request"`},
		{"email eve@example.com", `"type":"function_call"`},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			body := `{"input":[{"role":"user","type":"message","content":[{"type":"text","text":"` + tt.text + `"}]}],"session_id":"s1"}`
			resp, err := http.Post(srv.URL+"/process", "application/json", strings.NewReader(body))
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			var last string
			n := 0
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					var ev struct {
						Seq int `json:"sequence_number"`
					}
					require.NoError(t, json.Unmarshal([]byte(line), &ev))
					require.Equal(t, n, ev.Seq)
					n++
					last = line
				}
			}
			require.Contains(t, last, `"status":"completed"`)
			require.Contains(t, last, tt.want)
		})
	}
}
