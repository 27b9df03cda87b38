package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storetest"
	"github.com/delaybridge/delay-bridge/testkit"
)

// The store conformance suite (store/storetest) on the three servers the
// bridge runs on. The tests of the Redis key layout itself are in store_test.go.

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// subject opens a Store on rdb with cfg, under a prefix and cluster name of its own.
func subject(t *testing.T, rdb redis.UniversalClient, prefix, cluster string, cfg storetest.Config, elapse func(time.Duration), cold ...redisstore.ColdOptions) storetest.Subject {
	t.Helper()
	opt := redisstore.Options{Prefix: prefix, Cluster: cluster, Shards: cfg.Shards, DoneWindow: cfg.DoneWindow, Ordered: cfg.Ordered}
	if len(cold) > 0 {
		opt.Cold, opt.Clock = cold[0], beforeT0{}
	}
	return subjectOf(t, rdb, prefix, cluster, opt, elapse)
}

// subjectOf is subject with the store's options as given.
func subjectOf(t *testing.T, rdb redis.UniversalClient, prefix, cluster string, opt redisstore.Options, elapse func(time.Duration)) storetest.Subject {
	t.Helper()
	s, err := redisstore.New(ctxFor(t), rdb, opt)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	return storetest.Subject{
		Store:  s,
		Elapse: elapse,
		// The lease is the owner key with a TTL (docs/CONTRACT.md §3): deleting it is
		// what its expiry does.
		ExpireLease: func(shard int) {
			key := fmt.Sprintf("%s:{%s:%d}:owner", prefix, cluster, shard)
			if err := rdb.Del(ctxFor(t), key).Err(); err != nil {
				t.Fatalf("DEL %s: %v", key, err)
			}
		},
	}
}

// TestConformanceRedis: a redis-server of its own per case.
func TestConformanceRedis(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		r := testkit.StartRedis(t)
		return subject(t, r.Client(), "delaybridge", "default", cfg, time.Sleep)
	}, storetest.Options{})
}

// allCold parks every message due a millisecond or more ahead in the cold tier
// (lua/includes/cold.lua), so that the suite's cases run on it: by id, browse, counts, replace,
// and promotion on claim. The suite's times are around its fixed t0 (2023): the store
// reads its park time from a clock an hour before t0.
var allCold = redisstore.ColdOptions{Horizon: time.Millisecond}

const suiteT0 = int64(1_700_000_000_000) // storetest's t0

// beforeT0 is the real clock moved back to an hour before the suite's t0.
type beforeT0 struct{ clock.Real }

var sinceT0 = time.Since(time.UnixMilli(suiteT0 - 3_600_000))

func (beforeT0) Now() time.Time { return time.Now().Add(-sinceT0) }

// TestConformanceRedisCold: the suite with (nearly) every message in the cold tier.
func TestConformanceRedisCold(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		r := testkit.StartRedis(t)
		return subject(t, r.Client(), "delaybridge", "default", cfg, time.Sleep, allCold)
	}, storetest.Options{})
}

// TestConformanceRedisClusterCold: the suite on the cold tier of a real Redis Cluster,
// whose bucket keys the scripts name (they must share the shard's slot).
func TestConformanceRedisClusterCold(t *testing.T) {
	cc := testkit.StartRedisCluster(t, 3).Client()
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		return subject(t, cc, "delaybridge", fmt.Sprintf("cold%d", n.Add(1)), cfg, time.Sleep, allCold)
	}, storetest.Options{})
}

// TestConformanceMiniredisCold: the suite on the cold tier of `bridge dev`'s server.
func TestConformanceMiniredisCold(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		return subject(t, c, "delaybridge", "default", cfg, m.FastForward, allCold)
	}, storetest.Options{})
}

// TestConformanceRedisCluster: one real three-master Redis Cluster, a bridge cluster
// name of its own per case (so its shards spread over the masters).
func TestConformanceRedisCluster(t *testing.T) {
	cc := testkit.StartRedisCluster(t, 3).Client()
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		return subject(t, cc, "delaybridge", fmt.Sprintf("case%d", n.Add(1)), cfg, time.Sleep)
	}, storetest.Options{})
}

// TestConformanceMiniredis: miniredis, the embedded server of `bridge dev`, one per
// case. miniredis does not age TTLs by itself; Elapse fast-forwards them.
func TestConformanceMiniredis(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		return subject(t, c, "delaybridge", "default", cfg, m.FastForward)
	}, storetest.Options{})
}

// bucketed parks the suite's Kafka default ids due two seconds or more ahead of the
// store's clock (an hour before the suite's t0) into due buckets
// (lua/includes/bucket.lua), so that the suite's cases run on them.
func bucketed(cfg storetest.Config) redisstore.Options {
	return redisstore.Options{Shards: cfg.Shards, DoneWindow: cfg.DoneWindow, Ordered: cfg.Ordered, Clock: beforeT0{}, Buckets: true}
}

// TestConformanceRedisBuckets: the suite with due buckets.
func TestConformanceRedisBuckets(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		r := testkit.StartRedis(t)
		return subjectOf(t, r.Client(), "delaybridge", "default", bucketed(cfg), time.Sleep)
	}, storetest.Options{})
}

// TestConformanceMiniredisBuckets: the suite with due buckets on `bridge dev`'s server.
func TestConformanceMiniredisBuckets(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		return subjectOf(t, c, "delaybridge", "default", bucketed(cfg), m.FastForward)
	}, storetest.Options{})
}

// TestConformanceRedisClusterBuckets: the suite with due buckets on a real Redis
// Cluster, whose bucket keys the scripts name (they must share the shard's slot).
func TestConformanceRedisClusterBuckets(t *testing.T) {
	cc := testkit.StartRedisCluster(t, 3).Client()
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		opt := bucketed(cfg)
		opt.Cluster = fmt.Sprintf("bk%d", n.Add(1))
		return subjectOf(t, cc, "delaybridge", opt.Cluster, opt, time.Sleep)
	}, storetest.Options{})
}
