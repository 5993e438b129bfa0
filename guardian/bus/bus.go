// Package bus carries the guardian's committed events to the parts that react to them: the
// live hub, and, when several guardian processes (replicas) share one PostgreSQL database,
// the holds, session controls, rules and session histories of every replica.
//
// Two implementations:
//   - Local, for SQLite (one process): Publish hands the event to every subscriber in the
//     publishing goroutine, exactly as the guardian did before the bus existed; no extra
//     latency, no copy.
//   - Postgres, for replicas: the event log in the database is the bus. Every transaction
//     that appends events notifies the channel vigil_events with its highest seq; each
//     replica LISTENs, reads the events after the last seq it delivered (EventsPage) and
//     hands them to its subscribers in seq order, its own events and every other
//     replica's alike. Reading by seq makes the bus gap tolerant (seqs may skip) and
//     lossless across a dropped connection (it reconnects and reads on from its cursor), and
//     bounds its memory by one page.
package bus

import (
	"sync"

	"github.com/vigil-guardian/vigil/record"
)

// Subscriber receives committed events. Its methods run on the bus's delivery goroutine (or
// the publisher's, for Local) and must not block: the live hub and the guardian's parts
// queue or hand off anything slow.
type Subscriber interface {
	// Publish receives an event. From Local it is never a step; from Postgres steps come
	// this way too, as "step" events whose payload is the record's JSON.
	Publish(ev record.Event)
	// PublishStep receives a stored step (Local only). rec is shared by every subscriber
	// and must not be changed.
	PublishStep(rec *record.StepRecord)
}

// Bus takes the events this process committed (Publish, PublishStep) and delivers
// committed events to its subscribers.
type Bus interface {
	Subscriber
	// Subscribe adds a subscriber. Call it before events flow (before Run for Postgres).
	Subscribe(s Subscriber)
	// Shared reports whether events of other processes arrive too (replicas): then the
	// guardian's in-memory state follows the bus, not only its own changes.
	Shared() bool
}

// Local delivers this process's events to its subscribers synchronously.
type Local struct {
	mu   sync.RWMutex
	subs []Subscriber
}

var _ Bus = (*Local)(nil)

// NewLocal returns an in-process bus.
func NewLocal() *Local { return &Local{} }

// Subscribe implements Bus.
func (b *Local) Subscribe(s Subscriber) {
	b.mu.Lock()
	b.subs = append(b.subs, s)
	b.mu.Unlock()
}

// Shared implements Bus: an in-process bus sees only its own process.
func (b *Local) Shared() bool { return false }

// Publish implements Subscriber.
func (b *Local) Publish(ev record.Event) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, s := range b.subs {
		s.Publish(ev)
	}
}

// PublishStep implements Subscriber.
func (b *Local) PublishStep(rec *record.StepRecord) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, s := range b.subs {
		s.PublishStep(rec)
	}
}

// Funcs adapts two functions to a Subscriber; a nil one ignores its events.
type Funcs struct {
	Event func(ev record.Event)
	Step  func(rec *record.StepRecord)
}

// Publish implements Subscriber.
func (f Funcs) Publish(ev record.Event) {
	if f.Event != nil {
		f.Event(ev)
	}
}

// PublishStep implements Subscriber.
func (f Funcs) PublishStep(rec *record.StepRecord) {
	if f.Step != nil {
		f.Step(rec)
	}
}
