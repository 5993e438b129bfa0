package sqlite

import (
	"context"
	"sync"
	"time"

	"github.com/vigil-guardian/vigil/record"
)

// minuteCounts keeps the per-minute decision counts of recent steps in memory, so the
// dashboard's steps-per-minute series costs nothing however many steps the last hour held
// (the query it replaces scans every step of the hour: close to a second at 1M steps).
// It is seeded from the database at Open and counts each step SaveStep commits; minutes
// before `from` are not covered and are answered by the query.
type minuteCounts struct {
	mu      sync.Mutex
	from    time.Time
	buckets map[int64]*record.MinuteStats // by unix minute
	newest  int64
}

// keepMinutes bounds the memory: twice the dashboard's window.
const keepMinutes = 2 * record.StatsMinutes

func newMinuteCounts(from time.Time, seed []record.MinuteStats) *minuteCounts {
	c := &minuteCounts{from: from.UTC().Truncate(time.Minute), buckets: make(map[int64]*record.MinuteStats)}
	for _, m := range seed {
		if m.Allow+m.Deny+m.Modify+m.Hold == 0 {
			continue
		}
		m := m
		k := m.Minute.Unix() / 60
		c.buckets[k] = &m
		c.newest = max(c.newest, k)
	}
	return c
}

func (c *minuteCounts) add(at time.Time, decision string) {
	k := at.Unix() / 60
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.Before(c.from) {
		return
	}
	b := c.buckets[k]
	if b == nil {
		b = &record.MinuteStats{Minute: time.Unix(k*60, 0).UTC()}
		c.buckets[k] = b
	}
	b.Add(decision, 1)
	if k > c.newest {
		c.newest = k
		for old := range c.buckets {
			if old < k-keepMinutes {
				delete(c.buckets, old)
			}
		}
	}
}

// window fills out (minutes starting at start) and reports whether the counts cover it.
func (c *minuteCounts) window(start time.Time, out []record.MinuteStats) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if start.Before(c.from) || start.Unix()/60 < c.newest-keepMinutes {
		return false
	}
	for i := range out {
		if b := c.buckets[out[i].Minute.Unix()/60]; b != nil {
			out[i].Allow, out[i].Deny, out[i].Modify, out[i].Hold = b.Allow, b.Deny, b.Modify, b.Hold
		}
	}
	return true
}

// seedMinutes reads the last hour's counts when the database opens.
func (db *DB) seedMinutes(ctx context.Context, now time.Time) error {
	tx, err := db.r.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	seed, err := perMinuteQuery(ctx, tx, now)
	if err != nil {
		return err
	}
	end := now.UTC().Truncate(time.Minute).Add(time.Minute)
	db.minutes = newMinuteCounts(end.Add(-record.StatsMinutes*time.Minute), seed)
	return nil
}
