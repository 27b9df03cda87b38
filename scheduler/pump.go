package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// pump claims due messages of one shard into the wheel.
func (s *Scheduler) pump(ctx context.Context, st *shardState) {
	lookahead := s.opt.Lookahead.Milliseconds()
	bo := clock.NewBackoff(s.clk, clock.BackoffPolicy{Initial: 50 * time.Millisecond, Max: 2 * time.Second})
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
	// A claim that failed may have run, its reply lost: it is sent again unchanged,
	// credits kept, and answers what it claimed (claimRequest).
	c := claimState{behind: true}
	defer func() { c.drop(s) }()
	var need int64 // bytes the shard's first due message needs (the last claim left it due)
	for ctx.Err() == nil {
		if !s.clockOK() { // no claims on a clock off Redis's; woken when it is back (clockcheck.go)
			if st.wakeAt.Store(clock.NowMs(s.clk) + s.opt.SafetyScan.Milliseconds()); !sleep(s.opt.SafetyScan) {
				return
			}
			continue
		}
		req, now, ok := s.claimRequest(ctx, st, &c, lookahead, need)
		if !ok {
			return
		}
		if now-lastRecover >= s.opt.InflightLease.Milliseconds()/2 {
			lastRecover = now
			s.recoverExpired(ctx, st, now)
		}
		st.claiming.Store(true)  // until wakeAt is stored: Notify notes what is parked meanwhile
		st.parkedDuring.Store(0) // anything Notify noted before this is in the store for this claim
		items, nextDue, needNext, replayed, err := s.claims.claim(ctx, s.store, req)
		if err != nil {
			c.resend = &req // its outcome is unknown; its credits stay taken (dropped on return)
			if errors.Is(err, storeapi.ErrFenced) {
				s.log.Warn("shard lease lost (fenced); pump stops", "shard", st.shard)
				st.leaseUntil.Store(0)
				return
			}
			if ctx.Err() != nil {
				return
			}
			s.endFailedClaim(st)
			wait := bo.Next()
			s.log.Warn("claim failed; sending it again", "shard", st.shard, "err", err, "backoff", wait)
			if !sleep(wait) { // a wake-up retries at once
				return
			}
			continue
		}
		c.took(s, items)
		need = needNext
		c.behind = len(items) == req.Limit || need > 0 || (nextDue >= 0 && nextDue <= now)
		if replayed {
			s.claimHealed(st, len(items))
		}
		bo.Reset()
		s.schedule(st, items)
		if len(items) == req.Limit || need > 0 {
			st.claiming.Store(false)
			continue // a full batch, or one the byte budget cut short: more may be due right now
		}
		at := s.planClaim(st, nextDue, now)
		// Sleep until the planned instant, not for wait from whenever the timer is set:
		// the clock moved on while the claim ran (on a loaded machine, or a test's fake
		// clock advancing meanwhile), and a relative wait would wake that much late.
		if !sleep(time.Duration(at-clock.NowMs(s.clk)) * time.Millisecond) {
			return
		}
	}
}

// claimHealed notes a claim whose reply was lost, sent again, that found its n
// messages in flight: they fire now rather than at its lease deadline.
func (s *Scheduler) claimHealed(st *shardState, n int) {
	s.obs.ClaimHealed()
	s.log.Warn("a claim's reply was lost; the claim sent again found its messages in flight and fires them",
		"shard", st.shard, "n", n)
}

// claimState is what a pump's claims carry from one to the next: a claim whose
// outcome is unknown, to send again, and the credits taken.
type claimState struct {
	resend *storeapi.ClaimRequest
	grant  grant // the credits the claim in hand (or to send again) took
	last   grant // what the last claim that answered took (claimSize)
	// behind: the last claim left messages due by its time (a full batch, a byte
	// budget, a next due time already passed), or none answered yet: the next claim
	// tells the store its clock (ClaimRequest.Now), so the ids due by then are read
	// without their scores. A pump that keeps up claims ahead of due, where nothing is
	// due by now and that read would be one more range query a claim.
	behind bool
}

// took ends a claim that answered items: what its credits did not take goes back, and
// the items are counted as claimed by the pump (messages_claimed_total{via="claim"}).
func (c *claimState) took(s *Scheduler, items []*envelope.Envelope) {
	c.resend = nil
	c.last = grant{n: len(items), bytes: claimedBytes(items)}
	s.credits.settle(c.grant, c.last.n, c.last.bytes)
	c.grant = grant{}
	s.claimedByPump.Add(int64(len(items)))
}

// drop gives back the credits of a claim no longer to be sent again.
func (c *claimState) drop(s *Scheduler) {
	if c.resend != nil {
		s.credits.settle(c.grant, 0, 0)
		c.grant = grant{}
		c.resend = nil
	}
}

// claimRequest is the pump's next claim and the time it is made; ok is false when ctx
// ended. A claim whose outcome is unknown (it failed: it may have run, its reply lost
// to a timeout, a reset connection or a migrating slot) is sent again unchanged, with
// the credits it took, while its lease deadline is at least half an in-flight lease
// away: run, it answers what it claimed; not run, it claims now (its horizon is older,
// which only claims less). Past that, a new claim is made, and whatever the old one
// may have claimed is recovered at its deadline (recoverExpired), less than half a
// lease later. A new claim takes as many messages and bytes as credits allow, up to
// claimSize after the shard's last claim (need: the bytes the shard's first due
// message needs, which the last claim's byte budget left due).
func (s *Scheduler) claimRequest(ctx context.Context, st *shardState, c *claimState, lookahead, need int64) (storeapi.ClaimRequest, int64, bool) {
	lease := s.opt.InflightLease.Milliseconds()
	if c.resend != nil {
		now := clock.NowMs(s.clk)
		if now < c.resend.LeaseDeadline-lease/2 {
			return *c.resend, now, true
		}
		s.log.Warn("a claim's outcome stayed unknown; what it may have claimed is recovered at its lease deadline",
			"shard", st.shard, "deadline", time.UnixMilli(c.resend.LeaseDeadline).UTC())
		c.drop(s)
	}
	most, want := s.claimSize(c.last)
	g, err := s.credits.acquire(ctx, most, need, want, func() {
		s.log.Debug("claim held back by scheduler.max_in_memory_bytes", "shard", st.shard, "need", need)
	})
	if err != nil {
		return storeapi.ClaimRequest{}, 0, false
	}
	c.grant = g
	now := clock.NowMs(s.clk)
	deadline := st.takeLostPark(now, lease) // a failed park's, asked again (parkclaim.go)
	if deadline == 0 {
		deadline = st.nextDeadline(now, lease)
	}
	req := storeapi.ClaimRequest{Shard: st.shard, Instance: s.holder, Token: st.token, UpTo: now + lookahead,
		LeaseDeadline: deadline, Limit: g.n, MaxBytes: g.bytes, Alone: g.alone, Idempotent: true}
	if c.behind {
		req.Now = now
	}
	return req, now, true
}

// Claim sizing: a claim holds the credits it asks for (messages and bytes) until its
// reply, and pumps that find none free wait. A claim asking for scheduler.claim_batch
// whatever its shard holds let a few claims take all the credits: with 1,024 shards
// (a claim every second or so each, ~20 messages) the others queued behind them and
// fired seconds late. So a claim asks for twice what its shard's last claim took, at
// least minClaim messages and minClaimBytes; a claim that comes back full is followed at
// once by one twice its size (pump), so a shard with a backlog reaches claim_batch in a
// few round trips.
const (
	minClaim      = 32
	minClaimBytes = 256 << 10
)

// claimSize is the messages and bytes a shard's next claim asks for after its last
// claim took last.
func (s *Scheduler) claimSize(last grant) (int, int64) {
	return min(s.opt.ClaimBatch, max(minClaim, 2*last.n)), max(minClaimBytes, 2*last.bytes)
}

// planClaim ends a claim made at now that left nextDue as the earliest pending due
// time: it stores and returns when the pump claims next. Wake when the next message is
// half a lookahead from due, not as soon as it enters the horizon: the claim then also
// takes everything due in the half lookahead after it, so at low rates one claim moves
// many messages instead of one claim per message (each still claimed at least
// lookahead/2 ahead).
//
// Messages parked while the claim ran (it may have read the shard before them) are
// planned for like nextDue, not claimed at once: at 20k msgs/s over 64 shards a park
// landed during most claims, and waking for each chained claims of a few messages each
// (bench: about one claim per five messages). parkedDuring is read after claiming is
// false: a Notify later than this read wakes the pump itself.
func (s *Scheduler) planClaim(st *shardState, nextDue, now int64) int64 {
	at := now + s.nextClaimIn(nextDue, now).Milliseconds()
	st.wakeAt.Store(at)
	st.claiming.Store(false)
	if d := st.parkedDuring.Swap(0); d > 0 {
		if at2 := now + s.nextClaimIn(d, now).Milliseconds(); at2 < at {
			at = at2
			st.wakeAt.Store(at)
		}
	}
	return at
}

// endFailedClaim ends a claim that failed: a park noted during it makes the retry go
// at once, as any wake-up does.
func (s *Scheduler) endFailedClaim(st *shardState) {
	st.claiming.Store(false)
	if st.parkedDuring.Swap(0) > 0 {
		notify(st.wake)
	}
}

// nextClaimIn is how long after now the pump claims again for a message due at
// nextDue (-1: none; the safety scan then): when it is half a lookahead from due.
func (s *Scheduler) nextClaimIn(nextDue, now int64) time.Duration {
	wait := s.opt.SafetyScan
	if nextDue >= 0 {
		if d := time.Duration(nextDue-s.opt.Lookahead.Milliseconds()/2-now) * time.Millisecond; d < wait {
			wait = max(d, 0)
		}
	}
	return wait
}

// schedule hands claimed messages to the wheel, remembering their claim.
func (s *Scheduler) schedule(st *shardState, items []*envelope.Envelope) {
	if len(items) > 0 {
		s.wheel.ScheduleBatch(items, s.track(st, items))
	}
}

// recoverExpired is the pump's backstop: an in-flight entry whose deadline passed (an
// outcome that could not be recorded through a long Redis outage) fires again.
func (s *Scheduler) recoverExpired(ctx context.Context, st *shardState, now int64) {
	if moved, _, err := s.store.Recover(ctx, st.shard, now, s.opt.ClaimBatch); err == nil && moved > 0 {
		s.obs.Recovered(observe.RecoverLeaseExpired, moved)
		s.log.Warn("recovered in-flight messages past their deadline", "shard", st.shard, "n", moved)
	}
}

// Notify wakes the pumps of shards that just received a message due before their next
// planned claim would pick it up in time. minDue maps shard -> earliest newly parked due.
//
// In time means at least lookahead/8 before its due time (250 ms at the default 2 s).
// The pump's own rhythm claims everything at least lookahead/2 ahead; asking the same
// of every newly parked message woke a pump for each message with a delay just above
// the lookahead — about one claim per eight messages at 10k msgs/s with 1–10 s delays,
// each claim taking one or two messages. A message parked while its pump is claiming
// is noted instead (parkedDuring): that claim may have read the shard before the
// message was there, so the pump plans its next claim for it as well, and claims at once
// only when it is already within half a lookahead of due.
func (s *Scheduler) Notify(minDue map[int]int64) {
	margin := s.opt.Lookahead.Milliseconds() / 8
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
		// only something due before wakeAt (plus the margin) needs an early wake-up.
		if st.claiming.Load() {
			noteMin(&st.parkedDuring, due)
			if st.claiming.Load() {
				continue // the pump reads parkedDuring after its claim
			}
			// The claim ended meanwhile and may have read parkedDuring already: wake.
		} else if due >= st.wakeAt.Load()+margin {
			continue
		}
		notify(st.wake)
	}
}

// noteMin lowers v to due (v = 0 means unset).
func noteMin(v *atomic.Int64, due int64) {
	for {
		cur := v.Load()
		if cur != 0 && cur <= due {
			return
		}
		if v.CompareAndSwap(cur, due) {
			return
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
