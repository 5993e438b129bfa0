package live

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/vigil-guardian/vigil/record"
)

// synthSource is an event log whose event n is a pure function of n, so a benchmark can
// "commit" millions of events without keeping them.
type synthSource struct {
	committed atomic.Int64
	payload   json.RawMessage
}

func (s *synthSource) event(seq int64) record.Event {
	return record.Event{
		Seq:       seq,
		Type:      "step",
		SessionID: "bench-session",
		At:        time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Payload:   s.payload,
	}
}

func (s *synthSource) commit() record.Event { return s.event(s.committed.Add(1)) }

func (s *synthSource) EventsPage(_ context.Context, after int64, p record.EventPage) ([]record.Event, error) {
	end := min(s.committed.Load(), after+int64(p.Limit))
	var (
		evs  []record.Event
		size int
	)
	for seq := after + 1; seq <= end; seq++ {
		ev := s.event(seq)
		if size += len(ev.Payload); len(evs) > 0 && p.MaxBytes > 0 && size > p.MaxBytes {
			break
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// frameSeq reads the seq from the start of a frame, `{"seq":N,`, sparing the benchmark's
// readers a full decode.
func frameSeq(data []byte) int64 {
	rest, _ := bytes.CutPrefix(data, []byte(`{"seq":`))
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0
	}
	n, _ := strconv.ParseInt(string(rest[:end]), 10, 64)
	return n
}

// benchPayload is about the size of a stored tool-call step.
var benchPayload = json.RawMessage(`{"seq":1,"sessionId":"bench-session","method":"steps/toolCallRequest",` +
	`"decision":"allow","request":{"jsonrpc":"2.0","id":1,"params":{"text":"` + strings.Repeat("lorem ipsum ", 60) + `"}}}`)

// drainClients connects n clients that read continuously; each reports the seq it reached
// and pokes progress (when given) after every event.
func drainClients(b *testing.B, e *testEnv, n int, progress chan<- struct{}) []*atomic.Int64 {
	b.Helper()
	reached := make([]*atomic.Int64, n)
	for i := range n {
		conn := e.dial(b, "", nil)
		reached[i] = &atomic.Int64{}
		go func(r *atomic.Int64, conn *websocket.Conn) {
			for {
				_, data, err := conn.ReadMessage()
				if err != nil {
					return
				}
				r.Store(frameSeq(data))
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}(reached[i], conn)
	}
	return reached
}

// BenchmarkPublish10Clients measures sustained delivery to 10 connected clients: each op is
// one event published and received by all 10, the publisher staying at most a window ahead
// so that nobody is dropped. publish-ns/op is the part the guardian itself pays, inside
// Publish.
func BenchmarkPublish10Clients(b *testing.B) {
	src := &synthSource{payload: benchPayload}
	e := start(b, Options{Source: src, ClientBuffer: 256})
	progress := make(chan struct{}, 1)
	reached := drainClients(b, e, 10, progress)
	const window = 128
	slowest := func() int64 {
		m := reached[0].Load()
		for _, r := range reached[1:] {
			m = min(m, r.Load())
		}
		return m
	}
	var inPublish time.Duration
	var seq int64
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ev := src.commit()
		seq = ev.Seq
		t0 := time.Now()
		e.hub.Publish(ev)
		inPublish += time.Since(t0)
		for seq-slowest() > window {
			<-progress
		}
	}
	for slowest() < seq {
		<-progress
	}
	b.StopTimer()
	b.ReportMetric(float64(inPublish.Nanoseconds())/float64(b.N), "publish-ns/op")
	c := e.hub.Counters()
	if c.SlowClients > 0 || c.Resyncs > 0 || c.Clients != 10 {
		b.Fatalf("clients were dropped while paced: %+v", c)
	}
}

// BenchmarkPublishOverload publishes as fast as the caller can with 10 clients attached:
// the clients cannot keep up and are dropped, and Publish stays cheap and never blocks.
func BenchmarkPublishOverload(b *testing.B) {
	src := &synthSource{payload: benchPayload}
	e := start(b, Options{Source: src})
	drainClients(b, e, 10, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e.hub.Publish(src.commit())
	}
	b.StopTimer()
	c := e.hub.Counters()
	b.ReportMetric(float64(c.Dropped)/float64(b.N), "dropped/op")
	b.ReportMetric(float64(c.SlowClients), "clients-dropped")
}
