package series

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// Counts land in the interval that was open, each exactly once, and the ring keeps
// only the last Keep intervals.
func TestRecorderCountsAndRing(t *testing.T) {
	r := New(Options{Interval: 10 * time.Second, Keep: 3, Clock: clock.NewFake(t0)})
	r.Declare("a", "b")
	r.Received("a", 5)
	r.Received("a", 2)
	r.Delivered("a", 3*time.Millisecond)
	r.Delivered("a", 3*time.Millisecond)
	r.DeadLettered("b", 4)
	r.Received("c", 1) // an undeclared route is counted too
	iv := r.close(t0, map[string]int64{"a": 12})
	if got := iv.Routes["a"]; got.Received != 7 || got.Delivered != 2 || got.Pending != 12 || got.Lateness.Count() != 2 {
		t.Fatalf("a = %+v", got)
	}
	if got := iv.Routes["b"]; got.DeadLettered != 4 || got.Pending != 0 || got.Lateness != nil {
		t.Fatalf("b = %+v (pending known: 0 for a route the counts do not list)", got)
	}
	if got := iv.Routes["c"]; got.Received != 1 {
		t.Fatalf("c = %+v", got)
	}
	next := r.close(t0.Add(10*time.Second), nil)
	if got := next.Routes["a"]; got.Received != 0 || got.Delivered != 0 || got.Pending != -1 || got.Lateness != nil {
		t.Fatalf("the next interval carries over counts: %+v (pending unknown must read -1)", got)
	}
	for i := 2; i < 6; i++ {
		r.Received("a", i)
		r.close(t0.Add(time.Duration(i)*10*time.Second), nil)
	}
	ring := r.Since(0)
	if len(ring) != 3 || ring[0].Start != t0.Add(30*time.Second).UnixMilli() || ring[2].Routes["a"].Received != 5 {
		t.Fatalf("ring = %+v, want the last 3 intervals", ring)
	}
	if got := r.Since(t0.Add(50 * time.Second).UnixMilli()); len(got) != 1 {
		t.Fatalf("Since(the last start) = %d intervals", len(got))
	}
}

// The hot path allocates nothing for a known route (its counters exist).
func TestHotPathAllocatesNothing(t *testing.T) {
	r := New(Options{})
	r.Declare("a")
	obs := Observe(observe.Nop{}, r)
	allocs := testing.AllocsPerRun(1000, func() {
		obs.Received("a", 3)
		obs.Delivered("a", 7*time.Millisecond)
		obs.DeadLettered("a", 1)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per message on the hot path", allocs)
	}
}

// Concurrent counting while intervals close loses and doubles nothing.
func TestConcurrentCountsAddUp(t *testing.T) {
	r := New(Options{})
	const workers, per = 4, 5000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				r.Received(fmt.Sprint("r", w%2), 1)
				r.Delivered("r0", time.Duration(i)*time.Microsecond)
			}
		}()
	}
	var total, delivered, hist uint64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for i := 0; ; i++ {
		select {
		case <-done:
		default:
			iv := r.close(t0.Add(time.Duration(i)*time.Second), nil)
			total += iv.Routes["r0"].Received + iv.Routes["r1"].Received
			delivered += iv.Routes["r0"].Delivered
			hist += iv.Routes["r0"].Lateness.Count()
			continue
		}
		iv := r.close(t0.Add(time.Duration(i)*time.Second), nil)
		total += iv.Routes["r0"].Received + iv.Routes["r1"].Received
		delivered += iv.Routes["r0"].Delivered
		hist += iv.Routes["r0"].Lateness.Count()
		break
	}
	if total != workers*per || delivered != workers*per || hist != workers*per {
		t.Fatalf("received %d, delivered %d, lateness observations %d; want %d each", total, delivered, hist, workers*per)
	}
}

// Quantiles from the log buckets stay within a bucket's width of the truth.
func TestQuantile(t *testing.T) {
	r := New(Options{})
	for i := 1; i <= 1000; i++ { // 0.1 ms .. 100 ms, uniform
		r.Delivered("a", time.Duration(i)*100*time.Microsecond)
	}
	h := r.close(t0, nil).Routes["a"].Lateness
	for _, c := range []struct{ q, want float64 }{{0.5, 50}, {0.99, 99}, {0.1, 10}} {
		got, ok := h.Quantile(c.q)
		if !ok || math.Abs(got-c.want)/c.want > 0.19 {
			t.Errorf("p%v = %.2f ms, want %.0f ms ± 19 %%", c.q*100, got, c.want)
		}
	}
	if _, ok := Hist(nil).Quantile(0.5); ok {
		t.Error("an empty histogram has a quantile")
	}
	var late Hist = make(Hist, NumBuckets)
	late[bucketOf(3*time.Hour)] = 1
	if got, _ := late.Quantile(0.99); got != nsToMs(bounds[len(bounds)-1]) || got < 3_600_000 {
		t.Errorf("beyond the largest bound: %.0f ms, want the largest bound (~70 min)", got)
	}
	if bucketOf(-time.Second) != 0 || bucketOf(0) != 0 || bucketOf(firstBound) != 0 || bucketOf(firstBound+1) != 1 {
		t.Error("bucket bounds: early, zero and the first bound belong to bucket 0")
	}
}

// Merge adds counters and histograms of the same start; pending is the largest
// reading; the wire form round-trips.
func TestMergeAndWire(t *testing.T) {
	a := New(Options{})
	b := New(Options{})
	for i := 0; i < 10; i++ {
		a.Delivered("x", 2*time.Millisecond)
		b.Delivered("x", 40*time.Millisecond)
	}
	a.Received("x", 10)
	b.Received("x", 5)
	b.DeadLettered("x", 1)
	ia := a.close(t0, map[string]int64{"x": 7})
	ib := b.close(t0, map[string]int64{"x": 9})
	later := b.close(t0.Add(10*time.Second), nil)
	wire, err := Encode(ib)
	if err != nil {
		t.Fatal(err)
	}
	ib2, err := Decode(wire)
	if err != nil {
		t.Fatal(err)
	}
	merged := Merge([]Interval{ia}, []Interval{later, ib2})
	if len(merged) != 2 || merged[0].Start != t0.UnixMilli() {
		t.Fatalf("merged = %+v", merged)
	}
	x := merged[0].Routes["x"]
	if x.Received != 15 || x.Delivered != 20 || x.DeadLettered != 1 || x.Pending != 9 || x.Lateness.Count() != 20 {
		t.Fatalf("merged x = %+v", x)
	}
	if p50, _ := x.Lateness.Quantile(0.5); p50 > 2.5 {
		t.Errorf("merged p50 = %.2f ms, want ~2 ms (half the observations)", p50)
	}
	if p99, _ := x.Lateness.Quantile(0.99); p99 < 33 || p99 > 48 {
		t.Errorf("merged p99 = %.2f ms, want ~40 ms", p99)
	}
	if merged[1].Routes["x"].Pending != -1 {
		t.Errorf("pending unknown everywhere reads %d, want -1", merged[1].Routes["x"].Pending)
	}
	if got := ia.Routes["x"].Lateness.Count(); got != 10 {
		t.Errorf("Merge changed its input: %d", got)
	}
	pts := ByRoute(merged, "x")["x"]
	if len(pts) != 2 || pts[0].Received != 15 {
		t.Errorf("points = %+v", pts)
	}
	if Slot(t0.UnixMilli(), 10_000, 360) == Slot(t0.UnixMilli()+10_000, 10_000, 360) ||
		Slot(t0.UnixMilli(), 10_000, 360) != Slot(t0.UnixMilli()+3_600_000, 10_000, 360) {
		t.Error("slots: neighbours must differ, an hour apart must share")
	}
}

// Run closes intervals on the boundaries of the injected clock, with the pending
// counts, publishes each, and keeps going when reading pending or publishing fails.
func TestRunClosesOnBoundaries(t *testing.T) {
	clk := clock.NewFake(t0.Add(3 * time.Second))
	r := New(Options{Interval: 10 * time.Second, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r.Declare("a")
	published := make(chan Interval, 4)
	fail := true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, func(context.Context) (map[string]int64, error) {
			if fail {
				return nil, errors.New("redis down")
			}
			return map[string]int64{"a": 3}, nil
		}, func(_ context.Context, iv Interval) error { published <- iv; return nil })
	}()
	defer func() { cancel(); <-done }()
	waitTimer(t, clk)
	r.Received("a", 2)
	clk.Advance(7 * time.Second) // to t0+10s: the first (partial) interval closes
	iv := <-published
	if iv.Start != t0.UnixMilli() || iv.Routes["a"].Received != 2 || iv.Routes["a"].Pending != -1 {
		t.Fatalf("first interval %+v", iv)
	}
	fail = false // read by Run only after the timer fires again
	waitTimer(t, clk)
	clk.Advance(10 * time.Second)
	iv = <-published
	if iv.Start != t0.Add(10*time.Second).UnixMilli() || iv.Routes["a"].Pending != 3 {
		t.Fatalf("second interval %+v", iv)
	}
}

func waitTimer(t *testing.T, clk *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clk.Timers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Run set no timer")
		}
		time.Sleep(time.Millisecond)
	}
}

func BenchmarkHotPath(b *testing.B) {
	r := New(Options{})
	r.Declare("a", "b")
	obs := Observe(observe.Nop{}, r)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			obs.Received("a", 1)
			obs.Delivered("a", 3*time.Millisecond)
		}
	})
}
