package app

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	if a.Counts == nil || *a.Counts != (admin.Counts{Pending: 2}) || a.NextDue != firstA {
		t.Errorf("route a: counts %+v next due %d, want 2 pending, next due %d", a.Counts, a.NextDue, firstA)
	}
	if b.Counts == nil || *b.Counts != (admin.Counts{Pending: 2}) || b.NextDue != firstB {
		t.Errorf("route b: counts %+v next due %d, want 2 pending, next due %d", b.Counts, b.NextDue, firstB)
	}
	st, err := tb.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Routes["a"] != (admin.Counts{Pending: 2}) || st.Routes["b"] != (admin.Counts{Pending: 2}) {
		t.Errorf("stats routes %+v", st.Routes)
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
