package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/testkit"
)

// TestRedisClusterReshardUnderLoad: one bridge on a 3-master Redis Cluster with
// messages of 0.2–3 s delays flowing the whole time, far-future messages parked before,
// and replays of already delivered ids (which the done window must refuse) sent
// throughout. A fourth, empty master is added with `redis-cli --cluster add-node` and
// slots are moved onto it with `redis-cli --cluster rebalance --cluster-use-empty-masters`
// while the bridge parks, claims and acks. The shards' done-window indexes start at one
// sub-hash, so they split every few dozen acks, during the migration too.
//
// Judged: every message delivered, none early, none later than the longest span in
// which the bridge's slots were half-moved plus reshardLatenessSlack, no replay delivered again, duplicates counted (none
// expected: no lease lapses here); after the move some shards live on the
// new master and no node holds a key of a slot it does not serve (no orphans on the
// sources); the bridge logged no script failure.
func TestRedisClusterReshardUnderLoad(t *testing.T) {
	rc := testkit.StartRedisCluster(t, 3)
	ctx := context.Background()
	cc := rc.Client()
	// Start every shard's index with one sub-hash (level 0): it splits whenever it
	// holds 48 entries per sub-hash on average, i.e. all through this test.
	for sh := 0; sh < haShards; sh++ {
		if err := cc.HSet(ctx, ixKey(sh), "level", 0, "split", 0, "n", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := startReshardRig(t, rc, "rs")

	before := ixStates(t, cc)
	owners0 := shardNodes(t, rc)
	watch := watchMigrations(t, rc)
	newNode := rc.AddMaster()
	started := time.Now()
	out := rc.Rebalance()
	took := time.Since(started)
	after := ixStates(t, cc)
	owners1 := shardNodes(t, rc)
	time.Sleep(time.Second)
	slow := slowMoves(t, rc, cc)
	migration, slots := watch.finish()
	time.Sleep(2 * time.Second)

	moved, splitMoving := judgeMoves(t, owners0, owners1, before, after, newNode.Addr())
	if moved == 0 {
		t.Fatalf("the rebalance moved no shard's slot to the new master:\n%s", out)
	}
	all, replays, dups, late := r.judgeDelivered(t, migration)
	keys, retried := judgeAfterMove(t, rc, r.p)
	logs := r.p.logs()
	t.Logf("slow slot moves: %v; script calls retried: %v", slow, retried)
	t.Logf("reshard: %d messages (%d far-future), %d replays refused, %d duplicates; rebalance took %s, %d of the bridge's slots moved, moved %d of %d shards (%d split their index meanwhile); keys per node %v; TRYAGAIN retries logged %d; %s",
		len(all), len(r.far), replays, dups, took.Round(time.Millisecond), slots, moved, haShards, splitMoving, keys,
		strings.Count(logs, "TRYAGAIN"), late)
}

// reshardRig is the load of the resharding tests: one bridge (instance prefix-a) on
// the cluster, 200 messages parked 40 s ahead, a stream of 400 msgs/s with delays of
// 0.2-3 s, and replays of delivered ids, all running for 6 s when it is returned.
type reshardRig struct {
	c   *haCluster
	p   *bridgeProc
	far map[string]sent
	s   *stream
	rp  *replays
}

func startReshardRig(t *testing.T, rc *testkit.RedisCluster, prefix string) *reshardRig {
	t.Helper()
	r := &reshardRig{c: startHAClusterOn(t, rc.Addrs(), 4, 3*time.Second)}
	r.p = r.c.start(prefix + "-a")
	r.c.waitBalanced(r.p, 20*time.Second, prefix+"-a")
	r.far = sendFar(t, r.c, 200, 40*time.Second)
	r.s = startStream(t, r.c.writer, prefix, 400, 200*time.Millisecond, 3*time.Second)
	r.rp = startReplays(t, r.c, r.s)
	time.Sleep(6 * time.Second)
	return r
}

// reshardLatenessSlack is how much later than the migration (the longest span of
// half-moved slots) a message may arrive during a live reshard: a shard's calls are
// refused while its slot moves (and a park batch with a message of it waits with
// them), so a message due as the move starts waits for the move, then for the store's
// retries and the pump's backoff (at most 2 s), a claim sent again after a lost reply
// (it fires no earlier than that claim's horizon, at most the lookahead late) and the
// consumer's own delay.
const reshardLatenessSlack = 5 * time.Second

// judgeDelivered stops the stream and the replays, waits for every message and judges
// them: none lost or early, duplicates reported one by one, and none later after its
// due time than migration (the longest span in which the bridge's slots were
// half-moved: migrationWatch) plus reshardLatenessSlack — a claim whose reply a migration lost
// must not wait for the in-flight lease of a dead owner. It returns
// the messages, the replays sent (each refused, or the ledger would have found it), the
// duplicates and a line of lateness figures.
func (r *reshardRig) judgeDelivered(t *testing.T, migration time.Duration) (all map[string]sent, replays, dups int, late string) {
	t.Helper()
	sentMsgs := r.s.finish(t)
	replays = r.rp.finish()
	all = map[string]sent{}
	for id, m := range sentMsgs {
		all[id] = m
	}
	for id, m := range r.far {
		all[id] = m
	}
	waitAllArrived(t, r.c.target, all, 3*time.Minute, r.p)
	time.Sleep(2 * time.Second) // a late duplicate, if any, arrives too
	got := r.c.target.snapshot()
	dups = ledger(t, all, got, "orders.delay")
	if dups != 0 {
		for id, as := range arrivalsByID(got) {
			if len(as) > 1 {
				t.Errorf("fired twice: %s (shard %d) at %v", id, shardOf(id), arrivalTimes(as))
			}
		}
	}
	ls := lateness(got)
	bound := migration + reshardLatenessSlack
	late = fmt.Sprintf("lateness after due p50 %s p99 %s max %s (bound: the longest span of half-moved slots, %s, + %s)", percentile(ls, 0.5),
		percentile(ls, 0.99), percentile(ls, 1), migration.Round(time.Millisecond), reshardLatenessSlack)
	if worst := percentile(ls, 1); worst > bound {
		over := 0
		for _, l := range ls {
			if l > bound {
				over++
			}
		}
		t.Errorf("%d messages arrived more than %s after their due time, the worst %s late: %s", over, bound, worst, late)
	}
	return all, replays, dups, late
}

// sendFar produces n messages due in delay (+10 ms each), before the move.
func sendFar(t *testing.T, c *haCluster, n int, delay time.Duration) map[string]sent {
	t.Helper()
	far := map[string]sent{}
	var batch []sent
	for i := 0; i < n; i++ {
		m := newSent("far", i, delay+time.Duration(i)*10*time.Millisecond)
		far[m.id], batch = m, append(batch, m)
	}
	if err := kafkaSender(c.writer)(batch); err != nil {
		t.Fatal(err)
	}
	return far
}

// judgeMoves counts the shards whose slot moved (each must have moved to newNode) and
// those of them whose index split meanwhile (at least one must have).
func judgeMoves(t *testing.T, owners0, owners1, before, after []string, newNode string) (moved, splitMoving int) {
	t.Helper()
	for sh := 0; sh < haShards; sh++ {
		if owners0[sh] != owners1[sh] {
			moved++
			if after[sh] != before[sh] {
				splitMoving++
			}
			if owners1[sh] != newNode {
				t.Errorf("shard %d moved from %s to %s, not to the new master %s", sh, owners0[sh], owners1[sh], newNode)
			}
		}
	}
	if moved > 0 && splitMoving == 0 {
		t.Errorf("no moved shard's index split during the migration (before %v, after %v)", before, after)
	}
	return moved, splitMoving
}

// judgeAfterMove: no node holds a key of a slot it does not serve, the bridge logged no
// error, no script failure and no BUSYKEY, and counted its retries of refused calls
// (the slow moves kept slots half-moved for seconds while it worked them). It returns
// the keys per node and the retries.
func judgeAfterMove(t *testing.T, rc *testkit.RedisCluster, p *bridgeProc) ([]int, float64) {
	t.Helper()
	keys := judgeClean(t, rc, p)
	retried := metricSum(t, p, "redis_retries_total")
	if retried <= 0 {
		t.Errorf("redis_retries_total = %v after slots were half-moved for seconds; want the store's retries counted", retried)
	}
	return keys, retried
}

// judgeClean: no node holds a key of a slot it does not serve, and the bridge logged no
// error, no script failure and no BUSYKEY. It returns the keys per node.
func judgeClean(t *testing.T, rc *testkit.RedisCluster, p *bridgeProc) []int {
	t.Helper()
	misplaced, keys, err := rc.Misplaced(context.Background())
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
	return keys
}

// metricSum adds up every series of the bridge's metric name.
func metricSum(t *testing.T, p *bridgeProc, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, v := range p.series(name) {
		sum += v
	}
	return sum
}

func ixKey(shard int) string { return fmt.Sprintf("delaybridge:{ha:%d}:ix", shard) }

// ixStates reads every shard's index state as "level/split".
func ixStates(t *testing.T, cc *redis.ClusterClient) []string {
	t.Helper()
	out := make([]string, haShards)
	for sh := range out {
		v, err := cc.HMGet(context.Background(), ixKey(sh), "level", "split").Result()
		if err != nil {
			t.Fatal(err)
		}
		out[sh] = fmt.Sprintf("%v/%v", v[0], v[1])
	}
	return out
}

// shardNodes is the address of the master serving each shard's slot.
func shardNodes(t *testing.T, rc *testkit.RedisCluster) []string {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: rc.Nodes[0].Addr()})
	defer cl.Close()
	slots, err := cl.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, haShards)
	for sh := range out {
		slot, err := cl.ClusterKeySlot(context.Background(), ixKey(sh)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				out[sh] = s.Nodes[0].Addr
			}
		}
	}
	return out
}

func arrivalTimes(as []arrival) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.at.Format("15:04:05.000")
	}
	return out
}

// replays re-sends, every 100 ms, up to 20 messages of the stream that already arrived
// (same id, record time, delay and payload, as an ingress replay would): the done
// window must refuse every one, so any second arrival is a failure of it.
type replays struct {
	stop, done chan struct{}
	mu         sync.Mutex
	n          int
	err        error
}

func startReplays(t *testing.T, c *haCluster, s *stream) *replays {
	r := &replays{stop: make(chan struct{}), done: make(chan struct{})}
	send := kafkaSender(c.writer)
	go func() {
		defer close(r.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		next := 0
		for {
			select {
			case <-r.stop:
				return
			case <-tick.C:
			}
			got := c.target.snapshot()
			var batch []sent
			s.mu.Lock()
			for ; next < len(got) && len(batch) < 20; next++ {
				if m, ok := s.sent[got[next].headers["x-message-id"]]; ok {
					batch = append(batch, m)
				}
			}
			s.mu.Unlock()
			if len(batch) == 0 {
				continue
			}
			err := send(batch)
			r.mu.Lock()
			r.n += len(batch)
			r.err = err
			r.mu.Unlock()
		}
	}()
	t.Cleanup(r.halt)
	return r
}

func (r *replays) halt() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

func (r *replays) finish() int {
	r.halt()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// slowMoves moves three shards' slots one key at a time (100 ms apart) to another
// master while the stream flows, so scripts meet a half-moved slot for seconds: the
// keys the scripts build (index sub-hashes and done slices) first for shards 0 and 1,
// last for shard 2.
func slowMoves(t *testing.T, rc *testkit.RedisCluster, cc *redis.ClusterClient) []string {
	t.Helper()
	ctx := context.Background()
	undeclared := func(key string) bool { return strings.Contains(key, ":ix:") || strings.Contains(key, ":dn:") }
	orders := []func(string) bool{undeclared, undeclared, func(k string) bool { return !undeclared(k) }}
	owners := shardNodes(t, rc)
	var out []string
	for sh, first := range orders {
		var from, to *testkit.Redis
		for i, n := range rc.Nodes {
			if n.Addr() == owners[sh] {
				from, to = n, rc.Nodes[(i+1)%len(rc.Nodes)]
			}
		}
		slot, err := cc.ClusterKeySlot(ctx, ixKey(sh)).Result()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		n, err := rc.MoveSlot(ctx, int(slot), from, to, 100*time.Millisecond, first)
		if err != nil {
			t.Errorf("moving shard %d (slot %d) from %s to %s: %v", sh, slot, from.Addr(), to.Addr(), err)
		}
		out = append(out, fmt.Sprintf("shard %d: %d keys %s->%s in %s", sh, n, from.Addr(), to.Addr(), time.Since(start).Round(time.Millisecond)))
	}
	return out
}
