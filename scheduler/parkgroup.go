package scheduler

import (
	"context"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// parkGroup merges the parks that arrive while one is under way into the next
// Store.ParkClaimEach — the group commit of commitgroup.go, as for the claims, no waiting added:
// a park that finds none under way goes at once; parks that arrive meanwhile are
// queued, and when it returns the first of them sends them all. The Kafka ingress parks
// each partition's batch from its own goroutine, and spread over 64 shards such a batch
// was one or two messages per shard script call, each paying a fixed cost in Redis far
// above a message's own (bench, 20k msgs/s: 0.58 park calls per message).
//
// Each caller gets its own messages' prior states and claimed flags, and the call's
// leases and error. The call's
// minDue goes to the caller that led it, whose Wake covers every shard concerned. A
// combined call that could try nothing (prior nil: an envelope that does not encode)
// is made again caller by caller, so one caller's bad message fails only that caller.
// Like claimGroup's, the call runs without the leader's cancellation (it answers other
// callers too), as bounded as any store call.
type parkGroup struct {
	commitGroup[parkBatch, parkOutcome]
}

// parkBatch is one caller's messages and which of them it wants claimed (nil: none).
type parkBatch struct {
	envs []*envelope.Envelope
	want []bool
}

// maxParksPerCall bounds the messages of one combined call; more wait for the next
// (a single caller's batch always goes whole).
const maxParksPerCall = 4096

// parkFunc parks envs, claiming those want marks where it can (parkClaimEach).
type parkFunc func(ctx context.Context, envs []*envelope.Envelope, want []bool) parkOutcome

// parkOutcome is one caller's part of a call: the prior states of its messages, which
// were claimed, under which leases (the call's, per shard), the call's minDue (for
// its leader only) and error.
type parkOutcome struct {
	prior   []storeapi.State
	claimed []bool
	leases  map[int]storeapi.ParkLease
	minDue  map[int]int64
	err     error
}

// park parks b through fn together with the parks queued meanwhile.
func (g *parkGroup) park(ctx context.Context, b parkBatch, fn parkFunc) parkOutcome {
	return g.do(b, takeParks, func(batch []parkBatch) []parkOutcome {
		return runParks(context.WithoutCancel(ctx), batch, fn)
	})
}

// takeParks is how many of the queued batches one call takes: the first whole, then
// as many as fit in maxParksPerCall messages.
func takeParks(q []parkBatch) int {
	n, msgs := 1, len(q[0].envs)
	for n < len(q) && msgs+len(q[n].envs) <= maxParksPerCall {
		msgs += len(q[n].envs)
		n++
	}
	return n
}

// runParks makes one call for batch and splits its answer.
func runParks(ctx context.Context, batch []parkBatch, fn parkFunc) []parkOutcome {
	out := make([]parkOutcome, len(batch))
	if len(batch) == 1 {
		out[0] = fn(ctx, batch[0].envs, batch[0].want)
		return out
	}
	var all []*envelope.Envelope
	for _, b := range batch {
		all = append(all, b.envs...)
	}
	res := fn(ctx, all, mergeWant(batch, len(all)))
	if res.prior == nil { // nothing was tried: each caller on its own
		for i, b := range batch {
			out[i] = fn(ctx, b.envs, b.want)
		}
		return out
	}
	off := 0
	for i, b := range batch {
		end := off + len(b.envs)
		out[i] = parkOutcome{prior: res.prior[off:end:end], leases: res.leases, err: res.err}
		if res.claimed != nil {
			out[i].claimed = res.claimed[off:end:end]
		}
		off = end
	}
	out[0].minDue = res.minDue // the leader's Wake covers every shard of the call
	return out
}

// mergeWant is the want flags of the batches' messages in one slice (nil when no batch
// wants any claimed).
func mergeWant(batch []parkBatch, n int) []bool {
	var want []bool
	off := 0
	for _, b := range batch {
		if b.want != nil {
			if want == nil {
				want = make([]bool, n)
			}
			copy(want[off:], b.want)
		}
		off += len(b.envs)
	}
	return want
}
