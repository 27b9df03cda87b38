package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// The marks of the Kafka blocks whose ids have index entries (lua/includes/kbmark.lua),
// on a redis-server of its own: a park looks Kafka-form ids up in the index only in a
// marked block, a marked block's cold places and tombstones still refuse their ids, and
// marks that stand for nothing any more are deleted.

// blockIDs are n Kafka-form ids of one partition's block 0 (offsets from..from+n-1).
func blockIDs(partition, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = kafkaID(partition, from+i)
	}
	return out
}

// kafkaID is the Kafka default id of offset of partition of orders.delay.
func kafkaID(partition, offset int) string {
	return fmt.Sprintf("orders.delay/%d/%d/%012x", partition, offset, (0xbeef00+offset)&0xffffffffffff)
}

// marksOf returns the block marks of shard keys k: kind "p" (cold places) or "c"
// (tombstones), block name -> score.
func marksOf(t *testing.T, c *redis.Client, k shardKeys, kind string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, z := range c.ZRangeWithScores(storeCtx(t), k.ix[:len(k.ix)-len("ix")]+"kx"+kind, 0, -1).Val() {
		out[z.Member.(string)] = int64(z.Score)
	}
	return out
}

func TestKafkaBlockMarksSkipIndex(t *testing.T) {
	s, c := newColdStore(t, Options{Shards: 1, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	k := s.keys[0]
	now := t0 - 3_600_000 // newColdStore's clock

	// A cold message of partition 1's block and a tombstone (a cancel before its
	// message) of partition 3's: both are index entries, and mark their blocks.
	cold := blockIDs(1, 0, 1)[0]
	mustPark(t, s, env(cold, t0))
	tomb := blockIDs(3, 0, 1)[0]
	if st, _, err := s.Cancel(ctx, tomb, now, CancelOptions{Route: "r", Tombstone: true}); err != nil || st != StateUnknown {
		t.Fatalf("cancel before the message = %q %v", st, err)
	}
	p, cm := marksOf(t, c, k, "p"), marksOf(t, c, k, "c")
	if len(p) != 1 || p["orders.delay/1/0"] != t0/coldW || len(cm) != 1 || cm["orders.delay/3/0"] != now/1000 {
		t.Fatalf("block marks %v and %v, want orders.delay/1/0 at its bucket and orders.delay/3/0 at the cancel's second", p, cm)
	}

	// A fetch of partition 2's block, due soon: its block has no mark, so none of its
	// ids is looked up in the index (the index holds entries: one HGET per id else).
	fetch := blockIDs(2, 0, 10)
	var envs []*envelope.Envelope
	for _, id := range fetch {
		envs = append(envs, env(id, now+2_000))
	}
	resetStats(t, c)
	if parked := mustPark(t, s, envs...); len(parked) != 10 || !parked[0] || !parked[9] {
		t.Fatalf("parked %v, want all 10", parked)
	}
	if n := callsOf(t, c, "hget"); n > 1 {
		t.Errorf("park of an unmarked block ran HGET %d times, want at most 1 (the cold watermark): its ids were looked up in the index", n)
	}

	// The marked blocks' ids are still looked up: a replay of the cold message and the
	// cancelled message are refused.
	prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{env(cold, t0), envOn(tomb, "r", now+2_000)})
	if err != nil || prior[0] != StatePending || prior[1] != StateCancelled {
		t.Fatalf("replay into marked blocks = %v %v, want pending (cold) and cancelled", prior, err)
	}

	// Once the cold message's bucket is promoted whole and the tombstone's slice
	// trimmed, neither mark stands for anything and both are gone.
	tok := mustLease(t, s, 0, "i1")
	mustClaim(t, s, 0, tok, (t0/coldW+1)*coldW, 100)
	mustClaim(t, s, 0, tok, (t0/coldW+1)*coldW, 100) // the emptied bucket is deleted
	if n := len(coldEntries(t, s, c, 0)); n != 0 {
		t.Fatalf("%d cold places left after the promotion", n)
	}
	if p := marksOf(t, c, k, "p"); len(p) != 0 {
		t.Fatalf("place marks %v left after their bucket was promoted", p)
	}
	later := now + time.Minute.Milliseconds() + 2*s.doneSliceMs()
	for range 3 {
		if err := s.Ack(ctx, 0, []string{"none"}, later); err != nil {
			t.Fatal(err)
		}
	}
	if cm := marksOf(t, c, k, "c"); len(cm) != 0 {
		t.Fatalf("cancel marks %v left after their slice was trimmed", cm)
	}
	wantState(t, s, tomb, StateUnknown, -1)
}
