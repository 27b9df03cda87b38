package admin

import (
	"context"
	"time"
)

// chartsFake is the console backend with a fixed history (series_export_test.go).
type chartsFake struct{ liveFake }

// NewChartsBackend is the backend of admin's charts drawing test: route orders has 12
// intervals of 10 s ending a minute ago with a gap of three intervals after the sixth,
// no pending count in the third and no deliveries (so no lateness) in the first two;
// route billing has 12 intervals of nothing.
func NewChartsBackend() Backend {
	f := newFake()
	f.msgs = map[string]*Message{}
	return chartsFake{liveFake{f}}
}

func (chartsFake) Series(_ context.Context, q SeriesQuery) (Series, error) {
	now := time.Now().UnixMilli()
	start := now - now%10_000 - 15*10_000
	var orders, billing []SeriesPoint
	for i := range 15 {
		t := start + int64(i)*10_000
		zero := int64(0)
		billing = append(billing, SeriesPoint{T: t, Pending: &zero})
		if i >= 6 && i < 9 {
			continue // nothing recorded
		}
		pending, p50, p99 := int64(100+10*i), 1.0+float64(i%3), 5.0+float64(i)
		p := SeriesPoint{T: t, ReceivedPerS: float64(10 + i), DeliveredPerS: float64(8 + i), DeadLetteredPerS: float64(i % 2),
			Pending: &pending, Deliveries: uint64(80 + i), P50Ms: &p50, P99Ms: &p99}
		if i == 2 {
			p.Pending = nil
		}
		if i < 2 {
			p.Deliveries, p.P50Ms, p.P99Ms = 0, nil, nil
		}
		orders = append(orders, p)
	}
	return Series{IntervalMs: 10_000, WindowMs: q.Window.Milliseconds(), From: now - q.Window.Milliseconds(), To: now,
		Scope: q.Scope, Instances: []string{"a-1"},
		Routes: []RouteSeries{{Route: "billing", Points: billing}, {Route: "orders", Points: orders}}}, nil
}
