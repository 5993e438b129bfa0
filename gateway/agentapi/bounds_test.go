package agentapi

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// What an upstream can make one turn hold is bounded: the messages it starts and never
// completes, the judged messages and notices kept for the final response, and a stream to
// a client that stopped reading.

// msgStart is the start of message id (evMsgStart under another id).
func msgStart(seq int, id string) string {
	return strings.Replace(strings.Replace(evMsgStart, `"id":"msg_z"`, fmt.Sprintf(`"id":%q`, id), 1),
		`"sequence_number":2`, fmt.Sprintf(`"sequence_number":%d`, seq), 1)
}

// countEvents is how many events of object with status the client got.
func countEvents(t *testing.T, raw, object, status string) int {
	t.Helper()
	evs, _ := events(t, strings.NewReader(raw))
	n := 0
	for _, e := range evs {
		if e["object"] == object && e["status"] == status {
			n++
		}
	}
	return n
}

// Messages started and never completed are kept until the turn ends: each costs its id
// (which may be as long as an event) and its entry against what the turn holds at once
// (MaxEventBytes). Before, they cost nothing: 64 of them with 1 MiB ids held 66 MiB under
// a 2 MiB bound.
func TestMessagesUnderWayAreBounded(t *testing.T) {
	const bound = 64 << 10
	for _, c := range []struct {
		name    string
		idBytes int
		n       int
	}{
		{"long ids", 16 << 10, 64},
		{"short ids", 8, 4096},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStack(t, "", Config{MaxEventBytes: bound})
			evs := []string{evCreated, evInProgress}
			// fit: the messages under way within the bound, each its id, its type and its entry.
			fit, held := 0, 0
			for i := range c.n {
				id := fmt.Sprintf("m%d-%s", i, strings.Repeat("i", c.idBytes))
				evs = append(evs, msgStart(2+i, id))
				if held += len(id) + len("message") + openCost; held <= bound {
					fit++
				}
			}
			require.Less(t, fit, c.n)
			s.agent.answer = sseAnswer(append(evs, evFinal(2+c.n, "[]"))...)
			raw := s.streamBytes(userRequest("hello", true))
			requireFailedEnd(t, raw, codeUpstreamBad, "the upstream's messages under way exceed 64 KiB")
			require.Equal(t, fit, countEvents(t, raw, "message", "in_progress"))
		})
	}
}

const redactT = `
rules:
  - id: redact-t
    when: method == "steps/message" && role == "agent"
    action: modify
    modify: {redact: ["tttttttttt"]}
  - id: no-zebra
    when: method == "steps/message" && text contains "zebra"
    action: deny
    message: No stripes.
  - id: no-mail
    when: tool == "send_email"
    action: deny
    message: No mail.
`

// A message a rule changes or withholds is kept as judged until the final response, to put
// in its output, and a call a rule stops is kept as the notice that replaces it. They count
// against MaxResponseBytes with the messages sent as they came. Before, none did: a redact
// rule over 64 messages of 1 MiB kept 64 MiB under a 4 MiB bound.
func TestJudgedMessagesKeptAreBounded(t *testing.T) {
	text := func(text string) func(i int) string {
		return func(i int) string {
			return strings.ReplaceAll(evMsgDone(2+i, "", textPart(`"text":"`+text+`"`)), "msg_z", fmt.Sprintf("msg_%d", i))
		}
	}
	call := func(i int) string {
		ev := evMsgDone(2+i, "", fmt.Sprintf(`[{"object":"content","type":"data","data":{"call_id":"c%d","name":"send_email","arguments":"{}"}}]`, i))
		ev = strings.Replace(ev, `"type":"message"`, `"type":"function_call"`, 1)
		return strings.ReplaceAll(ev, "msg_z", fmt.Sprintf("msg_%d", i))
	}
	for _, c := range []struct {
		name      string
		event     func(i int) string
		n         int
		completed int // completed messages the client gets before the turn fails
	}{
		{"redacted", text(strings.Repeat("t", 1500)), 8, 2}, // 1.5 KB kept each
		{"withheld", text("zebra"), 200, 11},                // some 350 bytes kept each
		{"calls stopped", call, 200, 10},                    // a notice of some 400 bytes each
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStack(t, redactT, Config{MaxResponseBytes: 4 << 10})
			evs := []string{evCreated, evInProgress}
			for i := range c.n {
				evs = append(evs, c.event(i))
			}
			s.agent.answer = sseAnswer(append(evs, evFinal(2+c.n, "[]"))...)
			raw := s.streamBytes(userRequest("hello", true))
			requireFailedEnd(t, raw, codeUpstreamBad, "the upstream's streamed messages exceed 4 KiB")
			require.Equal(t, c.completed, countEvents(t, raw, "message", "completed"))
			require.NotContains(t, raw, "tttttttttt")
			require.NotContains(t, raw, "zebra")
			require.NotContains(t, raw, `"call_id"`)
		})
	}
}

// allowAll decides every step allow, and no rule could act: everything streams through.
type allowAll struct{}

func (allowAll) DecideStep(context.Context, *aos.Step, guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error) {
	return guardian.Verdict{Decision: "allow"}, record.StepRecord{}, nil
}

func (allowAll) MayAct(*aos.Step, guardian.RequestMeta) bool { return false }

// A client that stops reading a turn's stream ends it at its first write past the server's
// write timeout, which the turn lifted (guardian.LongWait) but each write gets afresh: the
// handler and the upstream's stream are let go. Before, both were held for good.
func TestStalledReaderLetGo(t *testing.T) {
	var written atomic.Int64
	upDone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upDone)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{evCreated, evInProgress, evMsgStart} {
			io.WriteString(w, "data: "+e+"\n\n")
		}
		text := strings.Repeat("x", 60000)
		for i := range 2000 { // 120 MB, far more than the connections buffer
			if _, err := io.WriteString(w, "data: "+evText(3+i, `"text":"`+text+`"`)+"\n\n"); err != nil {
				return
			}
			written.Add(1)
		}
	}))
	t.Cleanup(up.Close)
	gw, err := New(Config{Name: "support", URL: up.URL}, Options{Decider: allowAll{}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	gw.Register(mux)
	handlerDone := make(chan struct{})
	var once sync.Once
	srv := httptest.NewUnstartedServer(guardian.WithLongWaits(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		once.Do(func() { close(handlerDone) })
	}), 250*time.Millisecond))
	srv.Config.WriteTimeout = 250 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	// A client that never reads past its request: its receive buffer fills.
	body := userRequest("hello", true)
	_, err = fmt.Fprintf(conn, "POST /agentapi/support/process HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	for _, ch := range []chan struct{}{handlerDone, upDone} {
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatal("the turn is still writing to a client that stopped reading")
		}
	}
	require.Less(t, written.Load(), int64(2000))
}
