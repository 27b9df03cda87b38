package store

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// evalshaCalls is Redis's own count of EVALSHA calls so far (INFO commandstats).
func evalshaCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(storeCtx(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// On a standalone Redis a batch spread over most of the 64 shards is parked, and its
// claimed messages acked, in one script call each; every message still gets its own
// reply (a replayed half reads "pending", the new half parks), and the per-route counts
// of every shard stay exact.
func TestParkAndAckMergeShardsOnStandalone(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 64})
	ctx := storeCtx(t)
	envs := make([]*envelope.Envelope, 300)
	shards := map[int]bool{}
	for i := range envs {
		envs[i] = env(fmt.Sprintf("merge-%d", i), t0+int64(i))
		shards[s.ShardOf(envs[i].ID)] = true
	}
	if len(shards) < 50 {
		t.Fatalf("only %d shards touched: the test needs a batch spread over most shards", len(shards))
	}
	before := evalshaCalls(t, c)
	if _, _, err := s.Park(ctx, envs[:150]); err != nil {
		t.Fatal(err)
	}
	if got := evalshaCalls(t, c) - before; got != 1 {
		t.Fatalf("parking 150 messages over %d shards took %d script calls, want 1", len(shards), got)
	}
	prior, _, err := s.ParkEach(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range prior {
		want := StateUnknown // parked now
		if i < 150 {
			want = StatePending // the replayed half
		}
		if st != want {
			t.Fatalf("message %d (shard %d): prior state %q, want %q", i, s.ShardOf(envs[i].ID), st, want)
		}
	}
	tok := map[int]int64{}
	var claimed []*envelope.Envelope
	for sh := range shards {
		if tok[sh], err = s.AcquireLease(ctx, sh, "me", time.Minute); err != nil {
			t.Fatal(err)
		}
		items, _, err := s.Claim(ctx, sh, "me", tok[sh], t0+1000, t0+60_000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, items...)
	}
	if len(claimed) != len(envs) {
		t.Fatalf("claimed %d, want %d", len(claimed), len(envs))
	}
	before = evalshaCalls(t, c)
	if err := s.AckEnvelopes(ctx, claimed, t0+2000); err != nil {
		t.Fatal(err)
	}
	if got := evalshaCalls(t, c) - before; got != 1 {
		t.Fatalf("acking %d messages over %d shards took %d script calls, want 1", len(claimed), len(shards), got)
	}
	for _, e := range envs {
		wantState(t, s, e.ID, StateDelivered, -1)
	}
	for sh := range 64 {
		counts, err := c.HGetAll(ctx, s.keys[sh].counts).Result()
		if err != nil {
			t.Fatal(err)
		}
		for f, v := range counts {
			if !strings.HasPrefix(f, "~") && v != "0" {
				t.Fatalf("shard %d: count %s = %s after everything was acked", sh, f, v)
			}
		}
	}
}

// A merged call stays within the bounds of one script call: a batch of more than
// maxItemsPerCall messages is split into several calls, and every message is parked.
func TestMergedCallsStayBounded(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 64})
	ctx := storeCtx(t)
	n := 3*maxItemsPerCall + 100
	envs := make([]*envelope.Envelope, n)
	for i := range envs {
		envs[i] = env(fmt.Sprintf("bound-%d", i), t0)
	}
	before := evalshaCalls(t, c)
	parked, _, err := s.Park(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parked {
		if !p {
			t.Fatalf("message %d not parked", i)
		}
	}
	calls := evalshaCalls(t, c) - before
	if calls < 4 || calls > 8 {
		t.Fatalf("%d messages took %d script calls, want 4 to 8 (at most %d messages per call)", n, calls, maxItemsPerCall)
	}
}
