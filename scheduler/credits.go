package scheduler

import (
	"context"
	"sync"
)

// credits is a counting semaphore over messages held in memory (claimed into the wheel,
// queued for egress or being published). Pumps take credits before a claim and egress
// outcomes give them back, so the bridge's memory is bounded by scheduler.max_in_memory
// however many messages are pending in Redis: Redis is the buffer.
type credits struct {
	mu    sync.Mutex
	avail int
	ch    chan struct{} // closed and replaced whenever credits are returned
}

func newCredits(n int) *credits {
	return &credits{avail: n, ch: make(chan struct{})}
}

// acquire blocks until at least one credit is free, then takes up to max of them.
func (c *credits) acquire(ctx context.Context, max int) (int, error) {
	for {
		c.mu.Lock()
		if c.avail > 0 {
			n := min(c.avail, max)
			c.avail -= n
			c.mu.Unlock()
			return n, nil
		}
		ch := c.ch
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (c *credits) release(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.avail += n
	close(c.ch)
	c.ch = make(chan struct{})
	c.mu.Unlock()
}

func (c *credits) available() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.avail
}
