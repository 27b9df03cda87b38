package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

func init() {
	register("ShardOfKafkaBlock", caseShardOfKafkaBlock)
}

// An id of the Kafka default form "<topic>/<partition>/<offset>/<hash>" lives in the
// shard of "<topic>/<partition>/<offset / ShardBlock>" (docs/CONTRACT.md §3), so the
// records of one block of a partition are parked, claimed and acknowledged together;
// every by-id operation finds them from the id alone, whoever gave it.
func caseShardOfKafkaBlock(t *testing.T, newSubject func(Config) Subject) {
	const shards = 64
	s := newSubject(Config{Shards: shards, DoneWindow: time.Hour}).Store
	ctx := storeCtx(t)
	base := int64(5 * storeapi.ShardBlock)
	want := fnvShard(fmt.Sprintf("orders.delay/2/%d", base/storeapi.ShardBlock), shards)
	var envs []*envelope.Envelope
	for off := base; off < base+300; off++ {
		id := fmt.Sprintf("orders.delay/2/%d/%012x", off, off*7919)
		if got := s.ShardOf(id); got != want {
			t.Fatalf("ShardOf(%s) = %d, want %d (its block's shard)", id, got, want)
		}
		envs = append(envs, env(id, t0+off-base))
	}
	next := fmt.Sprintf("orders.delay/2/%d/000000000000", base+storeapi.ShardBlock)
	if got, w := s.ShardOf(next), fnvShard(fmt.Sprintf("orders.delay/2/%d", base/storeapi.ShardBlock+1), shards); got != w {
		t.Fatalf("ShardOf(%s) = %d, want %d (the next block's shard)", next, got, w)
	}
	parked, minDue, err := s.Park(ctx, envs)
	if err != nil || len(minDue) != 1 || minDue[want] != t0 {
		t.Fatalf("Park: minDue %v, %v; want only shard %d", minDue, err, want)
	}
	for i, p := range parked {
		if !p {
			t.Fatalf("%s not parked", envs[i].ID)
		}
	}
	// By id: Get and Cancel find them from the id alone.
	wantState(t, s, envs[7].ID, storeapi.StatePending, t0+7)
	if st, _, err := s.Cancel(ctx, envs[9].ID, t0, storeapi.CancelOptions{Route: "orders"}); err != nil || st != storeapi.StatePending {
		t.Fatalf("Cancel(%s) = %q, %v; want pending", envs[9].ID, st, err)
	}
	tok := mustLease(t, s, want, "i1")
	items, _ := mustClaim(t, s, want, tok, t0+1000, 1000)
	if len(items) != len(envs)-1 {
		t.Fatalf("claimed %d of shard %d, want %d", len(items), want, len(envs)-1)
	}
	if err := s.Ack(ctx, want, ids(items), t0+2000); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	wantState(t, s, envs[7].ID, storeapi.StateDelivered, -1)
	wantState(t, s, envs[9].ID, storeapi.StateCancelled, -1)
	// A replay of the whole block is refused by id.
	parked, _, err = s.Park(ctx, envs)
	if err != nil {
		t.Fatalf("Park again: %v", err)
	}
	for i, p := range parked {
		if p {
			t.Fatalf("%s parked again after it was done", envs[i].ID)
		}
	}
}
