package scheduler

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

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

// StoreOptions configure a Store.
type StoreOptions struct {
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
// Keys (DESIGN §3), prefix P and bridge cluster name C; shard n's keys share the hash
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
	opt        StoreOptions
	obs        observe.Observer
	keys       []shardKeys
	metaKey    string
	membersKey string
	wakeCh     string

	park, bury, claim, ack, retry, recover, cancel, reschedule, get, purgeDead *script
	leaseAcquire, leaseRenew, leaseRelease                                     *script
}

// NewStore checks the recorded shard count (recording it on first start) and loads the
// scripts. A different shard count than the one recorded is refused with ErrShardCount.
func NewStore(ctx context.Context, rdb redis.UniversalClient, opt StoreOptions) (*Store, error) {
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
		s.get, s.purgeDead, s.leaseAcquire, s.leaseRenew, s.leaseRelease}
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

// WakeChannel is the pub/sub channel on which a parker announces messages due earlier
// than a pump may be sleeping for (payload: FormatWake).
func (s *Store) WakeChannel() string { return s.wakeCh }

// PublishWake announces newly parked minimum due times per shard on WakeChannel. It is
// an optimisation only: pumps also scan periodically, so a lost message is harmless.
func (s *Store) PublishWake(ctx context.Context, minDue map[int]int64) error {
	if len(minDue) == 0 {
		return nil
	}
	if err := s.rdb.Publish(ctx, s.wakeCh, FormatWake(minDue)).Err(); err != nil {
		return fmt.Errorf("scheduler: publish wake-up: %w", err)
	}
	return nil
}

// FormatWake encodes per-shard due times as "shard:due,shard:due" (shards ascending).
func FormatWake(minDue map[int]int64) string {
	shards := make([]int, 0, len(minDue))
	for sh := range minDue {
		shards = append(shards, sh)
	}
	sort.Ints(shards)
	var b strings.Builder
	for i, sh := range shards {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(sh))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(minDue[sh], 10))
	}
	return b.String()
}

// ParseWake decodes a FormatWake payload.
func ParseWake(payload string) (map[int]int64, error) {
	out := make(map[int]int64)
	if payload == "" {
		return out, nil
	}
	for _, part := range strings.Split(payload, ",") {
		sh, due, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("%w: wake-up payload %q", ErrInvalid, payload)
		}
		n, err1 := strconv.Atoi(sh)
		d, err2 := strconv.ParseInt(due, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: wake-up payload %q", ErrInvalid, payload)
		}
		if old, seen := out[n]; !seen || d < old {
			out[n] = d
		}
	}
	return out, nil
}

func (s *Store) shardKeys(shard int) (shardKeys, error) {
	if shard < 0 || shard >= len(s.keys) {
		return shardKeys{}, fmt.Errorf("%w: shard %d out of range [0,%d)", ErrInvalid, shard, len(s.keys))
	}
	return s.keys[shard], nil
}

// ---------------------------------------------------------------------------------
// Script execution

// eval runs one script call with EVALSHA, falling back to EVAL when Redis lost its
// script cache (restart, failover to a replica that never saw SCRIPT LOAD, FLUSH).
func (s *Store) eval(ctx context.Context, sc *script, keys []string, args ...any) *redis.Cmd {
	start := time.Now()
	cmd := sc.Run(ctx, s.rdb, keys, args...)
	s.obs.ScriptDuration(sc.name, time.Since(start))
	return cmd
}

type call struct {
	sc   *script
	keys []string
	args []any
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// evalPipelined runs calls in one round trip (per node on Cluster, where go-redis
// routes each call by its slot) and returns one result per call. A call that met
// NOSCRIPT did nothing, so it is re-sent with EVAL in a second round trip. With wait,
// the pipeline ends with WAIT so the writes are on MinReplicas replicas when it returns.
// The returned error is the first failure; results of calls that succeeded are valid.
func (s *Store) evalPipelined(ctx context.Context, calls []call, wait bool) ([]*redis.Cmd, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	start := time.Now()
	var cmds []*redis.Cmd
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok && wait {
		cmds, err = s.pipelinePerNode(ctx, cc, calls)
	} else {
		cmds, err = s.pipelineOnce(ctx, s.rdb, calls, wait)
	}
	took := time.Since(start)
	seen := make(map[string]bool, 2)
	for _, c := range calls {
		if !seen[c.sc.name] {
			seen[c.sc.name] = true
			s.obs.ScriptDuration(c.sc.name, took)
		}
	}
	return cmds, err
}

func (s *Store) pipelineOnce(ctx context.Context, c redis.Cmdable, calls []call, wait bool) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	waited, err := s.execPipe(ctx, c, calls, cmds, wait, false)
	if err != nil {
		return cmds, err
	}
	var redo []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			redo = append(redo, i)
		}
	}
	if len(redo) > 0 {
		sub := make([]call, len(redo))
		subCmds := make([]*redis.Cmd, len(redo))
		for j, i := range redo {
			sub[j] = calls[i]
		}
		// The first WAIT covered only the calls that ran; the re-sent ones need theirs.
		w, err := s.execPipe(ctx, c, sub, subCmds, wait, true)
		for j, i := range redo {
			cmds[i] = subCmds[j]
		}
		if err != nil {
			return cmds, err
		}
		if wait {
			waited = w
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return cmds, fmt.Errorf("scheduler: %s: %w", calls[i].sc.name, err)
		}
	}
	if wait && waited < int64(s.opt.MinReplicas) {
		return cmds, fmt.Errorf("%w: %d of %d replicas acknowledged within %s",
			ErrNotReplicated, waited, s.opt.MinReplicas, s.opt.WaitTimeout)
	}
	return cmds, nil
}

// execPipe sends calls (EVALSHA, or EVAL with viaEval) plus an optional WAIT in one
// pipeline. It returns the WAIT result and an error only when the pipeline as a whole
// failed (connection lost); per-call errors stay in cmds.
func (s *Store) execPipe(ctx context.Context, c redis.Cmdable, calls []call, cmds []*redis.Cmd, wait, viaEval bool) (int64, error) {
	pipe := c.Pipeline()
	for i, cl := range calls {
		if viaEval {
			cmds[i] = cl.sc.Eval(ctx, pipe, cl.keys, cl.args...)
		} else {
			cmds[i] = cl.sc.EvalSha(ctx, pipe, cl.keys, cl.args...)
		}
	}
	var waitCmd *redis.Cmd
	if wait {
		// Pipeliner has no Wait method; WAIT must still ride this pipeline's connection.
		waitCmd = pipe.Do(ctx, "wait", s.opt.MinReplicas, s.opt.WaitTimeout.Milliseconds())
	}
	_, err := pipe.Exec(ctx)
	if err != nil {
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return 0, fmt.Errorf("scheduler: %s: %w", calls[0].sc.name, err)
		}
	}
	if waitCmd != nil {
		n, err := waitCmd.Int64()
		if err != nil {
			return 0, fmt.Errorf("scheduler: WAIT: %w", err)
		}
		return n, nil
	}
	return 0, nil
}

// pipelinePerNode is evalPipelined for Redis Cluster with MinReplicas: WAIT counts the
// replicas of the writes made on its own connection, so each primary gets its own
// pipeline of its shards' calls followed by WAIT, all primaries concurrently. A slot
// moving meanwhile surfaces as a MOVED error, which is retryable (the writes are
// idempotent).
func (s *Store) pipelinePerNode(ctx context.Context, cc *redis.ClusterClient, calls []call) ([]*redis.Cmd, error) {
	type group struct {
		node *redis.Client
		idx  []int
	}
	groups := make(map[*redis.Client]*group)
	for i, c := range calls {
		node, err := cc.MasterForKey(ctx, c.keys[0])
		if err != nil {
			return nil, fmt.Errorf("scheduler: find primary for %s: %w", c.keys[0], err)
		}
		g := groups[node]
		if g == nil {
			g = &group{node: node}
			groups[node] = g
		}
		g.idx = append(g.idx, i)
	}
	cmds := make([]*redis.Cmd, len(calls))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for _, g := range groups {
		wg.Add(1)
		go func(g *group) {
			defer wg.Done()
			sub := make([]call, len(g.idx))
			for j, i := range g.idx {
				sub[j] = calls[i]
			}
			subCmds, err := s.pipelineOnce(ctx, g.node, sub, true)
			mu.Lock()
			defer mu.Unlock()
			for j, i := range g.idx {
				if j < len(subCmds) {
					cmds[i] = subCmds[j]
				}
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}(g)
	}
	wg.Wait()
	for i := range cmds {
		if cmds[i] == nil { // that group failed before building its commands
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(firstErr)
		}
	}
	return cmds, firstErr
}

// ---------------------------------------------------------------------------------
// Park and bury

type encoded struct {
	idx   int // position in the caller's slice
	shard int
	data  []byte
}

// encodeGrouped encodes envs and groups them by shard, shards ascending, input order
// kept within a shard.
func (s *Store) encodeGrouped(envs []*envelope.Envelope) ([][]encoded, []int, error) {
	byShard := make(map[int][]encoded)
	for i, e := range envs {
		if e == nil || e.ID == "" {
			return nil, nil, fmt.Errorf("%w: envelope %d has no id", ErrInvalid, i)
		}
		data, err := envelope.Encode(e)
		if err != nil {
			return nil, nil, fmt.Errorf("scheduler: encode envelope %q: %w", e.ID, errors.Join(ErrInvalid, err))
		}
		sh := s.ShardOf(e.ID)
		byShard[sh] = append(byShard[sh], encoded{idx: i, shard: sh, data: data})
	}
	shards := make([]int, 0, len(byShard))
	for sh := range byShard {
		shards = append(shards, sh)
	}
	sort.Ints(shards)
	groups := make([][]encoded, len(shards))
	for i, sh := range shards {
		groups[i] = byShard[sh]
	}
	return groups, shards, nil
}

// chunk splits one shard's items into script calls bounded in count and bytes.
func chunk(items []encoded) [][]encoded {
	var out [][]encoded
	start, bytes := 0, 0
	for i, it := range items {
		if i > start && (i-start >= maxItemsPerCall || bytes+len(it.data) > maxBytesPerCall) {
			out = append(out, items[start:i])
			start, bytes = i, 0
		}
		bytes += len(it.data)
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}

// Park stores envs, each in the shard of its id, due at its DueAt. parked[i] is false
// for a duplicate: an id already pending, in flight, dead or recently done. minDue
// holds, per shard, the earliest due time among newly parked messages, for waking
// pumps. It is ParkEach with the refusal reasons folded into a bool.
func (s *Store) Park(ctx context.Context, envs []*envelope.Envelope) (parked []bool, minDue map[int]int64, err error) {
	prior, minDue, err := s.ParkEach(ctx, envs)
	if prior == nil {
		return nil, nil, err
	}
	parked = make([]bool, len(envs))
	for i, st := range prior {
		parked[i] = st == StateUnknown
	}
	return parked, minDue, err
}

// ParkEach stores envs, each in the shard of its id, due at its DueAt. One script call
// per shard (more for huge batches), all in one pipelined round trip. prior[i] is the
// state envs[i]'s id was in before the call: StateUnknown means it was new and is now
// parked; any other state is why it was refused (pending, inflight, dead, delivered,
// cancelled — the duplicate reason). A tombstone left by a cancel of another route
// does not refuse a message (cancels are scoped to their route). minDue holds, per
// shard, the earliest due time among newly parked messages, for waking pumps.
//
// On error some shards may have been written; parking is idempotent, so retry the whole
// batch (the replay then reports the messages parked the first time as pending). prior
// and minDue are still filled in for the calls that succeeded (all of them with
// ErrNotReplicated); the others read StateNotStored.
func (s *Store) ParkEach(ctx context.Context, envs []*envelope.Envelope) (prior []State, minDue map[int]int64, err error) {
	prior = make([]State, len(envs))
	for i := range prior {
		prior[i] = StateNotStored
	}
	minDue = make(map[int]int64)
	if len(envs) == 0 {
		return prior, minDue, nil
	}
	groups, shards, err := s.encodeGrouped(envs)
	if err != nil {
		return nil, nil, err
	}
	var calls []call
	var chunks [][]encoded
	for gi, g := range groups {
		k := s.keys[shards[gi]]
		for _, ch := range chunk(g) {
			args := make([]any, 0, 4*len(ch))
			for _, it := range ch {
				e := envs[it.idx]
				args = append(args, e.ID, e.DueAt, it.data, e.Route)
			}
			calls = append(calls, call{sc: s.park, keys: []string{k.due, k.msg, k.inflight, k.dead, k.done, k.cancelled}, args: args})
			chunks = append(chunks, ch)
		}
	}
	cmds, err := s.evalPipelined(ctx, calls, s.opt.MinReplicas > 0)
	for ci, cmd := range cmds {
		if cmd == nil || cmd.Err() != nil {
			continue
		}
		res, perr := cmd.StringSlice()
		if perr != nil || len(res) != len(chunks[ci]) {
			return prior, minDue, fmt.Errorf("scheduler: park: unexpected reply %v: %v", cmd.Val(), perr)
		}
		for j, it := range chunks[ci] {
			if res[j] != "parked" {
				prior[it.idx] = State(res[j])
				continue
			}
			prior[it.idx] = StateUnknown
			due := envs[it.idx].DueAt
			if old, ok := minDue[it.shard]; !ok || due < old {
				minDue[it.shard] = due
			}
		}
	}
	return prior, minDue, err
}

// Bury stores invalid messages straight into the dead letters (their Reason should say
// why), idempotently like Park: prior[i] is StateUnknown when envs[i] was buried now,
// else the state its id was already in (left as it is), so a replayed batch is not
// counted or copied to a dead-letter target twice. On error prior is nil unless the
// error is ErrNotReplicated.
func (s *Store) Bury(ctx context.Context, envs []*envelope.Envelope, now int64) (prior []State, err error) {
	prior = make([]State, len(envs))
	if len(envs) == 0 {
		return prior, nil
	}
	groups, shards, err := s.encodeGrouped(envs)
	if err != nil {
		return nil, err
	}
	var calls []call
	var chunks [][]encoded
	for gi, g := range groups {
		k := s.keys[shards[gi]]
		for _, ch := range chunk(g) {
			args := make([]any, 0, 1+3*len(ch))
			args = append(args, now)
			for _, it := range ch {
				args = append(args, envs[it.idx].ID, it.data, envs[it.idx].Route)
			}
			calls = append(calls, call{sc: s.bury, keys: []string{k.due, k.msg, k.inflight, k.dead, k.done, k.cancelled}, args: args})
			chunks = append(chunks, ch)
		}
	}
	cmds, err := s.evalPipelined(ctx, calls, s.opt.MinReplicas > 0)
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return nil, err
	}
	for ci, cmd := range cmds {
		res, perr := cmd.StringSlice()
		if perr != nil || len(res) != len(chunks[ci]) {
			return nil, fmt.Errorf("scheduler: bury: unexpected reply %v: %v", cmd.Val(), perr)
		}
		for j, it := range chunks[ci] {
			if res[j] != "buried" {
				prior[it.idx] = State(res[j])
			}
		}
	}
	return prior, err
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
// Dead letters (by id: store_byid.go)

// ListDead returns up to limit dead letters over all shards, oldest first. An envelope
// that does not decode is shown as one holding only its id and a reason saying so.
func (s *Store) ListDead(ctx context.Context, limit int) ([]*envelope.Envelope, error) {
	if limit <= 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	ranges := make([]*redis.ZSliceCmd, len(s.keys))
	for i, k := range s.keys {
		ranges[i] = pipe.ZRangeWithScores(ctx, k.dead, 0, int64(limit-1))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("scheduler: list dead letters: %w", err)
	}
	type ref struct {
		shard int
		id    string
		at    float64
	}
	var refs []ref
	for sh, r := range ranges {
		for _, z := range r.Val() {
			refs = append(refs, ref{shard: sh, id: z.Member.(string), at: z.Score})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].at < refs[j].at })
	refs = refs[:min(limit, len(refs))]
	if len(refs) == 0 {
		return nil, nil
	}
	pipe = s.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(refs))
	for i, r := range refs {
		gets[i] = pipe.HGet(ctx, s.keys[r.shard].msg, r.id)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("scheduler: list dead letters: %w", err)
	}
	out := make([]*envelope.Envelope, 0, len(refs))
	for i, g := range gets {
		raw, err := g.Bytes()
		if err != nil {
			continue // requeued or purged since the range was read
		}
		e, err := envelope.Decode(raw, refs[i].id)
		if err != nil {
			e = &envelope.Envelope{ID: refs[i].id, Reason: "corrupt envelope in Redis: " + err.Error()}
		}
		out = append(out, e)
	}
	return out, nil
}

// PurgeDead deletes every dead letter and returns how many. Purged ids are not
// remembered in done: a replay of their ingress record would park them again.
func (s *Store) PurgeDead(ctx context.Context) (int64, error) {
	var total int64
	pending := make([]int, len(s.keys))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		calls := make([]call, len(pending))
		for i, sh := range pending {
			k := s.keys[sh]
			calls[i] = call{sc: s.purgeDead, keys: []string{k.dead, k.msg}, args: []any{purgeBatch}}
		}
		cmds, err := s.evalPipelined(ctx, calls, false)
		var next []int
		for i, cmd := range cmds {
			res, rerr := cmd.Int64Slice()
			if rerr != nil || len(res) != 2 {
				continue
			}
			total += res[0]
			if res[1] == 1 {
				next = append(next, pending[i])
			}
		}
		if err != nil {
			return total, err
		}
		pending = next
	}
	return total, nil
}

// ShardStat is one shard's counts, for /v1/stats and the pending/in-flight gauges.
type ShardStat struct {
	Shard    int
	Pending  int64
	Inflight int64
	Dead     int64
	NextDue  int64  // earliest pending due time, -1 if none
	Owner    string // instance holding the lease, "" if none
	Token    int64  // its fencing token
}

// ShardStats reads every shard's counts in one pipelined round trip. The counts are
// read shard by shard, not as one snapshot.
func (s *Store) ShardStats(ctx context.Context) ([]ShardStat, error) {
	type cmds struct {
		due, inflight, dead *redis.IntCmd
		head                *redis.ZSliceCmd
		owner               *redis.StringCmd
	}
	pipe := s.rdb.Pipeline()
	cs := make([]cmds, len(s.keys))
	for i, k := range s.keys {
		cs[i] = cmds{
			due: pipe.ZCard(ctx, k.due), inflight: pipe.ZCard(ctx, k.inflight), dead: pipe.ZCard(ctx, k.dead),
			head: pipe.ZRangeWithScores(ctx, k.due, 0, 0), owner: pipe.Get(ctx, k.owner),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("scheduler: shard stats: %w", err)
	}
	out := make([]ShardStat, len(s.keys))
	for i, c := range cs {
		st := ShardStat{Shard: i, Pending: c.due.Val(), Inflight: c.inflight.Val(), Dead: c.dead.Val(), NextDue: -1}
		if h := c.head.Val(); len(h) > 0 {
			st.NextDue = int64(h[0].Score)
		}
		st.Owner, st.Token = parseOwner(c.owner.Val())
		out[i] = st
	}
	return out, nil
}

// parseOwner splits an owner value "holder|token" into the instance name and token. The
// scheduler holds leases as "instance#incarnation" (an 8-hex-digit tag random per
// process, so two processes never share a lease); the tag is cut off here, so owners
// read as the instance names that `members` lists.
func parseOwner(v string) (string, int64) {
	i := strings.LastIndexByte(v, '|')
	if i < 0 {
		return v, 0
	}
	tok, _ := strconv.ParseInt(v[i+1:], 10, 64)
	return InstanceOf(v[:i]), tok
}

// InstanceOf returns the instance name of a lease holder: holder without a trailing
// "#" and 8 hex digits (the scheduler's incarnation tag), if it has one.
func InstanceOf(holder string) string {
	i := len(holder) - 9
	if i < 1 || holder[i] != '#' {
		return holder
	}
	for _, c := range holder[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return holder
		}
	}
	return holder[:i]
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
