package scheduler

import (
	"context"
	"sync"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

// parkGroup merges the parks that arrive while one is under way into the next
// Store.ParkEach — a group commit like claimGroup's (claims.go), with no waiting added:
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
type parkGroup struct {
	mu    sync.Mutex
	busy  bool
	queue []*parkWaiter
}

// maxParksPerCall bounds the messages of one combined call; more wait for the next
// (a single caller's batch always goes whole).
const maxParksPerCall = 4096

// parkFunc is Intake.ParkEach.
type parkFunc func(ctx context.Context, envs []*envelope.Envelope) ([]storeapi.State, map[int]int64, error)

type parkWaiter struct {
	envs []*envelope.Envelope
	done chan parkOutcome // capacity 1: answered once, or told to lead once
}

type parkOutcome struct {
	prior  []storeapi.State
	minDue map[int]int64
	err    error
	lead   bool
}

// park parks envs through fn together with the parks queued meanwhile.
func (g *parkGroup) park(ctx context.Context, envs []*envelope.Envelope, fn parkFunc) ([]storeapi.State, map[int]int64, error) {
	w := &parkWaiter{envs: envs, done: make(chan parkOutcome, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !lead {
		if out := <-w.done; !out.lead {
			return out.prior, out.minDue, out.err
		}
	}
	g.mu.Lock()
	n, msgs := 1, len(g.queue[0].envs)
	for n < len(g.queue) && msgs+len(g.queue[n].envs) <= maxParksPerCall {
		msgs += len(g.queue[n].envs)
		n++
	}
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()
	out := runParks(context.WithoutCancel(ctx), batch, msgs, fn)
	var mine parkOutcome
	for i, b := range batch {
		if b == w {
			mine = out[i]
		} else {
			b.done <- out[i]
		}
	}
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].done <- parkOutcome{lead: true} // busy stays true: the lead passes on
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return mine.prior, mine.minDue, mine.err
}

// runParks makes one call for batch (msgs messages in all) and splits its answer.
func runParks(ctx context.Context, batch []*parkWaiter, msgs int, fn parkFunc) []parkOutcome {
	out := make([]parkOutcome, len(batch))
	if len(batch) == 1 {
		out[0].prior, out[0].minDue, out[0].err = fn(ctx, batch[0].envs)
		return out
	}
	all := make([]*envelope.Envelope, 0, msgs)
	for _, b := range batch {
		all = append(all, b.envs...)
	}
	prior, minDue, err := fn(ctx, all)
	if prior == nil { // nothing was tried: each caller on its own
		for i, b := range batch {
			out[i].prior, out[i].minDue, out[i].err = fn(ctx, b.envs)
		}
		return out
	}
	off := 0
	for i, b := range batch {
		end := off + len(b.envs)
		out[i].prior, out[i].err = prior[off:end:end], err
		off = end
	}
	out[0].minDue = minDue // the leader's Wake covers every shard of the call
	return out
}
