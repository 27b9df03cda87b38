package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/lua"
)

// Errors of the shard store. Callers test them with errors.Is; IsRetryable sorts every
// error the store returns into "try again later" and "will not get better".
var (
	// ErrFenced: the shard's lease is not held with the token the caller presented (it
	// expired or another instance took over). The caller must stop working the shard.
	ErrFenced = errors.New("scheduler: shard lease not held (fenced)")
	// ErrShardCount: Redis records a different shard count for this cluster than the
	// configuration asks for. Shards cannot be re-counted in place.
	ErrShardCount = errors.New("scheduler: shard count mismatch")
	// ErrNotReplicated: the write reached the primary but fewer than MinReplicas
	// replicas acknowledged it in time. Writes are idempotent, so retrying is safe.
	ErrNotReplicated = errors.New("scheduler: write not acknowledged by enough replicas")
	// ErrNotFound: no message with that id in the state the operation needs.
	ErrNotFound = errors.New("scheduler: message not found")
	// ErrInvalid: a bad argument (shard out of range, instance name with '|', ...).
	ErrInvalid = errors.New("scheduler: invalid argument")
)

// State is where a message is in its shard.
type State string

const (
	StatePending  State = "pending"  // in due, waiting for its time
	StateInflight State = "inflight" // claimed by a pump, being published
	StateDead     State = "dead"     // dead-lettered (envelope Reason says why)
	// StateDelivered: published, remembered for the dedup window. A done entry of an
	// older bridge (which recorded cancels there too) reads as delivered.
	StateDelivered State = "delivered"
	// StateCancelled: cancelled (or tombstoned by a cancel that came before its
	// message), remembered for the dedup window.
	StateCancelled State = "cancelled"
	StateUnknown   State = "" // never seen, or forgotten
	// StateNotStored is not a message state: it appears only in ParkEach results
	// returned with an error, for messages whose script call failed (stored or not,
	// nobody knows; the caller replays the batch).
	StateNotStored State = "not_stored"
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
}

// shardKeys are the Redis keys of one shard. They share the hash tag {cluster:shard}, so
// on Redis Cluster every script call touches one slot.
type shardKeys struct {
	due, msg, inflight, dead, done, cancelled, owner, fence string
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
	wakeCh     string

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
		metaKey:    fmt.Sprintf("%s:{%s}:meta", opt.Prefix, opt.Cluster),
		membersKey: fmt.Sprintf("%s:{%s}:members", opt.Prefix, opt.Cluster),
		wakeCh:     fmt.Sprintf("%s:{%s}:wake", opt.Prefix, opt.Cluster),
	}
	for i := range s.keys {
		base := fmt.Sprintf("%s:{%s:%d}:", opt.Prefix, opt.Cluster, i)
		s.keys[i] = shardKeys{
			due: base + "due", msg: base + "msg", inflight: base + "inflight", dead: base + "dead",
			done: base + "done", cancelled: base + "cancelled", owner: base + "owner", fence: base + "fence",
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
			return nil, fmt.Errorf("scheduler: load script %s: %w", sc.name, err)
		}
	}
	return s, nil
}

func (s *Store) scripts() []*script {
	return []*script{s.park, s.bury, s.claim, s.ack, s.retry, s.recover, s.cancel, s.reschedule,
		s.get, s.purgeDead, s.browse, s.leaseAcquire, s.leaseRenew, s.leaseRelease}
}

func (s *Store) checkShards(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	pipe.HSetNX(ctx, s.metaKey, "shards", s.opt.Shards)
	get := pipe.HGet(ctx, s.metaKey, "shards")
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("scheduler: record shard count in %s: %w", s.metaKey, err)
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
func (s *Store) ShardOf(id string) int {
	h := fnv.New32a()
	_, _ = io.WriteString(h, id)
	return int(h.Sum32() % uint32(s.opt.Shards))
}

func (s *Store) shardKeys(shard int) (shardKeys, error) {
	if shard < 0 || shard >= len(s.keys) {
		return shardKeys{}, fmt.Errorf("%w: shard %d out of range [0,%d)", ErrInvalid, shard, len(s.keys))
	}
	return s.keys[shard], nil
}

// ---------------------------------------------------------------------------------
// Claim, ack, retry, recover

// OwnerValue is the owner key's value for an instance holding a shard with a token.
func OwnerValue(instance string, token int64) string {
	return instance + "|" + strconv.FormatInt(token, 10)
}

// Claim moves up to limit messages of shard due at or before upTo into inflight with
// the lease deadline leaseDeadline, and returns them earliest first, each with FireAt set
// to the later of its due score and its envelope's DueAt (Reschedule keeps the two equal;
// a retry's score is later, a recovered message's may be earlier).
// nextDue is the due time of the earliest message still pending, -1 if none. Claim fails
// with ErrFenced unless instance holds the shard's lease with token.
//
// Damaged entries never wedge a shard: an id without an envelope is dropped by the
// script, and an envelope that does not decode is moved to the dead letters as is; both
// are counted as Invalid on the Observer.
func (s *Store) Claim(ctx context.Context, shard int, instance string, token int64, upTo, leaseDeadline int64, limit int) (items []*envelope.Envelope, nextDue int64, err error) {
	k, err := s.shardKeys(shard)
	if err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		return nil, 0, fmt.Errorf("%w: claim limit %d", ErrInvalid, limit)
	}
	cmd := s.eval(ctx, s.claim, []string{k.due, k.msg, k.inflight, k.owner},
		OwnerValue(instance, token), upTo, leaseDeadline, limit)
	if err := cmd.Err(); err != nil {
		if redis.HasErrorPrefix(err, "FENCED") {
			return nil, 0, fmt.Errorf("%w: shard %d, %s: %v", ErrFenced, shard, OwnerValue(instance, token), err)
		}
		return nil, 0, fmt.Errorf("scheduler: claim shard %d: %w", shard, err)
	}
	vals, err := cmd.Slice()
	if err != nil || len(vals) < 2 || (len(vals)-2)%3 != 0 {
		return nil, 0, fmt.Errorf("scheduler: claim shard %d: unexpected reply %v", shard, cmd.Val())
	}
	nextDue, _ = vals[0].(int64)
	if dropped, _ := vals[1].(int64); dropped > 0 {
		for range dropped {
			s.obs.Invalid("", "missing_envelope")
		}
	}
	items = make([]*envelope.Envelope, 0, (len(vals)-2)/3)
	var corrupt, newer []RetryItem
	for i := 2; i+2 < len(vals); i += 3 {
		id, _ := vals[i].(string)
		due, _ := vals[i+1].(int64)
		raw, _ := vals[i+2].(string)
		e, derr := envelope.Decode([]byte(raw), id)
		if errors.Is(derr, envelope.ErrNewerVersion) {
			// Parked by a newer bridge during a rolling upgrade: put it back unchanged,
			// a little later, until an instance that reads it owns the shard.
			newer = append(newer, RetryItem{raw: raw, id: id, Due: upTo + newerVersionRetry.Milliseconds()})
			continue
		}
		if derr != nil {
			corrupt = append(corrupt, RetryItem{raw: raw, id: id, Dead: true})
			continue
		}
		// DueAt stays the message's due time (headers, lateness); the score may be
		// later (retry backoff) or earlier (recovered "now"): fire at the later one.
		e.FireAt = max(due, e.DueAt)
		items = append(items, e)
	}
	if len(newer) > 0 {
		if err := s.Retry(ctx, shard, newer, upTo); err != nil {
			return items, nextDue, fmt.Errorf("scheduler: put back %d envelopes of a newer bridge version on shard %d: %w", len(newer), shard, err)
		}
		for range newer {
			s.obs.Invalid("", "newer_envelope_version")
		}
	}
	if len(corrupt) > 0 {
		// Keep the bytes for forensics; ListDead shows them as an envelope with a reason.
		// Claim is not told the time; upTo (now + lookahead) stands in as the dead time.
		if err := s.Retry(ctx, shard, corrupt, upTo); err != nil {
			return items, nextDue, fmt.Errorf("scheduler: dead-letter %d corrupt envelopes of shard %d: %w", len(corrupt), shard, err)
		}
		for range corrupt {
			s.obs.Invalid("", "corrupt_envelope")
		}
	}
	return items, nextDue, nil
}

// newerVersionRetry is how long an envelope this build cannot read (a newer bridge
// parked it) waits before this instance looks at it again, if it still owns the shard.
const newerVersionRetry = 5 * time.Second

// trimArgs are the done-window arguments shared by ack and cancel.
func (s *Store) trimArgs(now int64, batch int) (remember int, trimBefore int64, trimLimit int) {
	remember = 0
	if s.opt.DoneWindow > 0 {
		remember = 1
	}
	return remember, now - s.opt.DoneWindow.Milliseconds(), max(2*batch, minTrim)
}

func (s *Store) ackCalls(shard int, ids []string, now int64) []call {
	k := s.keys[shard]
	var calls []call
	for start := 0; start < len(ids); start += maxItemsPerCall {
		part := ids[start:min(start+maxItemsPerCall, len(ids))]
		remember, trimBefore, trimLimit := s.trimArgs(now, len(part))
		args := make([]any, 0, 4+len(part))
		args = append(args, now, remember, trimBefore, trimLimit)
		for _, id := range part {
			args = append(args, id)
		}
		calls = append(calls, call{sc: s.ack, keys: []string{k.msg, k.inflight, k.done, k.cancelled}, args: args})
	}
	return calls
}

// Ack records that claimed messages of shard were published: they leave inflight and
// are remembered in done for the dedup window. Ids no longer in flight (recovered,
// cancelled, acked already) are ignored. Old done entries are trimmed on the way.
func (s *Store) Ack(ctx context.Context, shard int, ids []string, now int64) error {
	if _, err := s.shardKeys(shard); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	calls := s.ackCalls(shard, ids, now)
	if len(calls) == 1 {
		return wrapErr("ack", s.eval(ctx, s.ack, calls[0].keys, calls[0].args...).Err())
	}
	_, err := s.evalPipelined(ctx, calls, false)
	return err
}

// AckMany is Ack for ids of any shards, grouped by shard in one pipelined round trip.
func (s *Store) AckMany(ctx context.Context, ids []string, now int64) error {
	if len(ids) == 0 {
		return nil
	}
	byShard := make(map[int][]string)
	for _, id := range ids {
		sh := s.ShardOf(id)
		byShard[sh] = append(byShard[sh], id)
	}
	var calls []call
	for sh, part := range byShard {
		calls = append(calls, s.ackCalls(sh, part, now)...)
	}
	_, err := s.evalPipelined(ctx, calls, false)
	return err
}

// RetryItem is a failed publish to put back: into due at Due with Env (attempt, reason
// and DueAt as the caller set them), or, with Dead, into the dead letters.
type RetryItem struct {
	Env  *envelope.Envelope
	Due  int64
	Dead bool

	id, raw string // set by Claim to dead-letter undecodable bytes unchanged
}

// Retry puts failed claimed messages of shard back (see RetryItem). Messages no longer
// in flight are ignored. now is the dead-letter time.
func (s *Store) Retry(ctx context.Context, shard int, items []RetryItem, now int64) error {
	calls, err := s.retryCalls(shard, items, now)
	if err != nil {
		return err
	}
	switch len(calls) {
	case 0:
		return nil
	case 1:
		return wrapErr("retry", s.eval(ctx, s.retry, calls[0].keys, calls[0].args...).Err())
	}
	_, err = s.evalPipelined(ctx, calls, false)
	return err
}

// RetryMany is Retry for items of any shards (byShard: shard -> items), in one
// pipelined round trip instead of one per shard.
func (s *Store) RetryMany(ctx context.Context, byShard map[int][]RetryItem, now int64) error {
	var calls []call
	for shard, items := range byShard {
		c, err := s.retryCalls(shard, items, now)
		if err != nil {
			return err
		}
		calls = append(calls, c...)
	}
	if len(calls) == 0 {
		return nil
	}
	_, err := s.evalPipelined(ctx, calls, false)
	return err
}

// retryCalls encodes items and builds the retry script calls of one shard (bounded
// batches).
func (s *Store) retryCalls(shard int, items []RetryItem, now int64) ([]call, error) {
	k, err := s.shardKeys(shard)
	if err != nil {
		return nil, err
	}
	enc := make([]encoded, len(items))
	for i, it := range items {
		if it.Env == nil {
			if it.id == "" {
				return nil, fmt.Errorf("%w: retry item %d has no envelope", ErrInvalid, i)
			}
			enc[i] = encoded{idx: i, shard: shard, data: []byte(it.raw)}
			continue
		}
		data, err := envelope.Encode(it.Env)
		if err != nil {
			return nil, fmt.Errorf("scheduler: encode envelope %q: %w", it.Env.ID, errors.Join(ErrInvalid, err))
		}
		enc[i] = encoded{idx: i, shard: shard, data: data}
	}
	var calls []call
	for _, ch := range chunk(enc) {
		args := make([]any, 0, 1+4*len(ch))
		args = append(args, now)
		for _, e := range ch {
			it := items[e.idx]
			id := it.id
			if it.Env != nil {
				id = it.Env.ID
			}
			dead := 0
			if it.Dead {
				dead = 1
			}
			args = append(args, id, it.Due, e.data, dead)
		}
		calls = append(calls, call{sc: s.retry, keys: []string{k.due, k.msg, k.inflight, k.dead}, args: args})
	}
	return calls, nil
}

// Recover moves up to limit inflight messages of shard whose lease deadline is at or
// before now back to due at now, so they fire again; more reports that expired ones
// remain. It rescues claims that were neither acked nor retried in time.
func (s *Store) Recover(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error) {
	return s.recoverInflight(ctx, shard, now, limit, strconv.FormatInt(now, 10))
}

// RecoverAll moves up to limit inflight messages of shard back to due at now whatever
// their deadline; more reports that some remain. A new shard owner calls it until more
// is false before its first claim: the previous owner's lease expired (or it released
// the shard), so whatever it left in flight is fired again at once instead of after
// the inflight lease (at-least-once; duplicates only around a failover). Messages are
// not fired early as long as scheduler.lookahead is shorter than the shard lease TTL:
// a claim is at most lookahead early, and a dead owner's lease takes the TTL to expire.
func (s *Store) RecoverAll(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error) {
	return s.recoverInflight(ctx, shard, now, limit, "+inf")
}

func (s *Store) recoverInflight(ctx context.Context, shard int, now int64, limit int, cutoff string) (int, bool, error) {
	k, err := s.shardKeys(shard)
	if err != nil {
		return 0, false, err
	}
	if limit <= 0 {
		return 0, false, fmt.Errorf("%w: recover limit %d", ErrInvalid, limit)
	}
	res, err := s.eval(ctx, s.recover, []string{k.due, k.inflight}, now, limit, cutoff).Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("scheduler: recover shard %d: %w", shard, err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("scheduler: recover shard %d: unexpected reply %v", shard, res)
	}
	return int(res[0]), res[1] == 1, nil
}

// ---------------------------------------------------------------------------------
// Errors

func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("scheduler: %s: %w", op, err)
}

// IsRetryable reports whether err is transient: the network, a timeout, Redis loading
// its data set after a restart, a failover in progress (READONLY, MASTERDOWN,
// CLUSTERDOWN, TRYAGAIN, MOVED/ASK), a busy script, memory pressure or too few replicas.
// Those are worth retrying with backoff. Everything else (ErrFenced, ErrShardCount,
// ErrInvalid, a corrupt envelope, a cancelled context, a closed client, a script error)
// will not get better by retrying.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, ErrFenced), errors.Is(err, ErrShardCount), errors.Is(err, ErrInvalid),
		errors.Is(err, ErrNotFound), errors.Is(err, ErrOtherRoute), errors.Is(err, envelope.ErrCorrupt),
		errors.Is(err, context.Canceled), errors.Is(err, redis.ErrClosed):
		return false
	case errors.Is(err, ErrNotReplicated), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err) || redis.IsOOMError(err) || redis.HasErrorPrefix(err, "BUSY") {
		return true
	}
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	return false
}
