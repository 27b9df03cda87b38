package fault

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// Publish outcomes. A sink marks each failed publish with what it knows of it, where it
// knows it; whoever decides about the message (retry, dead letter, leave in flight) and
// whoever counts it read the same marks here, without importing the sink. The marks are
// independent of Permanent/Transient: an error may be both permanent and rejected.
var (
	// ErrUnreachable: no connection to the broker, or it closed under the request;
	// nothing was applied, a retry is safe and never a reason to give up on a message.
	ErrUnreachable = errors.New("broker unreachable")
	// ErrRejected: the broker answered and refused the message (nack, error code).
	ErrRejected = errors.New("rejected by the broker")
	// ErrUnroutable: the broker has nowhere to put it (AMQP return, unknown topic).
	ErrUnroutable = errors.New("unroutable")
	// ErrUnknownOutcome: the message was written to the broker's connection and no
	// answer came before the publish was given up (timeout, connection lost after the
	// write): the broker may still apply it, so re-sending it at once could publish it
	// twice.
	ErrUnknownOutcome = errors.New("outcome unknown")
)

// Unreachable marks err with ErrUnreachable; the message is err's. nil stays nil.
func Unreachable(err error) error { return mark(err, ErrUnreachable) }

// Rejected marks err with ErrRejected; the message is err's. nil stays nil.
func Rejected(err error) error { return mark(err, ErrRejected) }

// Unroutable marks err with ErrUnroutable; the message is err's. nil stays nil.
func Unroutable(err error) error { return mark(err, ErrUnroutable) }

// UnknownOutcome marks err with ErrUnknownOutcome; the message is err's. nil stays nil.
func UnknownOutcome(err error) error { return mark(err, ErrUnknownOutcome) }

func mark(err, class error) error {
	if err == nil || errors.Is(err, class) {
		return err
	}
	return &marked{err: err, class: class}
}

// IsUnknownOutcome reports whether err says the message may have reached the broker
// (marked with ErrUnknownOutcome): it must not be re-sent at once.
func IsUnknownOutcome(err error) bool { return errors.Is(err, ErrUnknownOutcome) }

// IsUnreachable reports whether a failed publish means the broker could not be
// reached (ReasonOf(err) == ReasonUnreachable): nothing was applied, and such a
// failure never counts towards giving up on the message.
func IsUnreachable(err error) bool { return ReasonOf(err) == ReasonUnreachable }

// Reason names why a publish failed, one value per failure; the values are the
// `reason` label of the publish-failure metrics.
type Reason string

// The reasons ReasonOf returns.
const (
	ReasonTimeout     Reason = "timeout"     // no answer in time (outcome unknown)
	ReasonUnreachable Reason = "unreachable" // connection refused, reset, broker down
	ReasonRejected    Reason = "rejected"    // the broker refused the message
	ReasonUnroutable  Reason = "unroutable"  // AMQP basic.return, unknown topic
	ReasonOther       Reason = "other"       // anything else
)

// ReasonOf maps a publish error to its Reason, first match wins: marked unroutable,
// marked rejected, marked unreachable or a failed dial, an unmarked connection error
// (refused, reset, broken pipe, host or network unreachable, EOF, closed connection),
// then marked unknown outcome or a timeout; anything else is ReasonOther. nil is "".
func ReasonOf(err error) Reason {
	var nerr net.Error
	var operr *net.OpError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrUnroutable):
		return ReasonUnroutable
	case errors.Is(err, ErrRejected):
		return ReasonRejected
	case errors.Is(err, ErrUnreachable), errors.As(err, &operr) && operr.Op == "dial":
		return ReasonUnreachable
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return ReasonUnreachable
	case errors.Is(err, ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &nerr) && nerr.Timeout():
		return ReasonTimeout
	}
	return ReasonOther
}
