package testkit

import (
	"sync/atomic"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

// SkewedClock is the real clock shifted by an offset that a test changes while the
// clock is in use: an instance whose wall clock runs ahead of (or behind) Redis's.
// Timers run on real time. Unlike a real wall-clock step, a change of the offset moves
// Now's monotonic reading too (time.Time.Add shifts both), so code that detects steps
// from the wall minus the monotonic clock does not see it as one.
type SkewedClock struct {
	offset atomic.Int64 // nanoseconds
}

var _ clock.Clock = (*SkewedClock)(nil)

// NewSkewedClock returns the real clock shifted by offset.
func NewSkewedClock(offset time.Duration) *SkewedClock {
	c := &SkewedClock{}
	c.Set(offset)
	return c
}

// Set changes the offset (a step of the wall clock).
func (c *SkewedClock) Set(offset time.Duration) { c.offset.Store(int64(offset)) }

// Now is time.Now plus the offset.
func (c *SkewedClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// NewTimer is a real timer (durations are not skewed).
func (c *SkewedClock) NewTimer(d time.Duration) clock.Timer { return clock.Real{}.NewTimer(d) }
