package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/scheduler/store"
)

// Options configure a Scheduler.
type Options struct {
	Store    Store
	Clock    clock.Clock
	Instance string

	Tick          time.Duration
	Lookahead     time.Duration
	ClaimBatch    int
	InflightLease time.Duration
	LeaseTTL      time.Duration
	SafetyScan    time.Duration
	MaxInMemory   int

	MaxAttempts    int
	BackoffInitial time.Duration
	BackoffMax     time.Duration

	// OnDead, if set, receives messages just dead-lettered after failed publishes (to
	// copy them to a dead-letter topic/exchange). It runs on a dispatcher worker.
	OnDead func([]*envelope.Envelope)

	Observer observe.Observer
	Logger   *slog.Logger
}

// Dispatcher is what the wheel fires into (egress.Dispatcher).
type Dispatcher interface {
	Submit(batch []*envelope.Envelope)
	Run(ctx context.Context)
}

// Scheduler owns shards, runs one pump per owned shard, the shared wheel, and the
// wake-up subscription, and records egress outcomes (it is the egress.Completer).
//
// Ownership (docs/HA.md): every LeaseTTL/3 the ownership loop heartbeats into
// `members`, computes this instance's shards with Owners (rendezvous hashing with
// bounded loads over the live members), renews every lease it holds in one pipelined
// round trip, hands over shards it should no longer own, and acquires the ones it
// should. Leases are taken in the name of a holder unique to this process (instance
// name + '#' + random incarnation), so a restarted process, or a second process
// configured with the same instance name, never shares a lease or a fencing token with
// another process.
//
// Local fencing: every message claimed is remembered per shard with the token of the
// claim (held). Owns lets the dispatcher publish a message only if it is the latest
// claim of its id, its shard is still held with that token, and the lease is surely
// still valid (renewal start + TTL on the local clock). Anything else is dropped: the
// next owner (or this one, after a re-acquisition) recovers it from `inflight`.
//
// Goroutines (all owned by Run and stopped before it returns): the ownership loop (in
// Run itself), one pump per owned shard, the wheel loop, the wake subscriber, the
// dispatcher's workers, and during shutdown the lease keeper.
//
// Lock order: Scheduler.mu, then nothing; heldSet.mu, then the wheel's lock (track and
// take cancel wheel entries under heldSet.mu); shardState.omu, then nothing. The wheel
// never calls back into the scheduler with its lock held.
type Scheduler struct {
	opt     Options
	store   Store
	clk     clock.Clock
	wheel   *Wheel
	credits *credits
	disp    Dispatcher
	log     *slog.Logger
	obs     observe.Observer
	holder  string    // lease holder name: Instance#incarnation
	epoch   time.Time // origin of mono

	mu     sync.Mutex
	shards []*shardState // indexed by shard; nil = not owned

	// held tracks, per shard, the messages in memory (wheel + egress), so that a shard
	// handed over gracefully is released only once everything it claimed is finished,
	// and so that Owns can tell a message's claim token.
	held []heldSet

	// The last assignment computed, for the member list it was computed for (the
	// ownership loop is its only user).
	assignKey string
	assignOut []string
	wantSince []int64      // per shard: since when it is wanted but held by another (unix ms)
	lastRenew atomic.Int64 // start of the last successful renewal round (mono ms + 1; 0 = none)

	ready atomic.Bool
}

// heldSet is one shard's messages in memory.
type heldSet struct {
	mu   sync.Mutex
	n    int                 // copies in memory, including superseded ones
	byID map[string]heldCopy // the latest claim of each id
}

// heldCopy is one claimed copy of a message: the envelope the claim returned (its
// pointer identifies the copy) and the lease token it was claimed under.
type heldCopy struct {
	env   *envelope.Envelope
	token int64
}

type shardState struct {
	shard      int
	token      int64
	leaseUntil atomic.Int64 // Scheduler.mono ms until which our lease is surely valid
	wakeAt     atomic.Int64 // the pump's next planned claim (unix ms)
	wake       chan struct{}
	cancel     context.CancelFunc
	done       chan struct{}
	leaving    bool // guarded by Scheduler.mu: handing over, pump stopped

	// orphans are outcomes that could not be written while the lease was not surely
	// valid (see Dropped); they are written after the next successful renewal, or
	// forgotten when the lease turns out lost (the next owner recovers them).
	omu     sync.Mutex
	orphans []store.RetryItem
}

// New builds a scheduler. Run starts it.
func New(opt Options) *Scheduler {
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	if opt.Observer == nil {
		opt.Observer = observe.Nop{}
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	var inc [4]byte
	_, _ = rand.Read(inc[:])
	s := &Scheduler{
		opt:     opt,
		store:   opt.Store,
		clk:     opt.Clock,
		credits: newCredits(opt.MaxInMemory),
		log:     opt.Logger,
		obs:     opt.Observer,
		holder:  opt.Instance + "#" + hex.EncodeToString(inc[:]),
		epoch:   opt.Clock.Now(),
		shards:  make([]*shardState, opt.Store.Shards()),
		held:    make([]heldSet, opt.Store.Shards()),
	}
	for i := range s.held {
		s.held[i].byID = make(map[string]heldCopy)
	}
	slots := 1
	for time.Duration(slots)*opt.Tick < 2*opt.Lookahead+opt.SafetyScan {
		slots <<= 1
	}
	s.wheel = NewWheel(opt.Clock, opt.Tick, slots, s.fire)
	return s
}

// fire runs on the wheel goroutine for every tick with due messages.
func (s *Scheduler) fire(batch []*envelope.Envelope, now time.Time) {
	nowMs := now.UnixMilli()
	for _, env := range batch {
		// Lateness against the message's due time: retries and recoveries count as late.
		s.obs.Fired(env.Route, time.Duration(nowMs-env.DueAt)*time.Millisecond)
	}
	s.disp.Submit(batch)
}

// mono is the time in ms since the scheduler was built, on the monotonic clock when the
// clock has one (time.Now does): lease validity is judged with it, so a step of the
// wall clock neither extends nor cuts a lease.
func (s *Scheduler) mono() int64 { return s.clk.Now().Sub(s.epoch).Milliseconds() }

// leaseValid reports whether st's lease is surely still ours.
func (s *Scheduler) leaseValid(st *shardState) bool { return s.mono() < st.leaseUntil.Load() }

// Ready reports whether the scheduler has completed a first ownership round.
func (s *Scheduler) Ready() bool { return s.ready.Load() }

// Holder is the name under which this process holds shard leases: the instance name,
// '#', and an incarnation tag random per process.
func (s *Scheduler) Holder() string { return s.holder }

// OwnedShards returns the shards this instance currently holds.
func (s *Scheduler) OwnedShards() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for i, st := range s.shards {
		if st != nil && !st.leaving {
			out = append(out, i)
		}
	}
	return out
}

func (s *Scheduler) state(shard int) *shardState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shards[shard]
}

// Owns reports whether env may be published: it is the latest claim of its id, its
// shard's lease is still held under the token it was claimed with, and the lease is
// surely still valid. The dispatcher drops (does not publish) anything else, e.g. after
// this process was frozen past its lease, or a copy superseded by a re-claim after this
// instance lost and re-acquired the shard: whoever owns the shard recovers and fires
// those from `inflight`, so a frozen instance waking up does not publish a second copy.
func (s *Scheduler) Owns(env *envelope.Envelope) bool {
	shard := s.store.ShardOf(env.ID)
	st := s.state(shard)
	if st == nil || !s.leaseValid(st) {
		return false
	}
	h := &s.held[shard]
	h.mu.Lock()
	c, ok := h.byID[env.ID]
	h.mu.Unlock()
	return ok && c.env == env && c.token == st.token
}

// track records claimed messages as held under st's token before they enter the wheel.
// A message already held (claimed again after a recovery) supersedes the older copy:
// if that copy is still in the wheel it is taken out, otherwise it is on its way to
// egress, where Owns drops it.
func (s *Scheduler) track(st *shardState, items []*envelope.Envelope) {
	h := &s.held[st.shard]
	replaced := 0
	h.mu.Lock()
	for _, env := range items {
		if _, ok := h.byID[env.ID]; ok && s.wheel.Cancel(env.ID) {
			h.n--
			replaced++
		}
		h.byID[env.ID] = heldCopy{env: env, token: st.token}
		h.n++
	}
	h.mu.Unlock()
	s.credits.release(replaced)
}

// untrack forgets one copy that left memory (published, failed, dropped, put back) and
// reports whether it was the latest claim of its id, and that claim's token.
func (s *Scheduler) untrack(shard int, env *envelope.Envelope) (current bool, token int64) {
	h := &s.held[shard]
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if c, ok := h.byID[env.ID]; ok && c.env == env {
		delete(h.byID, env.ID)
		return true, c.token
	}
	return false, 0
}

// takeFromWheel removes from the wheel every message of st's shard claimed under st's
// token and returns them, no longer held. Credits are the caller's to return.
func (s *Scheduler) takeFromWheel(st *shardState) []*envelope.Envelope {
	h := &s.held[st.shard]
	var out []*envelope.Envelope
	h.mu.Lock()
	for id, c := range h.byID {
		if c.token == st.token && s.wheel.Cancel(id) {
			delete(h.byID, id)
			h.n--
			out = append(out, c.env)
		}
	}
	h.mu.Unlock()
	return out
}

func (s *Scheduler) heldCount(shard int) int {
	h := &s.held[shard]
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (st *shardState) addOrphans(items ...store.RetryItem) {
	st.omu.Lock()
	st.orphans = append(st.orphans, items...)
	st.omu.Unlock()
}

func (st *shardState) takeOrphans() []store.RetryItem {
	st.omu.Lock()
	defer st.omu.Unlock()
	out := st.orphans
	st.orphans = nil
	return out
}

// Run owns shards and fires messages until ctx is cancelled, then shuts down in this
// order: leave `members` (the others plan without us at once); keep renewing the
// leases still held, so nobody takes a shard over while this instance finishes it;
// stop the pumps (no new claims); stop the wheel and put every message it still held
// back into `due` unchanged (so whoever owns the shard next fires them on time, not
// after the in-flight lease); let the dispatcher finish what it is publishing and
// record the outcomes; release the leases. The caller stops ingress before
// cancelling ctx.
func (s *Scheduler) Run(ctx context.Context, disp Dispatcher) error {
	s.disp = disp
	bg := context.WithoutCancel(ctx)
	s.log.Info("scheduler starting", "instance", s.opt.Instance, "lease_holder", s.holder, "shards", s.store.Shards())

	wheelCtx, stopWheel := context.WithCancel(bg)
	dispCtx, stopDisp := context.WithCancel(bg)
	subCtx, stopSub := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var wheelWG, dispWG sync.WaitGroup
	wheelWG.Add(1)
	go func() { defer wheelWG.Done(); s.wheel.Run(wheelCtx) }()
	dispWG.Add(1)
	go func() { defer dispWG.Done(); disp.Run(dispCtx) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.store.Listen(subCtx, s.Notify, func(id string) { s.CancelLocal(id) })
	}()

	s.ownershipLoop(ctx)

	// Shutdown, in the documented order.
	lctx, lcancel := context.WithTimeout(bg, 5*time.Second)
	if err := s.store.Leave(lctx, s.opt.Instance); err != nil {
		s.log.Warn("leave members", "err", err)
	}
	lcancel()
	keepCtx, stopKeep := context.WithCancel(bg)
	keepDone := make(chan struct{})
	go func() { defer close(keepDone); s.keepLeases(keepCtx) }()

	stopSub()
	s.mu.Lock()
	var pumps []*shardState
	for _, st := range s.shards {
		if st != nil {
			st.cancel()
			pumps = append(pumps, st)
		}
	}
	s.mu.Unlock()
	for _, st := range pumps {
		<-st.done
	}
	stopWheel()
	wheelWG.Wait()
	if left := s.wheel.Drain(); len(left) > 0 {
		s.putBack(bg, left)
	}
	stopDisp()
	dispWG.Wait()
	wg.Wait()
	stopKeep()
	<-keepDone

	rctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	s.renewAll(rctx) // writes outstanding orphans while the leases are surely ours
	s.mu.Lock()
	owned := append([]*shardState(nil), s.shards...)
	s.mu.Unlock()
	for _, st := range owned {
		if st != nil {
			s.release(rctx, st)
		}
	}
	s.obs.ShardsOwned(0)
	return nil
}

// keepLeases renews the leases still held every LeaseTTL/3 until ctx is done (during
// shutdown, when the ownership loop no longer runs).
func (s *Scheduler) keepLeases(ctx context.Context) {
	t := s.clk.NewTimer(s.opt.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		s.renewAll(ctx)
		t.Reset(s.opt.LeaseTTL / 3)
	}
}

// putBack returns messages claimed but not fired to `due` with their due time and
// attempt unchanged, for the shards still held under the token they were claimed
// with; the others are left in flight for the shard's next owner to recover.
func (s *Scheduler) putBack(ctx context.Context, envs []*envelope.Envelope) {
	byShard := map[int][]store.RetryItem{}
	for _, env := range envs {
		sh := s.store.ShardOf(env.ID)
		cur, tok := s.untrack(sh, env)
		if st := s.state(sh); cur && st != nil && st.token == tok {
			byShard[sh] = append(byShard[sh], store.RetryItem{Env: env, Due: env.FireTime()})
		}
	}
	s.credits.release(len(envs))
	now := clock.NowMs(s.clk)
	for sh, items := range byShard {
		if err := s.store.Retry(ctx, sh, items, now); err != nil {
			s.log.Warn("put back unfired messages; they stay in flight and are recovered by the next owner", "shard", sh, "n", len(items), "err", err)
		}
	}
}

// ownershipLoop runs an ownership round every LeaseTTL/3 (measured from the start of
// one round to the next, so a slow round does not stretch the renewal period), and
// sooner when a round asks for it: at the moment another member's heartbeat ages out,
// and in quick succession while shards it should own are still held by someone else
// (a dead member's lease about to expire, or a graceful handover finishing), so a
// failover takes about the lease TTL rather than TTL plus a round interval.
func (s *Scheduler) ownershipLoop(ctx context.Context) {
	interval := s.opt.LeaseTTL / 3
	quick := max(s.opt.LeaseTTL/20, 10*time.Millisecond)
	t := s.clk.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		start := s.clk.Now()
		soon := s.ownershipRound(ctx)
		now := s.clk.Now()
		d := interval - now.Sub(start)
		if soon > 0 {
			d = min(d, max(time.Duration(soon-now.UnixMilli())*time.Millisecond, quick))
		}
		t.Reset(max(d, 0))
	}
}

// ownershipRound heartbeats, renews every held lease in one round trip, and then, with
// a fresh view of the members, hands over the shards this instance should no longer
// own and acquires the ones it should. It returns when (unix ms) the next round should
// come at the latest, 0 for the regular interval.
func (s *Scheduler) ownershipRound(ctx context.Context) (soon int64) {
	now := clock.NowMs(s.clk)
	ttl := s.opt.LeaseTTL.Milliseconds()
	var want []bool
	if err := s.store.Heartbeat(ctx, s.opt.Instance, now); err != nil {
		s.log.Warn("heartbeat", "err", err)
	} else if members, err := s.store.LiveMembers(ctx, now, s.opt.LeaseTTL); err != nil {
		s.log.Warn("members", "err", err)
	} else {
		names := make([]string, len(members))
		for i, m := range members {
			names[i] = m.Name
			// The moment this member ages out of everyone's view (Members keeps a
			// heartbeat at most LeaseTTL old): look again right then.
			if at := m.Heartbeat + ttl + 1; m.Name != s.opt.Instance && at > now && (soon == 0 || at < soon) {
				soon = at
			}
		}
		want = s.assign(names)
	}
	// Keeping what we hold comes first and never waits for acquisitions.
	s.renewAll(ctx)
	if want == nil || ctx.Err() != nil {
		return 0 // no view of the members: change nothing until the next round
	}
	for shard := range want {
		st := s.state(shard)
		if st == nil {
			continue
		}
		if !want[shard] && !st.leaving && s.leaseValid(st) {
			s.handOver(ctx, st) // (only while the lease is surely ours: it writes to due)
		}
		if st.leaving {
			if s.heldCount(shard) <= 0 {
				s.release(ctx, st)
			} else {
				soon = now + 1 // release as soon as egress is done with it
			}
		}
	}
	if s.wantSince == nil {
		s.wantSince = make([]int64, len(want))
	}
	var candidates []int
	for shard, mine := range want {
		if !mine || s.state(shard) != nil {
			s.wantSince[shard] = 0
			continue
		}
		if s.wantSince[shard] == 0 {
			s.wantSince[shard] = now
		}
		// Copies claimed in an earlier tenure of ours (the lease lapsed, e.g. a stall
		// past the TTL) may still be publishing; a recovery now would fire them again
		// while their acks are on the way. They are dropped or acknowledged soon.
		if s.heldCount(shard) > 0 {
			if now-s.wantSince[shard] < ttl {
				soon = now + 1
			}
			continue
		}
		candidates = append(candidates, shard)
	}
	if len(candidates) > 0 && ctx.Err() == nil {
		for i, token := range s.acquireAll(ctx, candidates) {
			shard := candidates[i]
			if token > 0 {
				s.wantSince[shard] = 0
				continue
			}
			// Held by another holder: its lease runs out within a TTL of its last
			// renewal (a dead member) or it releases as soon as its messages are
			// published (a handover). Try again quickly for a while, then at the regular
			// pace (a holder that keeps renewing, e.g. a second process under our name,
			// is not hammered).
			if now-s.wantSince[shard] < ttl/2 {
				soon = now + 1 // as soon as the loop allows (it keeps a short minimum gap)
			}
		}
	}
	s.obs.ShardsOwned(len(s.OwnedShards()))
	s.ready.Store(true)
	return soon
}

// assign returns which shards this instance should own for the live members.
func (s *Scheduler) assign(members []string) []bool {
	key := strings.Join(members, "\x00")
	if s.assignOut == nil || key != s.assignKey {
		ms := append([]string(nil), members...)
		if !contains(ms, s.opt.Instance) {
			ms = append(ms, s.opt.Instance)
		}
		s.assignKey, s.assignOut = key, Owners(ms, s.store.Shards())
	}
	out := make([]bool, len(s.assignOut))
	for i, o := range s.assignOut {
		out[i] = o == s.opt.Instance
	}
	return out
}

// renewAll renews every held lease in one pipelined round trip. A renewed lease is
// surely valid until the renewal's start + LeaseTTL; outcomes left pending while it was
// not (orphans) are written now. A lease found lost stops its shard at once.
func (s *Scheduler) renewAll(ctx context.Context) {
	s.mu.Lock()
	var sts []*shardState
	for _, st := range s.shards {
		if st != nil {
			sts = append(sts, st)
		}
	}
	s.mu.Unlock()
	if len(sts) == 0 {
		s.lastRenew.Store(0)
		return
	}
	leases := make([]store.Lease, len(sts))
	for i, st := range sts {
		leases[i] = store.Lease{Shard: st.shard, Token: st.token}
	}
	start, startMono := clock.NowMs(s.clk), s.mono()
	held, err := s.store.RenewLeases(ctx, s.holder, leases, s.opt.LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("renew leases", "n", len(leases), "err", err)
		}
		return // leaseUntil is not extended: Owns turns false when it passes
	}
	until := startMono + s.opt.LeaseTTL.Milliseconds()
	if last := s.lastRenew.Swap(startMono + 1); last > 0 && startMono+1-last > s.opt.LeaseTTL.Milliseconds()/2 {
		// Renewals are due every TTL/3; half a TTL without one means the process or
		// Redis is stalling, and at a whole TTL the leases lapse.
		s.log.Warn("lease renewals are late; leases lapse when the gap reaches the lease TTL",
			"gap", time.Duration(startMono+1-last)*time.Millisecond, "lease_ttl", s.opt.LeaseTTL)
	}
	for i, st := range sts {
		if !held[i] {
			s.log.Warn("lost shard lease", "shard", st.shard, "token", st.token)
			s.lose(st)
			continue
		}
		st.leaseUntil.Store(until)
		if items := st.takeOrphans(); len(items) > 0 {
			s.writeOutcomes(ctx, st.shard, items, start)
		}
	}
}

// lose stops working a shard whose lease is gone: its pump stops, and what it held in
// the wheel is dropped without a write (the next owner recovers it from `inflight`).
func (s *Scheduler) lose(st *shardState) {
	st.leaseUntil.Store(0)
	st.cancel()
	<-st.done
	s.drop(st)
	st.takeOrphans()
	if n := len(s.takeFromWheel(st)); n > 0 {
		s.credits.release(n)
		s.log.Warn("dropped messages of a lost shard from the wheel; the next owner recovers them", "shard", st.shard, "n", n)
	}
}

// handOver starts a graceful handover: the pump stops claiming, what the shard has in
// the wheel goes back to `due` unchanged (the next owner fires it on time), and the
// lease is kept, and renewed, until what egress is publishing is finished; the round
// that finds nothing held releases it.
func (s *Scheduler) handOver(ctx context.Context, st *shardState) {
	st.cancel()
	<-st.done
	s.mu.Lock()
	st.leaving = true
	s.mu.Unlock()
	envs := s.takeFromWheel(st)
	if len(envs) == 0 {
		return
	}
	items := make([]store.RetryItem, len(envs))
	for i, env := range envs {
		items[i] = store.RetryItem{Env: env, Due: env.FireTime()}
	}
	if err := s.store.Retry(ctx, st.shard, items, clock.NowMs(s.clk)); err != nil {
		s.log.Warn("hand over: put back unfired messages; they stay in flight and are recovered by the next owner", "shard", st.shard, "n", len(items), "err", err)
	}
	s.credits.release(len(envs))
}

// release gives a held lease up (token-checked) and forgets the shard.
func (s *Scheduler) release(ctx context.Context, st *shardState) {
	st.cancel()
	<-st.done
	if items := st.takeOrphans(); len(items) > 0 && s.leaseValid(st) {
		s.writeOutcomes(ctx, st.shard, items, clock.NowMs(s.clk))
	}
	if err := s.store.ReleaseLease(ctx, st.shard, s.holder, st.token); err != nil {
		s.log.Warn("release lease", "shard", st.shard, "err", err)
	}
	st.leaseUntil.Store(0)
	s.drop(st)
}

// acquireAll tries to take the leases of shards in one round trip and starts a pump
// (after recovering the in-flight set) for each one taken. It returns the tokens, 0
// where another holder has the lease.
func (s *Scheduler) acquireAll(ctx context.Context, shards []int) []int64 {
	start := s.mono()
	tokens, err := s.store.AcquireLeases(ctx, shards, s.holder, s.opt.LeaseTTL)
	if err != nil {
		s.log.Warn("acquire leases", "n", len(shards), "err", err)
		// Leases taken by a call that failed on the way back expire after the TTL.
		return make([]int64, len(shards))
	}
	for i, token := range tokens {
		if token == 0 {
			continue // held by another holder (still handing over, or not yet expired)
		}
		shard := shards[i]
		st := &shardState{shard: shard, token: token, wake: make(chan struct{}, 1), done: make(chan struct{})}
		st.leaseUntil.Store(start + s.opt.LeaseTTL.Milliseconds())
		pctx, cancel := context.WithCancel(ctx)
		st.cancel = cancel
		s.mu.Lock()
		s.shards[shard] = st
		s.mu.Unlock()
		go func() {
			defer close(st.done)
			if s.recoverAll(pctx, st) {
				s.pump(pctx, st)
			}
		}()
	}
	return tokens
}

func (s *Scheduler) drop(st *shardState) {
	s.mu.Lock()
	if s.shards[st.shard] == st {
		s.shards[st.shard] = nil
	}
	s.mu.Unlock()
}

// recoverAll runs before a new owner's first claim: the previous holder is gone (its
// lease expired) or handed over after finishing what it held, so everything left in
// flight is ours to fire again (at-least-once). It retries through Redis errors while
// the lease is surely ours, and reports false when the pump should not start.
func (s *Scheduler) recoverAll(ctx context.Context, st *shardState) bool {
	backoff := 50 * time.Millisecond
	recovered := 0
	for ctx.Err() == nil {
		now := clock.NowMs(s.clk)
		var err error
		if s.leaseValid(st) {
			var more bool
			var moved int
			moved, more, err = s.store.RecoverAll(ctx, st.shard, now, s.opt.ClaimBatch)
			recovered += moved
			if err == nil && !more {
				if recovered > 0 {
					s.log.Info("recovered in-flight messages on acquiring a shard; they fire again (one whose publish had completed is delivered twice)",
						"shard", st.shard, "n", recovered)
				}
				return true
			}
			if err == nil {
				continue
			}
			if ctx.Err() == nil {
				s.log.Warn("recover in-flight; retrying", "shard", st.shard, "err", err, "backoff", backoff)
			}
		}
		t := s.clk.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		t.Stop()
		backoff = min(backoff*2, 2*time.Second)
	}
	return false
}

// pump claims due messages of one shard into the wheel.
func (s *Scheduler) pump(ctx context.Context, st *shardState) {
	lookahead := s.opt.Lookahead.Milliseconds()
	backoff := 50 * time.Millisecond
	timer := s.clk.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(d time.Duration) bool {
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return false
		case <-timer.C():
		case <-st.wake:
		}
		return true
	}
	lastRecover := clock.NowMs(s.clk)
	for ctx.Err() == nil {
		n, err := s.credits.acquire(ctx, s.opt.ClaimBatch)
		if err != nil {
			return
		}
		now := clock.NowMs(s.clk)
		if now-lastRecover >= s.opt.InflightLease.Milliseconds()/2 {
			// Backstop: an in-flight entry whose deadline passed (an outcome that could
			// not be recorded through a long Redis outage) fires again.
			lastRecover = now
			if moved, _, err := s.store.Recover(ctx, st.shard, now, s.opt.ClaimBatch); err == nil && moved > 0 {
				s.log.Warn("recovered in-flight messages past their deadline", "shard", st.shard, "n", moved)
			}
		}
		items, nextDue, err := s.store.Claim(ctx, st.shard, s.holder, st.token, now+lookahead, now+s.opt.InflightLease.Milliseconds(), n)
		s.credits.release(n - len(items))
		if err != nil {
			if errors.Is(err, store.ErrFenced) {
				s.log.Warn("shard lease lost (fenced); pump stops", "shard", st.shard)
				st.leaseUntil.Store(0)
				return
			}
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("claim failed; retrying", "shard", st.shard, "err", err, "backoff", backoff)
			if !sleep(backoff) {
				return
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if len(items) > 0 {
			s.track(st, items)
			s.wheel.ScheduleBatch(items)
		}
		if len(items) == n {
			continue // a full batch: more may be due right now
		}
		// Wake when the next message is half a lookahead from due, not as soon as it
		// enters the horizon: the claim then also takes everything due in the half
		// lookahead after it, so at low rates one claim moves many messages instead of
		// one claim per message (each still claimed at least lookahead/2 ahead).
		wait := s.opt.SafetyScan
		if nextDue >= 0 {
			if d := time.Duration(nextDue-lookahead/2-now) * time.Millisecond; d < wait {
				wait = max(d, 0)
			}
		}
		st.wakeAt.Store(now + wait.Milliseconds())
		if !sleep(wait) {
			return
		}
	}
}

// Notify wakes the pumps of shards that just received a message due before their next
// planned claim would pick it up in time. minDue maps shard -> earliest newly parked due.
func (s *Scheduler) Notify(minDue map[int]int64) {
	lookahead := s.opt.Lookahead.Milliseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	for shard, due := range minDue {
		if shard < 0 || shard >= len(s.shards) {
			continue
		}
		st := s.shards[shard]
		if st == nil || st.leaving {
			continue
		}
		// The pump's next claim at wakeAt takes everything due by wakeAt+lookahead;
		// only something due before wakeAt (plus margin for the claim itself) needs an
		// early wake-up.
		if due < st.wakeAt.Load()+lookahead/2 {
			select {
			case st.wake <- struct{}{}:
			default:
			}
		}
	}
}

// NeedsBroadcast reports whether another instance's pump could need waking for a
// message due at due: anything later is found by the periodic safety scan in time.
func (s *Scheduler) NeedsBroadcast(due int64) bool {
	return due < clock.NowMs(s.clk)+(s.opt.Lookahead+s.opt.SafetyScan).Milliseconds()
}

// BroadcastCancel tells every instance to drop id from its wheel: a message cancelled
// while in flight is held in memory by whichever instance claimed it.
func (s *Scheduler) BroadcastCancel(ctx context.Context, id string) error {
	return s.store.PublishCancel(ctx, id)
}

// CancelLocal removes id from the wheel if this instance holds it, returning whether it
// did. The store's cancel has already removed it from Redis.
func (s *Scheduler) CancelLocal(id string) bool {
	if !s.wheel.Cancel(id) {
		return false
	}
	// The wheel only ever holds the latest claim of an id (track takes older copies out).
	h := &s.held[s.store.ShardOf(id)]
	h.mu.Lock()
	h.n--
	delete(h.byID, id)
	h.mu.Unlock()
	s.credits.release(1)
	return true
}

// Published implements egress.Completer: acknowledge, then return credits. A copy
// published after its shard moved on is acknowledged all the same: it did reach the
// broker.
func (s *Scheduler) Published(ctx context.Context, envs []*envelope.Envelope) {
	ids := make([]string, len(envs))
	for i, env := range envs {
		s.untrack(s.store.ShardOf(env.ID), env)
		ids[i] = env.ID
	}
	// One pipelined round trip for all shards: acking shard by shard cost a round trip
	// per shard per batch on the dispatcher worker (bench: +11 % to +46 % drain rate).
	s.retryRedis(ctx, "ack", func(ctx context.Context) error {
		return s.store.AckMany(ctx, ids, clock.NowMs(s.clk))
	})
	s.credits.release(len(envs))
}

// Failed implements egress.Completer: retry with exponential backoff, or dead-letter
// after retry.max_attempts or a permanent error. A broker that cannot be reached is
// never a reason to dead-letter: those failures retry (backoff capped at
// retry.backoff.max) however many attempts they took. A message whose outcome is unknown
// (written, not answered: the broker may still apply it) is not re-sent now; it stays in
// flight and the pump's recovery fires it again once its in-flight lease has passed.
// Only the latest claim of a message, on a shard still held under the token it was
// claimed with, is written back: a superseded copy leaves the message to its newer
// claim, and a lost shard leaves it in flight for the next owner to recover. While the
// lease is not surely valid the write waits for the next successful renewal.
func (s *Scheduler) Failed(ctx context.Context, envs []*envelope.Envelope, errs []error) {
	now := clock.NowMs(s.clk)
	byShard := map[int][]store.RetryItem{}
	retried := map[string]int{}
	unknown := 0
	for i, env := range envs {
		sh := s.store.ShardOf(env.ID)
		cur, tok := s.untrack(sh, env)
		st := s.state(sh)
		if !cur || st == nil || st.token != tok {
			continue
		}
		if egress.UnknownOutcome(errs[i]) {
			unknown++
			retried[env.Route]++
			continue
		}
		item := s.failedItem(env, errs[i], now)
		if !item.Dead {
			retried[env.Route]++
		}
		if s.leaseValid(st) {
			byShard[sh] = append(byShard[sh], item)
		} else {
			st.addOrphans(item)
		}
	}
	s.credits.release(len(envs))
	for route, n := range retried {
		s.obs.PublishRetried(route, n)
	}
	if unknown > 0 {
		s.log.Info("publish outcome unknown (no answer from the broker); left in flight, fired again after the in-flight lease",
			"n", unknown, "err", errs[0])
	}
	if len(byShard) == 0 {
		return
	}
	// All shards in one pipelined round trip: a failing target fails whole batches,
	// and one round trip per shard would hold the dispatcher worker that long.
	s.retryRedis(ctx, "retry", func(ctx context.Context) error {
		return s.store.RetryMany(ctx, byShard, now)
	})
	for _, items := range byShard {
		s.reportDead(items)
	}
}

// failedItem is the outcome of one failed publish: a retry after backoff, or a dead
// letter (permanent error, or retry.max_attempts reached by a broker that answered).
func (s *Scheduler) failedItem(env *envelope.Envelope, err error, now int64) store.RetryItem {
	cp := *env
	cp.Attempt++
	item := store.RetryItem{Env: &cp}
	unreachable := egress.FailReason(err) == observe.FailUnreachable
	if errors.Is(err, egress.ErrPermanent) || (int(cp.Attempt) >= s.opt.MaxAttempts && !unreachable) {
		cp.Reason = fmt.Sprintf("publish failed after %d attempt(s): %v", cp.Attempt, err)
		item.Dead = true
		item.Due = now
	} else {
		item.Due = now + s.backoff(int(cp.Attempt)).Milliseconds()
	}
	return item
}

// writeOutcomes writes retries and dead letters of one shard (retrying through a Redis
// outage) and reports the dead letters.
func (s *Scheduler) writeOutcomes(ctx context.Context, shard int, items []store.RetryItem, now int64) {
	s.retryRedis(ctx, "retry", func(ctx context.Context) error {
		return s.store.Retry(ctx, shard, items, now)
	})
	s.reportDead(items)
}

// reportDead counts the dead letters among written outcomes and hands them to OnDead.
func (s *Scheduler) reportDead(items []store.RetryItem) {
	var dead []*envelope.Envelope
	for _, it := range items {
		if it.Dead {
			dead = append(dead, it.Env)
		}
	}
	if len(dead) == 0 {
		return
	}
	perRoute := map[string]int{}
	for _, env := range dead {
		perRoute[env.Route]++
	}
	for route, n := range perRoute {
		s.obs.DeadLettered(route, n)
	}
	if s.opt.OnDead != nil {
		s.opt.OnDead(dead)
	}
}

// Dropped implements egress.Completer for messages Owns refused. A superseded copy, or
// one of a shard lost or re-acquired since, needs nothing: the newer claim or the next
// owner fires it. The latest claim on a shard still held under its token was refused
// only because the lease was not surely valid at that moment; it goes back to `due`
// unchanged after the next successful renewal proves the lease was ours all along
// (otherwise it would stay in flight, recovered only by a future owner).
func (s *Scheduler) Dropped(envs []*envelope.Envelope) {
	for _, env := range envs {
		sh := s.store.ShardOf(env.ID)
		cur, tok := s.untrack(sh, env)
		if st := s.state(sh); cur && st != nil && st.token == tok {
			st.addOrphans(store.RetryItem{Env: env, Due: env.FireTime()})
		}
	}
	s.credits.release(len(envs))
	s.log.Warn("dropped fired messages of a shard whose lease may have expired; the shard's owner recovers them", "n", len(envs))
}

// Unpublished implements egress.Completer: fired messages the dispatcher did not
// publish during shutdown go back to `due` unchanged (see putBack).
func (s *Scheduler) Unpublished(envs []*envelope.Envelope) {
	s.putBack(context.Background(), envs)
}

// retryRedis retries an outcome write through a Redis outage for up to the in-flight
// lease: giving up earlier would leave the message in flight to be recovered and fired
// again (a duplicate), not lost.
func (s *Scheduler) retryRedis(ctx context.Context, what string, f func(context.Context) error) {
	deadline := time.Now().Add(s.opt.InflightLease)
	wait := 50 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil {
			return
		}
		if !store.IsRetryable(err) || time.Now().After(deadline) {
			s.log.Error("recording publish outcome failed; message stays in flight and is fired again on recovery", "op", what, "err", err)
			return
		}
		time.Sleep(wait)
		wait = min(wait*2, time.Second)
	}
}

func (s *Scheduler) backoff(attempt int) time.Duration {
	d := s.opt.BackoffInitial
	for i := 1; i < attempt && d < s.opt.BackoffMax; i++ {
		d *= 2
	}
	return min(d, s.opt.BackoffMax)
}

// Assign returns the shards instance should own among members (instance included
// whether listed or not): Owners, seen from one member.
func Assign(members []string, instance string, shards int) []bool {
	ms := append([]string(nil), members...)
	if !contains(ms, instance) {
		ms = append(ms, instance)
	}
	owners := Owners(ms, shards)
	out := make([]bool, shards)
	for i, o := range owners {
		out[i] = o == instance
	}
	return out
}

// Owners assigns every shard to one of members by rendezvous (highest random weight)
// hashing with bounded loads: all (shard, member) pairs are taken in descending order
// of their hash weight, and a shard goes to the first member of its pairs that still
// has room, where room is shards/len(members), plus one for the first shards%len
// members to reach that. So the split is even (shard counts differ by at most one),
// every instance computes the same answer from the same member list with no
// coordination, and a member joining or leaving moves its own share plus, on average,
// one to three more shards (measured for 16 and 64 shards and up to 7 members) — plain
// rendezvous hashing moves only the member's share but splits 16 shards over 3 members
// as unevenly as 8/4/4. Duplicate names count once; an empty list owns nothing ("").
func Owners(members []string, shards int) []string {
	ms := append([]string(nil), members...)
	sort.Strings(ms)
	ms = slices.Compact(ms)
	out := make([]string, shards)
	n := len(ms)
	if n == 0 || shards <= 0 {
		return out
	}
	type pair struct {
		w      uint64
		shard  int32
		member int32
	}
	pairs := make([]pair, 0, n*shards)
	for sh := 0; sh < shards; sh++ {
		for m := range ms {
			pairs = append(pairs, pair{w: weight(ms[m], sh), shard: int32(sh), member: int32(m)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		a, b := pairs[i], pairs[j]
		if a.w != b.w {
			return a.w > b.w
		}
		if a.shard != b.shard {
			return a.shard < b.shard
		}
		return a.member < b.member
	})
	base, extra := shards/n, shards%n
	count := make([]int, n)
	assigned := 0
	for _, p := range pairs {
		if out[p.shard] != "" {
			continue
		}
		c := count[p.member]
		if c < base || (c == base && extra > 0) {
			if c == base {
				extra--
			}
			out[p.shard] = ms[p.member]
			count[p.member]++
			if assigned++; assigned == shards {
				break
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func weight(member string, shard int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0, byte(shard >> 8), byte(shard)})
	x := h.Sum64()
	// fnv's low bits mix poorly for near-identical inputs; finish with splitmix64.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
