// Package ingress consumes delay sources (Kafka topics, AMQP queues), turns each record
// into an envelope (or an invalid item, or a cancel request) and hands batches to a
// Handler that parks them in Redis. Implementations live in ingress/kafka and ingress/amqp.
package ingress

import (
	"context"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Item is one consumed record after parsing. Exactly one of the cases holds:
//   - CancelID != "": a cancel request for that message id (the record is not delivered);
//   - Env.Reason != "": invalid input; Env is complete enough to dead-letter (or, per
//     route `on_invalid: deliver`, to deliver at once) and Invalid names the metric reason;
//   - otherwise: a message to park until Env.DueAt.
type Item struct {
	Env      *envelope.Envelope
	CancelID string
	// Replace: the message carries a truthy x-delay-replace: it replaces the message
	// with its id on its route (docs/CONTRACT.md "Replace").
	Replace bool
	Invalid string // low-cardinality reason label: bad_delay, delay_out_of_range, payload_too_large, target_not_allowed, bad_deliver_at
}

// Handler makes a batch durable. It returns nil only once every item is safely in Redis
// (parked, dead-lettered or cancelled). An error means nothing may be acknowledged; the
// source hands the whole batch again later (parking is idempotent by id, so a partial
// success followed by a replay never duplicates). It may be called concurrently (a Kafka
// source calls it from one worker per owned partition).
//
// A Handler must not modify the items, nor the envelopes they point to: a failed batch
// is handed again as the same items, parsed once (see Loop); a handler that needs a
// changed envelope copies it.
type Handler func(ctx context.Context, items []Item) error

// Source is one consumer of one delay source.
//
// Contract:
//   - Run consumes until ctx is cancelled (then returns nil) or an unrecoverable error
//     occurs (returned, marked fault.Permanent). Broker disconnects are not
//     unrecoverable: Run reconnects with backoff by itself.
//   - Batches are handed to h in source order, one at a time — for a Kafka source,
//     per partition: its partitions' workers call h concurrently, so h must be safe
//     for concurrent use (ordering across partitions was never promised by Kafka).
//   - A record is acknowledged to the broker (offset commit, basic.ack) only after h
//     returned nil for the batch holding it. When h fails, Run backs off and hands the
//     same items again (or gives the batch back to the broker to be delivered again);
//     it never skips them. Both sources do this through one Loop.
//   - Run returns promptly after ctx is cancelled, even while h or the broker blocks,
//     leaving unacknowledged records to be redelivered. A batch whose h returns nil
//     within HandlerGrace of the cancel is still acknowledged, so a graceful stop does
//     not hand back records it has already parked.
type Source interface {
	Run(ctx context.Context, h Handler) error
	// Name identifies the source in logs and metrics (e.g. "kafka:orders.delay").
	Name() string
}

// HandlerGrace is how long a source waits, after its context is cancelled, for a
// handler call already under way to return before giving up on it.
const HandlerGrace = 2 * time.Second

// Call runs h in its own goroutine so that a source can stop even if h ignores ctx (a
// stuck Redis call). returned is false when ctx ended and h had not returned within
// HandlerGrace; the goroutine then ends when h does and its result is discarded, so
// nothing of the batch may be acknowledged.
func Call(ctx context.Context, h Handler, items []Item) (returned bool, err error) {
	return call(ctx, clock.Real{}, h, items)
}

// call is Call with the grace timed on clk.
func call(ctx context.Context, clk clock.Clock, h Handler, items []Item) (returned bool, err error) {
	res := make(chan error, 1)
	go func() { res <- h(ctx, items) }()
	select {
	case err := <-res:
		return true, err
	case <-ctx.Done():
	}
	grace := clk.NewTimer(HandlerGrace)
	defer grace.Stop()
	select {
	case err := <-res:
		return true, err
	case <-grace.C():
		return false, nil
	}
}

// Ingress states, as reported by Health (and GET /v1/routes, /readyz).
const (
	// StateStarting: Run has not yet connected or joined for the first time.
	StateStarting = "starting"
	// StateConsuming: consuming and making progress, or caught up (Kafka: every partition
	// this instance should own is owned and read, or it owns none; AMQP: consumer
	// registered). The only ready state.
	StateConsuming = "consuming"
	// StateJoining: Kafka: waiting for the leases of partitions this instance should
	// own (held by another instance until it releases them or they expire); AMQP:
	// re-registering the consumer.
	StateJoining = "joining"
	// StateStalled: not making progress while there is lag (Kafka: an owned partition
	// is lagging; its reader is replaced after ingress.stall_timeout; AMQP: the watchdog
	// rebuilds the consumer).
	StateStalled = "stalled"
	// StateUnreachable: the broker cannot be reached (or refuses the queue/topic).
	StateUnreachable = "unreachable"
	// StateStopped: Run has returned.
	StateStopped = "stopped"
)

// Health is a snapshot of one source's state.
type Health struct {
	State string `json:"state"` // one of the State* constants
	// Detail says why, when State is not StateConsuming (for Kafka also while
	// consuming after a reset).
	Detail string `json:"detail,omitempty"`
	// Since is when State began.
	Since time.Time `json:"since"`
	// Partitions are the Kafka partitions this instance owns (nil for AMQP).
	Partitions []int `json:"partitions,omitempty"`
	// PartitionStates is the state of each owned Kafka partition (nil for AMQP).
	PartitionStates []PartitionHealth `json:"partition_states,omitempty"`
	// Lag is how many records the source is behind: for Kafka the sum over assigned
	// partitions of end offset minus committed offset; for AMQP the queue depth (ready
	// messages). -1 when unknown.
	Lag int64 `json:"lag"`
	// Rebuilds counts the times the consumer was torn down and built again (AMQP: the
	// watchdog; Kafka: a partition reader reset after an offset out of range or replaced
	// after a stall).
	Rebuilds int `json:"rebuilds"`
}

// Kafka partition states (PartitionHealth.State).
const (
	// PartitionOwned: the lease is held; the reader is being set up (committed offset).
	PartitionOwned = "owned"
	// PartitionFetching: the reader is reading: caught up, or making progress.
	PartitionFetching = "fetching"
	// PartitionLagging: records to read and no progress outside the handler for a
	// third of ingress.stall_timeout (at least 1s).
	PartitionLagging = "lagging"
	// PartitionUnreachable: the brokers do not answer this partition's reader or the
	// offset calls.
	PartitionUnreachable = "unreachable"
)

// PartitionHealth is one owned Kafka partition as its owner sees it.
type PartitionHealth struct {
	Partition int    `json:"partition"`
	State     string `json:"state"` // one of the Partition* constants
	Detail    string `json:"detail,omitempty"`
	// Since is when State began.
	Since time.Time `json:"since"`
	// Lag is the partition's end offset minus the offset committed (or started from),
	// -1 unknown.
	Lag int64 `json:"lag"`
	// Committed is the last offset committed by this owner (or the one it started
	// from), -1 unknown.
	Committed int64 `json:"committed"`
	// Resets counts the reader's resets (offset out of range) and replacements (stall).
	Resets int `json:"resets"`
}

// HealthReporter is implemented by sources that report their state. Health must be
// cheap (no broker call: it returns the last snapshot) and safe for concurrent use.
type HealthReporter interface {
	Health() Health
}
