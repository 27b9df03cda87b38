package redistest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/testkit"
)

// TestRestartUnderADeadNameHoldsOffUntilTheOthersTookItsShare: "b" died without
// leaving (its heartbeat and its shards' leases are still there) and is restarted at
// once under the same name beside "a". The restarted process takes nothing until "a"
// has taken the dead incarnation's shards over (when its heartbeat aged out and its
// leases lapsed), then gets its share back by graceful handover. Without the hold-off
// it would take those shards itself as the leases lapsed, and "a" would never own them:
// in a crash loop each incarnation took the shards and died before firing them.
func TestRestartUnderADeadNameHoldsOffUntilTheOthersTookItsShare(t *testing.T) {
	// The order rests on a margin of one ownership round (LeaseTTL/3): 3 s makes it a
	// second, beyond what a loaded machine running the suite with -race delays a round.
	const ttl = 3 * time.Second
	r := testkit.StartRedis(t)
	ctx := context.Background()
	shardStore, err := redisstore.New(ctx, r.Client(), redisstore.Options{Prefix: "t", Cluster: "c", Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The dead incarnation of b: its last heartbeat, and the leases of its share.
	owners := membership.Owners([]string{"a", "b"}, 8)
	if err := shardStore.Heartbeat(ctx, "b", time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	var bShare int
	for sh, o := range owners {
		if o != "b" {
			continue
		}
		bShare++
		if tok, err := shardStore.AcquireLease(ctx, sh, "b#dead", ttl); err != nil || tok == 0 {
			t.Fatalf("acquire shard %d for the dead incarnation: %d %v", sh, tok, err)
		}
	}
	// The order of the two is read from each scheduler's own report at the end of every
	// ownership round (Observer.ShardsOwned), not by polling: a poll starved on a busy
	// machine could miss the moment a held all eight.
	var seq atomic.Int64
	var aAll, bFirst atomic.Int64 // the sequence number of a's first report of 8, of b's first of any
	var aRounds atomic.Int64
	obsA := ownedReports{f: func(n int) {
		aRounds.Add(1)
		if n == 8 {
			aAll.CompareAndSwap(0, seq.Add(1))
		}
	}}
	obsB := ownedReports{f: func(n int) {
		if n > 0 {
			bFirst.CompareAndSwap(0, seq.Add(1))
		}
	}}
	withAdmission := func(obs observe.Observer) func(o *scheduler.Options) {
		return func(o *scheduler.Options) {
			o.LeaseTTL, o.Admission, o.Observer = ttl, membership.NewAdmission(ttl), obs
		}
	}
	a := startScheduler(t, r, "a", &recordingSink{}, withAdmission(obsA))
	// b restarts beside a live a: a's first round (its heartbeat) comes first, or b's
	// first look would find nobody else and rightly join at once, as a lone replica does.
	waitFor(t, "a's first ownership round", 10*time.Second, func() bool { return aRounds.Load() > 0 })
	b := startScheduler(t, r, "b", &recordingSink{}, withAdmission(obsB))

	// OwnedShards changes within a round, its report comes at the round's end: wait for
	// both, or a check between the two reads b's report as missing.
	waitFor(t, "the restarted b owns its share and reported it", 30*time.Second, func() bool {
		return len(b.sched.OwnedShards()) == bShare && bFirst.Load() > 0
	})
	if fa, fb := aAll.Load(), bFirst.Load(); fa == 0 || fb < fa {
		t.Fatalf("the restarted b took shards (report #%d) before a had taken the dead incarnation's share over (a's report of all 8: #%d)", fb, fa)
	}
	waitFor(t, "a hands b's share back", 15*time.Second, func() bool { return len(a.sched.OwnedShards()) == 8-bShare })
}

// ownedReports is an Observer that passes each ShardsOwned report to f.
type ownedReports struct {
	observe.Nop
	f func(n int)
}

func (o ownedReports) ShardsOwned(n int) { o.f(n) }
