package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// countingStore counts ClaimMany calls; the first one waits until release is closed,
// so that the claims made meanwhile queue behind it.
type countingStore struct {
	*memstore.Store
	calls   atomic.Int32
	release chan struct{}
}

func (c *countingStore) ClaimMany(ctx context.Context, reqs []storeapi.ClaimRequest) []storeapi.ClaimResult {
	if c.calls.Add(1) == 1 {
		<-c.release
	}
	return c.Store.ClaimMany(ctx, reqs)
}

// TestClaimGroupSendsConcurrentClaimsTogether: claims made while one is under way go in
// one ClaimMany after it, not one call each, and every pump gets its own shard's
// messages back.
func TestClaimGroupSendsConcurrentClaimsTogether(t *testing.T) {
	const shards = 16
	ms, err := memstore.New(memstore.Options{Shards: shards, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Now().UnixMilli()
	tokens := make([]int64, shards)
	for sh := range shards {
		if tokens[sh], err = ms.AcquireLease(ctx, sh, "i1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int]string{}
	for i := 0; len(want) < shards; i++ {
		id := "c-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if sh := ms.ShardOf(id); want[sh] == "" {
			want[sh] = id
			if _, _, err := ms.Park(ctx, []*envelope.Envelope{{ID: id, Route: "r", DueAt: t0, ReceivedAt: t0}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := &countingStore{Store: ms, release: make(chan struct{})}
	var g claimGroup
	var wg sync.WaitGroup
	got := make([][]*envelope.Envelope, shards)
	errs := make([]error, shards)
	claim := func(sh int) {
		defer wg.Done()
		got[sh], _, _, _, errs[sh] = g.claim(ctx, st, storeapi.ClaimRequest{Shard: sh, Instance: "i1", Token: tokens[sh], UpTo: t0 + 1000, LeaseDeadline: t0 + 60_000, Limit: 10})
	}
	wg.Add(1)
	go claim(0) // leads, and waits in the store
	for st.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for sh := 1; sh < shards; sh++ {
		wg.Add(1)
		go claim(sh)
	}
	for {
		g.mu.Lock()
		queued := len(g.queue)
		g.mu.Unlock()
		if queued == shards-1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(st.release)
	wg.Wait()
	if n := st.calls.Load(); n != 2 {
		t.Errorf("%d ClaimMany calls for %d claims, want 2 (the first, then all the others together)", n, shards)
	}
	for sh := range shards {
		if errs[sh] != nil || len(got[sh]) != 1 || got[sh][0].ID != want[sh] {
			t.Errorf("shard %d: %v %v, want %s", sh, got[sh], errs[sh], want[sh])
		}
	}
	if g.busy || len(g.queue) != 0 {
		t.Errorf("after the last claim: busy %v, %d queued", g.busy, len(g.queue))
	}
}
