package adminapi

import (
	"context"
	"sync"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Per-route counts and next due times for GET /v1/routes, /v1/stats and the gauges.
// The counts are the store's (kept by the scripts, one HGETALL per shard to read);
// the next due time of a route is looked up and cached (nextDueCache).

// nextDueTTL is how long the per-route next due times are reused.
const nextDueTTL = 5 * time.Second

// nextDueCache holds each route's earliest pending due time for nextDueTTL.
type nextDueCache struct {
	mu   sync.Mutex
	at   time.Time
	byRt map[string]int64
}

// routeCounts reads the per-route counts (per shard; summed in routes), and the
// routes' next due times (cached).
func (b *Backend) routeCounts(ctx context.Context, s storeapi.Store, shards []storeapi.ShardStat) (storeapi.Counts, map[string]storeapi.RouteCount, map[string]int64, error) {
	c, err := s.RouteCounts(ctx)
	if err != nil {
		return storeapi.Counts{}, nil, nil, err
	}
	routes := c.Routes()
	next, err := b.nextDue(ctx, s, routes, shards)
	if err != nil {
		return storeapi.Counts{}, nil, nil, err
	}
	return c, routes, next, nil
}

// nextDue finds each route's earliest pending due time, reused for nextDueTTL. A route
// that holds every pending message takes the earliest head of the shards (already
// read for the stats); any other is one browse page of limit 1 filtered by the route
// (bounded: it examines at most the browse scan budget, 2,000 candidates, merged over
// the shards). A route whose first message lies beyond that budget has no next due
// (omitted, never a guess).
func (b *Backend) nextDue(ctx context.Context, s storeapi.Store, routes map[string]storeapi.RouteCount, shards []storeapi.ShardStat) (map[string]int64, error) {
	b.due.mu.Lock()
	defer b.due.mu.Unlock()
	if b.due.byRt != nil && b.clk.Now().Sub(b.due.at) < nextDueTTL {
		return b.due.byRt, nil
	}
	var total int64
	head := int64(-1)
	for _, sh := range shards {
		total += sh.Pending
		if sh.NextDue >= 0 && (head < 0 || sh.NextDue < head) {
			head = sh.NextDue
		}
	}
	out := map[string]int64{}
	for r, n := range routes {
		switch {
		case n.Pending <= 0:
		case n.Pending == total && head >= 0:
			out[r] = head
		default:
			p, err := s.Browse(ctx, storeapi.BrowseQuery{State: storeapi.StatePending, Route: r, Limit: 1})
			if err != nil {
				return nil, err
			}
			if len(p.Items) > 0 {
				out[r] = p.Items[0].Score
			}
		}
	}
	b.due.byRt, b.due.at = out, b.clk.Now()
	return out, nil
}

func adminCounts(n storeapi.RouteCount) admin.Counts {
	return admin.Counts{Pending: n.Pending, Inflight: n.Inflight, Dead: n.Dead}
}
