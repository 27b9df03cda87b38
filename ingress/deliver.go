package ingress

import (
	"context"
	"log/slog"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

// Loop is the one delivery loop both sources run their batches through. A source
// fetches a batch, parses it once (Parse) and hands the items to Deliver, which
//
//   - calls the Handler (through Call, so shutdown never waits on a stuck handler);
//   - acknowledges the batch (Batch.Ack) only after the handler returned nil, even when
//     shutdown began meanwhile, so a graceful stop does not hand back what it parked;
//   - on failure waits the next step of its clock.Backoff on the injected clock and calls
//     the handler again with the same items: nothing is re-parsed, skipped or dropped;
//   - after GiveUpAfter failed calls (when set) returns GaveUp, and the source hands the
//     batch back to its broker (AMQP: basic.nack with requeue) to be delivered again.
//
// The handler must not modify the items (see Handler); the retry relies on it. A Loop
// belongs to one Run: it is not safe for concurrent use, and its backoff carries over
// from batch to batch until a batch succeeds.
type Loop struct {
	h    Handler
	opts LoopOptions
	bo   *clock.Backoff
}

// LoopOptions configures a Loop. Zero values take the defaults.
type LoopOptions struct {
	Clock   clock.Clock         // every backoff wait; default clock.Real
	Backoff clock.BackoffPolicy // the wait between handler calls; clock's defaults
	Logger  *slog.Logger        // default slog.Default()
	// GiveUpAfter is how many failed handler calls Deliver makes for one batch before
	// it returns GaveUp; 0 retries until the handler succeeds or ctx ends.
	GiveUpAfter int
	// Busy, when set, is called with true before the first handler call of a batch and
	// with false after the last, before Ack (the watchdogs leave time in the handler out
	// of their stall rules, but not a hanging acknowledgement).
	Busy func(busy bool)
}

// Outcome is how Deliver ended.
type Outcome int

const (
	// Acked: the handler returned nil and Batch.Ack was called and returned nil.
	Acked Outcome = iota + 1
	// GaveUp: GiveUpAfter handler calls failed; nothing was acknowledged and the
	// source must hand the batch back to the broker.
	GaveUp
	// Stopped: ctx ended (nothing acknowledged), or Ack or BeforeRetry failed (the
	// error Deliver returns). The source stops consuming on this channel or reader.
	Stopped
)

// Batch is one parsed batch and how to settle it with the broker.
type Batch struct {
	Items []Item
	// Ack acknowledges every record of the batch (offset commit, basic.ack). Required.
	Ack func() error
	// BeforeRetry, when set, is called after each backoff wait, before the next handler
	// call; an error ends Deliver with Stopped (the channel that delivered the batch is
	// gone, so it can no longer be acknowledged).
	BeforeRetry func() error
}

// NewLoop returns the delivery loop of one Run handing batches to h.
func NewLoop(h Handler, opts LoopOptions) *Loop {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.GiveUpAfter = max(opts.GiveUpAfter, 0)
	return &Loop{h: h, opts: opts, bo: clock.NewBackoff(opts.Clock, opts.Backoff)}
}

// Deliver hands b.Items to the handler until it succeeds (then acknowledges them), ctx
// ends, or GiveUpAfter calls failed. err is non-nil only with Stopped, when Ack or
// BeforeRetry failed.
func (l *Loop) Deliver(ctx context.Context, b Batch) (Outcome, error) {
	busy := l.opts.Busy != nil
	idle := func() {
		if busy {
			busy = false
			l.opts.Busy(false)
		}
	}
	if busy {
		l.opts.Busy(true)
	}
	defer idle()
	for attempt := 1; ; attempt++ {
		returned, herr := call(ctx, l.opts.Clock, l.h, b.Items)
		if !returned {
			// Shut down while the handler is still blocked: nothing is acknowledged; if it
			// did park the batch, the redelivery is recognised by id.
			return Stopped, nil
		}
		if herr == nil {
			l.bo.Reset()
			idle() // acknowledging is broker time, not handler time
			if err := b.Ack(); err != nil {
				return Stopped, err
			}
			return Acked, nil
		}
		if ctx.Err() != nil {
			return Stopped, nil
		}
		d := l.bo.Next()
		giveUp := l.opts.GiveUpAfter > 0 && attempt >= l.opts.GiveUpAfter
		lvl := slog.LevelWarn
		if attempt > 1 {
			lvl = slog.LevelDebug // one warning per failing batch, not one per retry
		}
		l.opts.Logger.Log(ctx, lvl, "handler failed; the same batch is handed over again", "records", len(b.Items),
			"attempt", attempt, "give_back", giveUp, "retry_in", d.Round(time.Millisecond), "err", herr)
		if clock.Sleep(ctx, l.opts.Clock, d) != nil {
			return Stopped, nil
		}
		if b.BeforeRetry != nil {
			if err := b.BeforeRetry(); err != nil {
				return Stopped, err
			}
		}
		if giveUp {
			return GaveUp, nil
		}
	}
}
