package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/fault"
)

// The store's errors are the contract's (storeapi, aliased in contract.go), classified
// there with internal/fault. redisErr classifies an error from go-redis where it enters the store (once; nil and
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
		redis.IsNoReplicasError(err) || isOOM(err) || redis.HasErrorPrefix(err, "BUSY") {
		return true
	}
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	_, ok := redis.IsAskError(err)
	return ok
}

// isOOM reports whether Redis refused a command because it is out of memory: used memory
// above maxmemory under the noeviction policy ("OOM command not allowed when used memory
// > 'maxmemory'"), also when a script's first write is the refused one. The command did
// nothing; it is transient (memory may free: messages fire and are acknowledged), and
// health.go watches every reply for it to show a full Redis.
func isOOM(err error) bool {
	return err != nil && redis.IsOOMError(err)
}
