package observe_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/observe"
	"github.com/vigil-guardian/vigil/record"
)

type recorder struct {
	mu     sync.Mutex
	steps  []*record.StepRecord
	events []record.Event
}

func (r *recorder) Publish(ev record.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) PublishStep(rec *record.StepRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, rec)
}

func (r *recorder) Step(rec *record.StepRecord) { r.PublishStep(rec) }
func (r *recorder) Event(ev record.Event)       { r.Publish(ev) }

func run(t *testing.T, f *observe.Fanout) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestFanoutPassesEverythingOn(t *testing.T) {
	next, inline := &recorder{}, &recorder{}
	got := make(chan observe.Item, 10)
	f := observe.New(next, []observe.Inline{inline}, []observe.Consumer{{
		Name:       "c",
		Steps:      true,
		StepFilter: func(rec *record.StepRecord) bool { return rec.Decision == "deny" },
		Events:     []string{record.EventHoldCreated},
		Handle:     func(_ context.Context, it observe.Item) { got <- it },
	}}, nil)
	run(t, f)

	allow := &record.StepRecord{Seq: 1, Decision: "allow"}
	deny := &record.StepRecord{Seq: 2, Decision: "deny"}
	f.PublishStep(allow)
	f.PublishStep(deny)
	payload := []byte(`{"id":"h_1"}`)
	f.Publish(record.Event{Seq: 3, Type: record.EventHoldCreated, Payload: payload})
	f.Publish(record.Event{Seq: 4, Type: "audit", Payload: json.RawMessage(`{}`)})
	// The publisher may reuse its buffer once Publish returns.
	copy(payload, `{"id":"XXX"}`)

	require.Equal(t, []*record.StepRecord{allow, deny}, next.steps)
	require.Len(t, next.events, 2)
	require.Equal(t, next.steps, inline.steps)
	require.Len(t, inline.events, 2)

	it := <-got
	require.Same(t, deny, it.Step, "only the steps the filter takes")
	it = <-got
	require.Nil(t, it.Step)
	require.EqualValues(t, 3, it.Event.Seq)
	require.JSONEq(t, `{"id":"h_1"}`, string(it.Event.Payload), "the consumer has its own copy")
	select {
	case it := <-got:
		t.Fatalf("unwanted event %+v", it)
	default:
	}
}

// TestFanoutNeverBlocks: a consumer stuck in Handle fills its queue; further events are
// dropped and counted for it, while the publisher and the other consumers go on.
func TestFanoutNeverBlocks(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	entered := make(chan struct{}, 1)
	fast := make(chan observe.Item, 100)
	f := observe.New(nil, nil, []observe.Consumer{
		{Name: "slow", Steps: true, Queue: 2, Handle: func(ctx context.Context, _ observe.Item) {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-stuck:
			case <-ctx.Done():
			}
		}},
		{Name: "fast", Steps: true, Queue: 100, Handle: func(_ context.Context, it observe.Item) { fast <- it }},
	}, nil)
	run(t, f)

	f.PublishStep(&record.StepRecord{Seq: 1})
	<-entered // the slow consumer holds the first step; its queue takes two more
	for i := range 10 {
		f.PublishStep(&record.StepRecord{Seq: int64(i + 2)})
	}
	for range 11 {
		select {
		case <-fast:
		case <-time.After(10 * time.Second):
			t.Fatal("the fast consumer was held up")
		}
	}
	st := f.Stats()
	require.Equal(t, observe.ConsumerStats{Name: "slow", Queued: 2, Handled: 1, Dropped: 8}, st[0])
	require.Equal(t, observe.ConsumerStats{Name: "fast", Handled: 11}, st[1])
}

func TestFanoutSurvivesAPanickingConsumer(t *testing.T) {
	got := make(chan int64, 2)
	f := observe.New(nil, nil, []observe.Consumer{{Name: "p", Steps: true, Handle: func(_ context.Context, it observe.Item) {
		if it.Step.Seq == 1 {
			panic("bad step")
		}
		got <- it.Step.Seq
	}}}, nil)
	run(t, f)
	f.PublishStep(&record.StepRecord{Seq: 1})
	f.PublishStep(&record.StepRecord{Seq: 2})
	require.EqualValues(t, 2, <-got)
}

// BenchmarkPublishStep is the fan-out's cost on a step's path with one queued consumer
// that takes every step and one that takes none.
func BenchmarkPublishStep(b *testing.B) {
	f := observe.New(nil, nil, []observe.Consumer{
		{Name: "all", Steps: true, Queue: 1 << 16, Handle: func(context.Context, observe.Item) {}},
		{Name: "denies", Steps: true, StepFilter: func(rec *record.StepRecord) bool { return rec.Decision == "deny" },
			Handle: func(context.Context, observe.Item) {}},
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	rec := &record.StepRecord{Decision: "allow"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f.PublishStep(rec)
		}
	})
}

// TestFanoutBoundsBytes: a consumer's queue holds at most QueueBytes of steps' requests
// and events' payloads, whatever their number.
func TestFanoutBoundsBytes(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	entered := make(chan struct{}, 1)
	f := observe.New(nil, nil, []observe.Consumer{{Name: "slow", Steps: true, Events: []string{"e"}, Queue: 1000, QueueBytes: 2500,
		Handle: func(ctx context.Context, _ observe.Item) {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-stuck:
			case <-ctx.Done():
			}
		}}}, nil)
	run(t, f)
	big := make([]byte, 1000)
	f.PublishStep(&record.StepRecord{Request: big})
	<-entered // in hand: still counted until handled
	f.PublishStep(&record.StepRecord{Request: big})
	f.Publish(record.Event{Type: "e", Payload: big})
	f.PublishStep(&record.StepRecord{Request: big})
	f.Publish(record.Event{Type: "e", Payload: big})
	require.Equal(t, observe.ConsumerStats{Name: "slow", Queued: 1, Handled: 1, Dropped: 3}, f.Stats()[0])
}
