package redisstore

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// scanKeys lists the keys matching pattern.
func scanKeys(t *testing.T, c *redis.Client, pattern string) []string {
	t.Helper()
	var out []string
	iter := c.Scan(storeCtx(t), 0, pattern, 1000).Iterator()
	for iter.Next(storeCtx(t)) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// parkClaimAck parks ids on shard 0 of s, claims them and acks them at now.
func parkClaimAck(t *testing.T, s *Store, idList []string, now int64) {
	t.Helper()
	ctx := storeCtx(t)
	for start := 0; start < len(idList); start += 500 {
		var envs []*envelope.Envelope
		for _, id := range idList[start:min(start+500, len(idList))] {
			envs = append(envs, env(id, t0))
		}
		mustPark(t, s, envs...)
	}
	tok := mustLease(t, s, 0, "i1")
	for {
		items, _ := mustClaim(t, s, 0, tok, t0, 500)
		if len(items) == 0 {
			break
		}
		if err := s.AckEnvelopes(ctx, items, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ReleaseLease(ctx, 0, "i1", tok); err != nil {
		t.Fatal(err)
	}
}

// TestStoreIndexLayout: the store keeps the done window in index sub-hashes that stay
// listpacks (split by linear hashing as they fill: entries/sub-hash stays near the
// target), keyed by the 12-byte fingerprint, with the entry count kept exactly, and in
// done slices that the trim deletes whole, leaving no key behind.
func TestStoreIndexLayout(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	k := s.keys[0]
	// More than 64 sub-hashes (the index's start) of 48 each: the index splits.
	const n = 5000
	idList := make([]string, n)
	for i := range idList {
		idList[i] = fmt.Sprintf("ix-%d", i)
	}
	parkClaimAck(t, s, idList, t0)

	state, err := c.HGetAll(ctx, k.ix).Result()
	if err != nil {
		t.Fatal(err)
	}
	level, _ := strconv.Atoi(state["level"])
	split, _ := strconv.Atoi(state["split"])
	if state["n"] != strconv.Itoa(n) {
		t.Fatalf("index state %v, want n=%d", state, n)
	}
	if nb := 1<<level + split; nb < n/48 || level != 6 || split == 0 {
		t.Fatalf("%d sub-hashes for %d entries (%v): not split to the target of 48", nb, n, state)
	}
	checkSubHashes(t, c, k, idList, 1<<level+split)
	// One done slice holds the 5000 fingerprints, one element per ack call.
	slices := c.ZRange(ctx, k.dn, 0, -1).Val()
	if len(slices) != 1 {
		t.Fatalf("done slices %v, want one", slices)
	}
	elems := c.LRange(ctx, k.dn+":"+slices[0], 0, -1).Val()
	if len(elems) != n/500 || len(strings.Join(elems, "")) != n*fpBytes {
		t.Fatalf("done slice of %d elements, %d bytes, want %d and %d", len(elems), len(strings.Join(elems, "")), n/500, n*fpBytes)
	}
	wantState(t, s, idList[7], StateDelivered, t0)

	// Past the window, tombstones trim a bounded number per call (16) until nothing is
	// left of the 5000 (only the tombstones themselves).
	later := t0 + time.Minute.Milliseconds() + s.doneSliceMs()
	for i := range 400 {
		if _, _, err := s.Cancel(ctx, fmt.Sprintf("trim-%d", i), later, CancelOptions{Route: "x", Tombstone: true}); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.HGet(ctx, k.ix, "n").Val(); got != "400" {
		t.Fatalf("index holds %s entries after the trim, want the 400 tombstones", got)
	}
	for _, key := range scanKeys(t, c, k.dn+":*") {
		if !strings.HasPrefix(key, fmt.Sprintf("%s:%d:", k.dn, later-later%s.doneSliceMs())) {
			t.Fatalf("done slice %s left after the trim", key)
		}
	}
	wantState(t, s, idList[7], StateUnknown, -1)
}

// checkSubHashes: the index has want sub-hashes, all listpacks, holding exactly the
// fingerprints of idList, each with the delivery time t0 in seconds.
func checkSubHashes(t *testing.T, c *redis.Client, k shardKeys, idList []string, want int) {
	t.Helper()
	ctx := storeCtx(t)
	n := len(idList)
	subs := scanKeys(t, c, k.ix+":*")
	if len(subs) != want {
		t.Fatalf("%d sub-hashes, want 2^level+split = %d", len(subs), want)
	}
	fps := map[string]bool{}
	total := 0
	for _, sub := range subs {
		if enc := c.ObjectEncoding(ctx, sub).Val(); enc != "listpack" && enc != "ziplist" {
			t.Fatalf("%s is a %s (%d entries), want a listpack", sub, enc, c.HLen(ctx, sub).Val())
		}
		m := c.HGetAll(ctx, sub).Val()
		total += len(m)
		for f, v := range m {
			fps[f] = true
			if v != strconv.FormatInt(t0/1000, 10) {
				t.Fatalf("%s: state %q, want the delivery time in seconds %d", sub, v, t0/1000)
			}
		}
	}
	if total != n {
		t.Fatalf("%d entries in the sub-hashes, want %d", total, n)
	}
	for _, id := range idList {
		if fp := fingerprint(id); len(fp) != fpBytes || !fps[fp] {
			t.Fatalf("%s: its fingerprint (%d bytes) is not an index field", id, len(fp))
		}
		if fps[id] {
			t.Fatalf("%s is an index field itself", id)
		}
	}
}

// A fingerprint is the id index's key (SHA-256's first 12 bytes), and for a Kafka
// default id also its block slot, record hash and block name (an ack's with zero bytes
// in place of the SHA-256): built for every message parked and acknowledged, it
// allocates nothing but its string.
func TestFingerprintBytesAndAllocations(t *testing.T) {
	kafka, user := "orders.delay/3/1234567/0123456789ab", "a-user-given-id-longer-than-thirty-two-bytes"
	sum := func(id string) string { s := sha256.Sum256([]byte(id)); return string(s[:fpBytes]) }
	// offset 1234567 = block 1205, slot 647 (0x0287)
	tail := "\x02\x87\x01\x23\x45\x67\x89\xab" + "orders.delay/3/1205"
	for _, c := range []struct{ name, got, want string }{
		{"kafka", fingerprint(kafka), sum(kafka) + tail},
		{"kafka ack", ackFingerprint(kafka), strings.Repeat("\x00", fpBytes) + tail},
		{"user", fingerprint(user), sum(user)},
		{"user ack", ackFingerprint(user), sum(user)},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	for _, id := range []string{kafka, user} {
		if n := testing.AllocsPerRun(100, func() { _ = fingerprint(id); _ = ackFingerprint(id) }); n != 2 {
			t.Errorf("fingerprint and ackFingerprint of %q: %v allocations, want 2 (their strings)", id, n)
		}
	}
}
