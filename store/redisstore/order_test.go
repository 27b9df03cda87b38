package redisstore

import (
	"slices"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// A key's head removed without the ordered wrappers (damage) would block its key for
// good; the sweep that every recover call runs replaces it.
func TestOrderSweepRepairsAHeadRemovedBehindItsBack(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 4, Ordered: []string{"orders"}})
	ctx := storeCtx(t)
	const t0 = int64(1_700_000_000_000)
	a, b := env("a", t0), env("b", t0+1)
	a.Key, b.Key = []byte("K"), []byte("K")
	if _, _, err := s.Park(ctx, []*envelope.Envelope{a, b}); err != nil {
		t.Fatal(err)
	}
	sh := storeapi.ShardOfKey("orders", "K", 4)
	k := s.keys[sh]
	// Remove the head as a script that knows nothing of keys would.
	if err := c.ZRem(ctx, k.due, "a").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HDel(ctx, k.msg, "a").Err(); err != nil {
		t.Fatal(err)
	}
	tok, err := s.AcquireLease(ctx, sh, "i1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if items, _, err := s.Claim(ctx, sh, "i1", tok, t0+1000, t0+60000, 10); err != nil || len(items) != 0 {
		t.Fatalf("claim before the sweep = %v, %v: want nothing (b waits behind the vanished head)", items, err)
	}
	if _, _, err := s.Recover(ctx, sh, t0, 10); err != nil {
		t.Fatal(err)
	}
	items, _, err := s.Claim(ctx, sh, "i1", tok, t0+1000, t0+60000, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range items {
		got = append(got, e.ID)
	}
	if !slices.Equal(got, []string{"b"}) {
		t.Fatalf("claim after the sweep = %v, want [b]", got)
	}
}
