// Package observe is the narrow interface through which core packages report what they
// do. Core packages never import Prometheus; app/metrics implements Observer with
// client_golang, and tests use Nop or their own recorder.
//
// Every message the bridge reads ends in exactly one outcome, each counted once (also
// when a batch is replayed after a failure): Parked then Delivered (Published),
// Cancelled, DeadLettered, Duplicate (a park refused because the id is known) or
// Dropped (at-most-once). Retries and failed publish attempts are counted on the way.
package observe

import "time"

// Reasons for Duplicate: the state the known id was found in.
const (
	DuplicatePending   = "pending"   // already parked, waiting
	DuplicateInflight  = "inflight"  // already claimed, being published
	DuplicateDead      = "dead"      // already dead-lettered
	DuplicateDelivered = "delivered" // delivered within done_window
	DuplicateCancelled = "cancelled" // cancelled (or tombstoned) within done_window
)

// DuplicateReasons lists every Duplicate reason (metrics create these series at 0).
var DuplicateReasons = []string{DuplicatePending, DuplicateInflight, DuplicateDead, DuplicateDelivered, DuplicateCancelled}

// Reasons for PublishFailed and Dropped: why a publish attempt did not succeed.
const (
	FailTimeout     = "timeout"     // no answer from the broker in time (outcome unknown)
	FailUnreachable = "unreachable" // connection refused, reset, broker down
	FailRejected    = "rejected"    // the broker refused the message (nack, error code)
	FailUnroutable  = "unroutable"  // AMQP basic.return, unknown topic
	FailFenced      = "fenced"      // not published: this instance no longer holds the shard
	FailOther       = "other"
)

// FailReasons lists every PublishFailed / Dropped reason.
var FailReasons = []string{FailTimeout, FailUnreachable, FailRejected, FailUnroutable, FailFenced, FailOther}

// Reasons for RedisRetried: the reply by which Redis Cluster refused a script call
// because its slot was moving (the call did nothing).
const (
	RetryTryAgain = "tryagain" // TRYAGAIN: the slot's keys are split between two nodes
	RetryMoved    = "moved"    // MOVED the client did not follow to the end
	RetryAsk      = "ask"      // ASK the client did not follow to the end
)

// RetryReasons lists every RedisRetried reason.
var RetryReasons = []string{RetryTryAgain, RetryMoved, RetryAsk}

// Side queues (egress.SidePublisher): copies published off the hot path. Metrics
// name their series after the queue (<queue>_backlog, <queue>_published_total, ...).
const (
	SideQueueDeadLetters = "dead_letter_copies" // copies of dead letters to dead_letter.kafka.topic / .amqp.exchange
	SideQueueReceipts    = "receipts"           // receipts to routes[].receipts (egress.Receipts)
)

// SideQueues lists every side queue (metrics create their series at start).
var SideQueues = []string{SideQueueDeadLetters, SideQueueReceipts}

// Reasons for SideDropped: why a copy was given up (the original is kept).
const (
	SideDropFull      = "full"      // the target's backlog was full
	SideDropPermanent = "permanent" // the target refused it for good
	SideDropShutdown  = "shutdown"  // still queued when the publisher stopped
)

// SideDropReasons lists every SideDropped reason.
var SideDropReasons = []string{SideDropFull, SideDropPermanent, SideDropShutdown}

// Observer receives events. Every method must be cheap and safe for concurrent use; it is
// called on hot paths (per batch where a count is passed, per message for histograms).
type Observer interface {
	// Received counts records consumed from a delay source (before parsing).
	Received(route string, n int)
	// Parked counts messages newly stored in Redis (duplicates excluded).
	Parked(route string, n int)
	// Duplicate counts parks refused because the id was already known, by reason (one
	// of DuplicateReasons). A replay of the bridge's own unacknowledged batch counts
	// here too: it is the same record suppressed again.
	Duplicate(route, reason string, n int)
	// Replaced counts messages that took the place of the pending, in-flight or dead
	// message with their id on their route (x-delay-replace); a replace that parks a
	// new message counts as Parked, one refused as Duplicate.
	Replaced(route string, n int)
	// Invalid counts one invalid record by reason (bad_delay, payload_too_large, ...).
	Invalid(route, reason string)
	// RequestedDelay records the delay a producer asked for (due - receive time).
	RequestedDelay(route string, d time.Duration)
	// Fired records one message handed to egress by the wheel, with its lateness
	// (fire time - due time; negative would mean early).
	Fired(route string, lateness time.Duration)
	// EgressWait records one fired message's wait in egress before its publish began:
	// the dispatcher's queue and any max_rate wait (publish start minus fire time).
	// Delivery lateness is fire lateness + this wait + the publish duration.
	EgressWait(route string, wait time.Duration)
	// Published counts messages the broker confirmed, with the batch's publish duration.
	Published(route, broker string, n int, took time.Duration)
	// Delivered records one broker-confirmed message's delivery lateness: the time the
	// broker confirmed it minus its due time (what consumers feel).
	Delivered(route string, lateness time.Duration)
	// PublishFailed counts failed publish attempts by reason (one of FailReasons).
	PublishFailed(route, broker, reason string, n int)
	// PublishRetried counts messages put back for another publish attempt.
	PublishRetried(route string, n int)
	// Dropped counts messages given up without delivery (at-most-once failures), by
	// reason (one of FailReasons).
	Dropped(route, reason string, n int)
	// Cancelled counts messages cancelled (by x-delay-cancel, HTTP or a bulk job).
	Cancelled(route string, n int)
	// Rescheduled counts messages given a new due time.
	Rescheduled(route string, n int)
	// DeadLettered counts messages moved to the dead letters.
	DeadLettered(route string, n int)
	// ScriptDuration records one Redis script call.
	ScriptDuration(script string, took time.Duration)
	// RedisRetried counts one script call Redis Cluster refused before running it
	// because its slot was being migrated, and that the store sends again after a
	// backoff; reason is one of RetryReasons.
	RedisRetried(script, reason string)
	// ShardsOwned sets the number of shards this instance owns.
	ShardsOwned(n int)
	// IngressConsuming sets whether a route's ingress is consuming (joined, fetching,
	// making progress) — 0 while joining, stalled or unreachable.
	IngressConsuming(route string, consuming bool)
	// SideBacklog sets how many copies of a side queue wait for a target.
	SideBacklog(queue, target string, n int)
	// SidePublished counts copies a side queue's target accepted.
	SidePublished(queue, target string, n int)
	// SideFailed counts copies whose publish failed and that are retried.
	SideFailed(queue, target string, n int)
	// SideDropped counts copies given up, by reason (one of SideDropReasons).
	SideDropped(queue, target, reason string, n int)
	// ClockOffset sets this instance's clock offset against Redis's (TIME), measured at
	// every ownership round: local clock minus Redis's, positive when ours is ahead.
	ClockOffset(offset time.Duration)
	// IngressLag sets how many records a route's ingress is behind (Kafka: log end
	// minus committed offset over its assigned partitions; AMQP: queue depth).
	IngressLag(route string, lag int64)
	// ScheduleSlots counts n slots of a recurring schedule with an outcome (Slot*).
	ScheduleSlots(schedule, outcome string, n int)
	// RedisPolicies sets the maxmemory-policy of every Redis primary at the last check,
	// node address -> policy (PolicyUnknown where neither CONFIG GET nor INFO answered);
	// a node not listed is gone.
	RedisPolicies(policies map[string]string)
	// RedisOOM counts n commands Redis refused because it is out of memory (used memory
	// above maxmemory under noeviction); they did nothing and are retried.
	RedisOOM(n int)
	// ClaimHealed counts one claim whose reply was lost (a timeout, a reset connection,
	// a pipeline with a failed call, a migrating slot) that its owner sent again and
	// found its messages in flight: they fire now, not at the in-flight lease.
	ClaimHealed()
	// Recovered counts n in-flight messages put back to fire again (at-least-once),
	// by reason (one of RecoverReasons): each may be a second copy of one already
	// published.
	Recovered(reason string, n int)
}

// Reasons an in-flight message is fired again (Recovered).
const (
	// RecoverLeaseExpired: its in-flight deadline passed under its live owner (an
	// outcome that could not be recorded, a publish held past scheduler.inflight_lease).
	RecoverLeaseExpired = "lease_expired"
	// RecoverShardAcquired: it was left in flight by the shard's previous owner.
	RecoverShardAcquired = "shard_acquired"
)

// RecoverReasons lists every Recovered reason.
var RecoverReasons = []string{RecoverLeaseExpired, RecoverShardAcquired}

// PolicyUnknown is the maxmemory-policy reported for a Redis node that answered neither
// CONFIG GET nor INFO memory with it.
const PolicyUnknown = "unknown"

// Outcomes of a recurring schedule's slot (ScheduleSlots), each counted once per slot
// and planner decision, except SlotPublished, counted per broker-confirmed publish.
const (
	SlotParked    = "parked"    // parked ahead of its time
	SlotLate      = "late"      // parked after its time (catch-up: one or all), fires at once
	SlotMissed    = "missed"    // passed while no bridge planned it, skipped by the catch-up policy
	SlotNoRoute   = "no_route"  // not parked: the schedule's route is not configured
	SlotPublished = "published" // the occurrence was published (broker-confirmed)
)

// SlotOutcomes lists every slot outcome (the series a schedule has from its first count).
var SlotOutcomes = []string{SlotParked, SlotLate, SlotMissed, SlotNoRoute, SlotPublished}

// Nop discards everything.
type Nop struct{}

func (Nop) Received(string, int)                         {}
func (Nop) Parked(string, int)                           {}
func (Nop) Replaced(string, int)                         {}
func (Nop) Duplicate(string, string, int)                {}
func (Nop) Invalid(string, string)                       {}
func (Nop) RequestedDelay(string, time.Duration)         {}
func (Nop) Fired(string, time.Duration)                  {}
func (Nop) EgressWait(string, time.Duration)             {}
func (Nop) Published(string, string, int, time.Duration) {}
func (Nop) Delivered(string, time.Duration)              {}
func (Nop) PublishFailed(string, string, string, int)    {}
func (Nop) PublishRetried(string, int)                   {}
func (Nop) Dropped(string, string, int)                  {}
func (Nop) Cancelled(string, int)                        {}
func (Nop) Rescheduled(string, int)                      {}
func (Nop) DeadLettered(string, int)                     {}
func (Nop) ScriptDuration(string, time.Duration)         {}
func (Nop) RedisRetried(string, string)                  {}
func (Nop) ShardsOwned(int)                              {}
func (Nop) IngressConsuming(string, bool)                {}
func (Nop) IngressLag(string, int64)                     {}
func (Nop) ClockOffset(time.Duration)                    {}
func (Nop) SideBacklog(string, string, int)              {}
func (Nop) SidePublished(string, string, int)            {}
func (Nop) SideFailed(string, string, int)               {}
func (Nop) SideDropped(string, string, string, int)      {}
func (Nop) ScheduleSlots(string, string, int)            {}
func (Nop) RedisPolicies(map[string]string)              {}
func (Nop) RedisOOM(int)                                 {}
func (Nop) ClaimHealed()                                 {}
func (Nop) Recovered(string, int)                        {}
