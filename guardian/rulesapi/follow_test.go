package rulesapi

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

// Two services over one store stand for two replicas: a change on one reaches the other's
// engine through the rule.changed events a bus delivers.
func TestFollowLoadsChangesMadeOnAnotherReplica(t *testing.T) {
	a := newFixture(t)
	b := newFixtureOn(t, a.db)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.svc.Follow(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ids := func(f *fixture) []string {
		var out []string
		for _, r := range f.svc.Engine().Rules() {
			out = append(out, r.ID)
		}
		return out
	}
	for _, step := range []struct {
		name   string
		change func()
		want   []string
	}{
		{"create", func() {
			_, err := a.svc.Create(ctx, rules.Rule{ID: "r1", When: "true", Action: rules.ActionDeny}, "dana")
			require.NoError(t, err)
		}, []string{"r1"}},
		{"second create", func() {
			_, err := a.svc.Create(ctx, rules.Rule{ID: "r2", When: "true", Action: rules.ActionAllow}, "dana")
			require.NoError(t, err)
		}, []string{"r1", "r2"}},
		{"delete", func() {
			_, err := a.svc.Delete(ctx, "r1", "dana")
			require.NoError(t, err)
		}, []string{"r2"}},
	} {
		before := len(a.published())
		step.change()
		require.Equal(t, step.want, ids(a), step.name)
		for _, ev := range a.published()[before:] {
			b.svc.Observe(ev)
		}
		require.Eventually(t, func() bool { return slices.Equal(ids(b), step.want) }, 10*time.Second, time.Millisecond, step.name)
	}
	// Other events ask for nothing.
	b.svc.Observe(record.Event{Type: record.EventAudit})
	require.Empty(t, b.svc.follow)
}
