package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/testkit"
)

// TestRedisClusterDelaysArriveOnTimeOnce runs the delivery test against a real 3-master
// Redis Cluster: redis.addrs lists the three nodes, so the bridge uses a cluster client,
// and every script touches one shard's hash-tag slot. Every message arrives once, none
// early, and the shards' keys are spread over all three masters.
func TestRedisClusterDelaysArriveOnTimeOnce(t *testing.T) {
	rc := testkit.StartRedisCluster(t, 3)
	kaddr, _ := testkit.StartKafka(t, 4, "orders.delay", "orders")
	cfg, admin := writeConfigRedis(t, redisSection(rc.Addrs(), ""), kaddr, kafkaRoute, "")
	e := &kafkaEnv{kaddr: kaddr}
	e.target = collect(t, kaddr, "orders")
	e.bridge = startBridge(t, cfg, admin)
	e.writer = newWriter(t, kaddr, "orders.delay")
	t.Cleanup(func() { e.writer.Close() })

	const n = 1000
	rng := rand.New(rand.NewPCG(5, 6))
	sentMsgs := e.produce(t, "rc", n, func(int) time.Duration { return time.Duration(rng.IntN(3000)) * time.Millisecond })
	waitUntil(t, "all messages on the target", 60*time.Second, func() bool { return e.target.uniqueCount() >= n })
	if dups := ledger(t, sentMsgs, e.target.snapshot(), "orders.delay"); dups != 0 {
		t.Errorf("%d duplicates without any fault", dups)
	}
	var stats struct {
		Totals struct{ Pending, Inflight, Dead int64 }
		Shards []struct {
			Shard int
			Owner string
		}
	}
	waitUntil(t, "shards empty", 10*time.Second, func() bool {
		e.bridge.api("GET", "/v1/stats", nil, &stats)
		return stats.Totals.Pending == 0 && stats.Totals.Inflight == 0
	})
	if len(stats.Shards) != 16 {
		t.Fatalf("stats list %d shards, want 16", len(stats.Shards))
	}
	for _, s := range stats.Shards {
		if s.Owner == "" {
			t.Errorf("shard %d has no owner", s.Shard)
		}
	}

	// Where the shards live: each shard's keys share the hash tag {e2e:n}, so they sit in
	// one slot; every master must serve some shards, and hold their keys.
	ctx := context.Background()
	perNode := map[string]int{} // node -> shards whose slot it serves and holds keys in
	for _, node := range rc.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: node.Addr()})
		defer cl.Close()
		slots, err := cl.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		serves := func(slot int64) bool {
			for _, s := range slots {
				if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 && s.Nodes[0].Addr == node.Addr() {
					return true
				}
			}
			return false
		}
		for sh := 0; sh < 16; sh++ {
			slot, err := cl.ClusterKeySlot(ctx, fmt.Sprintf("delaybridge:{e2e:%d}:due", sh)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !serves(slot) {
				continue
			}
			keys, err := cl.ClusterCountKeysInSlot(ctx, int(slot)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if keys == 0 {
				t.Errorf("shard %d: slot %d on %s holds no keys after 1000 messages went through the bridge", sh, slot, node.Addr())
				continue
			}
			perNode[node.Addr()]++
		}
	}
	sizes, err := rc.DBSize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, node := range rc.Nodes {
		if perNode[node.Addr()] == 0 || sizes[i] == 0 {
			t.Errorf("master %s serves %d shards and holds %d keys; want shards spread over all three masters", node.Addr(), perNode[node.Addr()], sizes[i])
		}
	}
	t.Logf("Redis Cluster: %d messages, shards per master %v, keys per master %v", n, perNode, sizes)
}

// TestRedisClusterFailover: two bridges on a 3-master Redis Cluster (leases, members,
// pipelined renewals and the wake-up channel all through the cluster client); one is
// killed with SIGKILL under a steady stream: the other takes its shards over, every
// message arrives, none early.
func TestRedisClusterFailover(t *testing.T) {
	rc := testkit.StartRedisCluster(t, 3)
	ttl := time.Second
	c := startHAClusterOn(t, rc.Addrs(), 4, ttl)
	a := c.start("rc-a")
	victim := c.startVictim("rc-b")
	c.waitBalanced(a, 10*time.Second, "rc-a", "rc-b")
	s := startStream(t, c.writer, "rcf", 200, 200*time.Millisecond, 2*time.Second)
	time.Sleep(2 * time.Second)
	shards := ownedBy(c.owners(a), "rc-b")
	killed := time.Now()
	victim.kill()
	c.waitBalanced(a, 10*time.Second, "rc-a")
	var last time.Time
	waitUntil(t, "every shard of the victim firing again", 15*time.Second, func() bool {
		var ok bool
		last, ok = refired(c.target.snapshot(), shards, killed)
		return ok
	})
	time.Sleep(time.Second)
	sentMsgs := s.finish(t)
	waitAllArrived(t, c.target, sentMsgs, 30*time.Second)
	dups := ledger(t, sentMsgs, c.target.snapshot(), "orders.delay")
	t.Logf("Redis Cluster failover: victim's shards %v fired again %s after SIGKILL; %d messages, %d duplicates",
		shards, last.Sub(killed).Round(time.Millisecond), len(sentMsgs), dups)
}
