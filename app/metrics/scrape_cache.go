package metrics

import (
	"context"
	"sync"
	"time"
)

// scrapeCache calls a function at most once per ttl however many scrapes arrive, and
// serves its last good answer in between (and after a failed call, until the next try
// a ttl later). It backs the collectors whose values cost a Redis call (counts,
// readiness checks).
type scrapeCache[T any] struct {
	ttl   time.Duration
	now   func() time.Time
	onErr func(error) // told about a failed call; nil = ignored

	mu      sync.Mutex // held while refreshing, so concurrent scrapes share one call
	f       func(context.Context) (T, error)
	last    T
	have    bool
	fetched time.Time
}

func newScrapeCache[T any](onErr func(error)) scrapeCache[T] {
	return scrapeCache[T]{ttl: StatsCacheTTL, now: time.Now, onErr: onErr}
}

// set installs f and forgets what the previous one answered.
func (c *scrapeCache[T]) set(f func(context.Context) (T, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero T
	c.f, c.last, c.have, c.fetched = f, zero, false, time.Time{}
}

// get returns the cached value, calling f when it is older than the ttl; ok is false
// until f has answered once (or while no f is set).
func (c *scrapeCache[T]) get() (v T, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return v, false
	}
	now := c.now()
	if !c.fetched.IsZero() && now.Sub(c.fetched) < c.ttl {
		return c.last, c.have
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := c.f(ctx)
	c.fetched = now
	if err != nil {
		if c.onErr != nil {
			c.onErr(err)
		}
		return c.last, c.have
	}
	c.last, c.have = got, true
	return got, true
}
