package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestBucketProbeKeepsItsInvariants runs the time-bucket probe's park, claim and ack on
// a real redis-server: its end check holds the per-route counts to what the driver
// parked and acknowledged and every acknowledged in-flight bucket to gone, with both
// ways to acknowledge, messages due at once and spread; and a claim without the
// shard's lease is refused.
func TestBucketProbeKeepsItsInvariants(t *testing.T) {
	for _, c := range []struct {
		bucket, ack string
		spread      int
	}{{"list", "slots", 1}, {"list", "slots", 32}, {"list", "bitmap", 1}, {"list", "bitmap", 32}, {"hash", "slots", 1}, {"hash", "slots", 32}} {
		rdb, stop, err := startPlain("redis-server")
		if err != nil {
			t.Fatalf("the probe needs redis-server on PATH: %v", err)
		}
		o := options{batch: 30, rounds: 40, spread: c.spread, kafkaIDs: true, layout: "buckets", bucketMS: 1024, ack: c.ack, bucket: c.bucket}
		ctx := context.Background()
		if err := workloadOf(ctx, rdb, o, len(stages)-1); err != nil {
			t.Errorf("-bucket %s -ack %s -spread %d: %v", c.bucket, c.ack, c.spread, err)
		}
		if err := rdb.Set(ctx, bp+"owner", "other|2", 0).Err(); err != nil {
			t.Fatal(err)
		}
		r := &bucketRun{rdb: rdb, o: o, width: 1024, pos: map[string]int{}}
		r.claim = redis.NewScript(bucketClaim) // loaded by the workload
		if _, err := r.claimUpTo(ctx, t0+1<<40); err == nil || !strings.Contains(err.Error(), "FENCED") {
			t.Errorf("-bucket %s -ack %s -spread %d: a claim without the lease: %v, want FENCED", c.bucket, c.ack, c.spread, err)
		}
		stop()
	}
}
