package adminapi

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/app/series"
)

// seriesKeep is how long the cluster view keeps an instance's intervals: the ring's
// span and one interval more (the newest is written an interval after it started).
// app writes the intervals with the same span.
func seriesKeep(r *series.Recorder) time.Duration {
	return time.Duration(r.Keep()+1) * r.Interval()
}

// Series answers GET /v1/series.
func (b *Backend) Series(ctx context.Context, q admin.SeriesQuery) (admin.Series, error) {
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
		raw, err := shardStore.Series(ctx, now.UnixMilli(), seriesKeep(b.series))
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
