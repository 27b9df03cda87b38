package app

import (
	"context"
	"time"

	"github.com/delaybridge/delay-bridge/app/series"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The console's charts (GET /v1/series): Options.Series is this instance's ring, fed by
// the observer (series.Observe, wired by cmd/bridge). runSeries closes its intervals,
// with the pending counts read from Redis, and writes each one to Redis for the cluster
// view (storeapi.History, bounded keys in Redis); app/adminapi's Series answers
// GET /v1/series from Redis (every instance's intervals, merged) or from the ring alone.

// runSeries closes the ring's intervals until ctx ends; the returned channel closes
// when it has stopped. Without a ring it is closed at once.
func (b *Bridge) runSeries(ctx context.Context, shardStore storeapi.Store) <-chan struct{} {
	done := make(chan struct{})
	if b.series == nil {
		close(done)
		return done
	}
	keep := b.seriesKeep()
	intervalMs := b.series.Interval().Milliseconds()
	pending := func(ctx context.Context) (map[string]int64, error) {
		c, err := shardStore.RouteCounts(ctx)
		if err != nil {
			return nil, err
		}
		out := map[string]int64{}
		for _, r := range b.cfg.Routes {
			out[r.Name] = 0
		}
		for name, n := range c.Routes() {
			out[name] = n.Pending
		}
		return out, nil
	}
	publish := func(ctx context.Context, iv series.Interval) error {
		wire, err := series.Encode(iv)
		if err != nil {
			return err
		}
		slot := series.Slot(iv.Start, intervalMs, b.series.Keep())
		return shardStore.PutSeries(ctx, b.cfg.Instance, slot, wire, b.clk.Now().UnixMilli(), keep)
	}
	go func() {
		defer close(done)
		b.series.Run(ctx, pending, publish)
	}()
	return done
}

// seriesKeep is how long the cluster view keeps an instance's intervals: the ring's
// span and one interval more (the newest is written an interval after it started);
// app/adminapi reads them back with the same span.
func (b *Bridge) seriesKeep() time.Duration {
	return time.Duration(b.series.Keep()+1) * b.series.Interval()
}
