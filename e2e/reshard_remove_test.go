package e2e

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/testkit"
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
// delivered, none early, none twice, none later than the longest span in which the
// bridge's slots were half-moved plus reshardLatenessSlack, no replay delivered again; no remaining node holds
// a key of a slot it does not serve; the bridge logged no error, no script failure
// and no BUSYKEY.
func TestRedisClusterPrimaryRemovedUnderLoad(t *testing.T) {
	rc := testkit.StartRedisCluster(t, 3)
	r := startReshardRig(t, rc, "rm")

	victim := rc.Nodes[2]
	served := 0
	for _, o := range shardNodes(t, rc) {
		if o == victim.Addr() {
			served++
		}
	}
	if served == 0 {
		t.Fatalf("master %s serves no shard before its removal: nothing to test", victim.Addr())
	}
	watch := watchMigrations(t, rc)
	started := time.Now()
	out := rc.RemoveMaster(victim)
	took := time.Since(started)
	migration, slots := watch.finish()
	for sh, o := range shardNodes(t, rc) {
		if o == victim.Addr() || o == "" {
			t.Errorf("shard %d is served by %q after the removal of %s:\n%s", sh, o, victim.Addr(), out)
		}
	}
	time.Sleep(4 * time.Second) // the stream goes on without the removed master

	all, replays, dups, late := r.judgeDelivered(t, migration)
	keys := judgeClean(t, rc, r.p)
	t.Logf("removal: %d messages (%d far-future), %d replays refused, %d duplicates; the removed master served %d of %d shards; rebalance + del-node took %s (%d of the bridge's slots moved); keys per remaining node %v; Redis retries %v; %s",
		len(all), len(r.far), replays, dups, served, haShards, took.Round(time.Millisecond), slots, keys, metricSum(t, r.p, "redis_retries_total"), late)
}
