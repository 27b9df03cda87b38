package store

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
	"github.com/redis/go-redis/v9"
)

// In compat mode (layout 2 written: a bridge of a release before layout 3 is a live
// member) a replace of an in-flight message is refused, because that release's ack
// would leave a successor behind; a pending one is replaced and a delivered one (in
// layout 2's done set) parked anew, its done entry dropped.
func TestStoreReplaceCompatMode(t *testing.T) {
	s, _, c := newV2Store(t, Options{Shards: 2})
	ctx := storeCtx(t)
	a := idsOnShard(s, 0, 3, "cm")
	mustPark(t, s, env(a[0], t0), env(a[1], t0+60_000), env(a[2], t0))
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, t0, 10) // a0 and a2 in flight
	if err := s.Ack(ctx, 0, []string{a[2]}, t0); err != nil || len(items) != 2 {
		t.Fatalf("ack: %v (claimed %d)", err, len(items))
	}
	res, _, err := s.ReplaceEach(ctx, []*envelope.Envelope{env(a[0], t0+1), env(a[1], t0+2), env(a[2], t0+3)})
	if err != nil {
		t.Fatal(err)
	}
	want := []storeapi.ReplaceResult{
		{Prior: StateInflight, Outcome: storeapi.ReplaceRefused},
		{Prior: StatePending, Outcome: storeapi.ReplaceReplaced},
		{Prior: StateDelivered, Outcome: storeapi.ReplaceParked},
	}
	for i := range want {
		if res[i] != want[i] {
			t.Fatalf("ReplaceEach = %+v, want %+v", res, want)
		}
	}
	if n := c.Exists(ctx, s.keys[0].nx).Val(); n != 0 {
		t.Fatalf("a successor was kept in compat mode")
	}
	if sc, err := c.ZScore(ctx, s.keys[0].done, a[2]).Result(); err == nil {
		t.Fatalf("delivered id parked anew still in layout 2's done set (score %v)", sc)
	}
	wantState(t, s, a[1], StatePending, t0+2)
	wantState(t, s, a[2], StatePending, t0+3)
}

// TestStoreReplaceBesideLevel3Member: a member of the release that records layout 3 but
// knows no successors (9fc0e73) is alive: the store writes layout 3, yet a replace of an
// in-flight id is refused (that release's ack would never promote a successor); once
// the member is gone, the same replace keeps a successor.
func TestStoreReplaceBesideLevel3Member(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1})
	ctx := storeCtx(t)
	ttl := 3 * time.Second
	if err := c.ZAdd(ctx, s.membersKey, redis.Z{Score: float64(t0), Member: "old"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, s.layoutsKey, "old", "3").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "new", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LiveMembers(ctx, t0, ttl); err != nil {
		t.Fatal(err)
	}
	if l := s.WritingLayout(); l != layoutV3 {
		t.Fatalf("beside a level-3 member the store writes layout %d, want 3", l)
	}
	if got := c.HGet(ctx, s.layoutsKey, "new").Val(); got != "5" {
		t.Fatalf("this release records level %q, want 5", got)
	}
	mustPark(t, s, env("a", t0), env("b", t0))
	tok := mustLease(t, s, 0, "i1")
	if items, _ := mustClaim(t, s, 0, tok, t0, 10); len(items) != 2 {
		t.Fatalf("claimed %d, want 2", len(items))
	}
	replace := func(id string) storeapi.ReplaceResult {
		t.Helper()
		res, _, err := s.ReplaceEach(ctx, []*envelope.Envelope{env(id, t0+5000)})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if r := replace("a"); r != (storeapi.ReplaceResult{Prior: StateInflight, Outcome: storeapi.ReplaceRefused}) {
		t.Fatalf("replace of an in-flight id beside a level-3 member = %+v, want refused", r)
	}
	if n := c.Exists(ctx, s.keys[0].nx).Val(); n != 0 {
		t.Fatal("a successor was kept beside a level-3 member")
	}
	if err := c.ZRem(ctx, s.membersKey, "old").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LiveMembers(ctx, t0+1000, ttl); err != nil {
		t.Fatal(err)
	}
	if r := replace("b"); r != (storeapi.ReplaceResult{Prior: StateInflight, Outcome: storeapi.ReplaceReplaced}) {
		t.Fatalf("replace of an in-flight id with only level-4 members = %+v, want replaced", r)
	}
}
