// Package egress publishes fired messages to their targets. Implementations live in
// egress/kafka and egress/amqp; the Dispatcher batches fired envelopes into them and
// reports each outcome (ack, retry, dead letter) back to the scheduler.
package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Sink publishes to one broker.
//
// Contract:
//   - Publish sends every message to its target (env.Target if set, else the sink's
//     default target for env.Route) with the outgoing headers of docs/CONTRACT.md §2 (see
//     OutgoingHeaders), and waits until the broker confirmed each one (Kafka acks=all,
//     AMQP publisher confirm with mandatory routing).
//   - It returns a slice with one error per message, in order; nil means the broker has
//     it. A returned (unroutable) or nacked message is an error. Errors for which
//     retrying cannot help are wrapped with ErrPermanent; errors wrap ErrUnreachable,
//     ErrRejected or ErrUnroutable when they are of that kind (see FailReason).
//   - A message whose write was handed to the broker's connection but not answered is
//     failed with an error wrapping ErrUnknownOutcome: the broker may still apply it.
//     Publish never sends a message twice itself, and it keeps waiting for the answer
//     of a write until ctx ends (it has no timeout of its own shorter than ctx).
//   - Publish must return promptly when ctx is cancelled (errors for what was not
//     confirmed).
//   - Publish may be called from several goroutines at once.
//   - Close flushes nothing further and releases connections; Publish after Close fails.
type Sink interface {
	Publish(ctx context.Context, msgs []*envelope.Envelope) []error
	Close() error
}

// ErrPermanent marks a publish failure that retrying cannot fix; the message goes
// straight to the dead letters.
var ErrPermanent = errors.New("permanent")

// Failure classes sinks wrap their errors with, for counting (FailReason) and for the
// retry decision.
var (
	// ErrUnreachable: no connection to the broker; nothing was sent, a retry is safe and
	// never a reason to give up on a message.
	ErrUnreachable = errors.New("broker unreachable")
	// ErrRejected: the broker answered and refused the message (nack, error code).
	ErrRejected = errors.New("rejected by the broker")
	// ErrUnroutable: the broker has nowhere to put it (AMQP return, unknown topic).
	ErrUnroutable = errors.New("unroutable")
	// ErrUnknownOutcome: the message was written to the broker's connection and no
	// answer came before the publish was given up (timeout, connection lost after the
	// write): the broker may still apply the write. Re-sending it at once would publish
	// it twice; the completer leaves it in flight instead (recovered after the in-flight
	// lease).
	ErrUnknownOutcome = errors.New("outcome unknown")
)

// UnknownOutcome reports whether err says the message may have reached the broker.
func UnknownOutcome(err error) bool { return errors.Is(err, ErrUnknownOutcome) }

// FailReason maps a publish error to its observe.Fail* reason: the classes above first,
// then timeouts, then connection errors; anything else is observe.FailOther.
func FailReason(err error) string {
	var nerr net.Error
	var operr *net.OpError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrUnroutable):
		return observe.FailUnroutable
	case errors.Is(err, ErrRejected):
		return observe.FailRejected
	case errors.Is(err, ErrUnreachable), errors.As(err, &operr) && operr.Op == "dial":
		return observe.FailUnreachable
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return observe.FailUnreachable
	case errors.Is(err, ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &nerr) && nerr.Timeout():
		return observe.FailTimeout
	}
	return observe.FailOther
}

// HealthChecker is implemented by sinks that can tell whether their broker is reachable
// even while nothing is being published (readiness must not wait for the first failed
// publish). Healthy returns nil when the broker answered recently, otherwise an error
// saying what failed. It must be cheap (the last result of a background probe or of the
// last publish, no broker call of its own) and safe for concurrent use.
type HealthChecker interface {
	Healthy() error
}
