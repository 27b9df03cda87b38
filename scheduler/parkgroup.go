package scheduler

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

// parkGroup merges the parks that arrive while one is under way into the next
// Store.ParkEach — the group commit of commitgroup.go, as for the claims, no waiting added:
// a park that finds none under way goes at once; parks that arrive meanwhile are
// queued, and when it returns the first of them sends them all. The Kafka ingress parks
// each partition's batch from its own goroutine, and spread over 64 shards such a batch
// was one or two messages per shard script call, each paying a fixed cost in Redis far
// above a message's own (bench, 20k msgs/s: 0.58 park calls per message; issue 17).
//
// Each caller gets its own messages' prior states and the call's error. The call's
// minDue goes to the caller that led it, whose Wake covers every shard concerned. A
// combined call that could try nothing (prior nil: an envelope that does not encode)
// is made again caller by caller, so one caller's bad message fails only that caller.
// Like claimGroup's, the call runs without the leader's cancellation (it answers other
// callers too), as bounded as any store call.
//
// The linger (Options.ParkLinger, scheduler.park_linger): a leader whose queue holds
// only messages due far ahead — at least the lookahead plus twice the linger from now,
// so no pump would claim them sooner — waits up to the linger for more parks before it
// sends. Waiting costs such a message nothing (it is stored long before any claim could
// want it; only the ingress acknowledgement comes later), and every partition's batch
// in the linger goes in one call: at 20k msgs/s that is several messages per shard
// script call instead of one or two. A park with any message due sooner, queued while
// a leader lingers, ends the linger at once, as does a park that may not wait (the
// schedules planner's and the admin API's: they park one after another), a queue of
// four messages per shard or more (at most 256) (a source that delivers batches that large gains little, and one that parks
// alone — an AMQP queue's consumer, prefetch 500 — would otherwise be slowed to a batch
// per linger) or the leader's cancellation.
type parkGroup struct {
	commitGroup[[]*envelope.Envelope, parkOutcome]
	clk       clock.Clock
	linger    time.Duration // 0: no linger
	lookahead time.Duration
	enough    int          // messages queued that end the linger: four per shard, at most 256
	urgent    atomic.Int32 // callers that may not wait (park with linger false) under way
}

func newParkGroup(clk clock.Clock, linger, lookahead time.Duration, shards int) *parkGroup {
	g := &parkGroup{clk: clk, linger: linger, lookahead: lookahead, enough: min(max(1, 4*shards), 256)}
	g.arrived = make(chan struct{}, 1)
	return g
}

// maxParksPerCall bounds the messages of one combined call; more wait for the next
// (a single caller's batch always goes whole).
const maxParksPerCall = 4096

// parkFunc is Intake.ParkEach.
type parkFunc func(ctx context.Context, envs []*envelope.Envelope) ([]storeapi.State, map[int]int64, error)

type parkOutcome struct {
	prior  []storeapi.State
	minDue map[int]int64
	err    error
}

// park parks envs through fn together with the parks queued meanwhile. linger says
// whether this park may wait for others (the ingress's may; the schedules planner's and
// the admin API's, which park one after another, may not, and end a leader's wait).
func (g *parkGroup) park(ctx context.Context, envs []*envelope.Envelope, linger bool, fn parkFunc) ([]storeapi.State, map[int]int64, error) {
	var hold func(func() [][]*envelope.Envelope)
	if linger && g.linger > 0 {
		hold = func(queued func() [][]*envelope.Envelope) { g.hold(ctx, queued) }
	} else if !linger {
		g.urgent.Add(1)
		defer g.urgent.Add(-1)
	}
	out := g.do(envs, hold, takeParks, func(batch [][]*envelope.Envelope) []parkOutcome {
		return runParks(context.WithoutCancel(ctx), batch, fn)
	})
	return out.prior, out.minDue, out.err
}

// hold is the leader's linger: it returns once the queue may not wait (mayWait), the
// linger has passed, or ctx ends; every park queued meanwhile makes it look again.
func (g *parkGroup) hold(ctx context.Context, queued func() [][]*envelope.Envelope) {
	start := g.clk.Now()
	if !g.mayWait(queued(), start) {
		return
	}
	timer := g.clk.NewTimer(g.linger)
	defer timer.Stop()
	for {
		select {
		case <-timer.C():
			return
		case <-ctx.Done():
			return
		case <-g.arrived:
		}
		if !g.mayWait(queued(), start) {
			return
		}
	}
}

// mayWait reports whether the queued parks may wait for more: no caller that may not
// wait under way, fewer than enough messages, each due at least the lookahead plus
// twice the linger after start.
func (g *parkGroup) mayWait(q [][]*envelope.Envelope, start time.Time) bool {
	if g.urgent.Load() > 0 {
		return false
	}
	far := start.Add(g.lookahead + 2*g.linger).UnixMilli()
	n := 0
	for _, envs := range q {
		for _, e := range envs {
			if e == nil || e.DueAt < far {
				return false
			}
		}
		if n += len(envs); n >= g.enough {
			return false
		}
	}
	return true
}

// takeParks is how many of the queued batches one call takes: the first whole, then
// as many as fit in maxParksPerCall messages.
func takeParks(q [][]*envelope.Envelope) int {
	n, msgs := 1, len(q[0])
	for n < len(q) && msgs+len(q[n]) <= maxParksPerCall {
		msgs += len(q[n])
		n++
	}
	return n
}

// runParks makes one call for batch and splits its answer.
func runParks(ctx context.Context, batch [][]*envelope.Envelope, fn parkFunc) []parkOutcome {
	out := make([]parkOutcome, len(batch))
	if len(batch) == 1 {
		out[0].prior, out[0].minDue, out[0].err = fn(ctx, batch[0])
		return out
	}
	var all []*envelope.Envelope
	for _, envs := range batch {
		all = append(all, envs...)
	}
	prior, minDue, err := fn(ctx, all)
	if prior == nil { // nothing was tried: each caller on its own
		for i, envs := range batch {
			out[i].prior, out[i].minDue, out[i].err = fn(ctx, envs)
		}
		return out
	}
	off := 0
	for i, envs := range batch {
		end := off + len(envs)
		out[i].prior, out[i].err = prior[off:end:end], err
		off = end
	}
	out[0].minDue = minDue // the leader's Wake covers every shard of the call
	return out
}
