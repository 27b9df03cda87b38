package scheduler

import (
	"context"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// parkGroup merges the parks that arrive while one is under way into the next
// Store.ParkEach — the group commit of commitgroup.go, as for the claims, no waiting added:
// a park that finds none under way goes at once; parks that arrive meanwhile are
// queued, and when it returns the first of them sends them all. The Kafka ingress parks
// each partition's batch from its own goroutine, and spread over 64 shards such a batch
// was one or two messages per shard script call, each paying a fixed cost in Redis far
// above a message's own (bench, 20k msgs/s: 0.58 park calls per message).
//
// Each caller gets its own messages' prior states and the call's error. The call's
// minDue goes to the caller that led it, whose Wake covers every shard concerned. A
// combined call that could try nothing (prior nil: an envelope that does not encode)
// is made again caller by caller, so one caller's bad message fails only that caller.
// Like claimGroup's, the call runs without the leader's cancellation (it answers other
// callers too), as bounded as any store call.
type parkGroup struct {
	commitGroup[[]*envelope.Envelope, parkOutcome]
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

// park parks envs through fn together with the parks queued meanwhile.
func (g *parkGroup) park(ctx context.Context, envs []*envelope.Envelope, fn parkFunc) ([]storeapi.State, map[int]int64, error) {
	out := g.do(envs, takeParks, func(batch [][]*envelope.Envelope) []parkOutcome {
		return runParks(context.WithoutCancel(ctx), batch, fn)
	})
	return out.prior, out.minDue, out.err
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
