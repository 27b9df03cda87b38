package app

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/internal/series"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

// The console's charts (GET /v1/series): Options.Series is this instance's ring, fed by
// the observer (series.Observe, wired by cmd/bridge). runSeries closes its intervals,
// with the pending counts read from Redis, and writes each one to Redis for the cluster
// view (storeapi.History, bounded keys in Redis); Series answers from Redis (every instance's
// intervals, merged) or from the ring alone.

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
// span and one interval more (the newest is written an interval after it started).
func (b *Bridge) seriesKeep() time.Duration {
	return time.Duration(b.series.Keep()+1) * b.series.Interval()
}

// Series answers GET /v1/series.
func (b *Bridge) Series(ctx context.Context, q admin.SeriesQuery) (admin.Series, error) {
	if b.series == nil {
		return admin.Series{}, fmt.Errorf("%w: this bridge keeps no history", admin.ErrNotImplemented)
	}
	now := b.clk.Now()
	interval := b.series.Interval()
	from := now.Add(-q.Window).Truncate(interval) // the interval holding now-window, whole
	out := admin.Series{IntervalMs: interval.Milliseconds(), WindowMs: q.Window.Milliseconds(),
		From: from.UnixMilli(), To: now.UnixMilli(), Scope: q.Scope}
	var ivs []series.Interval
	if q.Scope == admin.ScopeInstance {
		ivs = b.series.Since(out.From)
		out.Instances = []string{b.cfg.Instance}
	} else {
		shardStore, _, err := b.parts()
		if err != nil {
			return admin.Series{}, err
		}
		raw, err := shardStore.Series(ctx, now.UnixMilli(), b.seriesKeep())
		if err != nil {
			return admin.Series{}, storeErr(err)
		}
		sets := make([][]series.Interval, 0, len(raw))
		for inst, vals := range raw {
			out.Instances = append(out.Instances, inst)
			set := make([]series.Interval, 0, len(vals))
			for _, v := range vals {
				iv, err := series.Decode(v)
				if err != nil {
					b.log.Warn("series: skipping an unreadable interval in Redis", "instance", inst, "err", err)
					continue
				}
				if iv.Start >= out.From {
					set = append(set, iv)
				}
			}
			sets = append(sets, set)
		}
		sort.Strings(out.Instances)
		ivs = series.Merge(sets...)
	}
	out.Routes = seriesRoutes(ivs, q.Route, interval)
	return out, nil
}

// seriesRoutes turns intervals into the API's points, per route in name order.
func seriesRoutes(ivs []series.Interval, route string, interval time.Duration) []admin.RouteSeries {
	byRoute := series.ByRoute(ivs, route)
	names := make([]string, 0, len(byRoute))
	for name := range byRoute {
		names = append(names, name)
	}
	sort.Strings(names)
	secs := interval.Seconds()
	out := make([]admin.RouteSeries, 0, len(names))
	for _, name := range names {
		pts := byRoute[name]
		rs := admin.RouteSeries{Route: name, Points: make([]admin.SeriesPoint, len(pts))}
		for i, p := range pts {
			ap := admin.SeriesPoint{T: p.Start, ReceivedPerS: float64(p.Received) / secs,
				DeliveredPerS: float64(p.Delivered) / secs, DeadLetteredPerS: float64(p.DeadLettered) / secs,
				Deliveries: p.Lateness.Count()}
			if p.Pending >= 0 {
				n := p.Pending
				ap.Pending = &n
			}
			if p50, ok := p.Lateness.Quantile(0.5); ok {
				p99, _ := p.Lateness.Quantile(0.99)
				ap.P50Ms, ap.P99Ms = &p50, &p99
			}
			rs.Points[i] = ap
		}
		out = append(out, rs)
	}
	return out
}
