package redisstore

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// The cold tier (lua/includes/cold.lua, cold.go) on a redis-server of its own: where messages
// live, promotion, counts, and the by-id rules that keep it exact. (The conformance
// suite runs all of the contract on it too: TestConformance*Cold.)

const coldW = 65536 // lua/includes/cold.lua's CO_W

// newColdStore: "now" is an hour before t0 and messages due a minute or more ahead go
// cold, so everything the tests park around t0 is cold.
func newColdStore(t *testing.T, opt Options) (*Store, *redis.Client) {
	t.Helper()
	opt.Clock = fixedClock(t0 - 3_600_000)
	if opt.Cold.Horizon == 0 {
		opt.Cold.Horizon = time.Minute
	}
	s, _, c := newTestStore(t, opt)
	return s, c
}

// coldEntries returns the index entries that place a cold message ("p..."), by fp.
func coldEntries(t *testing.T, s *Store, c *redis.Client, shard int) map[string]string {
	t.Helper()
	ctx := storeCtx(t)
	keys, err := c.Keys(ctx, s.keys[shard].ix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		for fp, v := range c.HGetAll(ctx, k).Val() {
			if strings.HasPrefix(v, "p") {
				out[fp] = v
			}
		}
	}
	return out
}

func coldLen(t *testing.T, s *Store, c *redis.Client, shard int) int64 {
	t.Helper()
	ctx := storeCtx(t)
	var n int64
	for _, b := range c.ZRange(ctx, s.keys[shard].coldBuckets(), 0, -1).Val() {
		n += c.LLen(ctx, s.keys[shard].coldBuckets()+":"+b).Val()
	}
	return n
}

// TestColdTierPlacesAndPromotes: messages due an hour ahead are bucket elements with an
// index entry each, not due members or msg fields; they read as pending (by id, counts,
// stats, ranges); a claim promotes a bucket only once its start is within the lead of
// the claim's horizon, then they are ordinary pending messages and their index entries
// and buckets are gone.
func TestColdTierPlacesAndPromotes(t *testing.T) {
	s, c := newColdStore(t, Options{})
	ctx := storeCtx(t)
	ids := idsOnShard(s, 1, 10, "ct")
	var envs []*envelope.Envelope
	for i, id := range ids {
		due := t0 + int64(i)*1000 // cold
		if i < 4 {
			due = t0 - 3_600_000 + 30_000 // 30 s ahead: due
		}
		envs = append(envs, env(id, due))
	}
	mustPark(t, s, envs...)
	k := s.keys[1]
	if n := c.ZCard(ctx, k.due).Val(); n != 4 {
		t.Fatalf("due holds %d, want the 4 near messages", n)
	}
	if n := c.HLen(ctx, k.msg).Val(); n != 4 {
		t.Fatalf("msg holds %d, want 4", n)
	}
	if n := coldLen(t, s, c, 1); n != 6 {
		t.Fatalf("cold buckets hold %d elements, want 6", n)
	}
	if n := len(coldEntries(t, s, c, 1)); n != 6 {
		t.Fatalf("%d index entries place cold messages, want 6", n)
	}
	e := wantState(t, s, ids[7], StatePending, t0+7000)
	if string(e.Payload) != "payload "+ids[7] {
		t.Fatalf("cold message read back as %+v", e)
	}
	if n, err := s.CountRange(ctx, StatePending, t0, t0+5000); err != nil || n != 2 {
		t.Fatalf("CountRange(t0, t0+5s) = %d, %v; want 2 (due t0+4s, t0+5s)", n, err)
	}
	if v, ok, err := s.EdgeScore(ctx, StatePending, t0, 0, true); err != nil || !ok || v != t0+9000 {
		t.Fatalf("EdgeScore(highest) = %d %v %v, want t0+9s", v, ok, err)
	}
	st, err := s.ShardStats(ctx)
	if err != nil || st[1].Pending != 10 || st[1].NextDue != t0-3_570_000 {
		t.Fatalf("ShardStats[1] = %+v, %v: want 10 pending, next due the near ones", st[1], err)
	}

	tok := mustLease(t, s, 1, "i1")
	start := (t0 / coldW) * coldW
	lead := defaultColdLead.Milliseconds()
	items, next := mustClaim(t, s, 1, tok, start-lead-1, 100)
	if len(items) != 4 || next != t0+4000 {
		t.Fatalf("claim before the lead = %d items, next %d: want the 4 near ones, next t0+4s (%d)", len(items), next, t0+4000)
	}
	if n := coldLen(t, s, c, 1); n != 6 {
		t.Fatalf("promoted before the lead: %d cold elements left", n)
	}
	items, next = mustClaim(t, s, 1, tok, start-lead, 100)
	if len(items) != 0 || next != t0+4000 {
		t.Fatalf("claim at the lead = %d items, next %d: want none (promoted, not due), next t0+4s", len(items), next)
	}
	if n := c.ZCard(ctx, k.due).Val(); n != 6 {
		t.Fatalf("after promotion due holds %d, want 6", n)
	}
	if n := c.ZCard(ctx, k.coldBuckets()).Val(); n != 0 || len(coldEntries(t, s, c, 1)) != 0 {
		t.Fatalf("after promotion %d buckets and %d cold index entries are left", n, len(coldEntries(t, s, c, 1)))
	}
	if v := c.HGet(ctx, k.coldState(), "n").Val(); v != "0" {
		t.Fatalf("cold count after promotion = %q, want 0", v)
	}
	wantState(t, s, ids[7], StatePending, t0+7000)
	items, _ = mustClaim(t, s, 1, tok, t0+9000, 100)
	if len(items) != 6 {
		t.Fatalf("claimed %d, want the 6 promoted", len(items))
	}
	for _, e := range items {
		if e.FireAt < t0 || e.FireAt > t0+9000 {
			t.Fatalf("%s fires at %d, outside its due times", e.ID, e.FireAt)
		}
	}
}

// TestColdTierPromotionBudget: a bucket larger than the promotion budget is promoted
// over several claims; while it is, a claim says "claim again at once" (next 0) and
// nothing is claimed before it is due.
func TestColdTierPromotionBudget(t *testing.T) {
	s, c := newColdStore(t, Options{Shards: 1, Cold: ColdOptions{Budget: 700}})
	start := (t0/coldW + 1) * coldW // a whole bucket ahead of t0
	var envs []*envelope.Envelope
	for i := range 2500 {
		envs = append(envs, env(fmt.Sprintf("b%d", i), start+int64(i%60_000)))
	}
	for lo := 0; lo < len(envs); lo += 500 {
		mustPark(t, s, envs[lo:lo+500]...)
	}
	if n := coldLen(t, s, c, 0); n != 2500 {
		t.Fatalf("%d cold elements, want 2500", n)
	}
	tok := mustLease(t, s, 0, "i1")
	upTo := start + 30_000
	claimed, calls, zeros := 0, 0, 0
	for calls < 50 {
		items, next := mustClaim(t, s, 0, tok, upTo, 5000)
		calls++
		for _, e := range items {
			if e.FireAt > upTo {
				t.Fatalf("%s claimed at %d before its due time %d", e.ID, upTo, e.FireAt)
			}
		}
		claimed += len(items)
		if next != 0 {
			break
		}
		zeros++
	}
	if zeros < 3 {
		t.Fatalf("%d claims said the promotion continues, want at least 3 for 2500 elements at 700 a call", zeros)
	}
	want := 0
	for i := range 2500 {
		if int64(i%60_000) <= 30_000 {
			want++
		}
	}
	if claimed != want {
		t.Fatalf("claimed %d, want %d (those due by the claim's horizon)", claimed, want)
	}
	if n := c.Exists(storeCtx(t), s.keys[0].coldBuckets()).Val(); n != 0 {
		t.Fatalf("the bucket index is left after the promotion")
	}
}

// ixSlot is lua/includes/index.lua's ixslot: the index sub-hash of fp.
func ixSlot(t *testing.T, s *Store, c *redis.Client, shard int, fp string) string {
	t.Helper()
	v := c.HMGet(storeCtx(t), s.keys[shard].ix, "level", "split").Val()
	level, split := 6, 0
	if x, ok := v[0].(string); ok {
		fmt.Sscan(x, &level)
	}
	if x, ok := v[1].(string); ok {
		fmt.Sscan(x, &split)
	}
	h := uint64(binary.BigEndian.Uint32([]byte(fp[:4])))
	m := uint64(1) << level
	k := h % m
	if k < uint64(split) {
		k = h % (2 * m)
	}
	return fmt.Sprintf("%s:%d", s.keys[shard].ix, k)
}

// TestColdTierExactOnCollision: an index entry is trusted only when the element it
// points at holds the same id. An id whose fingerprint's entry points at another id's
// cold message (what a fingerprint collision looks like) is parked anyway, in due, and
// both messages stay readable and claimable.
func TestColdTierExactOnCollision(t *testing.T) {
	s, c := newColdStore(t, Options{Shards: 1})
	ctx := storeCtx(t)
	mustPark(t, s, env("a", t0))
	entries := coldEntries(t, s, c, 0)
	if len(entries) != 1 {
		t.Fatalf("%d cold entries, want 1", len(entries))
	}
	var mark string
	for _, v := range entries {
		mark = v
	}
	fpB := fingerprint("b")
	if err := c.HSet(ctx, ixSlot(t, s, c, 0, fpB), fpB, mark).Err(); err != nil {
		t.Fatal(err)
	}
	if got := mustPark(t, s, env("b", t0+5)); !got[0] {
		t.Fatalf("b was refused: its fingerprint's entry points at a's message")
	}
	if c.ZScore(ctx, s.keys[0].due, "b").Val() != float64(t0+5) {
		t.Fatalf("b is not in due")
	}
	wantState(t, s, "a", StatePending, t0)
	wantState(t, s, "b", StatePending, t0+5)
	tok := mustLease(t, s, 0, "i1")
	if items, _ := mustClaim(t, s, 0, tok, t0+5, 10); len(items) != 2 {
		t.Fatalf("claimed %v, want a and b", ids(items))
	}
}

// TestColdTierRollbackDuplicate: a release without the cold tier parked an id that is
// also cold (it could not see it): the promotion keeps the copy in msg, drops the cold
// one, and takes it out of the route's pending count, so one message is claimed.
func TestColdTierRollbackDuplicate(t *testing.T) {
	s, c := newColdStore(t, Options{Shards: 1})
	ctx := storeCtx(t)
	mustPark(t, s, env("x", t0))
	raw, err := envelope.Encode(env("x", t0))
	if err != nil {
		t.Fatal(err)
	}
	k := s.keys[0]
	c.HSet(ctx, k.msg, "x", raw)
	c.ZAdd(ctx, k.due, redis.Z{Score: float64(t0), Member: "x"})
	c.HIncrBy(ctx, k.counts, "pending:orders", 1)
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, t0, 10)
	if len(items) != 1 {
		t.Fatalf("claimed %d copies of x, want 1", len(items))
	}
	counts, err := s.RouteCounts(ctx)
	if r := counts.Routes()["orders"]; err != nil || r.Inflight != 1 || r.Pending != 0 {
		t.Fatalf("counts %+v, %v: want 1 in flight, none pending", counts, err)
	}
}
