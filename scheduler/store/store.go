package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/lua"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

// Limits that keep every script call short (Redis runs one script at a time, so a huge
// call stalls every other client) and every request body bounded.
const (
	maxItemsPerCall = 512
	maxBytesPerCall = 4 << 20
	// minTrim is the least number of done entries one ack or cancel may forget, so
	// single-id calls still keep pace with the entries they add.
	minTrim         = 16
	purgeBatch      = 1000
	startBackfill   = 256 // messages per shard counted by New (counts.go)
	defaultShards   = 64
	defaultPrefix   = "delaybridge"
	defaultCluster  = "default"
	defaultWaitTime = 2 * time.Second
)

// Options configure a Store.
type Options struct {
	Prefix  string // key prefix, default "delaybridge"
	Cluster string // bridge cluster name, default "default"
	Shards  int    // fixed shard count, default 64; recorded in Redis at first start
	// DoneWindow is how long fired and cancelled ids are remembered so that a replayed
	// ingress record is not parked again. Zero remembers nothing (as in the config).
	DoneWindow time.Duration
	// MinReplicas > 0 makes Park (and Bury) wait until that many replicas have the
	// write (WAIT), failing with ErrNotReplicated otherwise.
	MinReplicas int
	// WaitTimeout bounds that wait; default 2s.
	WaitTimeout time.Duration
	Observer    observe.Observer // nil = observe.Nop
	// Clock times Listen's reconnect waits; default the real clock. (Script times are
	// passed by the caller, never read here.)
	Clock clock.Clock
}

// shardKeys are the Redis keys of one shard. They share the hash tag {cluster:shard}, so
// on Redis Cluster every script call touches one slot.
type shardKeys struct {
	due, msg, inflight, dead, done, cancelled, owner, fence, counts string
}

type script struct {
	name string
	*redis.Script
}

// Store is the Redis shard store: every operation on parked messages, shard leases and
// membership. It is safe for concurrent use.
//
// Keys (docs/CONTRACT.md §3), prefix P and bridge cluster name C; shard n's keys share the hash
// tag {C:n}, so each script call touches one Redis Cluster slot:
//
//	P:{C:n}:due       ZSET   id -> due time (unix ms)
//	P:{C:n}:msg       HASH   id -> envelope; present exactly for ids in due, inflight, dead
//	P:{C:n}:inflight  ZSET   id -> lease deadline
//	P:{C:n}:dead      ZSET   id -> time dead-lettered
//	P:{C:n}:done      ZSET   id -> time delivered or cancelled (dedup window, trimmed)
//	P:{C:n}:cancelled HASH   id -> routes of its cancel, for the done ids that were
//	                         cancelled rather than delivered (trimmed with done)
//	P:{C:n}:owner     STRING "instance|token", PX lease TTL
//	P:{C:n}:fence     STRING counter behind the fencing tokens (never expires)
//	P:{C:n}:counts    HASH   "<state>:<route>" -> messages of that route pending, inflight,
//	                         dead; changed by the scripts that move them (counts.go)
//	P:{C}:members     ZSET   instance -> heartbeat time
//	P:{C}:meta        HASH   "shards" -> shard count recorded at first start
//	P:{C}:wake        pub/sub channel (WakeChannel)
//
// Redis Cluster: pipelines are split per slot by go-redis; with MinReplicas each primary
// gets its own pipeline ending in WAIT.
//
// Apart from ScriptDuration the store reports nothing to the Observer that its callers
// count themselves (parked, fired, ...): it does not know routes for most calls, and
// counting in one place avoids doubles. The exceptions are damage only the store can
// see: envelopes missing or undecodable in Redis are counted as Invalid("",
// "missing_envelope" / "corrupt_envelope").
type Store struct {
	rdb        redis.UniversalClient
	opt        Options
	obs        observe.Observer
	keys       []shardKeys
	metaKey    string
	membersKey string
	members    *membership.Redis
	wakeCh     string
	exact      countsExact

	park, bury, claim, ack, retry, recover, cancel, reschedule, get, purgeDead *script
	browse                                                                     *script
	leaseAcquire, leaseRenew, leaseRelease                                     *script
}

// New checks the recorded shard count (recording it on first start) and loads the
// scripts. A different shard count than the one recorded is refused with ErrShardCount.
func New(ctx context.Context, rdb redis.UniversalClient, opt Options) (*Store, error) {
	if opt.Prefix == "" {
		opt.Prefix = defaultPrefix
	}
	if opt.Cluster == "" {
		opt.Cluster = defaultCluster
	}
	if opt.Shards == 0 {
		opt.Shards = defaultShards
	}
	if opt.WaitTimeout <= 0 {
		opt.WaitTimeout = defaultWaitTime
	}
	if opt.Shards < 1 || opt.Shards > 16384 {
		return nil, fmt.Errorf("%w: shards must be between 1 and 16384, got %d", ErrInvalid, opt.Shards)
	}
	// A brace would end the hash tag early and scatter a shard's keys over slots.
	if strings.ContainsAny(opt.Prefix, "{}") || strings.ContainsAny(opt.Cluster, "{}") {
		return nil, fmt.Errorf("%w: prefix %q and cluster %q must not contain '{' or '}'", ErrInvalid, opt.Prefix, opt.Cluster)
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	obs := opt.Observer
	if obs == nil {
		obs = observe.Nop{}
	}
	s := &Store{
		rdb:        rdb,
		opt:        opt,
		obs:        obs,
		keys:       make([]shardKeys, opt.Shards),
		exact:      countsExact{shards: make([]atomic.Bool, opt.Shards)},
		metaKey:    fmt.Sprintf("%s:{%s}:meta", opt.Prefix, opt.Cluster),
		membersKey: membership.MembersKey(opt.Prefix, opt.Cluster),
		members:    membership.New(rdb, opt.Prefix, opt.Cluster),
		wakeCh:     fmt.Sprintf("%s:{%s}:wake", opt.Prefix, opt.Cluster),
	}
	for i := range s.keys {
		base := fmt.Sprintf("%s:{%s:%d}:", opt.Prefix, opt.Cluster, i)
		s.keys[i] = shardKeys{
			due: base + "due", msg: base + "msg", inflight: base + "inflight", dead: base + "dead",
			done: base + "done", cancelled: base + "cancelled", owner: base + "owner", fence: base + "fence",
			counts: base + "counts",
		}
	}
	mk := func(name, src string) *script { return &script{name: name, Script: redis.NewScript(src)} }
	s.park, s.bury, s.claim = mk("park", lua.Park), mk("bury", lua.Bury), mk("claim", lua.Claim)
	s.ack, s.retry, s.recover = mk("ack", lua.Ack), mk("retry", lua.Retry), mk("recover", lua.Recover)
	s.cancel, s.reschedule, s.get = mk("cancel", lua.Cancel), mk("reschedule", lua.Reschedule), mk("get", lua.Get)
	s.purgeDead = mk("purge_dead", lua.PurgeDead)
	s.browse = mk("browse", lua.Browse)
	s.leaseAcquire = mk("lease_acquire", lua.LeaseAcquire)
	s.leaseRenew = mk("lease_renew", lua.LeaseRenew)
	s.leaseRelease = mk("lease_release", lua.LeaseRelease)

	if err := s.checkShards(ctx); err != nil {
		return nil, err
	}
	// Loading up front turns a broken script into a start-up error rather than a
	// failure on the first message, and saves the EVAL fallback on first use.
	for _, sc := range s.scripts() {
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			return nil, fmt.Errorf("scheduler: load script %s: %w", sc.name, redisErr(err))
		}
	}
	// A new store is counted at once (empty sets); one written by an older bridge
	// gets its first step here and the rest from the caller (BackfillCounts).
	if _, _, err := s.BackfillCounts(ctx, startBackfill); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) scripts() []*script {
	return []*script{s.park, s.bury, s.claim, s.ack, s.retry, s.recover, s.cancel, s.reschedule,
		s.get, s.purgeDead, s.browse, s.leaseAcquire, s.leaseRenew, s.leaseRelease, countsBackfillScript}
}

func (s *Store) checkShards(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	pipe.HSetNX(ctx, s.metaKey, "shards", s.opt.Shards)
	get := pipe.HGet(ctx, s.metaKey, "shards")
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("scheduler: record shard count in %s: %w", s.metaKey, redisErr(err))
	}
	if got := get.Val(); got != strconv.Itoa(s.opt.Shards) {
		return fmt.Errorf("%w: Redis (%s) records shards=%s for cluster %q but the configuration says shards=%d; "+
			"the shard count is fixed at first start: set shards back to %s, or use a new cluster name",
			ErrShardCount, s.metaKey, got, s.opt.Cluster, s.opt.Shards, got)
	}
	return nil
}

// Shards is the fixed shard count.
func (s *Store) Shards() int { return s.opt.Shards }

// ShardOf maps a message id to its shard: FNV-1a (32-bit) of the id's bytes, modulo the
// shard count. It must never change: ids already parked would become unreachable.
func (s *Store) ShardOf(id string) int { return storeapi.ShardOf(id, s.opt.Shards) }

func (s *Store) shardKeys(shard int) (shardKeys, error) {
	if shard < 0 || shard >= len(s.keys) {
		return shardKeys{}, fmt.Errorf("%w: shard %d out of range [0,%d)", ErrInvalid, shard, len(s.keys))
	}
	return s.keys[shard], nil
}

// OwnerValue is the owner key's value for an instance holding a shard with a token.
func OwnerValue(instance string, token int64) string { return membership.OwnerValue(instance, token) }
