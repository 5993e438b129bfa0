package aap_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/gateway/aap"
	"github.com/vigil-guardian/vigil/gateway/aap/aaptest"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// decided is one step the fake pipeline saw.
type decided struct {
	step *aos.Step
	meta guardian.RequestMeta
	v    guardian.Verdict
}

// fakeDecider is the pipeline in unit tests: rule decides each step (allow when nil).
type fakeDecider struct {
	mu    sync.Mutex
	rule  func(ctx context.Context, s *aos.Step) (guardian.Verdict, error)
	steps []decided
}

func (f *fakeDecider) DecideStep(ctx context.Context, s *aos.Step, meta guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error) {
	v := guardian.Verdict{Decision: "allow"}
	var err error
	if f.rule != nil {
		v, err = f.rule(ctx, s)
	}
	if err == nil && v.Decision == "" {
		v.Decision = "allow"
	}
	f.mu.Lock()
	f.steps = append(f.steps, decided{s, meta, v})
	f.mu.Unlock()
	return v, record.StepRecord{}, err
}

// SessionRefusal: the unit tests' sessions have no owners.
func (f *fakeDecider) SessionRefusal(context.Context, string, string, string) string { return "" }

func (f *fakeDecider) decided() []decided {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]decided(nil), f.steps...)
}

// methods lists the decided steps as "method role|tool decision".
func (f *fakeDecider) summary() []string {
	var out []string
	for _, d := range f.decided() {
		what := ""
		switch {
		case d.step.Message != nil:
			what = d.step.Message.Message.Role + " " + d.step.Text()
		case d.step.ToolCall != nil:
			what = d.step.ToolCall.ToolCallRequest.ToolID
		case d.step.ToolResult != nil:
			what = d.step.ToolResult.ExecutionID
		}
		out = append(out, d.step.Method+" "+what+" → "+d.v.Decision)
	}
	return out
}

// redact is a modify verdict replacing old with repl in the step's params.
func redact(s *aos.Step, old, repl string) guardian.Verdict {
	return guardian.Verdict{Decision: "modify", Message: "redacted",
		ModifiedParams: bytes.ReplaceAll(s.Params, []byte(old), []byte(repl))}
}

type harness struct {
	t        *testing.T
	upstream *aaptest.Server
	up       *httptest.Server
	front    *httptest.Server
	fd       *fakeDecider
	gw       *aap.Gateway
}

func newHarness(t *testing.T, mod ...func(*aap.Options)) *harness {
	t.Helper()
	h := &harness{t: t, upstream: aaptest.New(), fd: &fakeDecider{}}
	h.up = httptest.NewServer(h.upstream)
	t.Cleanup(h.up.Close)
	opts := aap.Options{Name: "demo", Upstream: h.up.URL, Decider: h.fd, KeepAlive: 5 * time.Millisecond}
	for _, m := range mod {
		m(&opts)
	}
	gw, err := aap.New(opts)
	require.NoError(t, err)
	h.gw = gw
	mux := http.NewServeMux()
	gw.Register(mux, nil)
	h.front = httptest.NewServer(mux)
	t.Cleanup(h.front.Close)
	return h
}

// do sends a request to the gateway and reads the whole answer.
func (h *harness) do(method, path, body string) (*http.Response, string) {
	h.t.Helper()
	return doURL(h.t, method, h.front.URL+"/aap/demo"+path, body)
}

func doURL(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

const sessionBody = `{"agent":{"name":"guarded-agent","tools":[{"name":"read_file","trust":true},{"name":"delete_file"}],"options":{"apiKey":"sk-test-secret-value"}},` +
	`"tools":[{"name":"get_time","description":"client-side clock","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}]}`

func (h *harness) session() string {
	h.t.Helper()
	resp, body := h.do("POST", "/sessions", sessionBody)
	require.Equal(h.t, http.StatusCreated, resp.StatusCode, body)
	var out struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(h.t, json.Unmarshal([]byte(body), &out))
	return out.SessionID
}

// item is one thing a client turn showed, whatever its stream mode.
type item struct {
	Kind string // text, thinking, tool_call, tool_result, stop
	Text string // text, thinking, tool result content, stop reason
	Name string
	ID   string
	In   string // tool input JSON
}

// sseEvent is one event of a stream as the client got it.
type sseEvent struct{ name, data string }

func parseSSE(t *testing.T, body string) (events []sseEvent, comments int) {
	t.Helper()
	require.True(t, body == "" || strings.HasSuffix(body, "\n\n"), "a stream ends with a blank line: %q", body)
	for _, chunk := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		if chunk == "" {
			continue
		}
		var ev sseEvent
		for _, line := range strings.Split(chunk, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				comments++
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected line %q", line)
			}
		}
		if ev.name != "" {
			events = append(events, ev)
		}
	}
	return events, comments
}

// items normalizes a turn's answer in any mode: consecutive text deltas join into one text.
func items(t *testing.T, mode, body string) []item {
	t.Helper()
	var out []item
	if mode == "none" {
		var resp struct {
			StopReason string `json:"stopReason"`
			Messages   []struct {
				Role       string          `json:"role"`
				Content    json.RawMessage `json:"content"`
				ToolCallID string          `json:"toolCallId"`
			} `json:"messages"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &resp), body)
		for _, m := range resp.Messages {
			if m.Role == "tool" {
				var s string
				require.NoError(t, json.Unmarshal(m.Content, &s))
				out = append(out, item{Kind: "tool_result", ID: m.ToolCallID, Text: s})
				continue
			}
			var s string
			if json.Unmarshal(m.Content, &s) == nil {
				out = append(out, item{Kind: "text", Text: s})
				continue
			}
			var blocks []struct {
				Type       string          `json:"type"`
				Text       string          `json:"text"`
				Thinking   string          `json:"thinking"`
				ToolCallID string          `json:"toolCallId"`
				Name       string          `json:"name"`
				Input      json.RawMessage `json:"input"`
			}
			require.NoError(t, json.Unmarshal(m.Content, &blocks))
			for _, b := range blocks {
				switch b.Type {
				case "text":
					out = append(out, item{Kind: "text", Text: b.Text})
				case "thinking":
					out = append(out, item{Kind: "thinking", Text: b.Thinking})
				case "tool_use":
					out = append(out, item{Kind: "tool_call", ID: b.ToolCallID, Name: b.Name, In: string(b.Input)})
				}
			}
		}
		return append(out, item{Kind: "stop", Text: resp.StopReason})
	}
	events, _ := parseSSE(t, body)
	require.NotEmpty(t, events, body)
	require.Equal(t, "turn_start", events[0].name, body)
	starts := 0
	for _, ev := range events {
		var d struct {
			Delta, Text, Thinking, ToolCallID, Name, StopReason string
			Input                                               json.RawMessage
			Content                                             string
		}
		require.NoError(t, json.Unmarshal([]byte(ev.data), &d), ev.data)
		switch ev.name {
		case "turn_start":
			starts++
		case "text_delta":
			require.Equal(t, "delta", mode)
			if n := len(out); n > 0 && out[n-1].Kind == "text" {
				out[n-1].Text += d.Delta
			} else {
				out = append(out, item{Kind: "text", Text: d.Delta})
			}
		case "thinking_delta":
			out = append(out, item{Kind: "thinking", Text: d.Delta})
		case "text":
			require.Equal(t, "message", mode)
			out = append(out, item{Kind: "text", Text: d.Text})
		case "thinking":
			out = append(out, item{Kind: "thinking", Text: d.Thinking})
		case "tool_call":
			out = append(out, item{Kind: "tool_call", ID: d.ToolCallID, Name: d.Name, In: string(d.Input)})
		case "tool_result":
			out = append(out, item{Kind: "tool_result", ID: d.ToolCallID, Text: d.Content})
		case "turn_stop":
			out = append(out, item{Kind: "stop", Text: d.StopReason})
		default:
			t.Fatalf("unexpected event %q", ev.name)
		}
	}
	require.Equal(t, 1, starts, "the client sees one turn: %s", body)
	require.Equal(t, "stop", out[len(out)-1].Kind, body)
	return out
}

func turnBody(mode string, msgs ...string) string {
	return `{"stream":"` + mode + `","messages":[` + strings.Join(msgs, ",") + `]}`
}

func userMsg(text string) string {
	return `{"role":"user","content":` + string(mustJSON(text)) + `}`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// texts returns the texts of items of a kind.
func texts(its []item, kind string) []string {
	var out []string
	for _, it := range its {
		if it.Kind == kind {
			out = append(out, it.Text)
		}
	}
	return out
}

func names(its []item) []string {
	var out []string
	for _, it := range its {
		if it.Kind == "tool_call" {
			out = append(out, it.Name)
		}
	}
	return out
}

var modes = []string{"delta", "message", "none"}

// readUntil reads a stream until its text so far contains want.
func readUntil(t *testing.T, r *bufio.Reader, want string) string {
	t.Helper()
	var b strings.Builder
	for !strings.Contains(b.String(), want) {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		require.NoError(t, err, "stream so far: %q", b.String())
	}
	return b.String()
}
