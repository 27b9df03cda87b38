package metrics

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/app/series"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// BenchmarkObserverCharts is the per-message cost of the console charts' ring on the
// observer's hot path: the Prometheus observer alone, and with the ring (series.Observe)
// in front of it, for the two events every delivered message causes.
func BenchmarkObserverCharts(b *testing.B) {
	m, err := NewMetrics(NewRegistry(), "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	m.Declare([]RouteSeries{{Name: "orders", Broker: "kafka"}}, nil)
	ring := series.New(series.Options{})
	ring.Declare("orders")
	for _, c := range []struct {
		name string
		obs  observe.Observer
	}{{"metrics", m}, {"metrics+charts", series.Observe(m, ring)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.obs.Received("orders", 1)
					c.obs.Delivered("orders", 3*time.Millisecond)
				}
			})
		})
	}
}

// BenchmarkPerMessageObservations: the five observations every delivered message makes
// (requested delay at park, fired and fire lateness, egress wait, delivery lateness).
func BenchmarkPerMessageObservations(b *testing.B) {
	m, err := NewMetrics(NewRegistry(), "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	m.Declare([]RouteSeries{{Name: "orders", Broker: "kafka"}}, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.RequestedDelay("orders", time.Second)
			m.Fired("orders", time.Millisecond)
			m.EgressWait("orders", time.Millisecond)
			m.Delivered("orders", 3*time.Millisecond)
		}
	})
}
