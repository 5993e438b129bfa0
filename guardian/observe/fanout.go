// Package observe hands the guardian's committed events to the tool chain around it
// (metrics, traces, webhooks) without slowing the guardian down.
//
// Every committed event already goes through one publisher (the live hub): a stored step
// through PublishStep, holds, audit entries, rule and session changes through Publish. A
// Fanout stands in for that publisher, passes every event on to it unchanged, and offers it
// to its consumers. An inline consumer runs in the publishing goroutine and must be cheap
// and never block (the metrics: counting there keeps the counts exact under load). A queued
// consumer gets its own goroutine and a bounded queue; when the queue is full the event is
// dropped for that consumer and counted, so a slow trace collector or a dead webhook
// receiver never holds up an agent's answer.
package observe

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/vigil-guardian/vigil/record"
)

// Publisher is what the guardian publishes committed events to (live.Hub implements it).
type Publisher interface {
	Publish(ev record.Event)
	PublishStep(rec *record.StepRecord)
}

// Item is one committed event: a stored step (Step set; its Event is zero) or another
// event (Step nil). A step record is shared by every consumer and must not be changed.
type Item struct {
	Step  *record.StepRecord
	Event record.Event
}

// Inline consumes events in the publisher's goroutine. Its methods must return quickly and
// never block: they run on every step's path to its answer.
type Inline interface {
	Step(rec *record.StepRecord)
	Event(ev record.Event)
}

// Consumer is a queued consumer.
type Consumer struct {
	// Name identifies the consumer in counters and logs ("traces", "webhooks").
	Name string
	// Steps says whether stored steps are wanted; StepFilter, when set, narrows them
	// (evaluated in the publisher's goroutine, so it must be cheap).
	Steps      bool
	StepFilter func(rec *record.StepRecord) bool
	// Events are the non-step event types wanted (storage.EventHoldCreated, …).
	Events []string
	// Queue bounds the events waiting for Handle (default 4096), QueueBytes their size
	// (a step's request and answer, an event's payload; default 64 MiB): a step's request
	// may be megabytes, and a queue of them must not hold the memory the hold limits keep.
	Queue      int
	QueueBytes int64
	// Handle processes one event in the consumer's goroutine. It may block (it delays
	// only this consumer); ctx ends when the fan-out stops.
	Handle func(ctx context.Context, it Item)
}

// ConsumerStats counts one queued consumer's events since start.
type ConsumerStats struct {
	Name string
	// Queued is the number of events waiting now.
	Queued int
	// Handled counts events passed to Handle; Dropped those refused by a full queue.
	Handled, Dropped int64
}

type queue struct {
	c                Consumer
	ch               chan Item
	handled, dropped atomic.Int64
	// bytes is the size of the queued items (itemSize).
	bytes atomic.Int64
}

// itemSize is what a queued item holds on to.
func itemSize(it Item) int64 {
	if it.Step != nil {
		return int64(len(it.Step.Request) + len(it.Step.Response) + len(it.Step.Text))
	}
	return int64(len(it.Event.Payload))
}

// Fanout passes events to the next publisher and offers them to the consumers. Build it
// with New, then call Run once; it is safe for concurrent use.
type Fanout struct {
	next   Publisher
	inline []Inline
	queues []*queue
	log    *slog.Logger
	// byType lists the queues wanting each event type; steps the queues wanting steps.
	byType map[string][]*queue
	steps  []*queue
	// stopped is set when Run's context ends: later events go to next only.
	stopped atomic.Bool
	started atomic.Bool
}

// Default bounds of a queued consumer's queue.
const (
	DefaultQueue      = 4096
	DefaultQueueBytes = 64 << 20
)

// New builds a fan-out in front of next (nil: consumers only).
func New(next Publisher, inline []Inline, consumers []Consumer, log *slog.Logger) *Fanout {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Fanout{next: next, inline: slices.Clone(inline), log: log, byType: map[string][]*queue{}}
	for _, c := range consumers {
		if c.Handle == nil {
			continue
		}
		if c.Queue <= 0 {
			c.Queue = DefaultQueue
		}
		if c.QueueBytes <= 0 {
			c.QueueBytes = DefaultQueueBytes
		}
		q := &queue{c: c, ch: make(chan Item, c.Queue)}
		f.queues = append(f.queues, q)
		if c.Steps {
			f.steps = append(f.steps, q)
		}
		for _, t := range c.Events {
			if !slices.Contains(f.byType[t], q) {
				f.byType[t] = append(f.byType[t], q)
			}
		}
	}
	return f
}

// PublishStep passes a stored step on. rec must not change after the call.
func (f *Fanout) PublishStep(rec *record.StepRecord) {
	if f.next != nil {
		f.next.PublishStep(rec)
	}
	for _, in := range f.inline {
		in.Step(rec)
	}
	if len(f.steps) == 0 || f.stopped.Load() {
		return
	}
	for _, q := range f.steps {
		if q.c.StepFilter != nil && !q.c.StepFilter(rec) {
			continue
		}
		q.offer(Item{Step: rec})
	}
}

// Publish passes a committed event on. Like live.Hub.Publish it leaves ev.Payload to the
// caller: queued consumers get their own copy.
func (f *Fanout) Publish(ev record.Event) {
	if f.next != nil {
		f.next.Publish(ev)
	}
	for _, in := range f.inline {
		in.Event(ev)
	}
	qs := f.byType[ev.Type]
	if len(qs) == 0 || f.stopped.Load() {
		return
	}
	// One copy shared by the consumers, which only read it; none for consumers whose
	// queue could not take it anyway.
	var copied bool
	for _, q := range qs {
		if !q.room(int64(len(ev.Payload))) {
			q.dropped.Add(1)
			continue
		}
		if !copied {
			ev.Payload, copied = slices.Clone(ev.Payload), true
		}
		q.offer(Item{Event: ev})
	}
}

// room reports whether n more bytes fit the queue's byte bound (an empty queue takes any
// one item, so that a large one is not refused for ever). Publishers racing past the check
// together can exceed the bound by one item each.
func (q *queue) room(n int64) bool {
	b := q.bytes.Load()
	return b == 0 || b+n <= q.c.QueueBytes
}

func (q *queue) offer(it Item) {
	n := itemSize(it)
	if !q.room(n) {
		q.dropped.Add(1)
		return
	}
	q.bytes.Add(n)
	select {
	case q.ch <- it:
	default:
		q.bytes.Add(-n)
		q.dropped.Add(1)
	}
}

// Stats returns the queued consumers' counters.
func (f *Fanout) Stats() []ConsumerStats {
	out := make([]ConsumerStats, len(f.queues))
	for i, q := range f.queues {
		out[i] = ConsumerStats{Name: q.c.Name, Queued: len(q.ch), Handled: q.handled.Load(), Dropped: q.dropped.Load()}
	}
	return out
}

// Run runs the queued consumers until ctx ends, then returns once each has finished the
// event in hand; events still queued are dropped (uncounted), as the process is stopping.
// Call it once.
func (f *Fanout) Run(ctx context.Context) {
	if !f.started.CompareAndSwap(false, true) {
		f.log.Error("observe: Run called more than once")
		return
	}
	var wg sync.WaitGroup
	for _, q := range f.queues {
		wg.Go(func() { q.run(ctx, f.log) })
	}
	<-ctx.Done()
	f.stopped.Store(true)
	wg.Wait()
}

func (q *queue) run(ctx context.Context, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-q.ch:
			q.handle(ctx, it, log)
		}
	}
}

// handle runs Handle, so that a consumer's panic costs one event, not the guardian.
func (q *queue) handle(ctx context.Context, it Item, log *slog.Logger) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("observe: consumer panicked", "consumer", q.c.Name, "panic", r)
		}
	}()
	q.handled.Add(1)
	defer q.bytes.Add(-itemSize(it))
	q.c.Handle(ctx, it)
}
