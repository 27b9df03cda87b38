package redistest

import (
	"context"
	"testing"
	"time"

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
	const ttl = time.Second
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
	withAdmission := func(o *scheduler.Options) { o.LeaseTTL, o.Admission = ttl, membership.NewAdmission(ttl) }
	a := startScheduler(t, r, "a", &recordingSink{}, withAdmission)
	b := startScheduler(t, r, "b", &recordingSink{}, withAdmission)

	aHadAll := false
	waitFor(t, "the restarted b owns its share", 10*time.Second, func() bool {
		nb := len(b.sched.OwnedShards())
		if nb > 0 && !aHadAll {
			t.Fatalf("the restarted b took shards %v before a had taken the dead incarnation's share over (a owns %v)",
				b.sched.OwnedShards(), a.sched.OwnedShards())
		}
		if len(a.sched.OwnedShards()) == 8 {
			aHadAll = true
		}
		return nb == bShare
	})
	waitFor(t, "a hands b's share back", 5*time.Second, func() bool { return len(a.sched.OwnedShards()) == 8-bShare })
}
