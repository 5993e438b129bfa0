package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/bus"
	"github.com/vigil-guardian/vigil/guardian/cluster"
	"github.com/vigil-guardian/vigil/guardian/holds"
	"github.com/vigil-guardian/vigil/guardian/rulesapi"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// replication is how this guardian shares its events and holds with other guardian
// processes: on SQLite there are none, and the bus is in process; on PostgreSQL every
// process is a replica, its bus LISTENs for every replica's events, and a registry of
// replicas ends the holds of one that dies.
type replication struct {
	bus bus.Bus
	pg  *bus.Postgres
	reg *cluster.Registry
	log *slog.Logger
}

// pooled is a backend that shares its connection pool (storage/postgres).
type pooled interface{ Pool() *pgxpool.Pool }

// newReplication builds the bus for db. On PostgreSQL it starts listening at once, before
// the rules and session controls are loaded, so no change made by another replica falls
// between that load and the bus's first event.
func newReplication(ctx context.Context, db storage.Backend, log *slog.Logger) (*replication, error) {
	p, ok := db.(pooled)
	if !ok {
		return &replication{bus: bus.NewLocal(), log: log}, nil
	}
	pg := bus.NewPostgres(bus.PostgresOptions{Pool: p.Pool(), Source: db, Logger: log})
	if err := pg.Start(ctx); err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	return &replication{bus: pg, pg: pg, log: log}, nil
}

// join registers this replica (PostgreSQL only) and sets the holds' options for a store
// shared with other replicas. publish passes the events of holds a sweep ends to this
// replica's metrics and webhooks.
func (r *replication) join(ctx context.Context, cfg Config, db storage.Backend, addr string, publish func(record.Event), o *holds.Options) error {
	if r.pg == nil {
		return nil
	}
	p := db.(pooled)
	reg, err := cluster.Join(ctx, cluster.Options{Pool: p.Pool(), Holds: db, Addr: addr,
		Heartbeat: cfg.ReplicaHeartbeat, DeadAfter: cfg.ReplicaDeadAfter, Publish: publish, Logger: r.log})
	if err != nil {
		return fmt.Errorf("replicas: %w", err)
	}
	r.reg = reg
	o.Shared, o.Owner = true, reg
	return nil
}

// run makes this replica follow the others (holds decided and sessions controlled
// elsewhere, rule changes, other replicas' steps in the session histories) and starts the
// bus and the registry. It returns a function that stops them.
//
// Holds, session controls and session histories follow an event before the live hub gets
// it, so a console that has seen a step or a control knows the replica acts on it (a rule
// change starts its reload then).
func (r *replication) run(ctx context.Context, hm *holds.Manager, rs *rulesapi.Service, g *guardian.Guardian, hub bus.Subscriber) func() {
	if r.pg == nil {
		return func() {}
	}
	r.bus.Subscribe(bus.Funcs{Event: func(ev record.Event) {
		if ev.Type == record.EventStep {
			g.ObserveStepEvent(ev)
			return
		}
		hm.Observe(ev)
		rs.Observe(ev)
	}})
	r.bus.Subscribe(hub)
	// The steps of a dead replica's holds are stored by the replica whose sweep ends them.
	r.reg.OnInterrupted(func(ctx context.Context, h record.Hold) {
		if err := g.RecordInterrupted(ctx, []record.Hold{h}); err != nil {
			r.log.Error("step of an interrupted hold not stored", "hold", h.ID, "err", err)
		}
	})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 3)
	go func() { defer func() { done <- struct{}{} }(); r.pg.Run(ctx) }()
	go func() { defer func() { done <- struct{}{} }(); r.reg.Run(ctx) }()
	go func() { defer func() { done <- struct{}{} }(); rs.Follow(ctx) }()
	return func() {
		cancel()
		for range 3 {
			<-done
		}
	}
}

// close releases what newReplication opened, when the start fails before run.
func (r *replication) close() {
	if r.pg != nil {
		r.pg.Close()
	}
}

// leave removes this replica from the registry once its holds are ended (graceful
// shutdown), so no survivor mistakes it for a dead one.
func (r *replication) leave(ctx context.Context) {
	if r == nil || r.reg == nil {
		return
	}
	if err := r.reg.Leave(ctx); err != nil {
		r.log.Warn("leave the replica registry", "err", err)
	}
}
