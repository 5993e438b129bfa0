package rulesapi

import (
	"context"
	"fmt"

	"github.com/vigil-guardian/vigil/record"
)

// Observe takes a committed event of any replica sharing the store. A rule.changed event
// asks Follow to load the stored rule set again; it never blocks (it runs on the bus's
// delivery goroutine), and a burst of changes costs one reload.
func (s *Service) Observe(ev record.Event) {
	if ev.Type != record.EventRuleChanged {
		return
	}
	select {
	case s.follow <- struct{}{}:
	default:
	}
}

// Follow keeps the engine on the stored rule set until ctx ends: after every change made on
// any replica (Observe) it reads the whole set and swaps it in at once, so each replica
// runs either the old set or the new one, never a mix. A change this replica made itself
// is already loaded; reading it again changes nothing.
func (s *Service) Follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.follow:
		}
		if err := s.LoadStored(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("rules changed on another replica could not be loaded; the previous set stays", "err", err)
		}
	}
}

// LoadStored loads the stored rule set into the engine, under the lock that serialises
// this replica's own changes, so it never swaps in a set older than one it committed.
func (s *Service) LoadStored(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.store.ListRules(ctx)
	if err != nil {
		return fmt.Errorf("rulesapi: read stored rules: %w", err)
	}
	if err := s.engine.Load(cur); err != nil {
		return fmt.Errorf("rulesapi: load stored rules: %w", asInvalid(err))
	}
	s.log.Info("rules reloaded from the store", "rules", len(cur))
	return nil
}
