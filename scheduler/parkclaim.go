package scheduler

import (
	"context"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Claiming at park. A message parked due within the lookahead, in a shard this
// instance holds, is one its shard's next claim would take (a claim takes everything
// due within the lookahead): parked pending, it costs Redis a due entry written and
// removed and its envelope read back out, and the bridge a claim round trip and a
// decode, for nothing. Park claims such messages in the same step instead
// (Intake.ParkClaimEach): they go in flight under the shard's lease and, from the
// envelopes in hand, into the wheel. It takes only the credits free at once (a park
// never waits for memory; what it cannot hold is parked pending as before), and a
// message it could not place in the wheel (the lease moved on during the call) stays
// in flight for the shard's owner to recover, as a claimed message of a lost shard
// does. A park whose call failed (its reply lost: it may have run) hands its lease
// deadline to the shard's pump, whose next claim is sent with it as an idempotent
// claim: what the park claimed, if it ran, is answered again and fired then, not at
// the in-flight lease's end (ClaimRequest.Idempotent).

// parkClaims is which of envs (one Park call's) to claim as they are parked: those
// due within the lookahead, or within ParkClaimHorizon while half the memory budget
// stays free (credits.takeNow's reserve), in a shard this instance holds with a lease
// surely valid and whose pump runs (what the previous holder left in flight was
// recovered), while credits are free at once. It returns the envelopes to hand the
// store, a copy in place of each wanted one (the store and the wheel write to it; the
// caller's envelopes stay as they were), the want flags (nil: none) and the credits
// taken.
func (s *Scheduler) parkClaims(envs []*envelope.Envelope) ([]*envelope.Envelope, []bool, grant) {
	if s.opt.ParkOnly || !s.clockOK() {
		return envs, nil, grant{}
	}
	now := clock.NowMs(s.clk)
	near, far := now+s.opt.Lookahead.Milliseconds(), now+s.opt.ParkClaimHorizon.Milliseconds()
	var tiers [2]claimTier // within the lookahead, then beyond it
	s.mu.Lock()
	for i, e := range envs {
		if e.DueAt > max(near, far) {
			continue
		}
		st := s.shards[s.store.ShardOfEnv(e)]
		if st == nil || st.leaving || !st.recovered.Load() || !s.leaseValid(st) {
			continue
		}
		t := &tiers[0]
		if e.DueAt > near {
			t = &tiers[1]
		}
		t.idx = append(t.idx, i)
		t.sizes = append(t.sizes, sizeEstimate(e))
	}
	s.mu.Unlock()
	var g grant
	var take []int
	for k := range tiers {
		if len(tiers[k].idx) == 0 {
			continue
		}
		n, bytes := s.credits.takeNow(tiers[k].sizes, k == 1, g.bytes)
		take = append(take, tiers[k].idx[:n]...)
		g.n, g.bytes = g.n+n, g.bytes+bytes
	}
	if g.n == 0 {
		return envs, nil, grant{}
	}
	out := make([]*envelope.Envelope, len(envs))
	copy(out, envs)
	want := make([]bool, len(envs))
	copies := make([]envelope.Envelope, g.n)
	for j, i := range take {
		copies[j] = *envs[i]
		out[i], want[i] = &copies[j], true
	}
	return out, want, g
}

// claimTier is the messages of a park that one takeNow may claim: their places in
// the call and their size estimates.
type claimTier struct {
	idx   []int
	sizes []int64
}

// sizeEstimate is a message's credit bytes before the store encodes it: its
// variable fields plus room for the fixed ones, and storeapi.MemOverhead. The credits
// are settled to the encoded size (ClaimedBytes) when the call returns.
func sizeEstimate(e *envelope.Envelope) int64 {
	n := len(e.ID) + len(e.Route) + len(e.Source) + len(e.Target) + len(e.Key) + len(e.RoutingKey) + len(e.Payload) + 64
	for _, h := range e.Headers {
		n += len(h.Key) + 8
		switch v := h.Value.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		default:
			n += 16
		}
	}
	if e.AMQP != nil {
		n += 128
	}
	return int64(n) + storeapi.MemOverhead
}

// parkClaimEach is the park group's call: it gives the call a lease, with a lease
// deadline of its own, for each shard a wanted message is in and this instance still
// holds, and parks through Store.ParkClaimEach.
func (s *Scheduler) parkClaimEach(ctx context.Context, envs []*envelope.Envelope, want []bool) parkOutcome {
	c := storeapi.ParkClaim{Instance: s.holder, Want: want}
	if want != nil {
		now, lease := clock.NowMs(s.clk), s.opt.InflightLease.Milliseconds()
		c.Leases = map[int]storeapi.ParkLease{}
		s.mu.Lock()
		for i, e := range envs {
			if !want[i] {
				continue
			}
			sh := s.store.ShardOfEnv(e)
			if _, ok := c.Leases[sh]; ok {
				continue
			}
			if st := s.shards[sh]; st != nil && !st.leaving && st.recovered.Load() {
				c.Leases[sh] = storeapi.ParkLease{Token: st.token, LeaseDeadline: st.nextDeadline(now, lease)}
			}
		}
		s.mu.Unlock()
	}
	var out parkOutcome
	out.prior, out.claimed, out.minDue, out.err = s.store.ParkClaimEach(ctx, envs, c)
	out.leases = c.Leases
	return out
}

// scheduleParkClaimed puts the messages a park claimed into the wheel, each under its
// shard's state if that still holds the lease the call claimed it under, and settles
// the credits the park took (g) with what the wheel now holds.
func (s *Scheduler) scheduleParkClaimed(envs []*envelope.Envelope, out parkOutcome, g grant) {
	if g.n == 0 {
		return
	}
	byShard := map[int][]*envelope.Envelope{}
	for i, ok := range out.claimed {
		if ok {
			sh := envs[i].ClaimedFrom - 1
			byShard[sh] = append(byShard[sh], envs[i])
		}
	}
	held, heldBytes, lost := 0, int64(0), 0
	for sh, items := range byShard {
		st := s.state(sh)
		if st == nil || st.token != out.leases[sh].Token {
			lost += len(items)
			continue
		}
		s.schedule(st, items)
		s.claimedAtPark.Add(int64(len(items)))
		held += len(items)
		heldBytes += claimedBytes(items)
	}
	s.credits.settle(g, held, heldBytes)
	if lost > 0 {
		s.log.Warn("messages claimed as they were parked under a shard lease lost meanwhile stay in flight; the shard's owner recovers them", "n", lost)
	}
}

// parkClaimsUnknown hands the pumps the lease deadlines of a failed park's calls that
// were to claim wanted messages whose outcome is unknown (StateNotStored): each pump
// sends its next claim with that deadline, idempotent, and so gets what the call
// claimed if it ran.
func (s *Scheduler) parkClaimsUnknown(envs []*envelope.Envelope, want []bool, out parkOutcome) {
	if want == nil || out.prior == nil {
		return
	}
	done := map[int]bool{}
	for i, w := range want {
		if !w || out.prior[i] != storeapi.StateNotStored {
			continue
		}
		sh := s.store.ShardOfEnv(envs[i])
		l, ok := out.leases[sh]
		if !ok || done[sh] {
			continue
		}
		done[sh] = true
		if st := s.state(sh); st != nil && st.token == l.Token {
			st.omu.Lock()
			st.lostParks = append(st.lostParks, l.LeaseDeadline)
			st.omu.Unlock()
			notify(st.wake)
		}
	}
}

// takeLostPark is the lease deadline of a failed park for the pump's next claim to
// ask again, 0 if none is at least half a lease (lease, ms) away from now: past that,
// the deadline recovery takes those messages back soon enough.
func (st *shardState) takeLostPark(now, lease int64) int64 {
	st.omu.Lock()
	defer st.omu.Unlock()
	for len(st.lostParks) > 0 {
		d := st.lostParks[0]
		st.lostParks = st.lostParks[1:]
		if now < d-lease/2 {
			return d
		}
	}
	return 0
}
