package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/admin/consoletest"
	"github.com/delaybridge/delay-bridge/app/series"
	"github.com/delaybridge/delay-bridge/testkit"
)

// flow produces records to a.delay and b.delay until the returned stop is called: a
// wave of 3 to 15 records per 200 ms on a, half that on b, due in 1 to 4 s, and on a
// every tenth record with an invalid delay (dead-lettered at once). It returns how many
// records it produced per route.
func flow(t *testing.T, kaddr string) (stop func() map[string]int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kaddr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sent := map[string]int{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for tick := 0; ctx.Err() == nil; tick++ {
			n := 9 + int(6*math.Sin(float64(tick)/8))
			var recs []*kgo.Record
			for i := range n {
				topic, route := "a.delay", "a"
				if i%2 == 1 && i < n/2 {
					topic, route = "b.delay", "b"
				}
				delay := fmt.Sprint(1000 + (tick*7+i*13)%3000)
				if route == "a" && (tick+i)%10 == 0 {
					delay = "soon"
				}
				r := rec(fmt.Sprintf(`{"tick":%d,"i":%d}`, tick, i), "x-delay", delay)
				r.Topic, r.Key = topic, []byte(fmt.Sprint(i)) // keys spread the records over partitions
				recs = append(recs, r)
				sent[route]++
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil && ctx.Err() == nil {
				t.Errorf("produce: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() map[string]int {
		once.Do(func() { cancel(); wg.Wait(); cl.Close() })
		return sent
	}
	t.Cleanup(func() { stop() })
	return stop
}

// serveAdmin serves the admin API of b on a random port until the test ends.
func serveAdmin(t *testing.T, b admin.Backend, token string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := admin.NewServer(admin.Options{Backend: b, Token: token, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// TestConsoleChartsOnRedis: the real bridge (redis-server, kfake) with messages flowing,
// 1 s intervals; the console's charts page in headless Chromium must draw every line of
// both routes (admin/consoletest.Charts fails on an empty chart), through the cluster
// view in Redis. The screenshot is docs/console-charts.png (README "Console").
func TestConsoleChartsOnRedis(t *testing.T) {
	env := newEnv(t)
	env.series = series.New(series.Options{Interval: time.Second, Keep: 3600})
	tb := env.run(t)
	url := serveAdmin(t, tb.Backend, "s3cret")
	stop := flow(t, env.kaddr)
	shot := consoletest.Charts(t, consoletest.ChartsConfig{URL: url, Token: "s3cret", Routes: []string{"a", "b"},
		DeadLettered: []string{"a"}, MinPoints: 20, Window: "15m"})
	stop()
	t.Logf("charts: %s", shot)
}

// TestSeriesClusterView: two instances share the routes; after the traffic, GET
// /v1/series' cluster view is the sum of both instances' own rings, interval by
// interval (received, delivered, dead-lettered, lateness observations), lists both,
// and counts every produced record; pending is the cluster-wide count (the same on
// both) and reaches 0 once everything is delivered.
func TestSeriesClusterView(t *testing.T) {
	// Two partitions per topic, so that both instances consume.
	kaddr, _ := testkit.StartKafka(t, 2, "a.delay", "a.out", "b.delay", "b.out", "dlq")
	env := &testEnv{redisAddr: testkit.StartRedis(t).Addr(), kaddr: kaddr, prefix: testkit.Uniq(t, "sv"), group: testkit.Uniq(t, "g")}
	env.series = series.New(series.Options{Interval: time.Second, Keep: 3600})
	one := env.run(t, "instance=one")
	env.series = series.New(series.Options{Interval: time.Second, Keep: 3600})
	two := env.run(t, "instance=two")
	stop := flow(t, env.kaddr)
	time.Sleep(3 * time.Second)
	sent := stop()
	total := sent["a"] + sent["b"]
	waitUntil(t, "every record delivered or dead-lettered", 60*time.Second, func() bool {
		n := 0
		for _, tb := range []*testBridge{one, two} {
			n += tb.obs.get("published a") + tb.obs.get("published b") + tb.obs.get("dead_lettered a")
		}
		return n >= total
	})
	ctx := context.Background()
	q := admin.SeriesQuery{Window: 15 * time.Minute, Scope: admin.ScopeCluster}
	waitUntil(t, "the last intervals closed and written", 30*time.Second, func() bool {
		s, err := one.Backend.Series(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return sum(s, "received") >= float64(total) && lastPending(s) == 0
	})
	time.Sleep(2500 * time.Millisecond) // nothing flows now: let both instances close once more
	cluster, err := one.Backend.Series(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(cluster.Instances) != 2 || cluster.Instances[0] != "one" || cluster.Instances[1] != "two" {
		t.Fatalf("instances = %v", cluster.Instances)
	}
	own1, err := one.Backend.Series(ctx, admin.SeriesQuery{Window: 15 * time.Minute, Scope: admin.ScopeInstance})
	if err != nil {
		t.Fatal(err)
	}
	own2, err := two.Backend.Series(ctx, admin.SeriesQuery{Window: 15 * time.Minute, Scope: admin.ScopeInstance})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"received", "delivered", "dead_lettered", "deliveries"} {
		if c, a, b := sum(cluster, f), sum(own1, f), sum(own2, f); math.Abs(c-(a+b)) > 1e-6 {
			t.Errorf("%s: cluster %.1f, instances %.1f + %.1f", f, c, a, b)
		}
	}
	if got := sum(cluster, "received"); got < float64(total) {
		t.Errorf("received %.0f, produced %d", got, total)
	}
	for _, f := range []string{"received", "delivered"} {
		if a, b := sum(own1, f), sum(own2, f); a == 0 || b == 0 {
			t.Errorf("%s %.0f on one, %.0f on two: the merge must be tested with both sides", f, a, b)
		}
	}
	var maxPending int64
	for _, rs := range cluster.Routes {
		for _, p := range rs.Points {
			if p.Pending != nil {
				maxPending = max(maxPending, *p.Pending)
			}
		}
	}
	if maxPending == 0 {
		t.Error("pending never above 0 while messages waited 1 to 4 s")
	}
	if got, want := sum(cluster, "dead_lettered"), float64(one.obs.get("dead_lettered a")+two.obs.get("dead_lettered a")); got != want {
		t.Errorf("dead-lettered %.0f, the observers counted %.0f", got, want)
	}
}

// lastPending sums the routes' pending counts of their newest points (-1: unknown).
func lastPending(s admin.Series) int64 {
	var n int64
	for _, rs := range s.Routes {
		if len(rs.Points) == 0 || rs.Points[len(rs.Points)-1].Pending == nil {
			return -1
		}
		n += *rs.Points[len(rs.Points)-1].Pending
	}
	return n
}

// sum adds a field over every point of every route (rates times the interval: counts).
func sum(s admin.Series, field string) float64 {
	secs := float64(s.IntervalMs) / 1000
	var n float64
	for _, rs := range s.Routes {
		for _, p := range rs.Points {
			switch field {
			case "received":
				n += p.ReceivedPerS * secs
			case "delivered":
				n += p.DeliveredPerS * secs
			case "dead_lettered":
				n += p.DeadLetteredPerS * secs
			case "deliveries":
				n += float64(p.Deliveries)
			}
		}
	}
	return math.Round(n*1000) / 1000
}
