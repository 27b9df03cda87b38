package storetest

import (
	"maps"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Per-route counts (RouteCounts) after every transition.

func init() {
	register("CountsEveryTransition", caseCountsEveryTransition)
}

type rc = storeapi.RouteCount

// wantCounts checks RouteCounts per route as want (routes with nothing left absent).
func wantCounts(t *testing.T, s storeapi.Store, step string, want map[string]rc) {
	t.Helper()
	c, err := s.RouteCounts(storeCtx(t))
	if err != nil {
		t.Fatalf("%s: RouteCounts: %v", step, err)
	}
	if got := c.Routes(); !maps.Equal(got, want) {
		t.Fatalf("%s: counts = %+v, want %+v", step, got, want)
	}
}

func caseCountsEveryTransition(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	wantCounts(t, s, "empty", map[string]rc{})

	a := idsOnShard(s, 1, 8, "a") // route "orders" (env), shard 1
	b := idsOnShard(s, 2, 4, "b") // route "pay", shard 2
	mustPark(t, s, env(a[0], t0), env(a[1], t0), env(a[2], t0), env(a[3], t0), env(a[4], t0+60_000),
		envOn(b[0], "pay", t0), envOn(b[1], "pay", t0+5_000))
	// duplicates change nothing
	mustPark(t, s, env(a[0], t0), envOn(b[0], "pay", t0))
	wantCounts(t, s, "park", map[string]rc{"orders": {Pending: 5}, "pay": {Pending: 2}})

	if _, err := s.Bury(ctx, []*envelope.Envelope{envOn(b[2], "pay", t0), envOn(b[2], "pay", t0), env(a[0], t0)}, t0); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "bury", map[string]rc{"orders": {Pending: 5}, "pay": {Pending: 2, Dead: 1}})

	tok := mustLease(t, s, 1, "i1")
	items, _ := mustClaim(t, s, 1, tok, t0, 10) // a0..a3
	if len(items) != 4 {
		t.Fatalf("claimed %v", ids(items))
	}
	wantCounts(t, s, "claim", map[string]rc{"orders": {Pending: 1, Inflight: 4}, "pay": {Pending: 2, Dead: 1}})

	if err := s.Ack(ctx, 1, []string{a[0], a[0], "never-claimed"}, t0); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "ack", map[string]rc{"orders": {Pending: 1, Inflight: 3}, "pay": {Pending: 2, Dead: 1}})

	e1, e2 := env(a[1], t0), env(a[2], t0)
	e1.Attempt, e2.Attempt, e2.Reason = 1, 2, "boom"
	if err := s.Retry(ctx, 1, []storeapi.RetryItem{{Env: e1, Due: t0 + 1_000}, {Env: e2, Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "retry", map[string]rc{"orders": {Pending: 2, Inflight: 1, Dead: 1}, "pay": {Pending: 2, Dead: 1}})

	if n, _, err := s.RecoverAll(ctx, 1, t0+2_000, 100); err != nil || n != 1 {
		t.Fatalf("RecoverAll = %d, %v", n, err)
	}
	wantCounts(t, s, "recover", map[string]rc{"orders": {Pending: 3, Dead: 1}, "pay": {Pending: 2, Dead: 1}})

	if st, err := s.Reschedule(ctx, a[4], t0+1); err != nil || st != storeapi.StatePending {
		t.Fatalf("Reschedule = %q, %v", st, err)
	}
	wantCounts(t, s, "reschedule", map[string]rc{"orders": {Pending: 3, Dead: 1}, "pay": {Pending: 2, Dead: 1}})

	if err := s.RequeueDead(ctx, a[2], t0+3_000); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "requeue", map[string]rc{"orders": {Pending: 4}, "pay": {Pending: 2, Dead: 1}})
	countsCancelDeadPurge(t, s, a, b, tok)
}

// countsCancelDeadPurge continues caseCountsEveryTransition: cancel, retry to dead,
// purge.
func countsCancelDeadPurge(t *testing.T, s storeapi.Store, a, b []string, tok int64) {
	ctx := storeCtx(t)
	// cancel in each state: pending (b0), in flight (a1 claimed again), dead (b2)
	items, _ := mustClaim(t, s, 1, tok, t0+1_000, 1) // a4 (due t0+1)
	if len(items) != 1 || items[0].ID != a[4] {
		t.Fatalf("claimed %v", ids(items))
	}
	for _, id := range []string{b[0], a[4], b[2]} {
		if _, _, err := s.Cancel(ctx, id, t0, storeapi.CancelOptions{}); err != nil {
			t.Fatalf("Cancel(%s): %v", id, err)
		}
	}
	wantCounts(t, s, "cancel", map[string]rc{"orders": {Pending: 3}, "pay": {Pending: 1}})

	items, _ = mustClaim(t, s, 1, tok, t0+10_000, 10) // a1, a2, a3
	if len(items) != 3 {
		t.Fatalf("claimed %v", ids(items))
	}
	var dead []storeapi.RetryItem
	for _, e := range items {
		dead = append(dead, storeapi.RetryItem{Env: e, Dead: true})
	}
	if err := s.RetryMany(ctx, map[int][]storeapi.RetryItem{1: dead}, t0); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "dead", map[string]rc{"orders": {Dead: 3}, "pay": {Pending: 1}})

	if n, err := s.PurgeDead(ctx); err != nil || n != 3 {
		t.Fatalf("PurgeDead = %d, %v", n, err)
	}
	wantCounts(t, s, "purge", map[string]rc{"pay": {Pending: 1}})
}
