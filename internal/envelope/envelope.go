// Package envelope defines the message the bridge parks in Redis between ingress and
// egress, and its versioned compact binary encoding.
//
// Header values keep the type they arrived with so that a message republished to the same
// kind of broker is byte-for-byte (Kafka) or type-for-type (AMQP) what was consumed:
//
//   - Kafka header values are stored as Go strings (a Go string holds arbitrary bytes, so
//     nothing is lost); Kafka egress writes them back as the same bytes.
//   - AMQP header values are stored as the Go types amqp091-go decodes (int8..int64,
//     uint8..uint32, float32/64, bool, string, []byte, time.Time, Decimal, nested
//     tables as map[string]any, arrays as []any, nil).
package envelope

import (
	"strconv"
	"sync/atomic"
	"time"
)

// Broker names used in Envelope.Source* fields, routes and metrics labels.
const (
	BrokerKafka = "kafka"
	BrokerAMQP  = "amqp"
	BrokerHTTP  = "http"
)

// Header is one message header. Order is preserved.
type Header struct {
	Key   string
	Value any
}

// Decimal mirrors AMQP's decimal-value (amqp091-go's Decimal) without importing the client.
type Decimal struct {
	Scale uint8
	Value int32
}

// AMQPProperties are the AMQP 0-9-1 basic properties carried through unchanged when the
// source was AMQP. Zero values mean "not set".
type AMQPProperties struct {
	ContentType     string
	ContentEncoding string
	DeliveryMode    uint8
	Priority        uint8
	CorrelationID   string
	ReplyTo         string
	Expiration      string
	MessageID       string
	Timestamp       time.Time
	Type            string
	UserID          string
	AppID           string
}

// Envelope is a parked message. All times are unix milliseconds.
type Envelope struct {
	ID    string // x-message-id: idempotency, cancel and lookup key
	Route string // route name from the config

	SourceBroker string // BrokerKafka, BrokerAMQP or BrokerHTTP
	Source       string // source topic or queue, republished as x-delay-source

	Target string // per-message target override (x-delay-target), "" = route default

	DueAt      int64 // when to fire
	ReceivedAt int64 // when ingress received it
	Attempt    int32 // publish attempts already made (0 before the first)

	Key        []byte // Kafka key (nil = none)
	RoutingKey string // AMQP routing key the message was published with
	Payload    []byte
	Headers    []Header
	AMQP       *AMQPProperties // nil unless the source was AMQP

	Reason string // why it was dead-lettered; "" otherwise

	// FireAt is when the wheel fires the message (unix ms). It is not encoded: Claim
	// sets it to the later of the due score in Redis (a retry's backoff) and DueAt (a
	// recovered message is put back due "now", which must not fire it before DueAt).
	// Zero means DueAt.
	FireAt int64
	// ClaimedFrom is the shard Claim read the message from, plus one (0: not claimed).
	// It is not encoded. Acks, retries and put-backs go to that shard, whatever the
	// shard the message's id or key maps to now (a route's `order` may have changed).
	ClaimedFrom int
	// ClaimedBytes is the size the scheduler's byte budget counts for this claimed copy
	// (its encoded length plus storeapi.MemOverhead), set by Claim; it is given back
	// when the copy leaves memory. Not encoded.
	ClaimedBytes int64
	// Claim is the scheduler's mark on a claimed copy: the lease token it was claimed
	// under, and whether a later claim of its id superseded it. Set before the copy is
	// shared; not encoded. A copy of the envelope shares its mark.
	Claim *ClaimMark

	// Placed is where the Kafka sink's broker appended the message (partition and
	// offset), set when the broker confirmed it; nil otherwise (AMQP, not yet published,
	// or a sink that does not know). Not encoded: the delivery receipt reads it.
	Placed *Placement
}

// ClaimMark is the scheduler's mark on one claimed copy of a message (Envelope.Claim).
type ClaimMark struct {
	Token      int64       // the shard's lease token when the copy was claimed
	superseded atomic.Bool // a later claim of the same id replaced this copy
}

// Supersede marks the copy as replaced by a later claim of its id.
func (c *ClaimMark) Supersede() { c.superseded.Store(true) }

// Superseded reports whether a later claim of the copy's id replaced it.
func (c *ClaimMark) Superseded() bool { return c.superseded.Load() }

// Placement is a Kafka record's position: its partition and the offset the broker
// assigned.
type Placement struct {
	Partition int32
	Offset    int64
}

// FireTime is FireAt, or DueAt when FireAt is unset.
func (e *Envelope) FireTime() int64 {
	if e.FireAt != 0 {
		return e.FireAt
	}
	return e.DueAt
}

// Header returns the first header named key and whether it exists.
func (e *Envelope) Header(key string) (any, bool) {
	for _, h := range e.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// SetHeader replaces the first header named key, or appends it.
func (e *Envelope) SetHeader(key string, v any) {
	for i := range e.Headers {
		if e.Headers[i].Key == key {
			e.Headers[i].Value = v
			return
		}
	}
	e.Headers = append(e.Headers, Header{Key: key, Value: v})
}

// Wire header names (docs/CONTRACT.md §2).
const (
	HeaderDelay       = "x-delay"
	HeaderDeliverAt   = "x-deliver-at"
	HeaderMessageID   = "x-message-id"
	HeaderDelayTarget = "x-delay-target"
	HeaderCancel      = "x-delay-cancel"
	HeaderReplace     = "x-delay-replace"
	HeaderDueAt       = "x-delay-due-at"
	HeaderSource      = "x-delay-source"
	HeaderAttempt     = "x-delay-attempt"
)

// FormatInt is the text form used for numeric headers on Kafka (and on AMQP when the
// original value was a string).
func FormatInt(v int64) string { return strconv.FormatInt(v, 10) }
