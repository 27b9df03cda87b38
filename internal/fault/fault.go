// Package fault is the one place errors are classified. Every package wraps its errors
// with %w and marks them once, where the cause is known, as one of two classes:
//
//   - permanent: retrying the same operation cannot succeed (a missing target, an
//     invalid message, a refused configuration). A message that fails permanently is
//     dead-lettered at once; a permanent error at start-up stops the process.
//   - transient: the operation may succeed later (a network error, a timeout, a server
//     that is loading, failing over or temporarily refusing). It is retried with the
//     clock's Backoff policy; a message is never dead-lettered for a transient error
//     alone (it still counts attempts unless the broker was unreachable).
//
// An error marked with neither is unclassified: IsTransient falls back to the standard
// library's view (net.Error timeouts, connection refused/reset, EOF), everything else
// is treated as neither, and callers decide (usually: count an attempt and retry).
//
// A failed publish carries, besides, what is known of its outcome (publish.go):
// unreachable, rejected, unroutable or unknown outcome (written, not answered), read
// with ReasonOf, IsUnreachable and IsUnknownOutcome by whoever decides about the
// message, so nobody needs to import the sink that failed.
//
// The package has no project imports, so every layer may use it.
package fault

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

var (
	// ErrPermanent marks errors retrying cannot fix. Test with IsPermanent.
	ErrPermanent = errors.New("permanent")
	// ErrTransient marks errors that may go away by themselves. Test with IsTransient.
	ErrTransient = errors.New("transient")
)

type marked struct {
	err   error
	class error
}

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.class} }

// Permanent marks err as permanent; the message is err's, unchanged. nil stays nil.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return &marked{err: err, class: ErrPermanent}
}

// Transient marks err as transient; the message is err's, unchanged. nil stays nil.
// A permanent error stays permanent: permanent always wins over transient.
func Transient(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) || errors.Is(err, ErrTransient) {
		return err
	}
	return &marked{err: err, class: ErrTransient}
}

// IsPermanent reports whether err (or an error it wraps) was marked permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// IsTransient reports whether err is worth retrying: marked transient, or (unmarked)
// a network timeout, a refused, reset or aborted connection, a broken pipe, or an
// unexpected EOF. A permanent mark and context cancellation are never transient;
// context.DeadlineExceeded is (the operation timed out, it may work next time).
func IsTransient(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrPermanent), errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, ErrTransient), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
