package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/store/storeapi"
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
	// Ordered are the routes with `order: key` (strict per-key order): their messages
	// with an ordering key live in the shard of their key (storeapi/order.go).
	Ordered []string
	// Logger gets the store's rare notices; nil logs nothing.
	Logger *slog.Logger
	// Cold tunes the cold tier (lua/includes/cold.lua): pending messages due far ahead kept as
	// elements of per-bucket lists instead of sorted-set members.
	Cold ColdOptions
	// Buckets parks a fetch's Kafka default ids due two bucket widths (2,048 ms) or more
	// ahead into due buckets (lua/includes/bucket.lua) that claims take whole. The
	// claimers' lookahead must be at least a bucket width (1,024 ms), or a bucketed
	// message may be claimed up to the difference late.
	Buckets bool
}

// ColdOptions tune the cold tier. Zero values take the defaults.
type ColdOptions struct {
	// Horizon: a message due at least this far ahead is parked in the cold tier;
	// default 5 minutes. Negative turns the cold tier off for new messages (what is
	// cold is still promoted).
	Horizon time.Duration
	// Lead: a bucket is promoted into due when its start is this far ahead of a
	// claim's horizon (now + lookahead); default 30 s.
	Lead time.Duration
	// Budget: at most this many cold elements promoted per claim call; default 2000.
	Budget int
}

const (
	defaultColdHorizon = 5 * time.Minute
	defaultColdLead    = 30 * time.Second
	defaultColdBudget  = 2000
)

// defaults fills in the zero values.
func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = defaultPrefix
	}
	if o.Cluster == "" {
		o.Cluster = defaultCluster
	}
	if o.Shards == 0 {
		o.Shards = defaultShards
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = defaultWaitTime
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	o.Cold.defaults()
}

func (o *ColdOptions) defaults() {
	if o.Horizon == 0 {
		o.Horizon = defaultColdHorizon
	}
	if o.Lead <= 0 {
		o.Lead = defaultColdLead
	}
	if o.Budget <= 0 {
		o.Budget = defaultColdBudget
	}
}

// shardKeys are the Redis keys of one shard. They share the hash tag {cluster:shard}, so
// on Redis Cluster every script call touches one slot.
type shardKeys struct {
	due, msg, inflight, dead, owner, fence, counts string
	ix, dn                                         string // the id index and its done slices
	nx                                             string // replace's successors
	// guard is never written: every script that reads or writes index keys it was not
	// given (index.lua) declares it too, so Redis refuses the call while the shard's
	// slot is being migrated (slotguard.go).
	guard  string
	ko, ki string // per-key order (lua/includes/order.lua)
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
//	P:{C:n}:ix        HASH   the id index's state: level, split, n (entries), tcur
//	P:{C:n}:ix:<k>    HASH   fp -> done state, one small (listpack) sub-hash of the
//	                         index: the done window (dedup), fp = 12 bytes of SHA-256(id)
//	P:{C:n}:dn        ZSET   "<start>:<width>" -> end: the done window's time slices
//	P:{C:n}:dn:<s>:<w> LIST  the fps remembered in that slice, for trimming it
//	P:{C:n}:kb:<t>/<p>/<b> STRING the delivered ids of block b (offsets b*1024 ..
//	                         b*1024+1023) of topic t's partition p, for ids of the Kafka
//	                         default form: 10 bytes per offset (record hash, time)
//	P:{C:n}:kb        ZSET   block name -> its latest delivery (unix ms), for trimming
//	P:{C:n}:kxp, kxc  ZSET   block name -> highest cold bucket, latest cancel second of
//	                         its ids' index entries: the blocks park looks up in the
//	                         index (lua/includes/kbmark.lua)
//	P:{C:n}:cb        ZSET   the cold tier's buckets (b -> b); P:{C:n}:cb:<b> LIST the
//	                         pending messages due in [b*W, (b+1)*W), W = 65.536 s;
//	                         P:{C:n}:cw HASH wm, cur: how far promotion went (lua/includes/cold.lua)
//	P:{C:n}:slotguard never exists; declared by the scripts of the index (slotguard.go)
//	P:{C:n}:owner     STRING "instance|token", PX lease TTL
//	P:{C:n}:fence     STRING counter behind the fencing tokens (never expires)
//	P:{C:n}:counts    HASH   "<state>:<route>" -> messages of that route pending, inflight,
//	                         dead; changed by the scripts that move them (counts.go)
//	P:{C}:members     ZSET   instance -> heartbeat time
//	P:{C}:meta        HASH   "shards" -> shard count recorded at first start, "store" ->
//	                         the store format (marker.go)
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

	park, bury, get                          *script
	claim, retry, recover, purgeDead, browse *script
	coldRead                                 *script // lua/cold_read.lua (cold.go)
	bucketFlush                              *script // lua/bucket_flush.lua (bucket.go)
	replace                                  *script // replace.lua (store_replace.go)
	// ord are the ordered routes; the ordered_* scripts wrap park (for a batch with
	// ordering keys), ack, cancel and reschedule (order.go).
	ord                                    storeapi.Ordering
	oPark, oAck, oCancel, oReschedule      *script
	oReplace                               *script // ordered_replace (store_replace.go)
	leaseAcquire, leaseRenew, leaseRelease *script
	fns                                    functions // FCALL or EVALSHA (library.go)
}

// New checks the recorded store format and shard count (recording both on first start:
// marker.go) and loads the scripts. A store of another format is refused with
// ErrStoreFormat, a different shard count than the one recorded with ErrShardCount.
func New(ctx context.Context, rdb redis.UniversalClient, opt Options) (*Store, error) {
	opt.defaults()
	if opt.Shards < 1 || opt.Shards > 16384 {
		return nil, fmt.Errorf("%w: shards must be between 1 and 16384, got %d", ErrInvalid, opt.Shards)
	}
	// A brace would end the hash tag early and scatter a shard's keys over slots.
	if strings.ContainsAny(opt.Prefix, "{}") || strings.ContainsAny(opt.Cluster, "{}") {
		return nil, fmt.Errorf("%w: prefix %q and cluster %q must not contain '{' or '}'", ErrInvalid, opt.Prefix, opt.Cluster)
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
		metaKey:    fmt.Sprintf("%s:{%s}:meta", opt.Prefix, opt.Cluster),
		membersKey: membership.MembersKey(opt.Prefix, opt.Cluster),
		members:    membership.New(rdb, opt.Prefix, opt.Cluster),
		wakeCh:     fmt.Sprintf("%s:{%s}:wake", opt.Prefix, opt.Cluster),
	}
	for i := range s.keys {
		base := fmt.Sprintf("%s:{%s:%d}:", opt.Prefix, opt.Cluster, i)
		s.keys[i] = shardKeys{
			due: base + "due", msg: base + "msg", inflight: base + "inflight", dead: base + "dead",
			owner: base + "owner", fence: base + "fence",
			counts: base + "counts", ix: base + "ix", dn: base + "dn", nx: base + "nx",
			ko: base + "ko", ki: base + "ki", guard: base + "slotguard",
		}
	}
	mk := func(name string) *script { return newScript(name, name) }
	s.park, s.bury, s.get = mk("park"), mk("bury"), mk("get")
	s.claim = mk("claim")
	s.initOrdered()
	s.purgeDead = mk("purge_dead")
	s.replace = mk("replace")
	s.browse = mk("browse")
	s.coldRead = mk("cold_read")
	s.bucketFlush = mk("bucket_flush")
	s.leaseAcquire = mk("lease_acquire")
	s.leaseRenew = mk("lease_renew")
	s.leaseRelease = mk("lease_release")

	if err := s.checkMeta(ctx); err != nil {
		return nil, err
	}
	if err := s.initScripts(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) scripts() []*script {
	return []*script{s.park, s.bury, s.get, s.claim, s.retry, s.recover, s.purgeDead, s.replace, s.browse, s.coldRead, s.bucketFlush,
		s.leaseAcquire, s.leaseRenew, s.leaseRelease, s.oPark, s.oAck, s.oCancel, s.oReschedule, s.oReplace}
}

// Shards is the fixed shard count.
func (s *Store) Shards() int { return s.opt.Shards }

// ShardOf maps a message id to its shard: storeapi.ShardOf (FNV-1a 32 of the id, or of
// its Kafka partition's block of offsets, modulo the shard count). It must never
// change: ids already parked would become unreachable.
func (s *Store) ShardOf(id string) int { return storeapi.ShardOf(id, s.opt.Shards) }

func (s *Store) shardKeys(shard int) (shardKeys, error) {
	if shard < 0 || shard >= len(s.keys) {
		return shardKeys{}, fmt.Errorf("%w: shard %d out of range [0,%d)", ErrInvalid, shard, len(s.keys))
	}
	return s.keys[shard], nil
}

// OwnerValue is the owner key's value for an instance holding a shard with a token.
func OwnerValue(instance string, token int64) string { return membership.OwnerValue(instance, token) }
