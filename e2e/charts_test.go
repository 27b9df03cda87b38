package e2e

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
)

// checkCharts reads the console charts' history (GET /v1/series, the cluster view
// through Redis) of a bridge binary that delivered n messages on route with no fault:
// once the last intervals have closed (10 s each), the deliveries add up to n, the
// receptions to at least n, lateness has quantiles and the last pending is 0.
func checkCharts(t *testing.T, p *bridgeProc, route string, n int) {
	t.Helper()
	var s admin.Series
	var delivered, received float64
	waitUntil(t, "the charts' intervals to count every delivery", 40*time.Second, func() bool {
		if code := p.api("GET", "/v1/series?window=15m&route="+route, nil, &s); code != 200 {
			t.Fatalf("GET /v1/series: %d", code)
		}
		delivered, received = 0, 0
		for _, rs := range s.Routes {
			for _, pt := range rs.Points {
				delivered += pt.DeliveredPerS * float64(s.IntervalMs) / 1000
				received += pt.ReceivedPerS * float64(s.IntervalMs) / 1000
			}
		}
		return delivered >= float64(n)
	})
	if s.IntervalMs != 10_000 || s.Scope != admin.ScopeCluster || len(s.Instances) != 1 || len(s.Routes) != 1 || s.Routes[0].Route != route {
		t.Fatalf("series: interval %d ms, scope %s, instances %v, %d routes", s.IntervalMs, s.Scope, s.Instances, len(s.Routes))
	}
	if int(delivered+0.5) != n || received < float64(n)-0.5 {
		t.Errorf("charts count %.0f delivered, %.0f received; %d were sent and delivered once", delivered, received, n)
	}
	pts := s.Routes[0].Points
	withLateness := 0
	for _, pt := range pts {
		if pt.P99Ms != nil {
			withLateness++
		}
	}
	if withLateness == 0 {
		t.Error("no interval has a lateness p99")
	}
	if last := pts[len(pts)-1]; last.Pending == nil || *last.Pending != 0 {
		t.Errorf("last pending %v, want 0 after every delivery", last.Pending)
	}
}
