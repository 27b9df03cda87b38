// Package memstore is an in-memory shard store with the semantics of store/redisstore's
// Redis store: all of storeapi.Store (intake, claims, by id, leases, membership,
// notifications, browse, counts, dead letters, job records and batches, the charts'
// history), for tests that need what a real server cannot give: failure injection (any
// operation failing, transiently or not, before or after it took effect, or blocking)
// and lease expiry (and job record expiry) on a fake clock.
//
// It adds coverage; it never replaces the tests against a real redis-server. It passes
// the same conformance suite (store/storetest) as the Redis store on
// redis-server, Redis Cluster and miniredis, which is what keeps the two alike.
//
// The data model mirrors the Redis keys (docs/CONTRACT.md §3): per shard a due, msg,
// inflight, dead and done set, the cancelled routes of done ids, the owner and the
// fence counter; envelopes are stored encoded, as in Redis, so a caller's later change
// to an envelope never reaches the store. Times are the unix milliseconds the caller
// passes; only lease TTLs run on Options.Clock (as Redis runs them on its own clock).
//
// One mutex guards everything; every operation is atomic, like a script call. The
// failure hook runs before the mutex is taken, so it may block (on its ctx or a fake
// clock) without stopping other operations.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Operation names passed to the failure hook, named after the Redis store's scripts.
const (
	OpPark         = "park"
	OpBury         = "bury"
	OpClaim        = "claim"
	OpAck          = "ack"
	OpRetry        = "retry"
	OpRecover      = "recover"
	OpCancel       = "cancel"
	OpReschedule   = "reschedule"
	OpGet          = "get"
	OpPurgeDead    = "purge_dead"
	OpStats        = "stats" // ShardStats, RouteCounts, ListDead, Envelopes
	OpLeaseAcquire = "lease_acquire"
	OpLeaseRenew   = "lease_renew"
	OpLeaseRelease = "lease_release"
	OpHeartbeat    = "heartbeat"
	OpMembers      = "members"
	OpLeave        = "leave"
	OpTime         = "time"
	OpPublish      = "publish"   // PublishWake, PublishCancel
	OpBrowse       = "browse"    // Browse, CountRange, EdgeScore
	OpJobs         = "jobs"      // the job records: CreateJob, GetJob, ListJobs, ActiveJobs, ClaimJob, SaveJob, CancelJob
	OpSchedules    = "schedules" // the schedules: PutSchedule, GetSchedule, ListSchedules, DeleteSchedule, SaveSchedulePlan
)

// ErrInjected is the error FailNext and LoseReplyNext use when given none; it is
// transient (a lost connection, as far as the caller can tell).
var ErrInjected = fault.Transient(errors.New("memstore: injected failure"))

const (
	defaultShards = 64
	minTrim       = 16  // as the Redis store: least done entries one ack or cancel forgets
	maxPerCall    = 512 // as the Redis store: ids per script call (trim limits follow it)
)

// Options configure a Store.
type Options struct {
	Shards     int           // fixed shard count, default 64
	DoneWindow time.Duration // as the Redis store's Options.DoneWindow; zero remembers nothing
	Clock      clock.Clock   // runs lease TTLs; default the real clock
	Ordered    []string      // routes with `order: key`, as the Redis store's Options.Ordered
}

// Hook is called before every operation with its name (an Op constant). A non-nil
// error fails the operation, which then changes nothing. It may block; it should
// return when ctx ends.
type Hook func(ctx context.Context, op string) error

type shard struct {
	due, inflight, dead, done map[string]int64
	msg                       map[string][]byte
	cancelled                 map[string][]string  // done id -> routes whose cancel it was
	succ                      map[string]successor // in-flight id -> its replacement (replace.go)
	owner                     string               // "instance|token", "" when free
	ownerExp                  time.Time
	fence                     int64
	order                     order // per-key order (order.go)
}

type injection struct {
	op    string
	n     int
	err   error
	after bool // apply the operation, then fail (the reply was lost)
}

// Store is the in-memory shard store. It is safe for concurrent use.
type Store struct {
	opt Options
	ord storeapi.Ordering

	mu      sync.Mutex
	shards  []*shard
	members map[string]int64
	subs    map[*subscriber]struct{}
	jobs    map[string]*jobRecord // job id -> record (jobs.go)
	listed  map[string]int64      // job id -> created: the listing, trimmed on create
	active  map[string]bool       // queued and running job ids
	history map[string]*history   // instance -> its charts intervals (series.go), made on first write
	sched   schedules             // schedules.go
	woke    map[int]int64         // heads promoted, not yet published (order.go)

	hookMu  sync.Mutex
	hook    Hook
	afterCl Hook // SetAfterClaimHook
	inject  []*injection
	counter map[string]int
}

// New returns an empty store. Shards must be between 1 and 16384 (0: 64).
func New(opt Options) (*Store, error) {
	if opt.Shards == 0 {
		opt.Shards = defaultShards
	}
	if opt.Shards < 1 || opt.Shards > 16384 {
		return nil, fmt.Errorf("%w: shards must be between 1 and 16384, got %d", storeapi.ErrInvalid, opt.Shards)
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	s := &Store{
		opt: opt, shards: make([]*shard, opt.Shards), members: map[string]int64{},
		subs: map[*subscriber]struct{}{}, counter: map[string]int{},
		jobs: map[string]*jobRecord{}, listed: map[string]int64{}, active: map[string]bool{},
		ord: storeapi.NewOrdering(opt.Ordered), woke: map[int]int64{},
	}
	for i := range s.shards {
		s.shards[i] = &shard{
			due: map[string]int64{}, inflight: map[string]int64{}, dead: map[string]int64{},
			done: map[string]int64{}, msg: map[string][]byte{}, cancelled: map[string][]string{},
			succ:  map[string]successor{},
			order: newOrder(),
		}
	}
	return s, nil
}

// SetAfterClaimHook installs h (nil removes it), called when a Claim has read and
// changed the store, before it returns (its error is ignored): a test parks "during"
// a claim that can no longer see the message.
func (s *Store) SetAfterClaimHook(h Hook) {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	s.afterCl = h
}

// afterClaim runs the after-claim hook, if any.
func (s *Store) afterClaim(ctx context.Context) {
	s.hookMu.Lock()
	h := s.afterCl
	s.hookMu.Unlock()
	if h != nil {
		_ = h(ctx, OpClaim)
	}
}

// SetHook installs h (nil removes it). See Hook.
func (s *Store) SetHook(h Hook) {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	s.hook = h
}

// FailNext makes the next n calls of op fail with err (ErrInjected if nil) without
// changing anything. Injections queue up in the order given.
func (s *Store) FailNext(op string, n int, err error) { s.addInjection(op, n, err, false) }

// LoseReplyNext makes the next n calls of op take effect and then fail with err
// (ErrInjected if nil): the write happened but the caller cannot know, as when a
// connection drops after Redis ran the script.
func (s *Store) LoseReplyNext(op string, n int, err error) { s.addInjection(op, n, err, true) }

func (s *Store) addInjection(op string, n int, err error, after bool) {
	if err == nil {
		err = ErrInjected
	}
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	s.inject = append(s.inject, &injection{op: op, n: n, err: err, after: after})
}

// Calls reports how many times op was called (failed calls included).
func (s *Store) Calls(op string) int {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	return s.counter[op]
}

// begin runs before an operation: the context, the hook and injected failures. after
// is the error to return once the operation took effect (LoseReplyNext).
func (s *Store) begin(ctx context.Context, op string) (after error, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: %s: %w", op, err)
	}
	s.hookMu.Lock()
	s.counter[op]++
	h := s.hook
	for i, in := range s.inject {
		if in.op != op {
			continue
		}
		in.n--
		if in.n <= 0 {
			s.inject = append(s.inject[:i], s.inject[i+1:]...)
		}
		if in.after {
			after = fmt.Errorf("memstore: %s: %w", op, in.err)
		} else {
			err = fmt.Errorf("memstore: %s: %w", op, in.err)
		}
		break
	}
	s.hookMu.Unlock()
	if err != nil {
		return nil, err
	}
	if h != nil {
		if err := h(ctx, op); err != nil {
			return nil, fmt.Errorf("memstore: %s: %w", op, err)
		}
	}
	return after, nil
}

// Shards is the fixed shard count.
func (s *Store) Shards() int { return s.opt.Shards }

// ShardOf maps an id to its shard exactly as the Redis store does (storeapi.ShardOf).
func (s *Store) ShardOf(id string) int { return storeapi.ShardOf(id, s.opt.Shards) }

func (s *Store) shard(n int) (*shard, error) {
	if n < 0 || n >= len(s.shards) {
		return nil, fmt.Errorf("%w: shard %d out of range [0,%d)", storeapi.ErrInvalid, n, len(s.shards))
	}
	return s.shards[n], nil
}

// ownerNow is the shard's owner value, "" if none or expired (the key is gone).
func (s *Store) ownerNow(sh *shard) string {
	if sh.owner != "" && s.opt.Clock.Now().After(sh.ownerExp) {
		sh.owner = ""
	}
	return sh.owner
}

// scored is a sorted-set member.
type scored struct {
	id    string
	score int64
}

// sortedUpTo returns the members of z with score ≤ max in Redis's order (score, then
// member bytes), at most limit of them (limit < 0: all).
func sortedUpTo(z map[string]int64, max int64, limit int) []scored {
	var out []scored
	for id, sc := range z {
		if sc <= max {
			out = append(out, scored{id, sc})
		}
	}
	sortScored(out)
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// sortScored sorts members in Redis's order: score, then member bytes.
func sortScored(out []scored) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].score != out[j].score {
			return out[i].score < out[j].score
		}
		return out[i].id < out[j].id
	})
}

// trimArgs mirrors the Redis store's done-window arguments of ack and cancel, and its
// granularity: ids are forgotten by done slice (storeapi.DoneSliceMs wide),
// once the slice holding their time ended a window ago, so trimBefore is the start of
// the slice that holds now - window: the ids done before it are forgettable.
func (s *Store) trimArgs(now int64, batch int) (remember bool, trimBefore int64, trimLimit int) {
	window := s.opt.DoneWindow.Milliseconds()
	before := now - window
	w := storeapi.DoneSliceMs(window)
	return window > 0, before - ((before%w)+w)%w, max(2*batch, minTrim)
}

// doneSecond is the time a done entry keeps, as the Redis store does: whole
// seconds (rounded down).
func doneSecond(now int64) int64 { return now - ((now%1000)+1000)%1000 }

// trim forgets up to limit done entries older than before, with their cancelled routes.
func trim(sh *shard, before int64, limit int) {
	for _, m := range sortedUpTo(sh.done, before-1, limit) {
		delete(sh.done, m.id)
		delete(sh.cancelled, m.id)
	}
}

var _ storeapi.Store = (*Store)(nil)
