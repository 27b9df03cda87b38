// Package scheduler owns shards of the store, claims due messages into the timing wheel,
// hands what fires to egress and records the outcomes; it also takes messages in
// (park, bury, cancel and the wake rule). Its files by job, its goroutines and its lock
// order: docs/ARCHITECTURE.md "Inside the scheduler".
package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/scheduler/wheel"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

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
// Goroutines, lock order and which file holds which job: docs/ARCHITECTURE.md
// "Inside the scheduler". In short: Run owns every goroutine (the ownership loop runs in
// Run itself; one pump per owned shard, the wheel loop, the wake subscriber, the
// dispatcher's workers, and during shutdown the lease keeper) and stops them all before
// it returns. Lock order: Scheduler.mu, then nothing; heldSet.mu, then the wheel's lock
// (track and takeFromWheel cancel wheel entries under heldSet.mu); shardState.omu, then
// nothing. The wheel never calls back into the scheduler with its lock held.
type Scheduler struct {
	opt     Options
	store   Store
	clk     clock.Clock
	wheel   *wheel.Wheel
	credits *credits
	acks    *acker
	claims  claimGroup // the pumps' claims, sent together (claims.go)
	parks   parkGroup  // parks, sent together (parkgroup.go)
	disp    Dispatcher
	log     *slog.Logger
	obs     observe.Observer
	holder  string    // lease holder name: Instance#incarnation
	epoch   time.Time // origin of mono

	// claimedAtPark, claimedByPump: messages that entered the wheel from a park that
	// claimed them (parkclaim.go) and from the pumps' claims (CreditStats)
	claimedAtPark, claimedByPump atomic.Int64

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
	// heldOffLogged: the hold-off of Options.Admission was logged (ownership loop only).
	heldOffLogged bool
	wantSince     []int64      // per shard: since when it is wanted but held by another (unix ms)
	lastRenew     atomic.Int64 // start of the last successful renewal round (mono ms + 1; 0 = none)

	clock clockGate // the clock offset against the store's (clockcheck.go)

	ready atomic.Bool
}

type shardState struct {
	shard      int
	token      int64
	leaseUntil atomic.Int64 // Scheduler.mono ms until which our lease is surely valid
	wakeAt     atomic.Int64 // the pump's next planned claim (unix ms)
	claiming   atomic.Bool  // the pump is between its claim and storing the next wakeAt
	// parkedDuring is the earliest due time (unix ms) Notify saw parked while the pump
	// was claiming (0: none): the claim may have read the shard before those messages
	// were there, so the pump plans its next claim for them too (pump.go).
	parkedDuring atomic.Int64
	wake         chan struct{}
	cancel       context.CancelFunc
	done         chan struct{}
	leaving      bool // guarded by Scheduler.mu: handing over, pump stopped
	// recovered: the shard's in-flight set left by its previous holder went back to
	// due (recoverAll) and the pump runs; only then may a park claim into it, or the
	// recovery would take that park's messages back out of flight under the wheel.
	recovered atomic.Bool
	// lastDeadline is the lease deadline of the shard's latest claim, its pump's or a
	// park's (parkclaim.go): each claim gets a later one, which identifies it
	// (storeapi.ClaimRequest.Idempotent).
	lastDeadline atomic.Int64

	// orphans are outcomes that could not be written while the lease was not surely
	// valid (see Dropped); they are written after the next successful renewal, or
	// forgotten when the lease turns out lost (the next owner recovers them).
	omu     sync.Mutex
	orphans []storeapi.RetryItem
	// lostParks are the lease deadlines of parks that claimed into the shard and
	// failed: what they claimed, if they ran, is in flight under that deadline, and the
	// pump's next claim asks for it again (parkclaim.go). Guarded by omu.
	lostParks []int64
}

// nextDeadline is the lease deadline of a new claim of the shard made at now: now +
// lease, or just after the shard's latest claim's.
func (st *shardState) nextDeadline(now, lease int64) int64 {
	for {
		last := st.lastDeadline.Load()
		d := max(now+lease, last+1)
		if st.lastDeadline.CompareAndSwap(last, d) {
			return d
		}
	}
}

// New fills opt's defaults, validates it and builds a scheduler. Run starts it.
func New(opt Options) (*Scheduler, error) {
	opt = opt.withDefaults()
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	var inc [4]byte
	_, _ = rand.Read(inc[:])
	s := &Scheduler{
		opt:     opt,
		store:   opt.Store,
		clk:     opt.Clock,
		credits: newCredits(opt.MaxInMemory, opt.MaxInMemoryBytes),
		acks:    newAcker(opt.MaxInMemory, opt.MaxInMemoryBytes),
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
	slots := 1 // one rotation covers what a claim or a park claims ahead
	for time.Duration(slots)*opt.Tick < max(2*opt.Lookahead, opt.ParkClaimHorizon)+opt.SafetyScan {
		slots <<= 1
	}
	w, err := wheel.New(wheel.Options{Clock: opt.Clock, Tick: opt.Tick, Slots: slots, Fire: s.fire})
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s.wheel = w
	return s, nil
}

// fire runs on the wheel goroutine for every tick with due messages.
func (s *Scheduler) fire(batch []*envelope.Envelope, now time.Time) {
	if !s.clockOK() {
		// This instance's clock is off Redis's (it may have stepped ahead since the
		// claim): nothing fires on it; the messages go back to `due` unchanged.
		ctx, cancel := context.WithTimeout(context.Background(), s.opt.LeaseTTL)
		defer cancel()
		s.putBack(ctx, batch)
		return
	}
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

// OwnsShard reports whether this instance holds shard's lease now (not handing it
// over) and the lease is surely still valid: the recurring schedules' planner plans
// the schedules whose id falls in such a shard.
func (s *Scheduler) OwnsShard(shard int) bool {
	s.mu.Lock()
	st := s.shards[shard]
	held := st != nil && !st.leaving
	s.mu.Unlock()
	return held && s.leaseValid(st)
}

func (s *Scheduler) state(shard int) *shardState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shards[shard]
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
	ackCtx, stopAck := context.WithCancel(bg)
	ackDone := make(chan struct{})
	go func() { defer close(ackDone); s.runAcker(ackCtx, bg) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.store.Listen(subCtx, s.Notify, func(id string) { s.ReleaseLocal(id) })
	}()

	s.ownershipLoop(ctx)

	// The acker stops after the dispatcher, writing what it still queues, and before
	// any lease is released.
	s.shutdown(bg, stopSub, func() { stopWheel(); wheelWG.Wait() },
		func() { stopDisp(); dispWG.Wait(); stopAck(); <-ackDone; wg.Wait() })
	return nil
}

// shutdown is Run's second half, in the order Run documents. stopSub ends the wake
// subscription; stopWheel and stopDisp stop the wheel loop and the dispatcher and wait
// for them (and the subscriber).
func (s *Scheduler) shutdown(bg context.Context, stopSub, stopWheel, stopDisp func()) {
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
	if left := s.wheel.Drain(); len(left) > 0 {
		s.putBack(bg, left)
	}
	stopDisp()
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
	byShard := map[int][]storeapi.RetryItem{}
	for _, env := range envs {
		sh := s.store.ShardOfEnv(env)
		cur, tok := s.untrack(sh, env)
		if st := s.state(sh); cur && st != nil && st.token == tok {
			byShard[sh] = append(byShard[sh], storeapi.RetryItem{Env: env, Due: env.FireTime()})
		}
	}
	s.credits.release(len(envs), claimedBytes(envs))
	now := clock.NowMs(s.clk)
	for sh, items := range byShard {
		if err := s.store.Retry(ctx, sh, items, now); err != nil {
			s.log.Warn("put back unfired messages; they stay in flight and are recovered by the next owner", "shard", sh, "n", len(items), "err", err)
		}
	}
}
