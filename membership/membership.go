package membership

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/internal/fault"
)

// ErrInvalid is a bad argument: an instance name no lease can hold, a TTL under 1 ms.
var ErrInvalid = fault.Permanent(errors.New("membership: invalid argument"))

// Member is a live instance and the time of its last heartbeat (unix ms).
type Member struct {
	Name      string
	Heartbeat int64
}

// CheckInstance refuses an instance (or holder) name no lease can hold: empty, or with
// '|', which separates it from the token in the owner value.
func CheckInstance(instance string) error {
	if instance == "" || strings.ContainsRune(instance, '|') {
		return fmt.Errorf("%w: instance name %q must be non-empty without '|'", ErrInvalid, instance)
	}
	return nil
}

// LeaseTTLMs is ttl in whole milliseconds, refusing one under 1 ms.
func LeaseTTLMs(ttl time.Duration) (int64, error) {
	ms := ttl.Milliseconds()
	if ms <= 0 {
		return 0, fmt.Errorf("%w: lease TTL %s must be at least 1ms", ErrInvalid, ttl)
	}
	return ms, nil
}

// OwnerValue is an owner key's value for a holder holding a lease with a token.
func OwnerValue(holder string, token int64) string {
	return holder + "|" + strconv.FormatInt(token, 10)
}

// MembersKey is the key of the live members of a bridge cluster: P:{C}:members.
func MembersKey(prefix, cluster string) string {
	return fmt.Sprintf("%s:{%s}:members", prefix, cluster)
}

// LeaseKey names one lease: its owner key ("holder|token", PX TTL) and its fence
// counter (INCR on every acquisition from free; never expires).
type LeaseKey struct {
	Owner, Fence string
}

// PartitionLease is the lease of one Kafka source partition of a route:
//
//	P:{C:kafka:<route>}:<topic>:<partition>:owner
//	P:{C:kafka:<route>}:<topic>:<partition>:fence
//
// All keys of one route share the hash tag {C:kafka:<route>}: one Redis Cluster slot
// per route, so a round's renewals of a route's partitions are one pipelined call per
// node.
func PartitionLease(prefix, cluster, route, topic string, partition int) LeaseKey {
	base := fmt.Sprintf("%s:{%s:kafka:%s}:%s:%d:", prefix, cluster, route, topic, partition)
	return LeaseKey{Owner: base + "owner", Fence: base + "fence"}
}

// Held is a lease held with a fencing token.
type Held struct {
	Key   LeaseKey
	Token int64
}
