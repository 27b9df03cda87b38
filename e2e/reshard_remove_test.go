package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// TestRedisClusterPrimaryRemovedUnderLoad: the reverse of TestRedisClusterReshardUnderLoad,
// an operator scaling a Redis Cluster in while the bridge works. One bridge on a
// 3-master cluster (16 shards, 4 partitions), a stream of 400 msgs/s with delays of
// 0.2-3 s (part of it through the cold tier), 200 messages parked 40 s ahead, and
// replays of delivered ids throughout. A master that serves some shards has every slot
// moved off it (`redis-cli --cluster rebalance --cluster-weight <id>=0`), is removed
// (`redis-cli --cluster del-node`) and stopped; the stream goes on for a while after.
// The bridge's redis.addrs still lists the removed node.
//
// Judged: the removed master served shards before and none after; every message
// delivered, none early, none twice, no replay delivered again; no remaining node holds
// a key of a slot it does not serve; the bridge logged no error, no script failure
// and no BUSYKEY.
func TestRedisClusterPrimaryRemovedUnderLoad(t *testing.T) {
	rc := testkit.StartRedisCluster(t, 3)
	c := startHAClusterOn(t, rc.Addrs(), 4, 3*time.Second)
	p := c.start("rm-a")
	c.waitBalanced(p, 20*time.Second, "rm-a")

	far := sendFar(t, c, 200, 40*time.Second)
	s := startStream(t, c.writer, "rm", 400, 200*time.Millisecond, 3*time.Second)
	rp := startReplays(t, c, s)
	time.Sleep(6 * time.Second)

	victim := rc.Nodes[2]
	owners0 := shardNodes(t, rc)
	served := 0
	for _, o := range owners0 {
		if o == victim.Addr() {
			served++
		}
	}
	if served == 0 {
		t.Fatalf("master %s serves no shard before its removal (owners %v): nothing to test", victim.Addr(), owners0)
	}
	started := time.Now()
	out := rc.RemoveMaster(victim)
	took := time.Since(started)
	for sh, o := range shardNodes(t, rc) {
		if o == victim.Addr() || o == "" {
			t.Errorf("shard %d is served by %q after the removal of %s:\n%s", sh, o, victim.Addr(), out)
		}
	}
	time.Sleep(4 * time.Second) // the stream goes on without the removed master
	sentMsgs := s.finish(t)
	replays := rp.finish()

	all := map[string]sent{}
	for id, m := range sentMsgs {
		all[id] = m
	}
	for id, m := range far {
		all[id] = m
	}
	waitUntil(t, "every message on the target", 90*time.Second, func() bool { return c.target.uniqueCount() >= len(all) })
	time.Sleep(2 * time.Second) // a late duplicate, if any, arrives too
	dups := ledger(t, all, c.target.snapshot(), "orders.delay")
	if dups != 0 {
		t.Errorf("%d messages fired twice", dups)
	}
	misplaced, keys, err := rc.Misplaced(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range misplaced {
		t.Errorf("orphan key: %s", m)
	}
	for _, l := range strings.Split(p.logs(), "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "non local key") || strings.Contains(l, "BUSYKEY") {
			t.Errorf("bridge logged: %s", l)
		}
	}
	if pr := p.problems(); len(pr) > 0 {
		t.Errorf("bridge problems: %v", pr)
	}
	t.Logf("removal: %d messages (%d far-future), %d replays refused, %d duplicates; the removed master served %d of %d shards; rebalance + del-node took %s; keys per remaining node %v; Redis retries %v",
		len(all), len(far), replays, dups, served, haShards, took.Round(time.Millisecond), keys, metricSum(t, p, "redis_retries_total"))
}
