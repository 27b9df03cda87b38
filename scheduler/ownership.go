package scheduler

import (
	"context"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

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
	var hook roundHook
	defer hook.wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		start := s.clk.Now()
		soon := s.ownershipRound(ctx)
		hook.start(ctx, s.opt.OnOwnershipRound)
		now := s.clk.Now()
		// Never longer than the interval, also when the clock went back during the
		// round (a test's skewed clock steps its monotonic reading too).
		d := interval - max(now.Sub(start), 0)
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
	s.checkClock(ctx) // before anything is acquired: a pump never claims on an unchecked clock
	now := clock.NowMs(s.clk)
	ttl := s.opt.LeaseTTL.Milliseconds()
	var want []bool
	if members, joined, err := s.members(ctx, now); err != nil {
		s.log.Warn("members", "err", err)
	} else {
		names := make([]string, 0, len(members))
		for _, m := range members {
			if m.Name == s.opt.Instance {
				continue // (while held off, a previous incarnation's heartbeat)
			}
			names = append(names, m.Name)
			// The moment this member ages out of everyone's view (Members keeps a
			// heartbeat at most LeaseTTL old): look again right then.
			if at := m.Heartbeat + ttl + 1; at > now && (soon == 0 || at < soon) {
				soon = at
			}
		}
		if joined {
			want = s.assign(append(names, s.opt.Instance))
		} else {
			want = make([]bool, s.store.Shards()) // held off: nothing is ours yet
			if at, _ := s.opt.Admission.JoinAt(); soon == 0 || at < soon {
				soon = at
			}
		}
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
	if at := s.acquireWanted(ctx, want, now); at > 0 && (soon == 0 || at < soon) {
		soon = at
	}
	s.obs.ShardsOwned(len(s.OwnedShards()))
	s.ready.Store(true)
	return soon
}

// members is the round's membership step under Options.Admission
// (membership.Admission.Round); it says once when the process holds off.
func (s *Scheduler) members(ctx context.Context, now int64) (members []membership.Member, joined bool, err error) {
	members, joined, err = s.opt.Admission.Round(s.opt.Instance, now, s.opt.LeaseTTL,
		func(maxAge time.Duration) ([]membership.Member, error) {
			live, err := s.store.LiveMembers(ctx, now, maxAge)
			return toMembership(live), err
		},
		func() error { return s.store.Heartbeat(ctx, s.opt.Instance, now) })
	if err == nil && !joined {
		s.logHoldOff()
	}
	return members, joined, err
}

// logHoldOff says once that this process holds off, and until when.
func (s *Scheduler) logHoldOff() {
	if s.heldOffLogged {
		return
	}
	s.heldOffLogged = true
	at, _ := s.opt.Admission.JoinAt()
	s.log.Info("an earlier process under this instance name died without leaving; holding off from taking shards while the other instances take its share over",
		"instance", s.opt.Instance, "until", time.UnixMilli(at).UTC())
}

func toMembership(live []storeapi.Member) []membership.Member {
	out := make([]membership.Member, len(live))
	for i, m := range live {
		out[i] = membership.Member{Name: m.Name, Heartbeat: m.Heartbeat}
	}
	return out
}

// acquireWanted tries to take the shards want says are this instance's and nobody in
// this process holds, and returns when (unix ms) to look again soon, 0 for the regular
// interval.
func (s *Scheduler) acquireWanted(ctx context.Context, want []bool, now int64) (soon int64) {
	ttl := s.opt.LeaseTTL.Milliseconds()
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
	return soon
}

// assign returns which shards this instance should own for the live members.
func (s *Scheduler) assign(members []string) []bool {
	key := strings.Join(members, "\x00")
	if s.assignOut == nil || key != s.assignKey {
		ms := append([]string(nil), members...)
		if !membership.Contains(ms, s.opt.Instance) {
			ms = append(ms, s.opt.Instance)
		}
		s.assignKey, s.assignOut = key, membership.Owners(ms, s.store.Shards())
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
	leases := make([]storeapi.Lease, len(sts))
	for i, st := range sts {
		leases[i] = storeapi.Lease{Shard: st.shard, Token: st.token}
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
// The shard is forgotten (OwnedShards stops listing it) only after its messages left
// the wheel and their credits came back, so a caller that sees the shard gone sees
// its in-memory state gone too.
func (s *Scheduler) lose(st *shardState) {
	st.leaseUntil.Store(0)
	st.cancel()
	<-st.done
	st.takeOrphans()
	if envs := s.takeFromWheel(st); len(envs) > 0 {
		n := len(envs)
		s.credits.release(n, claimedBytes(envs))
		s.log.Warn("dropped messages of a lost shard from the wheel; the next owner recovers them", "shard", st.shard, "n", n)
	}
	s.drop(st)
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
	items := make([]storeapi.RetryItem, len(envs))
	for i, env := range envs {
		items[i] = storeapi.RetryItem{Env: env, Due: env.FireTime()}
	}
	if err := s.store.Retry(ctx, st.shard, items, clock.NowMs(s.clk)); err != nil {
		s.log.Warn("hand over: put back unfired messages; they stay in flight and are recovered by the next owner", "shard", st.shard, "n", len(items), "err", err)
	}
	s.credits.release(len(envs), claimedBytes(envs))
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
				st.recovered.Store(true)
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
	bo := clock.NewBackoff(s.clk, clock.BackoffPolicy{Initial: 50 * time.Millisecond, Max: 2 * time.Second})
	recovered := 0
	for ctx.Err() == nil {
		now := clock.NowMs(s.clk)
		var err error
		if s.leaseValid(st) {
			var more bool
			var moved int
			moved, more, err = s.store.RecoverAll(ctx, st.shard, now, s.opt.ClaimBatch)
			recovered += moved
			if moved > 0 {
				s.obs.Recovered(observe.RecoverShardAcquired, moved)
			}
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
				s.log.Warn("recover in-flight; retrying", "shard", st.shard, "err", err)
			}
		}
		_ = bo.Wait(ctx) // ctx ending ends the loop
	}
	return false
}
