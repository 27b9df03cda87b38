package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// sent is how many claims of shard were sent since claims last forgot them.
func (n *claimLog) sent(shard int) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, r := range n.reqs {
		if r.Shard == shard {
			k++
		}
	}
	return k
}

// claims returns the claims of shard sent so far, and forgets them.
func (n *claimLog) claims(shard int) []storeapi.ClaimRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []storeapi.ClaimRequest
	for _, r := range n.reqs {
		if r.Shard == shard {
			out = append(out, r)
		}
	}
	n.reqs = nil
	return out
}

// TestClaimTellsItsClockWhenBehind: a pump that keeps up claims ahead of due and does
// not tell the store its clock (ClaimRequest.Now: the Redis store would run one more
// range query a claim for nothing); a pump behind (a backlog: full batches) tells it,
// so the store reads the ids due by then without their scores.
func TestClaimTellsItsClockWhenBehind(t *testing.T) {
	const shards = 4
	w := newWorld(t, shards)
	ns := &claimLog{Store: w.ms}
	opt := w.options("a")
	opt.Store = ns
	a := w.start(opt, nil)
	w.drive("a owns every shard", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == shards })
	idsOn := func(prefix string, n int) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			if id := fmt.Sprintf("%s-%d", prefix, i); w.ms.ShardOf(id) == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	// The pump's first claim, with none answered before it, tells its clock.
	w.drive("shard 0's first claim", 10*time.Second, func() bool { return ns.sent(0) > 0 })
	ns.claims(0)
	ahead := idsOn("ahead", 3)
	for i, id := range ahead {
		w.park([]string{id}, w.fc.Now().Add(time.Duration(i+1)*2*time.Second))
	}
	w.drive("the messages due ahead published", 20*time.Second, func() bool { return len(a.disp.published()) == len(ahead) })
	keep := ns.claims(0)
	if len(keep) == 0 {
		t.Fatal("no claim of shard 0 while its messages came due")
	}
	for _, r := range keep {
		if r.Now != 0 {
			t.Fatalf("a pump keeping up told its claim its clock (Now %d, UpTo %d): want 0", r.Now, r.UpTo)
		}
	}
	backlog := idsOn("late", 350) // claim_batch 100: full batches
	w.park(backlog, w.fc.Now().Add(-time.Second))
	w.drive("the backlog published", 20*time.Second, func() bool { return len(a.disp.published()) == len(ahead)+len(backlog) })
	told := 0
	for _, r := range ns.claims(0) {
		if r.Now != 0 {
			told++
			if r.Now != r.UpTo-opt.Lookahead.Milliseconds() {
				t.Fatalf("claim told Now %d with UpTo %d: want UpTo less the lookahead", r.Now, r.UpTo)
			}
		}
	}
	if told == 0 {
		t.Fatal("a pump draining a backlog of full batches never told its claims its clock")
	}
}
