package storeapi

import (
	"errors"

	"github.com/delaybridge/delay-bridge/internal/fault"
)

// Errors of the shard store, classified with internal/fault: callers test the kind with
// errors.Is and the class with fault.IsTransient / fault.IsPermanent. A store wraps
// them with %w and classifies its own backend's errors once, where they enter it
// (store/redisstore: redisErr).
//
//   - transient: every backend error that may go away by itself (a lost connection, a
//     failover, a timeout), and ErrNotReplicated;
//   - permanent: ErrShardCount, ErrStoreFormat and ErrInvalid (retrying the same call
//     cannot succeed);
//   - neither: ErrFenced (a signal to stop working a shard, not a failure to retry),
//     ErrNotFound, ErrOtherRoute, ErrJobNotFound and ErrJobLost (answers), ErrBadCursor,
//     a corrupt envelope (envelope.ErrCorrupt), a cancelled context, a closed client, a
//     script or authentication error.
var (
	// ErrFenced: the shard's lease is not held with the token the caller presented (it
	// expired or another instance took over). The caller must stop working the shard.
	ErrFenced = errors.New("scheduler: shard lease not held (fenced)")
	// ErrShardCount: the store records a different shard count for this cluster than the
	// configuration asks for. Shards cannot be re-counted in place.
	ErrShardCount = fault.Permanent(errors.New("scheduler: shard count mismatch"))
	// ErrStoreFormat: Redis holds a store of a format this build does not read (one
	// written by a pre-release build, or by a later release). Nothing is read or written.
	ErrStoreFormat = fault.Permanent(errors.New("scheduler: unknown store format"))
	// ErrNotReplicated: the write reached the primary but fewer than the required
	// replicas acknowledged it in time. Writes are idempotent, so retrying is safe.
	ErrNotReplicated = fault.Transient(errors.New("scheduler: write not acknowledged by enough replicas"))
	// ErrNotFound: no message with that id in the state the operation needs.
	ErrNotFound = errors.New("scheduler: message not found")
	// ErrInvalid: a bad argument (shard out of range, instance name with '|', ...).
	ErrInvalid = fault.Permanent(errors.New("scheduler: invalid argument"))
	// ErrOtherRoute: a cancel scoped to a route named a message of another route;
	// nothing was changed.
	ErrOtherRoute = errors.New("scheduler: message belongs to another route")
	// ErrOrdered: a pending message of a route with `order: key` cannot be
	// rescheduled (it holds its place in its key's order); nothing was changed.
	ErrOrdered = errors.New("scheduler: message of an ordered key cannot be rescheduled")
	// ErrBadCursor: a browse cursor this store did not make for the same state.
	ErrBadCursor = errors.New("scheduler: invalid browse cursor")
	// ErrJobNotFound: no job with that id (never created, or expired after
	// JobRetention).
	ErrJobNotFound = errors.New("scheduler: job not found")
	// ErrJobLost: the runner no longer runs the job (an operator cancelled it, or
	// another instance took it over after a missed heartbeat, or it expired). The
	// runner stops.
	ErrJobLost = errors.New("scheduler: job no longer run by this instance")
)
