// Package storeapi is the shard store's contract: the Store interface the scheduler,
// the bulk-job runner and the admin backend work through, every type its methods take
// and return, and its errors. store/redisstore implements it on Redis (standalone,
// Sentinel or Cluster); store/memstore implements it in memory, with
// failure injection, for tests on a fake clock. Both pass the one conformance suite,
// store/storetest, which states this contract as tests.
//
// Conventions for every method:
//
//   - Times are unix milliseconds passed by the caller; a store never reads a clock
//     for them (only lease TTLs run on the store's own clock, as Redis runs them).
//   - Shards are 0 ≤ shard < Shards(); a message lives in shard ShardOfEnv(env),
//     forever: ShardOf(id), except for a message with an ordering key on a route with
//     `order: key`, which lives in its key's shard (order.go). By-id operations find
//     such a message wherever it is.
//   - A message is in one state at a time (State): pending (with its due time), in
//     flight (with its lease deadline), dead (with the time dead-lettered), or, for
//     the dedup window, delivered or cancelled (with the time it became so, in whole
//     seconds: rounded down to the second); each state's time is its score.
//   - The done window forgets by slice (DoneSliceMs): an id delivered or cancelled is
//     remembered for at least the window after its last done state, and forgotten at
//     most one slice later, once the bounded trim of an ack or cancel reaches it.
//   - Errors are wrapped with %w and classified by internal/fault (errors.go): a
//     transient error is worth retrying with backoff; anything else refuses the
//     operation. ErrFenced means the caller's lease token is no longer the shard's.
//   - Every method is safe for concurrent use, and every call that writes is atomic per
//     shard (one script call on Redis): a caller never sees half of it on one shard.
//
// The interface is split into roles, so that a consumer can say what it uses; Store
// embeds them all, and every store implements Store.
package storeapi

import (
	"context"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Store is the whole shard store.
type Store interface {
	Sharding
	Membership
	Leases
	Intake
	Delivery
	ByID
	Notifier
	Browser
	DeadLetters
	Stats
	Jobs
	Batches
	History
	Schedules
	Keys
}

// Keys reads one ordering key of a route with `order: key` (order.go).
type Keys interface {
	// KeyMessages returns what is pending or in flight for route's key, in the key's
	// order (due time, then receive order), each with its state and its due time (a
	// retried or recovered head: its current due score). Nothing for an unknown key or
	// a route that is not ordered. Cancel by key is Cancel of each (a message parked
	// after the read is not among them).
	KeyMessages(ctx context.Context, route, key string) ([]KeyMessage, error)
}

// Sharding is the fixed shard layout.
type Sharding interface {
	// Shards is the fixed shard count.
	Shards() int
	// ShardOf maps an id to its shard: ShardOf(id, Shards()), never anything else.
	ShardOf(id string) int
	// ShardOfEnv is the shard a message lives in: the shard it was claimed from
	// (envelope.ClaimedFrom), else, on a route with `order: key` and with an ordering
	// key, ShardOfKey(route, key) (order.go), else ShardOf(id).
	ShardOfEnv(e *envelope.Envelope) int
}

// Membership is the set of live instances (heartbeats).
type Membership interface {
	// Heartbeat records instance as alive at now. An instance name CheckInstance
	// refuses fails with ErrInvalid.
	Heartbeat(ctx context.Context, instance string, now int64) error
	// Members returns, sorted by name, the instances whose last heartbeat is within
	// maxAge of now. Entries ten times older than that may be deleted on the way (an
	// instance that went away without Leave does not pile up; one with a lagging
	// clock is not evicted by the next reader).
	Members(ctx context.Context, now int64, maxAge time.Duration) ([]string, error)
	// LiveMembers is Members with each member's last heartbeat, so that a caller can
	// tell when the next one ages out (Heartbeat + maxAge).
	LiveMembers(ctx context.Context, now int64, maxAge time.Duration) ([]Member, error)
	// Time is the coordinator's clock (Redis TIME): the reference every instance's
	// clock is measured against (scheduler/clockcheck.go, docs/HA.md "One clock"). It
	// is the one call that reads a clock; on a Redis Cluster it is the clock of
	// whichever master answers.
	Time(ctx context.Context) (time.Time, error)
	// Leave removes instance from the members at once (a clean shutdown), so the
	// others take its shards over without waiting for its heartbeat to age out.
	Leave(ctx context.Context, instance string) error
}

// Leases are the shard leases with fencing tokens. A shard is worked by the instance
// holding its lease; every acquisition from free takes a new token, strictly greater
// than any earlier token of that shard, and Claim checks it in the same atomic step,
// so an instance that stalled past its TTL cannot claim after another took over.
type Leases interface {
	// AcquireLease takes shard's lease for instance for ttl if it is free and returns
	// the fencing token to present to Claim; 0 means another instance holds it. If
	// instance already holds it the TTL is renewed and the same token returned. A ttl
	// under 1 ms or an instance name CheckInstance refuses: ErrInvalid.
	AcquireLease(ctx context.Context, shard int, instance string, ttl time.Duration) (int64, error)
	// AcquireLeases is AcquireLease for many shards at once: tokens[i] is the token for
	// shards[i], 0 where another instance holds it. On error the results are not
	// meaningful (some leases may have been taken: they expire after ttl unless
	// renewed).
	AcquireLeases(ctx context.Context, shards []int, instance string, ttl time.Duration) ([]int64, error)
	// RenewLease extends the lease for ttl if instance still holds it with token; false
	// means it was lost (stop working the shard: claims would fail with ErrFenced).
	RenewLease(ctx context.Context, shard int, instance string, token int64, ttl time.Duration) (bool, error)
	// RenewLeases is RenewLease for many leases of instance at once, one flag per
	// lease. On error the results are not meaningful.
	RenewLeases(ctx context.Context, instance string, leases []Lease, ttl time.Duration) ([]bool, error)
	// ReleaseLease gives shard up if (and only if) instance still holds it with token:
	// a late release never frees a lease someone else has taken since.
	ReleaseLease(ctx context.Context, shard int, instance string, token int64) error
}

// Intake stores new messages, idempotently by id.
type Intake interface {
	// ParkEach stores envs, each in the shard of its id, due at its DueAt. prior[i] is
	// the state envs[i]'s id was in before the call: StateUnknown means it was new and
	// is now pending; any other state is why it was refused (pending, inflight, dead,
	// delivered, cancelled: the duplicate reason). A cancel tombstone of another route
	// does not refuse a message (cancels are scoped to their route). minDue holds, per
	// shard, the earliest due time among newly parked messages, for waking pumps.
	//
	// On error some shards may have been written; parking is idempotent, so retry the
	// whole batch (the replay reports the messages parked the first time as pending).
	// prior and minDue are still filled in for the parts that succeeded (all of them
	// with ErrNotReplicated), the others reading StateNotStored; prior is nil when
	// nothing could be tried (an envelope that does not encode: ErrInvalid).
	ParkEach(ctx context.Context, envs []*envelope.Envelope) (prior []State, minDue map[int]int64, err error)
	// ParkClaimEach is ParkEach that claims, in the same atomic step, the new messages
	// the caller is about to claim anyway: envs[i] with claim.Want[i], new (prior
	// StateUnknown), of a route without `order: key`, in a shard of claim.Leases that
	// claim.Instance holds with that lease's token at the call, goes in flight under
	// the lease's LeaseDeadline instead of pending, exactly as a Claim would have left
	// it (Get reads it in flight, the counts move it to inflight, Ack, Retry and Recover
	// treat it as claimed), and claimed[i] is true; its envelope's FireAt becomes its
	// DueAt and its ClaimedBytes the size a claim's byte budget counts (so the caller
	// passes envelopes of its own for those it wants). Every other message is parked as
	// ParkEach parks it: a shard whose lease the caller no longer holds is not an
	// error, its messages are only not claimed. minDue counts pending ones only.
	//
	// A LeaseDeadline identifies a claim of its shard as ClaimRequest.Idempotent's does:
	// the caller gives each call its own, never one a claim of that shard uses. The
	// error contract is ParkEach's; what a failed call may have claimed is in flight
	// under its lease's deadline, and a Claim marked Idempotent with that deadline
	// answers it (or, if the call never ran, claims as any claim).
	ParkClaimEach(ctx context.Context, envs []*envelope.Envelope, claim ParkClaim) (prior []State, claimed []bool, minDue map[int]int64, err error)
	// Park is ParkEach with the refusal reasons folded into a bool: parked[i] is false
	// for a duplicate.
	Park(ctx context.Context, envs []*envelope.Envelope) (parked []bool, minDue map[int]int64, err error)
	// ReplaceEach stores envs like ParkEach, but each replaces the message its id
	// names on its route (x-delay-replace: upsert and debounce) instead of being
	// refused as a duplicate. res[i] says what happened to envs[i], by the state Prior
	// its id was in (docs/CONTRACT.md "Replace"):
	//
	//   - unknown, delivered, or only another route's cancel tombstone: parked anew
	//     (ReplaceParked; a delivered id's done entry is forgotten);
	//   - pending on the same route: its envelope and due time are replaced in one
	//     step (ReplaceReplaced); the counts move, they do not grow;
	//   - dead on the same route: the dead letter is replaced by the new version,
	//     pending (ReplaceReplaced);
	//   - in flight on the same route: the new version is kept as the id's successor
	//     (ReplaceReplaced) and becomes pending, in place of the in-flight version,
	//     when that version leaves in flight: acked (it was published), or put back by
	//     Retry (pending or dead) or Recover (it is not retried: the successor
	//     replaces it). Get shows the successor, as pending at its due time; Cancel
	//     cancels both. A later replace replaces the successor;
	//   - pending, in flight or dead on another route, or cancelled on this route (a
	//     tombstone in the done window): refused (ReplaceRefused), nothing changes.
	//
	// The same id twice in one call: the later replaces the earlier. minDue and the
	// error contract are ParkEach's (failed calls read StateNotStored, Outcome "").
	ReplaceEach(ctx context.Context, envs []*envelope.Envelope) (res []ReplaceResult, minDue map[int]int64, err error)
	// Bury stores invalid messages straight into the dead letters at now (their Reason
	// says why), idempotently like ParkEach: prior[i] is StateUnknown when envs[i] was
	// buried now, else the state its id was already in (left as it is), so a replayed
	// batch is not counted twice. On error prior is nil unless the error is
	// ErrNotReplicated.
	Bury(ctx context.Context, envs []*envelope.Envelope, now int64) (prior []State, err error)
}

// Delivery is the pump's side of a shard: claim, then acknowledge, retry or recover.
type Delivery interface {
	// Claim moves up to limit messages of shard due at or before upTo from pending to
	// in flight with the lease deadline leaseDeadline, and returns them in (due, id)
	// order, each with FireAt set to the later of its due score and its envelope's
	// DueAt (a retry's score is later, a recovered message's may be earlier), Attempt
	// as stored. nextDue is when to claim next: the earliest due time left pending, or
	// an earlier time when the store has work to do first (the Redis store answers the
	// earliest due time its cold tier may hold, and 0 while it is promoting a bucket:
	// "at once"); -1 if nothing is pending. Refused
	// with ErrFenced unless instance holds the shard's lease with token; limit ≤ 0 or a
	// shard out of range: ErrInvalid.
	//
	// A store may keep messages due close together as one group that a claim takes
	// whole (the Redis store's due buckets: a 1,024 ms window of a shard's Kafka default
	// ids) once the middle of its window is due by upTo: such a group passes limit by at
	// most its size (a byte budget, ClaimRequest.MaxBytes, still holds) and may hold
	// messages due up to half its width after upTo (each fires at its due time); nextDue
	// is then the start of its window. A caller that claims half its lookahead before
	// nextDue takes each group before its first message is due as long as the lookahead
	// is at least the group's width.
	//
	// Damaged entries never wedge a shard: an id without an envelope is dropped, an
	// envelope that does not decode is moved to the dead letters as it is, and one
	// written by a newer bridge goes back to pending a little later; none of them is
	// returned.
	Claim(ctx context.Context, shard int, instance string, token int64, upTo, leaseDeadline int64, limit int) (items []*envelope.Envelope, nextDue int64, err error)
	// ClaimMany is Claim for several shards at once, in one round trip where the store
	// can (a pipeline): out[i] is what Claim(reqs[i]) would have returned, except for
	// a request marked Idempotent whose claim ran already and the FireAt of a message
	// due by a request's Now (see ClaimRequest).
	ClaimMany(ctx context.Context, reqs []ClaimRequest) (out []ClaimResult)
	// Ack records claimed messages of shard as delivered at now: they leave in flight
	// and are remembered for the done window (zero window: forgotten at once). Ids no
	// longer in flight (recovered, cancelled, acked already) are ignored. Entries past
	// the window (by slice, DoneSliceMs) are forgotten on the way, a bounded number per
	// call.
	Ack(ctx context.Context, shard int, ids []string, now int64) error
	// AckMany is Ack for ids of any shards.
	AckMany(ctx context.Context, ids []string, now int64) error
	// AckEnvelopes is AckMany for messages whose claimed envelopes the caller holds; a
	// store may use them to save a read (the Redis store passes the routes along for
	// its per-route counts). The outcome is AckMany's.
	AckEnvelopes(ctx context.Context, envs []*envelope.Envelope, now int64) error
	// Retry puts failed in-flight messages of shard back: to pending at item.Due with
	// item.Env as given (attempt, reason, DueAt), or with item.Dead into the dead
	// letters at now. Ids no longer in flight are ignored. An item without an envelope:
	// ErrInvalid.
	Retry(ctx context.Context, shard int, items []RetryItem, now int64) error
	// RetryMany is Retry for items of any shards (byShard: shard -> items).
	RetryMany(ctx context.Context, byShard map[int][]RetryItem, now int64) error
	// Recover moves up to limit in-flight messages of shard whose lease deadline is at
	// or before now back to pending, due now, so they fire again (FireAt stays no
	// earlier than DueAt); more reports that expired ones remain.
	Recover(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error)
	// RecoverAll is Recover whatever the lease deadlines: a new owner takes over
	// everything its predecessor left in flight, calling it until more is false.
	RecoverAll(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error)
}

// ByID are the operations on one message by its id, wherever it is.
type ByID interface {
	// Cancel removes id wherever it is (pending, in flight or dead) and remembers it as
	// cancelled at now for the done window, so a replay of its ingress record on its
	// route is refused. It returns the prior state (StatePending, StateInflight or
	// StateDead: cancelled now; StateDelivered or StateCancelled: nothing changes;
	// StateUnknown: tombstoned if opt.Tombstone, else no trace) and the route of the
	// message it found (opt.Route when none). A message of another route than a
	// non-empty opt.Route is left alone: ErrOtherRoute. opt.Tombstone without
	// opt.Route: ErrInvalid. Cancelling an in-flight message cannot stop a publish
	// already under way (PublishCancel drops it from the wheel that holds it).
	Cancel(ctx context.Context, id string, now int64, opt CancelOptions) (prior State, route string, err error)
	// Reschedule sets a new due time for a pending message (the envelope's DueAt is
	// rewritten with its score) or requeues a dead letter at due (as RequeueDead). It
	// returns the prior state; only StatePending and StateDead mean the change was
	// made.
	Reschedule(ctx context.Context, id string, due int64) (State, error)
	// RequeueDead moves the dead letter id back to pending at due, its reason cleared
	// and its attempt count reset. ErrNotFound if id is not a dead letter.
	RequeueDead(ctx context.Context, id string, due int64) error
	// Get returns id's state, its score there (due time, lease deadline, time dead,
	// delivered or cancelled) and its envelope (nil for delivered, cancelled and
	// unknown). An envelope that does not decode is reported with an error wrapping
	// envelope.ErrCorrupt, along with the state and score.
	Get(ctx context.Context, id string) (State, int64, *envelope.Envelope, error)
	// Envelopes reads the stored envelopes of ids (pending, in flight or dead; nil for
	// any other, or one that does not decode), in ids' order.
	Envelopes(ctx context.Context, ids []string) ([]*envelope.Envelope, error)
}

// Notifier is the wake-up and cancel broadcast between instances. Notifications are an
// optimisation: they may be lost (pumps also scan periodically), never invented.
type Notifier interface {
	// PublishWake announces per shard the earliest due time of newly parked messages
	// to every instance's Listen (nothing for an empty map).
	PublishWake(ctx context.Context, minDue map[int]int64) error
	// PublishCancel tells every instance listening (this one included) to take id out of
	// its wheel (a cancelled message, or the old version of one replaced in flight).
	PublishCancel(ctx context.Context, id string) error
	// Listen delivers every wake-up (onWake) and cancel (onCancel) published while it
	// runs until ctx ends, reconnecting by itself; it returns ctx.Err(). The callbacks
	// run on Listen's goroutine, one at a time, in publication order, and must not
	// block.
	Listen(ctx context.Context, onWake func(minDue map[int]int64), onCancel func(id string)) error
}

// Browser reads messages by state in score order, for the admin API and bulk jobs.
type Browser interface {
	// Browse returns one page of the messages q selects (after q.Normalize: a state
	// other than pending, inflight or dead, or From > To, is ErrInvalid), ordered by
	// (score, id) across all shards. The page stops early, with a Next, when q.MaxScan
	// candidates were examined; Next is "" when nothing after the page can match. A
	// cursor not made by this store for q.State fails with ErrBadCursor. Messages that
	// change state while a client pages may be missed or seen twice, as with any
	// cursor over live data; a message that stays put is returned exactly once.
	Browse(ctx context.Context, q BrowseQuery) (BrowsePage, error)
	// CountRange counts the messages in state st (pending, inflight or dead) with a
	// score in [from, to] (0 = unbounded) over all shards.
	CountRange(ctx context.Context, st State, from, to int64) (int64, error)
	// EdgeScore returns the lowest (with highest, the highest) score in [from, to] (0
	// = unbounded) of state st over all shards; ok is false when there is none.
	EdgeScore(ctx context.Context, st State, from, to int64, highest bool) (score int64, ok bool, err error)
}

// DeadLetters lists and deletes dead letters (by id: ByID.RequeueDead, Cancel).
type DeadLetters interface {
	// ListDead returns up to limit dead letters over all shards, oldest first (by the
	// time dead-lettered). An envelope that does not decode is shown as one holding
	// only its id and a reason saying so.
	ListDead(ctx context.Context, limit int) ([]*envelope.Envelope, error)
	// PurgeDead deletes every dead letter and returns how many. Purged ids are not
	// remembered in the done window: a replay of their ingress record parks them again.
	PurgeDead(ctx context.Context) (int64, error)
}

// Stats are the counts behind /v1/stats, /v1/routes and the gauges.
type Stats interface {
	// ShardStats reads every shard's totals, earliest due time and lease holder, shard
	// by shard (not one snapshot).
	ShardStats(ctx context.Context) ([]ShardStat, error)
	// RouteCounts reads every shard's per-route counts, exact at every moment (every
	// message move changes them in the same atomic step).
	RouteCounts(ctx context.Context) (Counts, error)
}

// Jobs are the bulk job records: any instance answers for any job, and one runner at a
// time runs it, with a heartbeat.
type Jobs interface {
	// CreateJob validates spec (JobSpec.Validate: ErrInvalid) and records a queued
	// job, created and updated at now; a runner (any instance) picks it up. Jobs older
	// than JobRetention leave the listing on the way.
	CreateJob(ctx context.Context, spec JobSpec, now int64) (Job, error)
	// GetJob reads a job (ErrJobNotFound if there is none). now decides whether a
	// running job reads JobAbandoned (heartbeat older than JobStaleAfter).
	GetJob(ctx context.Context, id string, now int64) (Job, error)
	// ListJobs returns up to limit jobs, newest first (by creation time).
	ListJobs(ctx context.Context, limit int, now int64) ([]Job, error)
	// ActiveJobs lists the ids of queued and running jobs (what runners poll).
	ActiveJobs(ctx context.Context) ([]string, error)
	// ClaimJob makes instance the runner of a queued job, or of an abandoned one, and
	// returns the job (Claims counted, heartbeat now); ok is false when someone else
	// runs it or it has finished.
	ClaimJob(ctx context.Context, id, instance string, now int64) (job Job, ok bool, err error)
	// SaveJob records a running job's progress and heartbeat; with final set (JobDone,
	// JobFailed) it also ends the job and leaves the active set. It fails with
	// ErrJobLost, writing nothing, when instance no longer runs the job.
	SaveJob(ctx context.Context, id, instance string, p JobProgress, final JobState, now int64) error
	// CancelJob stops a queued or running job (its runner stops at its next save; what
	// it did stays done) and returns the state it was in; a finished job is left as it
	// is. ErrJobNotFound if there is none.
	CancelJob(ctx context.Context, id string, now int64) (JobState, error)
}

// Batches are the by-id operations a bulk job applies to the messages it browsed, each
// guarded by what it saw: a message that changed in between is left alone, and a
// batch applied twice changes nothing the second time. A result's Prior is the state
// the message was changed from; a message left alone reads its state then, except
// that pending and dead (which would mean "changed") read StateUnknown.
type Batches interface {
	// CancelBatch cancels the messages of items (as Cancel without a route scope) that
	// still match q's route, id and key filters. Prior pending, inflight or dead means
	// it was cancelled now (an in-flight one must still be dropped from its wheel:
	// PublishCancel); anything else means it was left alone (gone, or no longer
	// matching: StateUnknown).
	CancelBatch(ctx context.Context, items []BatchItem, q BrowseQuery, now int64) ([]BatchResult, error)
	// RescheduleBatch moves each pending message of items still due at the score it
	// was seen at to its new due time (DueAt rewritten, as Reschedule). Prior
	// StatePending means moved. A pending message whose envelope does not decode is
	// left alone with an Err wrapping envelope.ErrCorrupt.
	RescheduleBatch(ctx context.Context, items []RescheduleItem) ([]BatchResult, error)
	// RequeueDeadBatch moves each dead letter of items still dead-lettered at the score
	// it was seen at back to pending at due, reason cleared and attempts reset (as
	// RequeueDead). Prior StateDead means requeued.
	RequeueDeadBatch(ctx context.Context, items []BatchItem, due int64) ([]BatchResult, error)
	// PurgeDeadBatch deletes each dead letter of items still dead-lettered at the score
	// it was seen at (not remembered, as PurgeDead). One flag per item: deleted.
	PurgeDeadBatch(ctx context.Context, items []BatchItem) ([]bool, error)
}

// History is the console charts' cluster view (app/series): each instance writes
// its closed intervals, opaque bytes, into a ring of slots of its own, so what is kept
// stays bounded; any instance reads every instance's. Nothing here is on a message's
// path.
type History interface {
	// PutSeries stores one interval of instance in ring slot slot (>= 0), written at
	// now: it replaces what that slot of instance held. keep is how long the history
	// lasts: an instance's intervals are forgotten keep after its last write. A name
	// CheckInstance refuses, a negative slot or keep <= 0 fail with ErrInvalid.
	PutSeries(ctx context.Context, instance string, slot int, interval []byte, now int64, keep time.Duration) error
	// Series returns, for every instance that wrote within keep before now, the
	// intervals its slots hold (in no order; the caller drops those it does not want).
	Series(ctx context.Context, now int64, keep time.Duration) (map[string][][]byte, error)
}

// ClaimRequest is one Claim of Store.ClaimMany (the arguments of Claim, and a byte
// budget).
type ClaimRequest struct {
	Shard               int
	Instance            string
	Token               int64
	UpTo, LeaseDeadline int64
	Limit               int
	// Idempotent: LeaseDeadline identifies this claim (the caller gives every claim
	// of the shard its own). One whose messages are still in flight under it ran
	// already, its reply lost (a timeout, a reset connection, a client that re-sent
	// it), and answers those messages again (Replayed), claiming nothing more, each
	// with FireAt the later of UpTo and its DueAt (the due scores that run read are
	// gone), and NextDue 0. So a claim with an unknown outcome sent again unchanged
	// gets what the lost reply held, instead of leaving it in flight until the
	// deadline.
	Idempotent bool
	// MaxBytes > 0 bounds the claim by bytes as well: the claimed messages' sizes
	// (encoded envelope + MemOverhead each) add up to at most MaxBytes. The first due
	// message that does not fit stays due, and nothing due after it is taken (due
	// order holds). 0: no byte bound.
	MaxBytes int64
	// Alone takes the first due message whatever its size: the caller holds nothing
	// else, so a message larger than the whole budget still goes through, alone.
	Alone bool
	// Now, when > 0, is the caller's clock (unix ms). A message whose due score is at
	// or before it is due at this claim whatever the score, so the store may answer
	// its FireAt as its DueAt alone instead of the later of the two (it fires at once
	// unless DueAt is later): the Redis store then reads those ids without their
	// scores, which is most of what reading a drain's claim costs Redis. A message due
	// after Now gets the later of score and DueAt, as without Now.
	Now int64
}

// ParkClaim is what Intake.ParkClaimEach claims as it parks.
type ParkClaim struct {
	// Instance is the lease holder's name, as for Claim.
	Instance string
	// Want[i]: claim envs[i] if it is new and its shard is one of Leases (len(Want) is
	// len(envs), or 0: claim nothing).
	Want []bool
	// Leases: per shard, the lease the caller holds and the deadline of this call's
	// claims in it.
	Leases map[int]ParkLease
}

// ParkLease is one shard's lease in a ParkClaim: the token it is held with and the
// lease deadline its claimed messages get (unique per claim of the shard).
type ParkLease struct {
	Token, LeaseDeadline int64
}

// ClaimResult is one outcome of Store.ClaimMany (what Claim returns). Each item's
// ClaimedBytes is the size the byte budget counted for it.
type ClaimResult struct {
	Items   []*envelope.Envelope
	NextDue int64
	// Replayed: Items are what an earlier run of the same request claimed, whose
	// reply was lost (see Delivery.Claim), found again in flight.
	Replayed bool
	// Need is the size of the first due message MaxBytes left due (0: none was): the
	// budget the caller waits for before claiming that shard again.
	Need int64
	Err  error
}

// MemOverhead is the bytes a claimed message is counted for beyond its encoded
// envelope: the decoded envelope's structures, its wheel and held-set entries and the
// broker client's per-record structures. docs/OPERATIONS.md "Sizing" explains the
// figure.
const MemOverhead = 1024
