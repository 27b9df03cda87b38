package scheduler

import (
	"context"
	"sync"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// acker batches acknowledgements when Options.AckInterval > 0: Published queues the
// confirmed messages and returns, and one goroutine (owned by Run) acknowledges
// everything queued in one pipelined call, then waits AckInterval before the next, so
// at a low rate one Redis round trip carries many acks instead of one each. The first
// ack after a quiet interval goes at once. Nothing a consumer sees waits for it: the
// messages are already at the broker. Until its ack is written a message stays held
// (a graceful handover of its shard waits for it) and keeps its credit; Run writes
// what is queued before it releases any lease.
type acker struct {
	mu      sync.Mutex
	pending []*envelope.Envelope
	signal  chan struct{} // capacity 1: a pending signal is never lost, extra ones coalesce
}

func newAcker() *acker { return &acker{signal: make(chan struct{}, 1)} }

// add queues confirmed messages for the acker goroutine.
func (a *acker) add(envs []*envelope.Envelope) {
	a.mu.Lock()
	a.pending = append(a.pending, envs...)
	a.mu.Unlock()
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

// take returns and clears what is queued.
func (a *acker) take() []*envelope.Envelope {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.pending
	a.pending = nil
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.acks.signal:
		}
		flush()
		if clock.Sleep(ctx, s.clk, s.opt.AckInterval) != nil {
			return
		}
	}
}
