package scheduler

import (
	"context"
	"sync"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// acker batches acknowledgements when Options.AckInterval > 0: Published queues the
// confirmed messages and returns, and one goroutine (owned by Run) acknowledges
// everything queued in one pipelined call, then waits AckInterval before the next, so
// at a low rate one Redis round trip carries many acks instead of one each, and at a
// high rate each shard's ack call carries many messages (a script call's fixed cost in
// Redis is several messages' own). The first ack after a quiet interval goes at once.
// Nothing a consumer sees waits for it: the messages are already at the broker. Until
// its ack is written a message stays held (a graceful handover of its shard waits for
// it) and keeps its credit, so the queue never holds more than a quarter of the
// credits (messages or bytes): past that it is written at once, and claims never wait
// on acks that are merely queued. Run writes what is queued before it releases any
// lease.
type acker struct {
	mu      sync.Mutex
	pending []*envelope.Envelope
	bytes   int64         // the queued messages' claimed bytes
	signal  chan struct{} // capacity 1: a pending signal is never lost, extra ones coalesce
	urgent  chan struct{} // capacity 1: the queue reached a limit; write it without waiting
	// maxN and maxBytes are the queue's limits (0: none).
	maxN     int
	maxBytes int64
}

// ackerShare: queued acks may hold 1/ackerShare of the credits (messages and bytes)
// before they are written without waiting for AckInterval.
const ackerShare = 4

func newAcker(credits int, budget int64) *acker {
	return &acker{signal: make(chan struct{}, 1), urgent: make(chan struct{}, 1),
		maxN: credits / ackerShare, maxBytes: budget / ackerShare}
}

// add queues confirmed messages for the acker goroutine.
func (a *acker) add(envs []*envelope.Envelope) {
	a.mu.Lock()
	a.pending = append(a.pending, envs...)
	a.bytes += claimedBytes(envs)
	full := (a.maxN > 0 && len(a.pending) >= a.maxN) || (a.maxBytes > 0 && a.bytes >= a.maxBytes)
	a.mu.Unlock()
	notify(a.signal)
	if full {
		notify(a.urgent)
	}
}

// notify sends on a channel of capacity 1 unless a send is already waiting there.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// take returns and clears what is queued.
func (a *acker) take() []*envelope.Envelope {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.pending
	a.pending, a.bytes = nil, 0
	return out
}

// runAcker acknowledges queued messages until ctx ends, then once more (the dispatcher
// has stopped by then: nothing is queued after that). Writes use bg, which outlives
// ctx, with retryRedis's own bound.
func (s *Scheduler) runAcker(ctx, bg context.Context) {
	flush := func() {
		if envs := s.acks.take(); len(envs) > 0 {
			s.ack(bg, envs)
		}
	}
	defer flush()
	t := s.clk.NewTimer(s.opt.AckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.acks.signal:
		}
		flush()
		t.Reset(s.opt.AckInterval)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.acks.urgent:
		}
	}
}
