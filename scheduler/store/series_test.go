package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// The cluster view's keys stay bounded: one field per ring slot however many intervals
// were written, an expiry on every key, and an instance that stopped writing more than
// keep ago is forgotten by the index (and its hash expires).
func TestStoreSeriesBounded(t *testing.T) {
	s, _, c := newTestStore(t, Options{Prefix: "sr", Cluster: "c"})
	ctx := storeCtx(t)
	const slots = 4
	keep := time.Minute
	if err := s.PutSeries(ctx, "gone", 0, []byte("old"), t0-2*keep.Milliseconds(), keep); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * slots {
		now := t0 + int64(i)*1000
		if err := s.PutSeries(ctx, "a", i%slots, []byte(fmt.Sprint("a", i)), now, keep); err != nil {
			t.Fatal(err)
		}
		if err := s.PutSeries(ctx, "b", i%slots, []byte(fmt.Sprint("b", i)), now, keep); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.HLen(ctx, "sr:{c}:series:a").Val(); n != slots {
		t.Errorf("instance hash has %d fields after %d writes, want %d (one per slot)", n, 3*slots, slots)
	}
	for _, k := range []string{"sr:{c}:series:a", "sr:{c}:series"} {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > keep {
			t.Errorf("%s expires in %s, want (0, %s]", k, ttl, keep)
		}
	}
	if got := c.ZRange(ctx, "sr:{c}:series", 0, -1).Val(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("index = %v, want the instances that wrote within keep", got)
	}
	got, err := s.Series(ctx, t0+int64(3*slots)*1000, keep)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got["a"]) != slots || got["gone"] != nil {
		t.Fatalf("Series = %d instances (%v)", len(got), got)
	}
	var vals []string
	for _, v := range got["a"] {
		vals = append(vals, string(v))
	}
	slices.Sort(vals)
	if want := []string{"a10", "a11", "a8", "a9"}; !slices.Equal(vals, want) {
		t.Errorf("a's intervals = %v, want the last %d: %v", vals, slots, want)
	}
	if err := s.PutSeries(ctx, "x|y", 0, nil, t0, keep); err == nil {
		t.Error("an instance name with '|' was accepted")
	}
}

// The series keys share the {cluster} hash tag: the write (one MULTI) and the read work
// through a ClusterClient.
func TestStoreSeriesOnCluster(t *testing.T) {
	r := testkit.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	cc := newSingleNodeCluster(t, r)
	ctx := storeCtx(t)
	s, err := New(ctx, cc, Options{Shards: 2, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i, inst := range []string{"a", "b"} {
		if err := s.PutSeries(ctx, inst, i, []byte(inst), t0, time.Minute); err != nil {
			t.Fatalf("PutSeries on Cluster: %v", err)
		}
	}
	got, err := s.Series(ctx, t0, time.Minute)
	if err != nil || len(got) != 2 || string(got["b"][0]) != "b" {
		t.Fatalf("Series on Cluster = %v, %v", got, err)
	}
}

// miniredis (the embedded server of `bridge dev` without a redis-server on PATH) runs
// the same commands.
func TestStoreSeriesOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := storeCtx(t)
	s, err := New(ctx, c, Options{Shards: 2, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.PutSeries(ctx, "a", i%2, []byte(fmt.Sprint(i)), t0+int64(i), time.Minute); err != nil {
			t.Fatalf("PutSeries on miniredis: %v", err)
		}
	}
	got, err := s.Series(ctx, t0+5, time.Minute)
	if err != nil || len(got["a"]) != 2 {
		t.Fatalf("Series on miniredis = %v, %v", got, err)
	}
}
