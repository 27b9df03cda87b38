package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/testkit"
)

// hasLibrary says whether the server behind c holds the build's library.
func hasLibrary(t *testing.T, c redis.Cmdable) bool {
	t.Helper()
	libs, err := c.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: library.Name}).Result()
	if err != nil {
		t.Fatalf("FUNCTION LIST: %v", err)
	}
	return len(libs) == 1
}

func parkN(t *testing.T, s *Store, prefix string, n int) {
	t.Helper()
	var envs []*envelope.Envelope
	for i := range n {
		envs = append(envs, env(fmt.Sprintf("%s-%d", prefix, i), t0))
	}
	var (
		parked []bool
		err    error
	)
	// The first calls after a restart may meet a dead pooled connection; callers retry
	// on transient errors (fault.IsTransient), and so does this test.
	for range 5 {
		if parked, _, err = s.Park(storeCtx(t), envs); err == nil || !fault.IsTransient(err) {
			break
		}
	}
	if err != nil || slices.Contains(parked, false) {
		t.Fatalf("Park %s = %v %v", prefix, parked, err)
	}
}

// TestStoreFunctionsReload: the store calls its scripts with FCALL of the library it
// loaded at start, and loads it again when a server answers "function not found":
// after FUNCTION FLUSH, for pipelined calls (Park over every shard) and single ones
// (Get), and after a restart of a server that persists nothing.
func TestStoreFunctionsReload(t *testing.T) {
	r := testkit.StartRedis(t, "--appendonly", "no")
	c := r.Client()
	ctx := storeCtx(t)
	s, err := New(ctx, c, Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Functions() || !hasLibrary(t, c) {
		t.Fatalf("Functions() = %v, library loaded %v: redis-server 7 has FUNCTION", s.Functions(), hasLibrary(t, c))
	}
	parkN(t, s, "a", 20)
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	parkN(t, s, "b", 20)
	if !hasLibrary(t, c) {
		t.Fatal("Park after FUNCTION FLUSH did not load the library again")
	}
	c.FunctionFlush(ctx)
	if st, _, _, err := s.Get(ctx, "a-3"); err != nil || st != StatePending {
		t.Fatalf("Get after FUNCTION FLUSH = %v %v", st, err)
	}
	r.Restart() // nothing persisted: the library and every key are gone
	parkN(t, s, "c", 20)
	if !hasLibrary(t, c) {
		t.Fatal("no library after a restart")
	}
	calls := commandCalls(t, c, "fcall")
	if calls == 0 {
		t.Fatal("no FCALL counted: the store did not call the library")
	}
}

// TestStoreFunctionsReloadCluster: on Redis Cluster the library is loaded on every
// master at start and again when one has lost it.
func TestStoreFunctionsReloadCluster(t *testing.T) {
	rc := testkit.StartRedisCluster(t, 3)
	cc := rc.Client()
	ctx := storeCtx(t)
	s, err := New(ctx, cc, Options{Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if !hasLibrary(t, c) {
			return fmt.Errorf("master %s has no library", c.Options().Addr)
		}
		return c.FunctionFlush(ctx).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	parkN(t, s, "x", 64)
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if !hasLibrary(t, c) {
			return fmt.Errorf("master %s has no library after Park", c.Options().Addr)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestStoreEvalMode: a server without FUNCTION (miniredis, the embedded server of
// `bridge dev`) gets EVALSHA of the same scripts.
func TestStoreEvalMode(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	s, err := New(storeCtx(t), c, Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	if s.Functions() {
		t.Fatal("Functions() on miniredis")
	}
	parkN(t, s, "m", 10)
	if st, _, _, err := s.Get(storeCtx(t), "m-1"); err != nil || st != StatePending {
		t.Fatalf("Get = %v %v", st, err)
	}
}

// commandCalls is INFO commandstats' calls of cmd.
func commandCalls(t *testing.T, c *redis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			var n int
			fmt.Sscanf(rest, "%d", &n)
			return n
		}
	}
	return 0
}

// TestStoreAckBatch: ack looks the batch up in inflight with one ZMSCORE and, on a
// server without it, one ZSCORE per id; either way only ids still in flight are acked,
// each once however often the batch names it.
func TestStoreAckBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
	}{{"zmscore", nil}, {"no-zmscore", []string{"--rename-command", "ZMSCORE", ""}}} {
		t.Run(tc.name, func(t *testing.T) {
			r := testkit.StartRedis(t, tc.extra...)
			c := r.Client()
			ctx := storeCtx(t)
			s, err := New(ctx, c, Options{Shards: 1, DoneWindow: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			parkN(t, s, "k", 5)
			tok := mustLease(t, s, 0, "i1")
			items, _ := mustClaim(t, s, 0, tok, t0, 3)
			if len(items) != 3 {
				t.Fatalf("claimed %d, want 3", len(items))
			}
			batch := append(ids(items), ids(items)[0], "k-4", "never-parked")
			if err := s.Ack(ctx, 0, batch, t0); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids(items) {
				wantState(t, s, id, StateDelivered, t0)
			}
			wantState(t, s, "k-4", StatePending, t0)
			if n := c.ZCard(ctx, s.keys[0].inflight).Val(); n != 0 {
				t.Fatalf("%d left in flight", n)
			}
			counts, err := s.RouteCounts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(counts); got != "{[{0 map[orders:{2 0 0}]}]}" {
				t.Fatalf("counts %s, want 2 pending, none in flight", got)
			}
			calls := commandCalls(t, c, "zmscore")
			if (calls > 0) != (tc.extra == nil) {
				t.Fatalf("%d ZMSCORE calls", calls)
			}
		})
	}
}

// TestStoreEvalModeQuickPark: the embedded server of `bridge dev` (no FUNCTION) runs
// park's quick layout too: a fetch's Kafka default ids, some claimed as they are
// parked, end up in flight and pending as on a real Redis.
func TestStoreEvalModeQuickPark(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := storeCtx(t)
	s, err := New(ctx, c, Options{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	envs, cl := fetchClaimingAThird(12, mustLease(t, s, 0, "i1"))
	if _, claimed, _, err := s.ParkClaimEach(ctx, envs, cl); err != nil || !slices.Equal(claimed, cl.Want) {
		t.Fatalf("ParkClaimEach: claimed %v, %v; want %v", claimed, err, cl.Want)
	}
	for i, e := range envs {
		want := StatePending
		if cl.Want[i] {
			want = StateInflight
		}
		if st, _, _, err := s.Get(ctx, e.ID); err != nil || st != want {
			t.Errorf("%s: %v, %v; want %v", e.ID, st, err, want)
		}
	}
}
