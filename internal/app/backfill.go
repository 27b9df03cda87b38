package app

import (
	"context"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

// Counting a store written by a bridge without per-route counts (the counts
// themselves are read by internal/adminapi).

const (
	// backfillStep is how many messages one backfill call counts per shard; the pause
	// after a step is at least as long as the step took (as bulk jobs pause), so a
	// backfill keeps Redis busy at most about half the time.
	backfillStep     = 1000
	backfillMinPause = 50 * time.Millisecond
)

// backfillCounts counts a store written by a bridge without per-route counts, in
// bounded steps, until every shard is exact (store.BackfillCounts). It runs in its own
// goroutine, owned by Run, and ends with ctx. Several instances may run it at once.
func (b *Bridge) backfillCounts(ctx context.Context, s storeapi.Store) {
	backoff := clock.NewBackoff(b.clk, clock.BackoffPolicy{Initial: 100 * time.Millisecond, Max: 10 * time.Second})
	total := 0
	for ctx.Err() == nil {
		start := b.clk.Now()
		exact, n, err := s.BackfillCounts(ctx, backfillStep)
		switch {
		case err != nil && fault.IsTransient(err):
			_ = backoff.Wait(ctx)
			continue
		case err != nil:
			b.log.Warn("counting messages per route failed; counts stay inexact", "err", err)
			return
		}
		backoff.Reset()
		total += n
		if exact {
			if total > 0 {
				b.log.Info("messages counted per route", "messages", total)
			}
			return
		}
		_ = clock.Sleep(ctx, b.clk, max(backfillMinPause, b.clk.Now().Sub(start)))
	}
}
