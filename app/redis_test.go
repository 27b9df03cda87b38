package app

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
	"github.com/delaybridge/delay-bridge/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// retryable runs op until it succeeds, failing the test on an error that is not
// transient (fault.IsTransient) or after limit; it returns how many attempts failed.
func retryable(t *testing.T, what string, limit time.Duration, op func() error) int {
	t.Helper()
	deadline := time.Now().Add(limit)
	for failed := 0; ; failed++ {
		err := op()
		if err == nil {
			return failed
		}
		if !fault.IsTransient(err) {
			t.Fatalf("%s: %v (not retryable)", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNewRedisSentinelStoreSurvivesFailover: NewRedis with redis.addrs = three real
// sentinels and redis.master_name builds a Sentinel client; the shard shardStore parks (with
// min_replicas 1, so every park is on the replica when it returns), leases, claims and
// acks through it. After a forced failover (SENTINEL FAILOVER) the same client follows
// the new primary, which has everything: acked ids are done, the in-flight ones are
// recovered, the pending ones are claimed, and new parks and claims work.
func TestNewRedisSentinelStoreSurvivesFailover(t *testing.T) {
	s := testkit.StartRedisSentinel(t)
	rdb, err := NewRedis(config.RedisConfig{Addrs: s.Addrs(), MasterName: s.MasterName, MinReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, ok := rdb.(*redis.Client); !ok {
		t.Fatalf("NewRedis with master_name built a %T, want the Sentinel-backed *redis.Client", rdb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const shards = 4
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{
		Prefix: "sentinel", Cluster: "t", Shards: shards, MinReplicas: 1, DoneWindow: time.Hour,
	})
	if err != nil {
		t.Fatalf("NewStore through the sentinels: %v", err)
	}
	servedBy := func() int {
		t.Helper()
		var info string
		retryable(t, "INFO through the Sentinel client", 30*time.Second, func() error {
			var err error
			info, err = rdb.Info(ctx, "server").Result()
			return err
		})
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "tcp_port:"); ok {
				p, _ := strconv.Atoi(v)
				return p
			}
		}
		t.Fatalf("no tcp_port in INFO server")
		return 0
	}
	if p, want := servedBy(), s.Primary().Port; p != want {
		t.Fatalf("Sentinel client talks to port %d, want the primary %d", p, want)
	}

	now := time.Now().UnixMilli()
	envs := func(prefix string, n int) []*envelope.Envelope {
		out := make([]*envelope.Envelope, n)
		for i := range out {
			id := fmt.Sprintf("%s-%d", prefix, i)
			out[i] = &envelope.Envelope{ID: id, Route: "orders", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
				DueAt: now, ReceivedAt: now - 1000, Payload: []byte("payload " + id)}
		}
		return out
	}
	before := envs("before", 200)
	parked, _, err := shardStore.Park(ctx, before)
	if err != nil {
		t.Fatalf("Park with min_replicas 1 through the sentinels: %v", err)
	}
	for i, ok := range parked {
		if !ok {
			t.Fatalf("%s not parked", before[i].ID)
		}
	}
	// WAIT made them the replica's too.
	replica := s.Data[1]
	if onReplica := pendingOn(t, ctx, replica.Client()); onReplica != len(before) {
		t.Fatalf("replica holds %d pending messages after Park returned, want %d", onReplica, len(before))
	}

	// Shards 0 and 1 fired and acked, shard 2 claimed (in flight), shard 3 pending.
	const inst = "sentinel-test"
	tokens := make([]int64, shards)
	byShard := map[int][]string{}
	for _, e := range before {
		byShard[shardStore.ShardOf(e.ID)] = append(byShard[shardStore.ShardOf(e.ID)], e.ID)
	}
	for sh := 0; sh < shards; sh++ {
		if len(byShard[sh]) == 0 {
			t.Fatalf("no message on shard %d; pick other ids", sh)
		}
		if tokens[sh], err = shardStore.AcquireLease(ctx, sh, inst, time.Minute); err != nil || tokens[sh] == 0 {
			t.Fatalf("acquire lease of shard %d: %d %v", sh, tokens[sh], err)
		}
	}
	for sh := 0; sh < 3; sh++ {
		items, _, err := shardStore.Claim(ctx, sh, inst, tokens[sh], now+1000, now+int64(time.Hour/time.Millisecond), 1000)
		if err != nil || len(items) != len(byShard[sh]) {
			t.Fatalf("claim shard %d: %d items, %v; want %d", sh, len(items), err, len(byShard[sh]))
		}
		if sh < 2 {
			if err := shardStore.Ack(ctx, sh, byShard[sh], now); err != nil {
				t.Fatalf("ack shard %d: %v", sh, err)
			}
		}
	}
	// Acks and claims do not WAIT; make sure the replica has them before the failover
	// so what follows checks the client, not the replication lag.
	if n, err := rdb.Do(ctx, "WAIT", 1, 5000).Int64(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 before the failover: %d %v", n, err)
	}

	start := time.Now()
	old, promoted := s.Failover()
	switched := time.Since(start)
	t.Logf("SENTINEL FAILOVER: %s -> %s in %s", old.Addr(), promoted.Addr(), switched.Round(time.Millisecond))

	// The same client follows the new primary (go-redis hears +switch-master from a
	// sentinel and drops its connections to the old one).
	followed := time.Now().Add(30 * time.Second)
	for servedBy() != promoted.Port {
		if time.Now().After(followed) {
			t.Fatalf("30 s after the failover the Sentinel client still talks to port %d, want the new primary %d", servedBy(), promoted.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var failed int
	failed += retryable(t, "claim shard 3 after the failover", 30*time.Second, func() error {
		items, _, err := shardStore.Claim(ctx, 3, inst, tokens[3], now+1000, now+int64(time.Hour/time.Millisecond), 1000)
		if err == nil && len(items) != len(byShard[3]) {
			t.Fatalf("claim shard 3 after the failover: %d items, want %d (lost in the failover?)", len(items), len(byShard[3]))
		}
		return err
	})
	for sh := 0; sh < 2; sh++ {
		for _, id := range byShard[sh] {
			st, _, _, err := shardStore.Get(ctx, id)
			if err != nil || st != storeapi.StateDelivered {
				t.Fatalf("%s (acked before the failover) is %q on the new primary (%v), want delivered", id, st, err)
			}
		}
	}
	var moved int
	failed += retryable(t, "recover shard 2", 30*time.Second, func() error {
		var err error
		moved, _, err = shardStore.RecoverAll(ctx, 2, now, 1000)
		return err
	})
	if moved != len(byShard[2]) {
		t.Fatalf("recovered %d in-flight messages of shard 2 on the new primary, want %d", moved, len(byShard[2]))
	}
	items, _, err := shardStore.Claim(ctx, 2, inst, tokens[2], now+1000, now+int64(time.Hour/time.Millisecond), 1000)
	if err != nil || len(items) != len(byShard[2]) {
		t.Fatalf("claim recovered shard 2: %d items, %v; want %d", len(items), err, len(byShard[2]))
	}

	// Parks need a replica again: the sentinels turn the old primary into one a few
	// seconds after the switch. Until then a park fails with a retryable error.
	after := envs("after", 100)
	start = time.Now()
	parkFails := retryable(t, "park after the failover", 60*time.Second, func() error {
		_, _, err := shardStore.Park(ctx, after)
		return err
	})
	t.Logf("first park after the switch succeeded %s later (%d retryable failures: no replica until the sentinels reconfigure the old primary)",
		time.Since(start).Round(time.Millisecond), parkFails)
	s.WaitReplicaSynced(60 * time.Second)
	if n := pendingOn(t, ctx, old.Client()); n != len(after) {
		t.Fatalf("old primary, now a replica, holds %d pending messages, want the %d parked after the failover", n, len(after))
	}
	got := 0
	for sh := 0; sh < shards; sh++ {
		items, _, err := shardStore.Claim(ctx, sh, inst, tokens[sh], now+1000, now+int64(time.Hour/time.Millisecond), 1000)
		if err != nil {
			t.Fatalf("claim shard %d after the failover: %v", sh, err)
		}
		got += len(items)
	}
	if got != len(after) {
		t.Fatalf("claimed %d of the %d messages parked after the failover", got, len(after))
	}
	t.Logf("%d retryable errors on the first commands after the failover", failed)
}

// pendingOn sums the due sets of every shard on one server.
func pendingOn(t *testing.T, ctx context.Context, c *redis.Client) int {
	t.Helper()
	keys, err := c.Keys(ctx, "sentinel:*:due").Result()
	if err != nil {
		t.Fatalf("KEYS on %s: %v", c.Options().Addr, err)
	}
	n := 0
	for _, k := range keys {
		n += int(c.ZCard(ctx, k).Val())
	}
	return n
}

// TestNewRedisSentinelPassword: sentinels that require a password of their own
// (requirepass on the sentinels, none on the data servers) are reached with
// redis.sentinel_password; without it the client cannot find the primary and says why.
func TestNewRedisSentinelPassword(t *testing.T) {
	s := testkit.StartRedisSentinelAuth(t, "s3ntinel-secret")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	without, err := NewRedis(config.RedisConfig{Addrs: s.Addrs(), MasterName: s.MasterName})
	if err != nil {
		t.Fatal(err)
	}
	err = without.Ping(ctx).Err()
	without.Close()
	if err == nil {
		t.Fatal("PING through sentinels that require a password succeeded without one")
	}
	if !strings.Contains(strings.ToUpper(err.Error()), "AUTH") {
		t.Errorf("error without the sentinel password does not say it is about authentication: %v", err)
	}

	with, err := NewRedis(config.RedisConfig{Addrs: s.Addrs(), MasterName: s.MasterName, SentinelPassword: s.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer with.Close()
	if err := with.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through password-protected sentinels with redis.sentinel_password: %v", err)
	}
	if got, err := s.Primary().Client().Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("the primary has k = %q (%v), want v: the client did not reach the primary", got, err)
	}
}
