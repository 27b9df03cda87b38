package main

import (
	"context"
	"encoding/binary"
	"strconv"
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
	}{{"list", "slots", 1}, {"list", "slots", 32}, {"list", "bitmap", 1}, {"list", "bitmap", 32}, {"hash", "slots", 1}, {"hash", "slots", 32}, {"listpos", "slots", 1}, {"listpos", "slots", 32}, {"hash", "none", 32}} {
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

// TestBucketProbeSlotsHoldPositions parks fetches with -bucket listpos and finds each
// message's element from its slot alone: the bucket it names (modulo 1,024) and the
// position, as a cancel would, with one LINDEX.
func TestBucketProbeSlotsHoldPositions(t *testing.T) {
	rdb, stop, err := startPlain("redis-server")
	if err != nil {
		t.Fatalf("the probe needs redis-server on PATH: %v", err)
	}
	defer stop()
	ctx := context.Background()
	o := options{batch: 30, rounds: 3, spread: 32, kafkaIDs: true, layout: "buckets", bucketMS: 1024, ack: "slots", bucket: "listpos"}
	r, err := newBucketRun(ctx, rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := r.round(ctx, i, 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.pending) != 90 {
		t.Fatalf("%d pending, want 90", len(r.pending))
	}
	for _, m := range r.pending {
		v, err := rdb.GetRange(ctx, bp+"kb:orders.delay/3/0", int64(m.offset*10), int64(m.offset*10+9)).Result()
		if err != nil {
			t.Fatal(err)
		}
		x := binary.BigEndian.Uint32([]byte(v[6:]))
		if x>>31 != 1 || int64(x>>21&1023) != m.bucket%1024 {
			t.Fatalf("%s: slot %x, want pending in bucket %d", m.e.ID, v, m.bucket)
		}
		el, err := rdb.LIndex(ctx, bp+"hb:"+strconv.FormatInt(m.bucket, 10), int64(x&(1<<21-1))).Result()
		if err != nil {
			t.Fatalf("%s: %v", m.e.ID, err)
		}
		l, w := binary.Uvarint([]byte(el))
		if el[w:w+int(l)] != m.e.ID {
			t.Fatalf("%s: its slot's position holds %s", m.e.ID, el[w:w+int(l)])
		}
	}
}
