package admin

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

func TestLateness(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: LatenessMetric,
		Buckets: []float64{0.001, 0.002, 0.005, 0.01, 0.1, 1}}, []string{"route"})
	reg.MustRegister(h)
	h.WithLabelValues("idle") // a route with no deliveries yet
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	s := NewServer(Options{Backend: newFake(), Gatherer: reg, Clock: clk, Logger: quiet})
	get := func(q string) Lateness {
		t.Helper()
		r := do(t, s, "GET", "/v1/lateness"+q, "")
		r.expect(t, http.StatusOK, "window_ms", "from", "to", "routes")
		var l Lateness
		if err := json.Unmarshal([]byte(r.raw), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	near := func(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) < 1e-6 }

	// Old deliveries: 100 at 0.5 ms (bucket 0..1 ms).
	for range 100 {
		h.WithLabelValues("orders").Observe(0.0005)
	}
	l := get("")
	if l.From != 0 || l.WindowMs != 300_000 || len(l.Routes) != 2 {
		t.Fatalf("first answer: %+v", l)
	}
	if o := l.Routes[1]; o.Route != "orders" || o.Count != 100 || !near(o.P50Ms, 0.5) || !near(o.P99Ms, 0.99) {
		t.Errorf("since start: %+v p50 %v p99 %v", o, *o.P50Ms, *o.P99Ms)
	}
	if idle := l.Routes[0]; idle.Count != 0 || idle.P50Ms != nil || idle.P99Ms != nil {
		t.Errorf("idle route: %+v", idle)
	}

	// Six minutes later, 10 recent deliveries between 5 and 10 ms: a 5-minute window sees
	// only those (the snapshot of six minutes ago is its baseline).
	clk.Advance(6 * time.Minute)
	for range 10 {
		h.WithLabelValues("orders").Observe(0.007)
	}
	l = get("?window=5m")
	o := l.Routes[1]
	if l.From != 1_700_000_000_000 || l.To != 1_700_000_360_000 || o.Count != 10 || !near(o.P50Ms, 7.5) || !near(o.P99Ms, 9.95) {
		t.Errorf("recent window: from %d to %d %+v p50 %v p99 %v", l.From, l.To, o, *o.P50Ms, *o.P99Ms)
	}
	// Beyond the largest bucket: the largest finite bound. (The baseline is the
	// snapshot of the previous answer, a minute back.)
	clk.Advance(time.Minute)
	h.WithLabelValues("orders").Observe(5)
	h.WithLabelValues("orders").Observe(7)
	if o := get("?window=1m").Routes[1]; o.Count != 2 || !near(o.P50Ms, 1000) || !near(o.P99Ms, 1000) {
		t.Errorf("overflow: %+v", o)
	}

	for _, w := range []string{"30s", "2h", "x"} {
		do(t, s, "GET", "/v1/lateness?window="+w, "").expectError(t, http.StatusBadRequest, "window", "from 1m to 1h0m0s")
	}
}

// The snapshots kept stay bounded however long the server runs.
func TestLatenessSnapshotsBounded(t *testing.T) {
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	l := newLatenessWindow(prometheus.NewRegistry(), clk)
	for range 2000 {
		if err := l.sample(); err != nil {
			t.Fatal(err)
		}
		clk.Advance(latenessEvery)
	}
	if n, limit := len(l.snaps), int(MaxLatenessWindow/latenessEvery)+4; n > limit {
		t.Errorf("%d snapshots kept, want <= %d", n, limit)
	}
	if b, ok := l.baseline(clk.Now().Add(-MaxLatenessWindow)); !ok || clk.Now().Sub(b.at) < MaxLatenessWindow {
		t.Errorf("no baseline an hour back: %v %v", b.at, ok)
	}
}

// The sampler takes nothing at start (see run), one snapshot per period after, and
// stops with its context.
func TestLatenessSampler(t *testing.T) {
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	l := newLatenessWindow(prometheus.NewRegistry(), clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx, func(err error) { t.Error(err) }) }()
	count := func() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.snaps) }
	for range 3 {
		waitFor(t, func() bool { return clk.Timers() == 1 })
		if n := count(); n != int(clk.Now().Sub(time.UnixMilli(1_700_000_000_000))/latenessEvery) {
			t.Fatalf("%d snapshots at %v", n, clk.Now())
		}
		clk.Advance(latenessEvery)
		want := int(clk.Now().Sub(time.UnixMilli(1_700_000_000_000)) / latenessEvery)
		waitFor(t, func() bool { return count() == want })
	}
	cancel()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 5000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition not reached")
}
