package storeapi

import (
	"fmt"
	"hash/fnv"
	"io"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Strict per-key order (routes with `order: key`, docs/ARCHITECTURE.md "Per-key
// order"). The store enforces it, so that no owner change can break it:
//
//   - A message of an ordered route with a non-empty OrderKey lives in the shard of its
//     key (ShardOfKey), not of its id: one shard, so one owner, decides the key's order.
//   - Per shard, each key's pending and in-flight messages form a queue ordered by (due
//     time, receive sequence). Only the key's head is claimable; the others wait in the
//     pending set with their score raised by GateBase (claimed by nobody, counted as
//     pending). The next message becomes the head when the head is acked (the broker
//     confirmed it), dead-lettered (a dead letter unblocks its key) or cancelled.
//   - A retried or recovered head stays the head. A new message earlier than an
//     unclaimed head (one never claimed) becomes the head; once the head was claimed,
//     a later arrival waits behind it whatever its due time.
//   - Reschedule of a message of an ordered route is refused (ErrOrdered): cancel and
//     send it again. A requeued dead letter goes back into its key's queue as a new
//     arrival.
//
// Idempotency by id holds per shard, so on an ordered route per key: a replay of a
// record (same id, same key) is refused as a duplicate; the same id sent again with a
// different key is a different message unless both keys map to one shard.

// GateBase is added to the due score of a message waiting behind its key's head: such
// a score is never reached by a claim. Due times are below 2^42 ms, so GateBase + due
// stays an exact float64 (below 2^53), the type of a Redis sorted-set score.
const GateBase int64 = 1 << 52

// HeaderOrderKey names the ordering key header; it wins over the Kafka record key and
// the AMQP routing key.
const HeaderOrderKey = "x-delay-key"

// RealScore maps a pending score to the message's due time: a gated score (waiting
// behind its key's head) less GateBase.
func RealScore(score int64) int64 {
	if score >= GateBase {
		return score - GateBase
	}
	return score
}

// OrderKey is the ordering key of e: the x-delay-key header if present, else the Kafka
// record key, else the AMQP routing key. "" means none (the message is not ordered).
func OrderKey(e *envelope.Envelope) string {
	if v, ok := e.Header(HeaderOrderKey); ok {
		switch k := v.(type) {
		case string:
			return k
		case []byte:
			return string(k)
		case nil:
		default:
			return fmt.Sprint(k)
		}
	}
	if len(e.Key) > 0 {
		return string(e.Key)
	}
	return e.RoutingKey
}

// ShardOfKey maps an ordering key of route to its shard: FNV-1a (32-bit) of route,
// a NUL byte and the key, modulo shards. Like ShardOf it must never change.
func ShardOfKey(route, key string, shards int) int {
	h := fnv.New32a()
	_, _ = io.WriteString(h, route)
	_, _ = h.Write([]byte{0})
	_, _ = io.WriteString(h, key)
	return int(h.Sum32() % uint32(shards))
}

// Ordering is the set of routes with `order: key`; the zero value orders none.
type Ordering map[string]bool

// NewOrdering is the ordering of routes.
func NewOrdering(routes []string) Ordering {
	o := Ordering{}
	for _, r := range routes {
		o[r] = true
	}
	return o
}

// Key is e's ordering key when e's route is ordered, else "".
func (o Ordering) Key(e *envelope.Envelope) string {
	if !o[e.Route] {
		return ""
	}
	return OrderKey(e)
}

// ShardOf is the shard of e: ShardOfKey for a message with an ordering key on an
// ordered route, else ShardOf(e.ID).
func (o Ordering) ShardOf(e *envelope.Envelope, shards int) int {
	if k := o.Key(e); k != "" {
		return ShardOfKey(e.Route, k, shards)
	}
	return ShardOf(e.ID, shards)
}

// KeyMessage is one message of an ordering key (Keys.KeyMessages).
type KeyMessage struct {
	Env   *envelope.Envelope
	State State // pending or inflight
	Score int64 // due time (pending) or lease deadline (in flight), as Get reports it
	Head  bool  // the key's head: the one that is claimable or in flight
}
