package redistest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/storeapi"
	"github.com/delaybridge/delay-bridge/testkit"
)

// A replace that reaches its message held in ANOTHER instance's wheel (claimed a
// lookahead before due): the release goes over the store's cancel channel, the holder
// puts its copy back and the successor takes its place. The old version is never
// published; the new one once, at its own due time, by whichever instance owns the
// shard.
func TestReplaceReleasesCopyHeldByAnotherInstance(t *testing.T) {
	r := testkit.StartRedis(t)
	long := func(o *scheduler.Options) { o.Lookahead = 3 * time.Second }
	a := startScheduler(t, r, "a", &recordingSink{}, long)
	b := startScheduler(t, r, "b", &recordingSink{}, long)
	waitFor(t, "both instances own shards", 15*time.Second, func() bool {
		na, nb := len(a.sched.OwnedShards()), len(b.sched.OwnedShards())
		return na > 0 && nb > 0 && na+nb == 8
	})
	bShard := b.sched.OwnedShards()[0]
	if slices.Contains(a.sched.OwnedShards(), bShard) {
		t.Fatalf("shard %d owned by both", bShard)
	}
	id := idsOnShard(a.shardStore, bShard, 1, "cart")[0]
	ctx := context.Background()
	oldDue := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	if _, _, err := a.shardStore.Park(ctx, []*envelope.Envelope{{ID: id, Route: "r", DueAt: oldDue, Payload: []byte("v1")}}); err != nil {
		t.Fatal(err)
	}
	a.sched.Wake(ctx, map[int]int64{a.shardStore.ShardOf(id): oldDue})
	waitFor(t, "b holds it in its wheel", 5*time.Second, func() bool { return b.sched.InMemory().Wheel == 1 })

	newDue := oldDue + 2000
	res, err := a.sched.Replace(ctx, []*envelope.Envelope{{ID: id, Route: "r", DueAt: newDue, Payload: []byte("v2")}})
	if err != nil || res[0] != (storeapi.ReplaceResult{Prior: storeapi.StateInflight, Outcome: storeapi.ReplaceReplaced}) {
		t.Fatalf("Replace = %+v %v, want replaced in flight", res, err)
	}
	waitFor(t, "the new version published", 10*time.Second, func() bool {
		return len(a.sink.snapshot())+len(b.sink.snapshot()) > 0
	})
	time.Sleep(500 * time.Millisecond)
	got := append(a.sink.snapshot(), b.sink.snapshot()...)
	if len(got) != 1 || got[0].due != newDue || got[0].at < newDue {
		t.Fatalf("published %+v, want once, the new version (due %d), not before it (old due %d)", got, newDue, oldDue)
	}
	if st, _, _, err := a.shardStore.Get(ctx, id); err != nil || st != storeapi.StateDelivered {
		t.Fatalf("state %q %v, want delivered", st, err)
	}
}
