package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// claimLog records the claims the scheduler sends.
type claimLog struct {
	*memstore.Store
	mu   sync.Mutex
	reqs []storeapi.ClaimRequest
}

func (l *claimLog) ClaimMany(ctx context.Context, reqs []storeapi.ClaimRequest) []storeapi.ClaimResult {
	l.mu.Lock()
	l.reqs = append(l.reqs, reqs...)
	l.mu.Unlock()
	return l.Store.ClaimMany(ctx, reqs)
}

// seen returns the Limit and MaxBytes of every claim sent so far.
func (l *claimLog) seen() ([]int, []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var limits []int
	var bytes []int64
	for _, r := range l.reqs {
		limits, bytes = append(limits, r.Limit), append(bytes, r.MaxBytes)
	}
	return limits, bytes
}

// TestClaimAsksForWhatItsShardHolds: a claim holds the credits it asks for until its
// reply, so a pump whose shard has little due asks for little (32 messages, 256 KiB,
// twice its last claim), not for claim_batch: with many shards, claims asking for
// claim_batch each took every credit and the other pumps queued. A shard with a
// backlog doubles its claims until claim_batch.
func TestClaimAsksForWhatItsShardHolds(t *testing.T) {
	const shards = 64
	w := newWorld(t, shards)
	ls := &claimLog{Store: w.ms}
	opt := w.options("a")
	opt.Store = ls
	opt.ClaimBatch = 1000
	opt.MaxInMemory = 100000
	opt.MaxInMemoryBytes = 64 << 20
	a := w.start(opt, nil)
	w.drive("a owns every shard", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == shards })
	// One message per shard, then a backlog of 3000 in one shard.
	var one []string
	for i := 0; len(one) < shards; i++ {
		if id := fmt.Sprintf("one-%d", i); w.ms.ShardOf(id) == len(one) {
			one = append(one, id)
		}
	}
	w.park(one, w.fc.Now().Add(time.Second))
	w.drive("each shard's message published", 10*time.Second, func() bool { return len(a.disp.published()) == shards })
	limits, bytes := ls.seen()
	for i, n := range limits {
		if n > 64 || bytes[i] > 512<<10 {
			t.Fatalf("claim %d asked for %d messages and %d bytes while its shard held one or none: want at most twice the last claim (32 messages, 256 KiB at least)", i, n, bytes[i])
		}
	}
	var backlog []string
	for i := 0; len(backlog) < 3000; i++ {
		if id := fmt.Sprintf("big-%d", i); w.ms.ShardOf(id) == 0 {
			backlog = append(backlog, id)
		}
	}
	w.park(backlog, w.fc.Now().Add(time.Second))
	w.drive("the backlog published", 20*time.Second, func() bool { return len(a.disp.published()) == shards+len(backlog) })
	limits, _ = ls.seen()
	top := 0
	for _, n := range limits {
		top = max(top, n)
	}
	if top != 1000 {
		t.Errorf("largest claim asked for %d messages with a backlog of 3000 in one shard, want claim_batch (1000)", top)
	}
}
