package scheduler

import (
	"context"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler/store"
)

// Store is what the scheduler needs from the shard store. scheduler/store implements it
// on Redis (standalone, Sentinel or Cluster); internal/testkit/memstore implements it in
// memory, with failure injection, for tests on a fake clock. Both pass the one store
// conformance suite (internal/testkit/storetest).
//
// Times are unix milliseconds passed by the caller (the store never reads a clock for
// them). Shards are 0 ≤ shard < Shards(). Errors are wrapped with %w and classified by
// internal/fault (transient: retry with backoff; anything else: the operation is
// refused); store.ErrFenced means the caller's lease token is no longer the shard's.
type Store interface {
	// Shards is the fixed shard count; ShardOf maps an id to its shard, forever.
	Shards() int
	ShardOf(id string) int

	// Heartbeat records instance as alive at now in the membership set.
	Heartbeat(ctx context.Context, instance string, now int64) error
	// LiveMembers lists the instances whose last heartbeat is within maxAge of now.
	LiveMembers(ctx context.Context, now int64, maxAge time.Duration) ([]store.Member, error)
	// Leave removes instance from the membership set (a clean shutdown).
	Leave(ctx context.Context, instance string) error
	// Time is the coordinator's clock (Redis TIME): the reference every instance's
	// clock is measured against (clock.go). It is the one call that reads a clock.
	Time(ctx context.Context) (time.Time, error)

	// AcquireLeases tries to take each shard's lease for ttl: per shard the new fencing
	// token (strictly greater than any earlier token of that shard), or 0 if another
	// holder has it.
	AcquireLeases(ctx context.Context, shards []int, instance string, ttl time.Duration) ([]int64, error)
	// RenewLeases extends each lease still held with its token; false where it was lost.
	RenewLeases(ctx context.Context, instance string, leases []store.Lease, ttl time.Duration) ([]bool, error)
	// ReleaseLease gives a shard up if (and only if) instance still holds it with token.
	ReleaseLease(ctx context.Context, shard int, instance string, token int64) error

	// Claim moves up to limit ids due ≤ upTo from pending to in flight (lease deadline
	// leaseDeadline) and returns their envelopes in due order, DueAt set to the due
	// score, Attempt as stored. nextDue is the earliest due time left pending (-1: none).
	// Refused with store.ErrFenced unless token is the shard's current token.
	Claim(ctx context.Context, shard int, instance string, token int64, upTo, leaseDeadline int64, limit int) (items []*envelope.Envelope, nextDue int64, err error)
	// AckMany records ids (of any shards) as delivered at now: out of in flight and
	// msg, into done for the done window. An id no longer in flight is ignored.
	AckMany(ctx context.Context, ids []string, now int64) error
	// Retry and RetryMany put failed in-flight ids back to pending at item.Due with
	// attempt+1, or into dead (item.Dead, with its reason). Ids no longer in flight
	// are ignored.
	Retry(ctx context.Context, shard int, items []store.RetryItem, now int64) error
	RetryMany(ctx context.Context, byShard map[int][]store.RetryItem, now int64) error
	// Recover moves up to limit in-flight ids whose lease deadline ≤ now back to
	// pending, due now; RecoverAll does so whatever their deadline (a new owner takes
	// over everything its predecessor claimed). more says whether more remain.
	Recover(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error)
	RecoverAll(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error)

	// ParkEach stores envs, each in the shard of its id, due at its DueAt, idempotently:
	// prior[i] is the state envs[i]'s id was in before the call, StateUnknown when it
	// was new and is now parked, any other state being why it was refused (the duplicate
	// reason; a cancel tombstone of another route does not refuse it). minDue holds,
	// per shard, the earliest due time among newly parked messages. On error some
	// shards may have been written (retry the whole batch); prior and minDue are still
	// filled in for the parts that succeeded (all of them with store.ErrNotReplicated),
	// the others reading StateNotStored; prior is nil when nothing could be tried.
	ParkEach(ctx context.Context, envs []*envelope.Envelope) (prior []store.State, minDue map[int]int64, err error)
	// Bury stores invalid messages straight into dead (their Reason says why) at now,
	// idempotently like ParkEach: prior[i] is StateUnknown when buried now, else the
	// state its id was already in (left as it is). On error prior is nil unless the
	// error is store.ErrNotReplicated.
	Bury(ctx context.Context, envs []*envelope.Envelope, now int64) (prior []store.State, err error)
	// Cancel removes id wherever it is (pending, in flight or dead) and remembers it as
	// cancelled at now. It returns the prior state (StatePending, StateInflight or
	// StateDead: cancelled now; StateDelivered or StateCancelled: nothing changes;
	// StateUnknown: tombstoned if opt.Tombstone) and the route of the message found
	// (opt.Route when none). A message of another route than a non-empty opt.Route is
	// left alone: store.ErrOtherRoute. opt.Tombstone without opt.Route: store.ErrInvalid.
	Cancel(ctx context.Context, id string, now int64, opt store.CancelOptions) (prior store.State, route string, err error)
	// Get returns id's state, its score there (due time, lease deadline, time dead,
	// delivered or cancelled) and its envelope (nil for delivered, cancelled, unknown;
	// an undecodable one is reported with an error wrapping envelope.ErrCorrupt).
	Get(ctx context.Context, id string) (store.State, int64, *envelope.Envelope, error)
	// Envelopes reads the stored envelopes of ids (pending, in flight or dead; nil for
	// any other, or one that does not decode), in ids' order.
	Envelopes(ctx context.Context, ids []string) ([]*envelope.Envelope, error)

	// PublishWake and PublishCancel notify every instance's Listen; Listen delivers
	// them until ctx ends (see store.Store.Listen). Notifications may be lost.
	PublishWake(ctx context.Context, minDue map[int]int64) error
	PublishCancel(ctx context.Context, id string) error
	Listen(ctx context.Context, onWake func(minDue map[int]int64), onCancel func(id string)) error
}

var _ Store = (*store.Store)(nil)
