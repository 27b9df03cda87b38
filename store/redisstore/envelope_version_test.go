package redisstore

import (
	"bytes"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// fullEnv is a message as the bridge parks it from Kafka and AMQP, with every field the
// outgoing message is built from.
func fullEnv(id string, due int64) *envelope.Envelope {
	e := env(id, due)
	e.Headers = []envelope.Header{{Key: "x-delay", Value: "1000"}, {Key: "traceparent", Value: "00-abc-def-01"},
		{Key: "n", Value: int32(7)}}
	e.Key, e.Payload, e.RoutingKey = []byte("k"), []byte(`{"order":42}`), "eu.orders"
	e.AMQP = &envelope.AMQPProperties{ContentType: "application/json", DeliveryMode: 2}
	return e
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
	current, err := envelope.Encode(fullEnv(a[0], t0))
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
