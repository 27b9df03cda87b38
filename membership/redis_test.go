package membership_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPartitionLeases: on a real redis-server, a partition lease is taken by one holder
// at a time with a token that only grows, renewed and released only with that token,
// and every key of a route shares one hash slot.
func TestPartitionLeases(t *testing.T) {
	rdb := testkit.StartRedis(t).Client()
	ctx := context.Background()
	m := membership.New(rdb, "p", "c")
	k0, k1 := m.PartitionLease("orders", "orders.delay", 0), m.PartitionLease("orders", "orders.delay", 1)
	if k0.Owner != "p:{c:kafka:orders}:orders.delay:0:owner" || k0.Fence != "p:{c:kafka:orders}:orders.delay:0:fence" {
		t.Fatalf("keys %+v", k0)
	}
	s0, _ := rdb.ClusterKeySlot(ctx, k0.Owner).Result()
	s1, _ := rdb.ClusterKeySlot(ctx, k1.Fence).Result()
	if s0 != s1 {
		t.Errorf("slots %d %d: want one slot per route", s0, s1)
	}
	ttl := 300 * time.Millisecond
	tok, err := m.Acquire(ctx, []membership.LeaseKey{k0, k1}, "a#1", ttl)
	if err != nil || tok[0] != 1 || tok[1] != 1 {
		t.Fatalf("acquire: %v %v", tok, err)
	}
	if tok, err := m.Acquire(ctx, []membership.LeaseKey{k0}, "b#1", ttl); err != nil || tok[0] != 0 {
		t.Fatalf("acquire held by a: %v %v, want 0", tok, err)
	}
	if held, err := m.Renew(ctx, "a#1", []membership.Held{{Key: k0, Token: 1}, {Key: k1, Token: 7}}, ttl); err != nil || !held[0] || held[1] {
		t.Fatalf("renew: %v %v, want [true false] (wrong token)", held, err)
	}
	time.Sleep(2 * ttl) // a stops renewing: its leases expire
	tok, err = m.Acquire(ctx, []membership.LeaseKey{k0}, "b#1", ttl)
	if err != nil || tok[0] != 2 {
		t.Fatalf("acquire after expiry: %v %v, want token 2", tok, err)
	}
	if held, _ := m.Renew(ctx, "a#1", []membership.Held{{Key: k0, Token: 1}}, ttl); held[0] {
		t.Fatal("the old holder renewed a lease taken over (not fenced)")
	}
	if err := m.Release(ctx, "a#1", membership.Held{Key: k0, Token: 1}); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, k0.Owner).Val(); v != "b#1|2" {
		t.Fatalf("owner %q after a late release by the old holder, want b's", v)
	}
	if err := m.Release(ctx, "b#1", membership.Held{Key: k0, Token: 2}); err != nil || rdb.Exists(ctx, k0.Owner).Val() != 0 {
		t.Fatalf("release: %v", err)
	}
	// NOSCRIPT after a flush is answered with EVAL.
	rdb.ScriptFlush(ctx)
	if tok, err := m.Acquire(ctx, []membership.LeaseKey{k0}, "b#1", ttl); err != nil || tok[0] != 3 {
		t.Fatalf("acquire after SCRIPT FLUSH: %v %v", tok, err)
	}
}

// TestMembersLive: heartbeats make members live for maxAge; Leave removes at once.
func TestMembersLive(t *testing.T) {
	rdb := testkit.StartRedis(t).Client()
	ctx := context.Background()
	m := membership.New(rdb, "p", "c")
	for name, at := range map[string]int64{"a": 1000, "b": 1900, "c": 2000} {
		if err := m.Heartbeat(ctx, name, at); err != nil {
			t.Fatal(err)
		}
	}
	live, err := m.Live(ctx, 2000, 500*time.Millisecond)
	if err != nil || len(live) != 2 || live[0] != (membership.Member{Name: "b", Heartbeat: 1900}) || live[1].Name != "c" {
		t.Fatalf("live %v %v", live, err)
	}
	if err := m.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if live, _ := m.Live(ctx, 2000, time.Second); len(live) != 2 || live[0].Name != "a" {
		t.Fatalf("after leave: %v", live)
	}
	if err := m.Heartbeat(ctx, "x|y", 1); err == nil {
		t.Fatal("a name with '|' accepted")
	}
}
