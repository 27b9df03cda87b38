package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// credits bound what the scheduler holds in memory (claimed into the wheel, queued for
// egress or being published) by messages and by bytes. Pumps take credits before a
// claim and egress outcomes give them back, so the bridge's memory is bounded by
// scheduler.max_in_memory and scheduler.max_in_memory_bytes however many messages are
// pending in Redis: Redis is the buffer.
//
// Bytes are each claimed copy's envelope.ClaimedBytes (its encoded length plus
// storeapi.MemOverhead). A claim is granted up to a share of the free bytes and asks
// Redis for at most that (storeapi.ClaimRequest.MaxBytes); when the first due message
// of a shard does not fit (ClaimResult.Need), that pump waits until that many bytes are
// free. A message larger than the whole budget waits until nothing else is held and
// then goes through alone: free bytes may then be negative until it leaves memory.
type credits struct {
	mu     sync.Mutex
	avail  int
	total  int           // scheduler.max_in_memory
	bytes  int64         // budget minus the bytes held; negative while an oversized message is held alone (or always, without a budget)
	budget int64         // 0: no byte bound (bytes held are still counted)
	ch     chan struct{} // closed and replaced whenever credits are returned

	throttled     int64         // acquires that waited for bytes (messages were free)
	throttledTime time.Duration // how long they waited
}

// grant is what one acquire took: n messages and up to bytes bytes (0 without a byte
// budget). alone: nothing else was held, so the claim may take its first message
// whatever its size.
type grant struct {
	n     int
	bytes int64
	alone bool
}

// claimShares is how many claims the free bytes are shared between: a claim is
// granted at most budget/claimShares (or what its first message needs), so pumps
// claiming at the same time each get some of the budget instead of the first taking
// all of it.
const claimShares = 8

func newCredits(n int, budget int64) *credits {
	return &credits{avail: n, total: n, bytes: budget, budget: budget, ch: make(chan struct{})}
}

// acquire blocks until at least one credit is free and, under a byte budget, at least
// need bytes (capped at the budget: a larger message waits until nothing is held),
// then takes up to most credits and up to max(min(budget/claimShares, want), need)
// bytes. onWait, if set, is called once when the wait is for bytes.
func (c *credits) acquire(ctx context.Context, most int, need, want int64, onWait func()) (grant, error) {
	var since time.Time
	for {
		c.mu.Lock()
		enough := c.budget == 0 || (c.bytes > 0 && c.bytes >= min(need, c.budget))
		if c.avail > 0 && enough {
			g := grant{n: min(c.avail, most)}
			c.avail -= g.n
			if c.budget > 0 {
				g.alone = c.bytes == c.budget
				g.bytes = min(c.bytes, max(min(c.budget/claimShares, want), need))
				c.bytes -= g.bytes
			} // without a budget the claim's bytes are counted when it returns (settle)
			if !since.IsZero() {
				c.throttledTime += time.Since(since)
			}
			c.mu.Unlock()
			return g, nil
		}
		if c.avail > 0 && since.IsZero() {
			since = time.Now()
			c.throttled++
			if onWait != nil {
				onWait()
			}
		}
		ch := c.ch
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			if !since.IsZero() {
				c.mu.Lock()
				c.throttledTime += time.Since(since)
				c.mu.Unlock()
			}
			return grant{}, ctx.Err()
		}
	}
}

// takeNow takes, without waiting, a credit and its bytes for each of sizes in turn
// while they last (under a byte budget, up to budget/claimShares in all with the
// bytes already taken for the same park, as a claim's share), and returns how many it
// took and their bytes. A park claims with them what it can hold without holding
// anything up (parkclaim.go). With reserve, it stops
// where taking more would leave less than half of the credits, or of the byte
// budget, free: what a park claims ahead of the lookahead never takes the memory
// the pumps need for what is due sooner.
func (c *credits) takeNow(sizes []int64, reserve bool, already int64) (n int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keepN, keepBytes := 0, int64(0)
	if reserve {
		keepN, keepBytes = (c.total+1)/2, c.budget/2 // of one credit, the one
	}
	for _, sz := range sizes {
		if c.avail <= keepN || (c.budget > 0 && (sz > c.bytes-keepBytes || already+bytes+sz > c.budget/claimShares)) {
			break
		}
		c.avail--
		c.bytes -= sz
		n++
		bytes += sz
	}
	return n, bytes
}

// release gives back n credits and b bytes (either may be negative: a claim that took
// more than it was granted, its first message going through alone, or a due bucket the
// store hands over whole).
func (c *credits) release(n int, b int64) {
	if n == 0 && b == 0 {
		return
	}
	c.mu.Lock()
	c.avail += n
	c.bytes += b
	close(c.ch)
	c.ch = make(chan struct{})
	c.mu.Unlock()
}

// settle ends a claim granted g that returned items: what it did not take goes back.
func (c *credits) settle(g grant, got int, gotBytes int64) {
	c.release(g.n-got, g.bytes-gotBytes)
}

func (c *credits) available() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.avail
}

// CreditStats is what the credits show for metrics: bytes held against the budget,
// the claims held back by it, and how the messages they were taken for came in.
type CreditStats struct {
	HeldBytes     int64         // bytes of claimed copies in memory (ClaimedBytes)
	BudgetBytes   int64         // scheduler.max_in_memory_bytes (0: none)
	Throttled     int64         // claims that waited for bytes while messages were free
	ThrottledTime time.Duration // total time they waited
	ClaimedAtPark int64         // messages claimed as they were parked (parkclaim.go)
	ClaimedByPump int64         // messages claimed by the shards' pumps (claim script)
}

func (c *credits) stats() CreditStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CreditStats{HeldBytes: c.budget - c.bytes, BudgetBytes: c.budget, Throttled: c.throttled, ThrottledTime: c.throttledTime}
}

// claimedBytes is the bytes envs were counted for when claimed.
func claimedBytes(envs []*envelope.Envelope) int64 {
	var b int64
	for _, e := range envs {
		b += e.ClaimedBytes
	}
	return b
}
