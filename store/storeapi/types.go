package storeapi

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// State is where a message is in its shard.
type State string

const (
	StatePending  State = "pending"  // waiting for its time
	StateInflight State = "inflight" // claimed by a pump, being published
	StateDead     State = "dead"     // dead-lettered (envelope Reason says why)
	// StateDelivered: published, remembered for the dedup window.
	StateDelivered State = "delivered"
	// StateCancelled: cancelled (or tombstoned by a cancel that came before its
	// message), remembered for the dedup window.
	StateCancelled State = "cancelled"
	StateUnknown   State = "" // never seen, or forgotten
	// StateNotStored is not a message state: it appears only in ParkEach results
	// returned with an error, for messages whose call failed (stored or not, nobody
	// knows; the caller replays the batch).
	StateNotStored State = "not_stored"
)

// ShardOf maps a message id to its shard among shards: FNV-1a (32-bit) of its shard
// name, modulo the shard count. The shard name of an id of the form of a Kafka
// record's default id, "<topic>/<partition>/<offset>/<12 lowercase hex digits>"
// (ingress.KafkaRecordID), is "<topic>/<partition>/<offset / ShardBlock>": the
// partition's block of ShardBlock consecutive offsets, so a fetch of consecutive
// records of one partition lands in one shard and is parked, claimed and acked in one
// script call per shard instead of one per record (a Kafka fetch of a few dozen
// records spread over 64 shards was one or two messages per call, over 1,024 one).
// Load still spreads over every shard (and Redis Cluster slot): each block of a
// partition goes to its own hashed shard. The shard name of any other id is the id
// itself. It is a pure function of the id, so a lookup, cancel or replace by id finds
// the message from its id alone, whoever gave the id (a user-given id of that form is
// placed by the same rule).
//
// Every store uses it and it must never change: ids already parked would become
// unreachable. The hash is computed inline (the same as hash/fnv's New32a,
// TestShardOfIsFNV1a) and allocates nothing: it runs several times per message.
func ShardOf(id string, shards int) int {
	prefix, offset, ok := kafkaOffset(id)
	if !ok {
		return int(fnv1a(fnvOffset32, id) % uint32(shards))
	}
	var digits [20]byte
	h := fnv1a(fnvOffset32, prefix)
	h = fnv1a(h, string(strconv.AppendUint(digits[:0], offset/ShardBlock, 10)))
	return int(h % uint32(shards))
}

// ShardBlock is how many consecutive offsets of one Kafka partition share a shard
// (ShardOf). The larger it is, the more records of a fetch (and of an acknowledgement
// batch) share a script call; the smaller, the sooner a partition's flow moves on to
// another shard. It must never change, like ShardOf.
const ShardBlock = 1024

// kafkaOffset splits an id of the Kafka default form "<topic>/<partition>/<offset>/<hash>"
// (topic non-empty, partition 1-10 decimal digits, offset 1-19 decimal digits at most
// MaxInt64, hash 12 lowercase hex digits) into "<topic>/<partition>/" and the offset;
// ok is false for any other id. It reads the id from its end, so a
// topic may hold anything (Kafka's do not hold '/').
func kafkaOffset(id string) (prefix string, offset uint64, ok bool) {
	const hashLen = 12
	n := len(id)
	if n < hashLen+6 || id[n-hashLen-1] != '/' {
		return "", 0, false
	}
	for i := n - hashLen; i < n; i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", 0, false
		}
	}
	end := n - hashLen - 1 // the '/' before the hash
	start, offset, ok := decimalBefore(id, end, 19)
	if !ok || offset > math.MaxInt64 {
		return "", 0, false
	}
	pstart, _, ok := decimalBefore(id, start-1, 10)
	if !ok || pstart < 2 { // pstart-1 is the '/' after the topic
		return "", 0, false
	}
	return id[:start], offset, true
}

// KafkaOffset splits an id of the Kafka default form (as ShardOf reads it) into
// "<topic>/<partition>/", the offset and the 12 hex digits of its record hash; ok is
// false for any other id. A store may keep what it remembers of such ids per block of
// ShardBlock offsets (they share a shard).
func KafkaOffset(id string) (prefix string, offset uint64, hash string, ok bool) {
	prefix, offset, ok = kafkaOffset(id)
	if !ok {
		return "", 0, "", false
	}
	const hashLen = 12
	return prefix, offset, id[len(id)-hashLen:], true
}

// decimalBefore reads the run of 1 to maxDigits decimal digits that ends at id[end]
// (exclusive) and is preceded by a '/': it returns where the run starts and its value.
func decimalBefore(id string, end, maxDigits int) (start int, v uint64, ok bool) {
	start = end
	for start > 0 && id[start-1] >= '0' && id[start-1] <= '9' {
		start--
	}
	if start == end || end-start > maxDigits || start == 0 || id[start-1] != '/' {
		return 0, 0, false
	}
	for i := start; i < end; i++ {
		v = v*10 + uint64(id[i]-'0')
	}
	return start, v, true
}

// fnv1a continues the FNV-1a (32-bit) hash h over s.
func fnv1a(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= fnvPrime32
	}
	return h
}

const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// DoneSliceMs is the width of a done slice for a done window of windowMs: the least
// 1000*2^k ms at or above windowMs/32. The done window forgets ids by slice: an id is
// forgotten once the slice holding its time (whole seconds) ends a window in the past,
// so it is remembered for at least the window and at most the window plus one slice
// (plus the time the trim takes to reach it). Every store uses it (the Redis store,
// memstore) and the conformance suite states the bound with it.
func DoneSliceMs(windowMs int64) int64 {
	sec := max((windowMs/32+999)/1000, 1)
	return 1000 << (64 - bits.LeadingZeros64(uint64(sec-1)))
}

// Member is a live instance and the time of its last heartbeat (unix ms).
type Member struct {
	Name      string
	Heartbeat int64
}

// Lease names one held shard lease, for RenewLeases.
type Lease struct {
	Shard int
	Token int64
}

// CheckInstance refuses an instance name no lease can hold: empty, or with '|' (the
// stores keep a lease holder as "instance|token"). Errors wrap ErrInvalid.
func CheckInstance(instance string) error {
	if instance == "" || strings.ContainsRune(instance, '|') {
		return fmt.Errorf("%w: instance name %q must be non-empty without '|'", ErrInvalid, instance)
	}
	return nil
}

// LeaseTTLMs is ttl in whole milliseconds, refusing one under 1 ms (ErrInvalid).
func LeaseTTLMs(ttl time.Duration) (int64, error) {
	ms := ttl.Milliseconds()
	if ms <= 0 {
		return 0, fmt.Errorf("%w: lease TTL %s must be at least 1ms", ErrInvalid, ttl)
	}
	return ms, nil
}

// InstanceOf returns the instance name of a lease holder: holder without a trailing
// "#" and 8 hex digits (the scheduler's incarnation tag, random per process, so two
// processes never share a lease), if it has one. ShardStat.Owner is read through it,
// so owners read as the instance names that Members lists.
func InstanceOf(holder string) string {
	i := len(holder) - 9
	if i < 1 || holder[i] != '#' {
		return holder
	}
	for _, c := range holder[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return holder
		}
	}
	return holder[:i]
}

// RetryItem is a failed publish to put back: into pending at Due with Env (attempt,
// reason and DueAt as the caller set them), or, with Dead, into the dead letters.
type RetryItem struct {
	Env  *envelope.Envelope
	Due  int64
	Dead bool
}

// ReplaceOutcome is what ReplaceEach did with one message.
type ReplaceOutcome string

const (
	ReplaceParked   ReplaceOutcome = "parked"   // stored as a new message
	ReplaceReplaced ReplaceOutcome = "replaced" // took the place of the id's message
	ReplaceRefused  ReplaceOutcome = "refused"  // left alone: Prior says why
)

// ReplaceResult is ReplaceEach's answer for one message: the state its id was in
// before, and what the call did.
type ReplaceResult struct {
	Prior   State
	Outcome ReplaceOutcome
}

// CancelOptions scope a Cancel.
type CancelOptions struct {
	// Route, when set, limits the cancel to a message of that route (an x-delay-cancel
	// record cancels only its own route's messages): a message of another route is
	// left alone and Cancel fails with ErrOtherRoute. "" cancels whatever the route
	// (the admin API).
	Route string
	// Tombstone remembers an unknown id as cancelled for Route during the dedup window,
	// so a cancel that overtakes its message still wins: that route's message with
	// this id is then refused as a duplicate (reason cancelled). It needs Route. Without
	// it an unknown id leaves no trace.
	Tombstone bool
}

// ShardStat is one shard's counts, for /v1/stats and the pending/in-flight gauges.
type ShardStat struct {
	Shard    int
	Pending  int64
	Inflight int64
	Dead     int64
	NextDue  int64  // earliest pending due time (or earlier: a cold bucket's after a cancel), -1 if none
	Owner    string // instance holding the lease (InstanceOf its holder), "" if none
	Token    int64  // its fencing token
}

// RouteCount is one route's messages by state.
type RouteCount struct {
	Pending, Inflight, Dead int64
}

// ShardCounts is one shard's per-route counts.
type ShardCounts struct {
	Shard  int
	Routes map[string]RouteCount
}

// Counts are the per-route counts of every shard.
type Counts struct {
	Shards []ShardCounts
}

// Routes sums the shards' counts per route (routes with nothing left are omitted).
func (c Counts) Routes() map[string]RouteCount {
	out := map[string]RouteCount{}
	for _, s := range c.Shards {
		for r, n := range s.Routes {
			t := out[r]
			t.Pending += n.Pending
			t.Inflight += n.Inflight
			t.Dead += n.Dead
			out[r] = t
		}
	}
	return out
}
