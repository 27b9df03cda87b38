package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/admin"
)

// routeView is what GET /v1/routes says of one route's messages.
func routeView(t *testing.T, tb *testBridge, name string) admin.RouteStatus {
	t.Helper()
	res, err := tb.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Routes {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no route %q in %+v", name, res.Routes)
	return admin.RouteStatus{}
}

// TestRouteCountsAndNextDue: /v1/routes and /v1/stats report each route's counts and
// next due time on the real store, and say they are exact.
func TestRouteCountsAndNextDue(t *testing.T) {
	tb := startBridge(t)
	ctx := context.Background()
	var firstA, firstB int64
	for i, d := range []time.Duration{2 * time.Hour, time.Hour, 3 * time.Hour} {
		res, err := tb.Schedule(ctx, admin.ScheduleRequest{ID: fmt.Sprintf("a-%d", i), Route: "a", When: admin.When{Delay: d}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			firstA = res.DueAt
		}
	}
	for i, d := range []time.Duration{30 * time.Minute, 4 * time.Hour} {
		res, err := tb.Schedule(ctx, admin.ScheduleRequest{ID: fmt.Sprintf("b-%d", i), Route: "b", When: admin.When{Delay: d}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			firstB = res.DueAt
		}
	}
	if _, err := tb.Cancel(ctx, "a-2"); err != nil {
		t.Fatal(err)
	}
	a, b := routeView(t, tb, "a"), routeView(t, tb, "b")
	if a.Counts == nil || *a.Counts != (admin.Counts{Pending: 2}) || a.NextDue != firstA || a.CountsExact == nil || !*a.CountsExact {
		t.Errorf("route a: counts %+v next due %d exact %v, want 2 pending, next due %d, exact", a.Counts, a.NextDue, a.CountsExact, firstA)
	}
	if b.Counts == nil || *b.Counts != (admin.Counts{Pending: 2}) || b.NextDue != firstB {
		t.Errorf("route b: counts %+v next due %d, want 2 pending, next due %d", b.Counts, b.NextDue, firstB)
	}
	st, err := tb.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Routes["a"] != (admin.Counts{Pending: 2}) || st.Routes["b"] != (admin.Counts{Pending: 2}) || st.CountsExact == nil || !*st.CountsExact {
		t.Errorf("stats routes %+v exact %v", st.Routes, st.CountsExact)
	}
	perShard := map[string]int64{}
	for _, sh := range st.Shards {
		var sum int64
		for r, n := range sh.Routes {
			perShard[r] += n.Pending
			sum += n.Pending
		}
		if sum != sh.Pending {
			t.Errorf("shard %d: routes %+v sum to %d pending, the shard has %d", sh.Shard, sh.Routes, sum, sh.Pending)
		}
	}
	if perShard["a"] != 2 || perShard["b"] != 2 {
		t.Errorf("per-shard route counts sum to %v", perShard)
	}
}

// TestRouteCountsBackfilledAtStart: a bridge started on a store without counts (as an
// older bridge leaves it) counts it at start and then reports exact, right counts. (The
// counts being reported inexact while a large store is counted in steps is
// scheduler/store TestCountsUpgrade.)
func TestRouteCountsBackfilledAtStart(t *testing.T) {
	e := newEnv(t)
	tb := e.run(t)
	ctx := context.Background()
	for i := range 30 {
		route := "a"
		if i%3 == 0 {
			route = "b"
		}
		if _, err := tb.Schedule(ctx, admin.ScheduleRequest{ID: fmt.Sprintf("m-%d", i), Route: route, When: admin.When{Delay: time.Hour}}); err != nil {
			t.Fatal(err)
		}
	}
	tb.stop()
	rdb := redis.NewClient(&redis.Options{Addr: e.redisAddr})
	defer rdb.Close()
	for sh := range 4 {
		if err := rdb.Del(ctx, fmt.Sprintf("%s:{default:%d}:counts", e.prefix, sh)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	tb = e.run(t)
	waitUntil(t, "counts exact", 30*time.Second, func() bool {
		st, err := tb.Stats(ctx)
		return err == nil && st.CountsExact != nil && *st.CountsExact
	})
	st, _ := tb.Stats(ctx)
	if st.Routes["a"] != (admin.Counts{Pending: 20}) || st.Routes["b"] != (admin.Counts{Pending: 10}) {
		t.Errorf("after the backfill: %+v, want a 20 pending, b 10", st.Routes)
	}
}
