package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
	"github.com/delaybridge/delay-bridge/testkit"
)

// startBucketed starts a scheduler on a store of its own with due buckets (cluster
// "b", shards shards) and a 2 s lookahead, as the bridge's defaults.
func startBucketed(t *testing.T, r *testkit.Redis, shards int) (*harness, *redisstore.Store, *recordingSink) {
	t.Helper()
	sink := &recordingSink{}
	var st *redisstore.Store
	h := startScheduler(t, r, "i1", sink, func(o *scheduler.Options) {
		var err error
		st, err = redisstore.New(context.Background(), r.Client(), redisstore.Options{Prefix: "t", Cluster: "b", Shards: shards, DoneWindow: time.Hour, Buckets: true})
		if err != nil {
			t.Fatal(err)
		}
		o.Store, o.Lookahead, o.MaxInMemory, o.ClaimBatch, o.MaxInMemoryBytes = st, 2*time.Second, 100000, 1000, 64<<20
	})
	return h, st, sink
}

// checkOnce fails unless every message of got was published once, never early and,
// with late >= 0, at most late ms after its due time.
func checkOnce(t *testing.T, got []published, late int64) {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range got {
		if seen[p.id] {
			t.Fatalf("%s published twice", p.id)
		}
		seen[p.id] = true
		if p.at < p.due || (late >= 0 && p.at > p.due+late) {
			t.Fatalf("%s published at due%+d ms", p.id, p.at-p.due)
		}
	}
}

// TestBucketedMessagesFireOnceOnTime: Kafka default ids parked into due buckets
// (redisstore.Options.Buckets) are claimed a bucket at a time by the pumps and each
// fires once, never early and within the lookahead's margin, and none is left in
// flight (a copy the dispatcher refused would be recovered only at its lease's end).
func TestBucketedMessagesFireOnceOnTime(t *testing.T) {
	r := testkit.StartRedis(t)
	_, st, sink := startBucketed(t, r, 8)
	now := time.Now().UnixMilli()
	var envs []*envelope.Envelope
	for p := range 3 {
		for i := range 600 {
			id := ingress.KafkaRecordID("orders.delay", p, int64(i), time.UnixMilli(now), nil, []byte("p"), nil)
			envs = append(envs, &envelope.Envelope{ID: id, Route: "r", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
				DueAt: now + 3000 + int64(i*5), ReceivedAt: now, Payload: []byte("p")})
		}
	}
	prior, _, err := st.ParkEach(context.Background(), envs)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prior {
		if p != storeapi.StateUnknown {
			t.Fatalf("park %d: %v", i, p)
		}
	}
	pending, _, _ := totals(t, st)
	if pending != int64(len(envs)) {
		t.Fatalf("pending %d, want %d", pending, len(envs))
	}
	waitFor(t, "every message published", 20*time.Second, func() bool { return len(sink.snapshot()) >= len(envs) })
	time.Sleep(200 * time.Millisecond)
	checkOnce(t, sink.snapshot(), 1000)
	waitFor(t, "nothing left in flight", 5*time.Second, func() bool {
		p, f, _ := totals(t, st)
		return p == 0 && f == 0
	})
}

// TestBucketedFetchesThroughIntake: fetches accepted by the scheduler's intake over a
// few seconds, due 0.5 to 5 s ahead (some claimed at park, the rest pending, in buckets
// or not), each fire once, never early, within a second of due, and nothing is left.
func TestBucketedFetchesThroughIntake(t *testing.T) {
	r := testkit.StartRedis(t)
	h, st, sink := startBucketed(t, r, 64)
	waitFor(t, "the scheduler owns its shards", 5*time.Second, func() bool { return h.sched.OwnsShard(0) && h.sched.OwnsShard(63) })
	n := 0
	for f := range 30 {
		now := time.Now().UnixMilli()
		for p := range 3 {
			items := make([]scheduler.Incoming, 300)
			for i := range items {
				off := int64(f*300 + i)
				id := ingress.KafkaRecordID("orders.delay", p, off, time.UnixMilli(now), nil, []byte("p"), nil)
				items[i] = scheduler.Incoming{Env: &envelope.Envelope{ID: id, Route: "r", SourceBroker: envelope.BrokerKafka,
					Source: "orders.delay", DueAt: now + 500 + (off*37)%4500, ReceivedAt: now, Payload: []byte("p")}}
			}
			if err := h.sched.Accept(context.Background(), items); err != nil {
				t.Fatal(err)
			}
			n += len(items)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitFor(t, "every message published", 20*time.Second, func() bool { return len(sink.snapshot()) >= n })
	time.Sleep(200 * time.Millisecond)
	checkOnce(t, sink.snapshot(), 1000)
	waitFor(t, "nothing left in flight", 5*time.Second, func() bool {
		p, f, _ := totals(t, st)
		return p == 0 && f == 0
	})
}
