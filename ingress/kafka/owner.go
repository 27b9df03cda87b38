package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/membership"
)

// owner is the ownership loop of one Run: the partitions it holds and their workers.
// Only the loop's goroutine touches it.
type owner struct {
	s         *Source
	client    *kafka.Client
	h         ingress.Handler
	parts     map[int]*partition
	wantSince map[int]int64 // when a wanted partition was first found held elsewhere
}

// own runs an ownership round every LeaseTTL/3 (start to start), and sooner when a
// round asks for it: when another member's heartbeat ages out, and in quick succession
// while partitions it should own are held by another holder (a dead member's lease
// about to expire, a graceful handover finishing). When ctx ends it stops every worker
// (a batch already parked is still committed) and releases the leases.
func (s *Source) own(ctx context.Context, client *kafka.Client, h ingress.Handler) {
	o := &owner{s: s, client: client, h: h, parts: map[int]*partition{}, wantSince: map[int]int64{}}
	defer o.releaseAll()
	interval := s.cfg.LeaseTTL / 3
	quick := max(s.cfg.LeaseTTL/20, 10*time.Millisecond)
	t := s.cfg.Clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		start := s.cfg.Clock.Now()
		soon := o.round(ctx)
		now := s.cfg.Clock.Now()
		d := interval - now.Sub(start)
		if soon > 0 {
			d = min(d, max(time.Duration(soon-now.UnixMilli())*time.Millisecond, quick))
		}
		t.Reset(max(d, 0))
	}
}

// round: heartbeat and read the members, renew what is held, read positions, poll the
// topic and the group (within half a lease TTL), then (with a complete view) hand back
// what this instance should no longer own and acquire what it should. It returns when
// (unix ms) the next round should come at the latest, 0 for the regular interval.
func (o *owner) round(ctx context.Context) (soon int64) {
	s := o.s
	now := clock.NowMs(s.cfg.Clock)
	ttl := s.cfg.LeaseTTL
	names, soon, viewed, joined := o.view(ctx, now)
	// Keeping what is held comes first and never waits for the brokers.
	o.renew(ctx)
	if ctx.Err() != nil {
		return 0
	}
	// Positions first, offsets after: a live partition's end only grows, so a position
	// read before the poll and beyond the end it reports is beyond the end for real.
	pos := map[int]int64{}
	for id, p := range o.parts {
		pos[id] = p.next.Load()
	}
	// The broker calls get half a lease TTL in all, so a slow or silent broker never
	// delays the next round's renewals past the leases' end.
	pctx, cancel := context.WithTimeout(ctx, ttl/2)
	offsets, pollErr := s.pollTopic(pctx, o.client)
	cancel()
	if ctx.Err() != nil {
		return 0
	}
	var waiting []int
	if viewed && pollErr == nil {
		want := map[int]bool{} // held off (Config.Admission): nothing is ours yet
		if joined {
			want = o.want(names, offsets)
		}
		for id, p := range o.parts {
			if !want[id] {
				o.release(ctx, p, "no longer this instance's partition")
			}
		}
		var at int64
		waiting, at = o.acquire(ctx, want, now)
		if at > 0 && (soon == 0 || at < soon) {
			soon = at
		}
	}
	ends := map[int]int64{}
	for id, p := range o.parts {
		off, ok := offsets[id]
		if !ok {
			continue
		}
		ends[id] = off.end
		if at := pos[id]; at > off.end {
			p.reset(fmt.Sprintf("%s (position %d, end offset %d): the topic was deleted and recreated, or truncated; reading from the committed offset if within the partition, else from its first offset",
				resetOutOfRange, at, off.end))
		}
	}
	s.health.round(ends, pollErr, waiting)
	for _, id := range s.health.stuck() {
		if p := o.parts[id]; p != nil {
			p.reset(fmt.Sprintf("lagging without progress for %s", s.cfg.StallTimeout))
		}
	}
	return soon
}

// view is the round's view of the members: the other live members' names, when to
// look again (when the next of them ages out, or this process joins), whether the
// members could be read at all and whether this process is admitted.
func (o *owner) view(ctx context.Context, now int64) (others []string, soon int64, viewed, joined bool) {
	s := o.s
	live, joined, err := o.members(ctx, now)
	if err != nil {
		s.log.Warn("kafka ingress: members", "err", err)
		return nil, 0, false, false
	}
	for _, m := range live {
		if m.Name == s.cfg.Instance {
			continue // (while held off, a previous incarnation's heartbeat)
		}
		others = append(others, m.Name)
		if at := m.Heartbeat + s.cfg.LeaseTTL.Milliseconds() + 1; at > now && (soon == 0 || at < soon) {
			soon = at
		}
	}
	if at, _ := s.cfg.Admission.JoinAt(); !joined && (soon == 0 || at < soon) {
		soon = at
	}
	return others, soon, true, joined
}

// members is the round's membership step under Config.Admission (membership.Admission.Round).
func (o *owner) members(ctx context.Context, now int64) (live []membership.Member, joined bool, err error) {
	s := o.s
	return s.cfg.Admission.Round(s.cfg.Instance, now, s.cfg.LeaseTTL,
		func(maxAge time.Duration) ([]membership.Member, error) {
			return s.cfg.Membership.Live(ctx, now, maxAge)
		},
		func() error { return s.cfg.Membership.Heartbeat(ctx, s.cfg.Instance, now) })
}

// want is the set of partitions this instance should own: its rendezvous share over
// the live members (itself included).
func (o *owner) want(names []string, offsets map[int]partitionOffsets) map[int]bool {
	out := map[int]bool{}
	if len(offsets) == 0 {
		return out
	}
	if !slices.Contains(names, o.s.cfg.Instance) {
		names = append(names, o.s.cfg.Instance)
	}
	n := slices.Max(slices.Collect(maps.Keys(offsets))) + 1
	owners := membership.OwnersOf(o.s.cfg.Rules.Route+"\x00"+o.s.cfg.Topic, names, n)
	for id := range offsets {
		if owners[id] == o.s.cfg.Instance {
			out[id] = true
		}
	}
	return out
}

// renew renews every held lease in one round trip; a lease found lost stops its worker
// at once (fenced: it commits nothing more).
func (o *owner) renew(ctx context.Context) {
	if len(o.parts) == 0 {
		return
	}
	s := o.s
	ids := slices.Sorted(maps.Keys(o.parts))
	held := make([]membership.Held, len(ids))
	for i, id := range ids {
		held[i] = o.parts[id].lease
	}
	start := s.mono()
	ok, err := s.cfg.Membership.Renew(ctx, s.holder, held, s.cfg.LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("kafka ingress: renew partition leases; they lapse after the lease TTL without a renewal", "n", len(held), "err", err)
		}
		return
	}
	for i, id := range ids {
		p := o.parts[id]
		if !ok[i] {
			s.log.Warn("kafka ingress: lost a partition lease; stopped reading it", "partition", id, "token", p.lease.Token)
			p.fenced.Store(true)
			p.leaseUntil.Store(0)
			o.stop(p)
			continue
		}
		if until := start + s.cfg.LeaseTTL.Milliseconds(); until > p.leaseUntil.Load() {
			p.leaseUntil.Store(until)
		}
	}
}

// acquire takes the leases of the wanted partitions not held yet and starts their
// workers. It returns the partitions still held by another holder and when to look
// again soon (0: the regular interval).
func (o *owner) acquire(ctx context.Context, want map[int]bool, now int64) (waiting []int, soon int64) {
	s := o.s
	var ids []int
	for id := range want {
		if o.parts[id] == nil {
			ids = append(ids, id)
		}
	}
	for id := range o.wantSince {
		if !want[id] || o.parts[id] != nil {
			delete(o.wantSince, id)
		}
	}
	if len(ids) == 0 {
		return nil, 0
	}
	slices.Sort(ids)
	keys := make([]membership.LeaseKey, len(ids))
	for i, id := range ids {
		keys[i] = s.cfg.Membership.PartitionLease(s.cfg.Rules.Route, s.cfg.Topic, id)
	}
	start := s.mono()
	tokens, err := s.cfg.Membership.Acquire(ctx, keys, s.holder, s.cfg.LeaseTTL)
	if err != nil {
		s.log.Warn("kafka ingress: acquire partition leases", "n", len(ids), "err", err)
		return ids, 0
	}
	ttl := s.cfg.LeaseTTL.Milliseconds()
	for i, id := range ids {
		if tokens[i] == 0 {
			waiting = append(waiting, id)
			if o.wantSince[id] == 0 {
				o.wantSince[id] = now
			}
			// Held elsewhere: it expires within a TTL (a dead member) or is released
			// soon (a handover). Look again quickly for a while, then at the regular pace.
			if now-o.wantSince[id] < ttl {
				soon = now + 1
			}
			continue
		}
		delete(o.wantSince, id)
		p := &partition{id: id, lease: membership.Held{Key: keys[i], Token: tokens[i]}, done: make(chan struct{})}
		p.leaseUntil.Store(start + ttl)
		p.next.Store(-1)
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p.cancel = cancel
		o.parts[id] = p
		s.health.owned(id)
		s.log.Info("kafka ingress: partition acquired", "partition", id, "token", tokens[i])
		go s.work(wctx, p, o.client, o.h)
	}
	return waiting, soon
}

// stop stops p's worker and waits for it (a batch it parked is still committed while
// the lease is held), and forgets p.
func (o *owner) stop(p *partition) {
	p.cancel()
	<-p.done
	delete(o.parts, p.id)
	o.s.health.disowned(p.id)
}

// release stops p's worker, then gives its lease up (token-checked), so the new owner
// takes it at once and resumes from what was committed.
func (o *owner) release(ctx context.Context, p *partition, why string) {
	o.stop(p)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if err := o.s.cfg.Membership.Release(rctx, o.s.holder, p.lease); err != nil {
		o.s.log.Warn("kafka ingress: release partition lease; it expires after the lease TTL", "partition", p.id, "err", err)
		return
	}
	o.s.log.Info("kafka ingress: partition released", "partition", p.id, "reason", why)
}

// releaseAll stops every worker and releases every lease (Run is returning).
func (o *owner) releaseAll() {
	for _, p := range o.parts {
		p.cancel() // all at once; release waits for each
	}
	for _, p := range o.parts {
		if o.s.abandon.Load() {
			o.stop(p) // (tests) a killed process releases nothing: the leases expire
			continue
		}
		o.release(context.Background(), p, "stopping")
	}
}
