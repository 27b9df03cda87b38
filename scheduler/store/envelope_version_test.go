package store

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// oldEnv is a message as the bridge parks it from Kafka and AMQP, with every field the
// outgoing message is built from.
func oldEnv(id string, due int64) *envelope.Envelope {
	e := env(id, due)
	e.Headers = []envelope.Header{{Key: "x-delay", Value: "1000"}, {Key: "traceparent", Value: "00-abc-def-01"},
		{Key: "n", Value: int32(7)}}
	e.Key, e.Payload, e.RoutingKey = []byte("k"), []byte(`{"order":42}`), "eu.orders"
	e.AMQP = &envelope.AMQPProperties{ContentType: "application/json", DeliveryMode: 2}
	return e
}

// A bridge before envelope version 2 stored the id inside the envelope too. After an
// upgrade its pending messages and dead letters must still be served, claimed, fired
// with the same outgoing message, retried and requeued.
func TestStoreServesEnvelopesParkedByVersion1(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	a := idsOnShard(s, 2, 3, "old")
	k := s.keys[2]
	pending, dead, current := oldEnv(a[0], t0), oldEnv(a[1], t0), oldEnv(a[2], t0)
	dead.Reason, dead.Attempt = "bad_delay: x", 3
	for _, e := range []*envelope.Envelope{pending, dead} {
		raw, err := envelope.EncodeV1(e)
		if err != nil {
			t.Fatal(err)
		}
		c.HSet(ctx, k.msg, e.ID, raw)
	}
	c.ZAdd(ctx, k.due, redis.Z{Score: float64(t0), Member: a[0]})
	c.ZAdd(ctx, k.dead, redis.Z{Score: float64(t0), Member: a[1]})
	mustPark(t, s, current)

	// What this version parks is version 2, without the id.
	raw, err := c.HGet(ctx, k.msg, a[2]).Bytes()
	want, _ := envelope.Encode(current)
	if err != nil || raw[0] != 2 || !bytes.Equal(raw, want) {
		t.Fatalf("parked envelope %x (%v): want version 2, %x", raw, err, want)
	}
	if e, err := envelope.Decode(raw, ""); err != nil || e.ID != "" {
		t.Fatalf("parked envelope decodes to id %q (%v), want none stored", e.ID, err)
	}

	if got := wantState(t, s, a[0], StatePending, t0); !reflect.DeepEqual(got, pending) {
		t.Fatalf("Get of a version 1 envelope:\n got=%#v\nwant=%#v", got, pending)
	}
	ds, err := s.ListDead(ctx, 10)
	if err != nil || len(ds) != 1 || !reflect.DeepEqual(ds[0], dead) {
		t.Fatalf("ListDead = %#v, %v; want %#v", ds, err, dead)
	}

	tok := mustLease(t, s, 2, "i1")
	items, _ := mustClaim(t, s, 2, tok, t0+10, 10)
	if len(items) != 2 {
		t.Fatalf("claimed %v, want %s and %s", ids(items), a[0], a[2])
	}
	byID := map[string]*envelope.Envelope{items[0].ID: items[0], items[1].ID: items[1]}
	o, n := byID[a[0]], byID[a[2]]
	if o == nil || n == nil {
		t.Fatalf("claimed %v, want %s and %s", ids(items), a[0], a[2])
	}
	// The same message parked in either version goes out identically (but for its id).
	oh, nh := egress.OutgoingHeaders(o, 1), egress.OutgoingHeaders(n, 1)
	for i := range nh {
		if nh[i].Key == envelope.HeaderMessageID {
			nh[i].Value = a[0]
		}
	}
	if !reflect.DeepEqual(oh, nh) {
		t.Fatalf("outgoing headers differ by envelope version:\n v1=%#v\n v2=%#v", oh, nh)
	}
	if !bytes.Equal(o.Key, n.Key) || !bytes.Equal(o.Payload, n.Payload) || o.RoutingKey != n.RoutingKey ||
		!reflect.DeepEqual(o.AMQP, n.AMQP) || o.FireAt != n.FireAt || o.DueAt != n.DueAt || o.Source != n.Source {
		t.Fatalf("claimed envelopes differ by version:\n v1=%#v\n v2=%#v", o, n)
	}

	// A retry rewrites the old envelope as version 2, under the same id.
	o.Attempt = 1
	if err := s.Retry(ctx, 2, []RetryItem{{Env: o, Due: t0 + 100}}, t0); err != nil {
		t.Fatal(err)
	}
	raw, _ = c.HGet(ctx, k.msg, a[0]).Bytes()
	if len(raw) == 0 || raw[0] != 2 {
		t.Fatalf("retried envelope %x, want version 2", raw)
	}
	if got := wantState(t, s, a[0], StatePending, t0+100); got.ID != a[0] || got.Attempt != 1 || got.DueAt != t0 {
		t.Fatalf("retried envelope %#v", got)
	}

	if err := s.RequeueDead(ctx, a[1], t0+5); err != nil {
		t.Fatal(err)
	}
	got := wantState(t, s, a[1], StatePending, t0+5)
	requeued := *dead
	requeued.Reason, requeued.Attempt, requeued.DueAt = "", 0, t0+5
	if !reflect.DeepEqual(got, &requeued) {
		t.Fatalf("requeued version 1 dead letter:\n got=%#v\nwant=%#v", got, &requeued)
	}
}

// During a rolling upgrade an older instance may claim an envelope a newer bridge parked.
// It must not take it for corrupt (dead-letter it): it puts it back, bytes unchanged and
// a little later, for an instance that reads it. A version byte far above any plausible
// version is still corruption.
func TestStorePutsBackEnvelopesOfANewerVersion(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 2, "newer")
	k := s.keys[1]
	current, err := envelope.Encode(oldEnv(a[0], t0))
	if err != nil {
		t.Fatal(err)
	}
	newer := append([]byte{3}, current[1:]...)     // the next version
	garbage := append([]byte{200}, current[1:]...) // no plausible version
	c.HSet(ctx, k.msg, a[0], newer)
	c.HSet(ctx, k.msg, a[1], garbage)
	c.ZAdd(ctx, k.due, redis.Z{Score: float64(t0), Member: a[0]}, redis.Z{Score: float64(t0), Member: a[1]})

	tok := mustLease(t, s, 1, "i1") // an instance of the older build
	upTo := t0 + 10
	items, _ := mustClaim(t, s, 1, tok, upTo, 10)
	if len(items) != 0 {
		t.Fatalf("claimed %v, want nothing this build can fire", ids(items))
	}
	score, err := c.ZScore(ctx, k.due, a[0]).Result()
	if err != nil {
		t.Fatalf("newer-version envelope is no longer pending: %v", err)
	}
	if int64(score) != upTo+newerVersionRetry.Milliseconds() {
		t.Errorf("newer-version envelope due again at %d, want %d (claim horizon + %s)", int64(score), upTo+newerVersionRetry.Milliseconds(), newerVersionRetry)
	}
	if raw, _ := c.HGet(ctx, k.msg, a[0]).Bytes(); !bytes.Equal(raw, newer) {
		t.Errorf("newer-version envelope rewritten: %x, want %x unchanged", raw, newer)
	}
	if n, _ := c.ZCard(ctx, k.inflight).Result(); n != 0 {
		t.Errorf("%d entries left in flight", n)
	}
	if _, err := c.ZScore(ctx, k.dead, a[0]).Result(); err != redis.Nil {
		t.Errorf("newer-version envelope dead-lettered (%v)", err)
	}
	if _, err := c.ZScore(ctx, k.dead, a[1]).Result(); err != nil {
		t.Errorf("an envelope with version byte 200 is not dead-lettered as corrupt: %v", err)
	}
}
