package store

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/fault"
)

// Errors of the shard store, classified with internal/fault: callers test the kind with
// errors.Is and the class with fault.IsTransient / fault.IsPermanent.
//
//   - transient: every Redis error that may go away by itself (see redisErr), and
//     ErrNotReplicated;
//   - permanent: ErrShardCount and ErrInvalid (retrying the same call cannot succeed);
//   - neither: ErrFenced (a signal to stop working a shard, not a failure to retry),
//     ErrNotFound and ErrOtherRoute (answers), a corrupt envelope, a cancelled context,
//     a closed client, a script or authentication error.
var (
	// ErrFenced: the shard's lease is not held with the token the caller presented (it
	// expired or another instance took over). The caller must stop working the shard.
	ErrFenced = errors.New("scheduler: shard lease not held (fenced)")
	// ErrShardCount: Redis records a different shard count for this cluster than the
	// configuration asks for. Shards cannot be re-counted in place.
	ErrShardCount = fault.Permanent(errors.New("scheduler: shard count mismatch"))
	// ErrNotReplicated: the write reached the primary but fewer than MinReplicas
	// replicas acknowledged it in time. Writes are idempotent, so retrying is safe.
	ErrNotReplicated = fault.Transient(errors.New("scheduler: write not acknowledged by enough replicas"))
	// ErrNotFound: no message with that id in the state the operation needs.
	ErrNotFound = errors.New("scheduler: message not found")
	// ErrInvalid: a bad argument (shard out of range, instance name with '|', ...).
	ErrInvalid = fault.Permanent(errors.New("scheduler: invalid argument"))
	// ErrOtherRoute: a cancel scoped to a route named a message of another route;
	// nothing was changed.
	ErrOtherRoute = errors.New("scheduler: message belongs to another route")
)

// redisErr classifies an error from go-redis where it enters the store (once; nil and
// redis.Nil pass unchanged). Transient: the network (any net.Error, EOF, refused or
// reset connections), a timeout, the pool exhausted, and the replies of a server that
// is loading its data set, failing over or temporarily refusing (LOADING, READONLY,
// MASTERDOWN, CLUSTERDOWN, TRYAGAIN, MOVED, ASK, BUSY, OOM, max clients, NOREPLICAS).
// Anything else is left unmarked.
func redisErr(err error) error {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, fault.ErrPermanent) || errors.Is(err, fault.ErrTransient) {
		return err
	}
	if transientRedis(err) {
		return fault.Transient(err)
	}
	return err
}

func transientRedis(err error) bool {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, redis.ErrClosed):
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err) || redis.IsOOMError(err) || redis.HasErrorPrefix(err, "BUSY") {
		return true
	}
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	_, ok := redis.IsAskError(err)
	return ok
}
