package clock

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Sleep waits d on c, or until ctx ends; it returns ctx.Err() in that case, else nil.
// Every wait in the bridge goes through it (or a Timer of the same clock), so a test
// with a Fake clock decides when it ends.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// Backoff is the bridge's one retry-wait policy for operations retried in process
// (reconnects, Redis calls, claims, rebuilds): exponential from Initial doubling up to
// Max, each wait randomized by ±Jitter (cenkalti/backoff's ExponentialBackOff, never
// giving up by itself), every wait slept on the injected clock. It is not safe for
// concurrent use: each retry loop owns one.
//
// The per-message retry after a failed publish is a different thing: its wait is
// stored with the message in Redis and computed from the attempt number (see
// AttemptBackoff).
type Backoff struct {
	clk Clock
	b   *backoff.ExponentialBackOff
}

// BackoffPolicy configures a Backoff. Zero values take the defaults.
type BackoffPolicy struct {
	Initial time.Duration // first wait; default 50 ms
	Max     time.Duration // cap on the wait before jitter; default 2 s (at least Initial)
	Jitter  float64       // ±fraction randomizing each wait, 0 ≤ Jitter < 1; default 0.2
}

// NewBackoff returns a Backoff on c with policy p (defaults filled in).
func NewBackoff(c Clock, p BackoffPolicy) *Backoff {
	if p.Initial <= 0 {
		p.Initial = 50 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 2 * time.Second
	}
	p.Max = max(p.Max, p.Initial)
	if p.Jitter <= 0 || p.Jitter >= 1 {
		p.Jitter = 0.2
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier, b.RandomizationFactor = p.Initial, p.Max, 2, p.Jitter
	b.Reset()
	return &Backoff{clk: c, b: b}
}

// Next returns the next wait and advances the policy.
func (b *Backoff) Next() time.Duration { return b.b.NextBackOff() }

// Reset starts again from Initial (call it after a success).
func (b *Backoff) Reset() { b.b.Reset() }

// Wait sleeps the next wait on the clock; it returns ctx.Err() if ctx ends first.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.clk, b.Next()) }

// AttemptBackoff is the wait before retry number attempt (1 for the first retry) of a
// message whose publish failed: initial × 2^(attempt−1), capped at max, no jitter (it
// is written into Redis as the message's next due time, so it must be reproducible).
func AttemptBackoff(attempt int, initial, max time.Duration) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := initial
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
