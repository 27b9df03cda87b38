package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The hot path's scripts run no Redis command they can do without: counts from INFO
// commandstats (a command a script runs shows there under its own name), never times.

// TestClaimReadsColdHeadOnce: a claim that finds no cold bucket to promote reads the
// cold tier's earliest bucket once (copromote keeps it for conext), and the due set's
// head once.
func TestClaimReadsColdHeadOnce(t *testing.T) {
	s, c, tok := newLeasedStore(t)
	ctx := storeCtx(t)
	now := time.Now().UnixMilli() // park reads the store's clock to pick the cold tier
	envs := []*envelope.Envelope{env("a", now), env("b", now), env("far", now+48*3600_000)}
	if _, _, err := s.Park(ctx, envs); err != nil {
		t.Fatal(err)
	}
	if n, err := c.ZCard(ctx, s.keys[0].coldBuckets()).Result(); err != nil || n != 1 {
		t.Fatalf("cold buckets: %d, %v; the far message should be cold", n, err)
	}
	resetStats(t, c)
	items, next, err := s.Claim(ctx, 0, "i1", tok, now, now+30_000, 10)
	if err != nil || len(items) != 2 {
		t.Fatalf("claim: %d items, %v", len(items), err)
	}
	if next <= now {
		t.Errorf("next due %d, want the cold message's due time", next)
	}
	if got := callsOf(t, c, "zrange"); got != 3 {
		t.Errorf("claim ran ZRANGE %d times, want 3 (cold tier head, due head, due buckets' head)", got)
	}
}

// TestParkDecidesColdByTheBatchsLatest: ParkEach tells park.lua that no message of a
// call can go cold when the latest due time of its batch is within the cold horizon
// (park then converts no due time); a batch with one message due beyond it still
// parks that one cold and the others in due, whatever their order in the batch.
func TestParkDecidesColdByTheBatchsLatest(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1})
	ctx := storeCtx(t)
	now := time.Now().UnixMilli() // park reads the store's clock to pick the cold tier
	far := now + 48*3600_000
	batches := [][]*envelope.Envelope{
		{env("a", now+1000), env("b", now+5000)},
		{env("c", now+1000), env("far1", far)},
		{env("far2", far), env("d", now+1000)},
	}
	for _, b := range batches {
		if _, _, err := s.Park(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	due, err := c.ZRange(ctx, s.keys[0].due, 0, -1).Result()
	if err != nil || strings.Join(due, ",") != "a,c,d,b" {
		t.Fatalf("due = %v, %v; want the four near messages a,c,d,b", due, err)
	}
	for _, id := range []string{"far1", "far2"} {
		if st, _, _, err := s.Get(ctx, id); err != nil || st != StatePending {
			t.Errorf("%s: %s, %v; want pending", id, st, err)
		}
	}
	if n, err := c.HGet(ctx, s.keys[0].coldState(), "n").Int(); err != nil || n != 2 {
		t.Errorf("cold tier holds %d, %v; want far1 and far2", n, err)
	}
}

// TestAckAddsDoneSliceOnce: acks whose done-window ids fall in one slice add that
// slice to dn once, when its list starts.
func TestAckAddsDoneSliceOnce(t *testing.T) {
	s, c, tok := newLeasedStore(t)
	ctx := storeCtx(t)
	const now = int64(1_700_000_000_000)
	if _, _, err := s.Park(ctx, []*envelope.Envelope{env("a", now), env("b", now), env("c", now)}); err != nil {
		t.Fatal(err)
	}
	items, _, err := s.Claim(ctx, 0, "i1", tok, now, now+30_000, 10)
	if err != nil || len(items) != 3 {
		t.Fatalf("claim: %d items, %v", len(items), err)
	}
	resetStats(t, c)
	for _, it := range items {
		if err := s.AckEnvelopes(ctx, []*envelope.Envelope{it}, now); err != nil {
			t.Fatal(err)
		}
	}
	if got := callsOf(t, c, "zadd"); got != 1 {
		t.Errorf("3 acks in one slice ran ZADD %d times, want 1", got)
	}
	if got := callsOf(t, c, "rpush"); got != 3 {
		t.Errorf("3 acks ran RPUSH %d times, want 3", got)
	}
	for _, id := range []string{"a", "b", "c"} {
		st, _, _, err := s.Get(ctx, id)
		if err != nil || st != StateDelivered {
			t.Errorf("%s: %s, %v; want delivered", id, st, err)
		}
	}
}

// newLeasedStore is a one-shard store on its own redis-server and a lease of its shard
// held by instance "i1".
func newLeasedStore(t *testing.T) (*Store, *redis.Client, int64) {
	t.Helper()
	s, _, c := newTestStore(t, Options{Shards: 1})
	tok, err := s.AcquireLease(storeCtx(t), 0, "i1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return s, c, tok
}

func resetStats(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// callsOf is INFO commandstats' calls of command name.
func callsOf(t *testing.T, c *redis.Client, name string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// TestAckWritesFarApartSlotsWithoutReadingTheSpan: an ack of Kafka default ids far
// apart in their block (messages of one fetch with scattered delays) writes each run
// of slots with its own SETRANGE instead of reading the span between them into Lua
// (every string there is hashed byte by byte); ids close together are still patched
// with one GETRANGE and one SETRANGE of their span. Both are remembered as delivered.
func TestAckWritesFarApartSlotsWithoutReadingTheSpan(t *testing.T) {
	s, c, tok := newLeasedStore(t)
	ctx := storeCtx(t)
	now := time.Now().UnixMilli()
	idsAt := func(partition int, offsets ...int) []*envelope.Envelope {
		var out []*envelope.Envelope
		for _, o := range offsets {
			out = append(out, env(kafkaID(partition, o), now))
		}
		return out
	}
	far := idsAt(6, 0, 1, 200, 400, 600, 1000) // 5 runs over a 10,010-byte span
	var close []*envelope.Envelope
	for o := 0; o <= 40; o += 2 {
		close = append(close, idsAt(5, o)...) // 21 runs over 410 bytes
	}
	all := append(append([]*envelope.Envelope{}, far...), close...)
	if parked := mustPark(t, s, all...); len(parked) != len(all) {
		t.Fatalf("parked %v", parked)
	}
	if items, _, err := s.Claim(ctx, 0, "i1", tok, now, now+30_000, 100); err != nil || len(items) != len(all) {
		t.Fatalf("claim: %d items, %v", len(items), err)
	}
	for _, tc := range []struct {
		name               string
		envs               []*envelope.Envelope
		getrange, setrange int64
	}{
		{"far apart", far, 0, 1 + 5}, // the new block's string, then one per run
		{"close together", close, 1, 1 + 1},
	} {
		resetStats(t, c)
		if err := s.AckEnvelopes(ctx, tc.envs, now); err != nil {
			t.Fatal(err)
		}
		if g, st := callsOf(t, c, "getrange"), callsOf(t, c, "setrange"); g != tc.getrange || st != tc.setrange {
			t.Errorf("%s: ack ran GETRANGE %d and SETRANGE %d times, want %d and %d", tc.name, g, st, tc.getrange, tc.setrange)
		}
		for _, e := range tc.envs {
			if st, _, _, err := s.Get(ctx, e.ID); err != nil || st != StateDelivered {
				t.Errorf("%s: %s: %s, %v; want delivered", tc.name, e.ID, st, err)
			}
		}
	}
}

// TestParkClaimKeepsTheQuickPath: a fetch of Kafka default ids parked with half of it
// claimed (ParkClaimEach reorders the call's messages, wanted ones first) still takes
// park's quick path: its block is tested with one BITCOUNT, not read with GETRANGE,
// and the pending and the claimed messages are written with one ZADD each.
func TestParkClaimKeepsTheQuickPath(t *testing.T) {
	s, c, tok := newLeasedStore(t)
	ctx := storeCtx(t)
	envs, cl := fetchClaimingAThird(30, tok)
	resetStats(t, c)
	_, claimed, _, err := s.ParkClaimEach(ctx, envs, cl)
	if err != nil || !slices.Equal(claimed, cl.Want) {
		t.Fatalf("ParkClaimEach: claimed %v, %v; want %v", claimed, err, cl.Want)
	}
	if b, g, z := callsOf(t, c, "bitcount"), callsOf(t, c, "getrange"), callsOf(t, c, "zadd"); b != 1 || g != 0 || z != 2 {
		t.Errorf("park ran BITCOUNT %d, GETRANGE %d, ZADD %d times; want 1, 0, 2 (the quick path)", b, g, z)
	}
}

// fetchClaimingAThird is a fetch of n Kafka default ids of one block, due over three
// seconds, parked under shard 0's lease (token tok), every third one wanted in flight
// as it is parked.
func fetchClaimingAThird(n int, tok int64) ([]*envelope.Envelope, storeapi.ParkClaim) {
	now := time.Now().UnixMilli()
	cl := storeapi.ParkClaim{Instance: "i1", Leases: map[int]storeapi.ParkLease{0: {Token: tok, LeaseDeadline: now + 30_000}}}
	var envs []*envelope.Envelope
	for off := range n {
		envs = append(envs, env(fmt.Sprintf("orders.delay/2/%d/%012x", 2*storeapi.ShardBlock+off, off), now+int64(off%3)*1000))
		cl.Want = append(cl.Want, off%3 == 0)
	}
	return envs, cl
}
