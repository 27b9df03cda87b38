package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/testkit"
)

// TestRedisSentinelEvictionPolicy: with Sentinel the eviction policy checked is the
// master's, the one Sentinel names now. An evicting policy on the master fails /readyz
// "eviction" naming the master and the policy (the metric and the error line say the
// same), noeviction makes the bridge ready again, a replica's policy alone does not
// matter, and after a failover to a replica whose policy is allkeys-lru the check names
// the promoted master, not the old one.
func TestRedisSentinelEvictionPolicy(t *testing.T) {
	s := testkit.StartRedisSentinel(t)
	kaddr, _ := testkit.StartKafka(t, 1, "orders.delay", "orders")
	// min_replicas 0: parks go on while the old master is being made a replica.
	cfg, admin := sentinelConfig(t, s, kaddr, 0)
	p := startBridge(t, cfg, admin)
	master := s.Primary()
	replica := s.Data[0]
	if replica == master {
		replica = s.Data[1]
	}
	setPolicy := func(r *testkit.Redis, policy string) {
		t.Helper()
		if err := r.Client().ConfigSet(context.Background(), "maxmemory-policy", policy).Err(); err != nil {
			t.Fatalf("CONFIG SET maxmemory-policy %s on %s: %v", policy, r.Addr(), err)
		}
	}

	setPolicy(master, "allkeys-lru")
	code, detail := waitCheck(t, p, "eviction", false, "allkeys-lru on "+master.Addr(), 15*time.Second)
	if code != 503 || !strings.Contains(detail, "CONFIG SET maxmemory-policy noeviction") {
		t.Errorf("/readyz %d, eviction check %q: want 503 naming the fix", code, detail)
	}
	if v := policySeries(p, master.Addr(), "allkeys-lru"); len(v) != 1 || v[0] != 1 {
		t.Errorf("redis_maxmemory_policy{node=%s,policy=allkeys-lru} = %v, want [1]", master.Addr(), v)
	}
	if !logHas(p, "level=ERROR", "Redis may evict pending messages", "policy=allkeys-lru", "node="+master.Addr()) {
		t.Errorf("no error line naming the policy and the master:\n%s", p.logs())
	}
	setPolicy(master, "noeviction")
	p.waitReady(15 * time.Second)

	// The replica is not a primary: its policy counts only once it is promoted.
	setPolicy(replica, "allkeys-lru")
	stayReady(t, p, 2*time.Second) // several ownership rounds
	old, promoted := s.Failover()
	if promoted != replica {
		t.Fatalf("failover promoted %s, want the replica %s", promoted.Addr(), replica.Addr())
	}
	code, detail = waitCheck(t, p, "eviction", false, "allkeys-lru on "+promoted.Addr(), 30*time.Second)
	if code != 503 || strings.Contains(detail, old.Addr()) {
		t.Errorf("/readyz %d, eviction check %q: want 503 naming only the promoted master %s, not %s",
			code, detail, promoted.Addr(), old.Addr())
	}
	if v := policySeries(p, promoted.Addr(), "allkeys-lru"); len(v) != 1 || v[0] != 1 {
		t.Errorf("redis_maxmemory_policy{node=%s,policy=allkeys-lru} = %v, want [1]", promoted.Addr(), v)
	}
	if n := p.seriesCount("redis_maxmemory_policy", `node="`+old.Addr()+`"`); n != 0 {
		t.Errorf("redis_maxmemory_policy still has %d series for the old master %s", n, old.Addr())
	}
	if !logHas(p, "level=ERROR", "Redis may evict pending messages", "policy=allkeys-lru", "node="+promoted.Addr()) {
		t.Errorf("no error line naming the promoted master:\n%s", p.logs())
	}
	setPolicy(promoted, "noeviction")
	p.waitReady(15 * time.Second)
	if !logHas(p, "level=INFO", "maxmemory-policy is noeviction again", "node="+promoted.Addr(), "was=allkeys-lru") {
		t.Errorf("no info line when the promoted master is noeviction again:\n%s", p.logs())
	}
}
