package redisstore

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The cluster view's Redis keys stay bounded: one field per ring slot however many
// intervals were written, an expiry on every key, and the index holds only the
// instances that wrote within keep. (The behaviour through the methods is the
// conformance suite's SeriesBounded, on every backend.)
func TestStoreSeriesKeys(t *testing.T) {
	s, _, c := newTestStore(t, Options{Prefix: "sr", Cluster: "c"})
	ctx := storeCtx(t)
	const slots = 4
	keep := time.Minute
	if err := s.PutSeries(ctx, "gone", 0, []byte("old"), t0-2*keep.Milliseconds(), keep); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * slots {
		if err := s.PutSeries(ctx, "a", i%slots, []byte(fmt.Sprint("a", i)), t0+int64(i)*1000, keep); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.HLen(ctx, "sr:{c}:series:a").Val(); n != slots {
		t.Errorf("instance hash has %d fields after %d writes, want %d (one per slot)", n, 3*slots, slots)
	}
	for _, k := range []string{"sr:{c}:series:a", "sr:{c}:series:gone", "sr:{c}:series"} {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > keep {
			t.Errorf("%s expires in %s, want (0, %s]", k, ttl, keep)
		}
	}
	if got := c.ZRange(ctx, "sr:{c}:series", 0, -1).Val(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("index = %v, want the instances that wrote within keep", got)
	}
}
