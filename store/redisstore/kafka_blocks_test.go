package redisstore

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// TestKafkaIDsRememberedInBlocks: delivered ids of the Kafka default form are kept in
// their blocks' slots, not in the id index: one string of 1024 slots of 10 bytes (the
// record hash, the second delivered) per block, allocated whole when the block starts,
// named in the blocks set with its latest delivery; and a trim a window after a
// block's latest delivery deletes it with its entry.
func TestKafkaIDsRememberedInBlocks(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	k := s.keys[0]
	// Offsets 500..1599 of partition 2: the end of block 0 and the start of block 1.
	idList := make([]string, 1100)
	for i := range idList {
		idList[i] = fmt.Sprintf("orders.delay/2/%d/%012x", 500+i, 0xabc000+i)
	}
	parkClaimAck(t, s, idList, t0)

	if n := c.HGet(ctx, k.ix, "n").Val(); n != "" && n != "0" {
		t.Fatalf("the id index holds %s entries; Kafka-form ids belong in their blocks", n)
	}
	blocks := c.ZRangeWithScores(ctx, kbKey(k, ""), 0, -1).Val()
	if len(blocks) != 2 || blocks[0].Member != "orders.delay/2/0" || blocks[1].Member != "orders.delay/2/1" {
		t.Fatalf("blocks set %v, want orders.delay/2/0 and orders.delay/2/1", blocks)
	}
	key := kbKey(k, "orders.delay/2/1")
	if n := c.StrLen(ctx, key).Val(); n != 1024*10 {
		t.Fatalf("block string of %d bytes, want 10240 (1024 slots, allocated whole)", n)
	}
	// Offset 1550 is slot 526 of block 1: hash 0xabc000+1050, then t0 in seconds.
	slot := c.GetRange(ctx, key, 5260, 5269).Val()
	want, _ := hex.DecodeString(fmt.Sprintf("%012x%08x", 0xabc000+1050, t0/1000))
	if slot != string(want) {
		t.Fatalf("slot of offset 1550 = %x, want %x", slot, want)
	}
	wantState(t, s, idList[1050], StateDelivered, t0)

	// An ack a window after the blocks' latest delivery forgets them whole.
	later := t0 + time.Minute.Milliseconds() + 1
	if err := s.Ack(ctx, 0, []string{"none"}, later); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, key, kbKey(k, "orders.delay/2/0"), kbKey(k, "")).Val(); n != 0 {
		t.Fatalf("%d block keys left after the trim, want none", n)
	}
	wantState(t, s, idList[1050], StateUnknown, -1)
}

// kbKey is the blocks set of shard keys k (name ""), or block name's string, as
// lua/includes/index.lua names them.
func kbKey(k shardKeys, name string) string {
	base := k.ix[:len(k.ix)-len("ix")] + "kb"
	if name == "" {
		return base
	}
	return base + ":" + name
}

// TestAckNotesManyBlocksOnce: an ack whose ids fall in many blocks (messages due
// together, parked from many blocks) notes every block's latest delivery with one ZADD
// and one ZMSCORE, not one ZADD per block, and still allocates each new block whole.
func TestAckNotesManyBlocksOnce(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	k := s.keys[0]
	var idList []string
	for p := range 10 {
		idList = append(idList, fmt.Sprintf("orders.delay/%d/%d/%012x", p, 5000+p, 0xbeef00+p))
	}
	tok := mustLease(t, s, 0, "i1")
	envs := make([]*envelope.Envelope, len(idList))
	for i, id := range idList {
		envs[i] = env(id, t0)
	}
	mustPark(t, s, envs...)
	items, _ := mustClaim(t, s, 0, tok, t0, 100)
	if len(items) != len(idList) {
		t.Fatalf("claimed %d of %d", len(items), len(idList))
	}
	resetStats(t, c)
	if err := s.AckEnvelopes(ctx, items, t0); err != nil {
		t.Fatal(err)
	}
	if got := callsOf(t, c, "zadd"); got != 1 {
		t.Errorf("an ack touching 10 blocks ran ZADD %d times, want 1", got)
	}
	for p := range 10 {
		if n := c.StrLen(ctx, kbKey(k, fmt.Sprintf("orders.delay/%d/4", p))).Val(); n != 1024*10 {
			t.Errorf("block orders.delay/%d/4 of %d bytes, want 10240 (allocated whole)", p, n)
		}
	}
	for _, id := range idList {
		wantState(t, s, id, StateDelivered, t0)
	}
}
