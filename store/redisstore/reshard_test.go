package redisstore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/testkit"
)

// retryRecorder counts RedisRetried by script.
type retryRecorder struct {
	observe.Nop
	mu sync.Mutex
	n  map[string]int
}

func (r *retryRecorder) RedisRetried(script, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[script+"/"+reason]++
}

// TestStoreAckWaitsOutSlotMigration: a shard's slot is half-moved between two masters
// of a real Redis Cluster, its index sub-hashes and done slices already on the target,
// every key the ack script declares still on the source. Ack must neither run there (it would meet the
// moved sub-hashes half-way and fail after its first writes) nor on the target; it
// waits (TRYAGAIN, retried and counted) until the slot is wholly moved, then acks: the
// ids are remembered as delivered, a replay of one is refused, no key is left on the
// source and the MIGRATEs met no BUSYKEY.
func TestStoreAckWaitsOutSlotMigration(t *testing.T) {
	rc := testkit.StartRedisCluster(t, 3)
	cc := rc.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := &retryRecorder{n: map[string]int{}}
	s, err := New(ctx, cc, Options{Shards: 4, DoneWindow: time.Hour, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	a := idsOnShard(s, 0, 300, "mig")
	for _, id := range a {
		mustPark(t, s, env(id, t0))
	}
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, t0, 1000)
	if len(items) != len(a) {
		t.Fatalf("claimed %d of %d", len(items), len(a))
	}
	if err := s.Ack(ctx, 0, a[:200], t0); err != nil {
		t.Fatal(err)
	}
	k := s.keys[0]

	slot, m, built := beginIndexFirstMove(t, rc, cc, k)
	defer m.Close()
	finished := make(chan error, 1)
	go func() {
		time.Sleep(700 * time.Millisecond)
		finished <- m.Finish(ctx)
	}()
	// Park pipelines its calls (one per shard): shard 0's is refused and sent again,
	// shard 1's goes through at once.
	fresh := []*envelope.Envelope{env(idsOnShard(s, 0, 1, "new")[0], t0), env(idsOnShard(s, 1, 1, "new")[0], t0)}
	var parked []bool
	var parkErr error
	var wg sync.WaitGroup
	wg.Go(func() { parked, _, parkErr = s.Park(ctx, fresh) })
	ackErr := s.Ack(ctx, 0, a[200:], t0+1000)
	wg.Wait()
	if parkErr != nil || len(parked) != 2 || !parked[0] || !parked[1] {
		t.Fatalf("Park during the slot move = %v, %v", parked, parkErr)
	}
	if err := <-finished; err != nil {
		t.Fatalf("finishing the slot move: %v", err)
	}
	if ackErr != nil {
		t.Fatalf("Ack during the slot move: %v", ackErr)
	}
	rec.mu.Lock()
	acks, parks := rec.n["ack/tryagain"], rec.n["park/tryagain"]
	rec.mu.Unlock()
	if acks == 0 || parks == 0 {
		t.Fatalf("ack or park ran while the slot was half-moved: retries counted %v", rec.n)
	}
	for _, id := range []string{a[0], a[199], a[200], a[299]} {
		wantState(t, s, id, StateDelivered, -1)
	}
	if parked := mustPark(t, s, env(a[250], t0)); parked[0] {
		t.Fatalf("a replay of %s, acked during the move, was parked again", a[250])
	}
	bad, _, err := rc.Misplaced(ctx)
	if err != nil || len(bad) > 0 {
		t.Fatalf("keys left where their slot is not served: %v %v", bad, err)
	}
	t.Logf("slot %d moved with %d index keys first; retries %v", slot, built, rec.n)
}

// beginIndexFirstMove starts moving the slot of shard keys k to another master and
// migrates the keys index.lua builds (sub-hashes, done slices) at once, leaving every
// declared key on the source.
func beginIndexFirstMove(t *testing.T, rc *testkit.RedisCluster, cc *redis.ClusterClient, k shardKeys) (int64, *testkit.SlotMove, int) {
	t.Helper()
	ctx := context.Background()
	slot, err := cc.ClusterKeySlot(ctx, k.ix).Result()
	if err != nil {
		t.Fatal(err)
	}
	from := nodeServing(t, rc, k.ix)
	to := rc.Nodes[0]
	if to == from {
		to = rc.Nodes[1]
	}
	m, err := rc.BeginSlotMove(ctx, int(slot), from, to)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := m.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var built []string // the keys index.lua builds: sub-hashes and done slices
	for _, key := range keys {
		if strings.HasPrefix(key, k.ix+":") || strings.HasPrefix(key, k.dn+":") {
			built = append(built, key)
		}
	}
	if len(built) < 2 {
		t.Fatalf("shard 0 has %d index keys: %v", len(built), keys)
	}
	if err := m.Migrate(ctx, built...); err != nil {
		t.Fatal(err)
	}
	return slot, m, len(built)
}

// nodeServing is the master whose slots include key's.
func nodeServing(t *testing.T, rc *testkit.RedisCluster, key string) *testkit.Redis {
	t.Helper()
	ctx := context.Background()
	for _, n := range rc.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			cl.Close()
			t.Fatal(err)
		}
		keys, err := cl.ClusterCountKeysInSlot(ctx, int(slot)).Result()
		cl.Close()
		if err == nil && keys > 0 {
			return n
		}
	}
	t.Fatalf("no node holds %s", key)
	return nil
}
