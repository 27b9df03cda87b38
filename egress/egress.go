// Package egress publishes fired messages to their targets. Implementations live in
// egress/kafka and egress/amqp; the Dispatcher batches fired envelopes into them and
// reports each outcome (ack, retry, dead letter) back to the scheduler.
package egress

import (
	"context"
	"errors"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Sink publishes to one broker.
//
// Contract:
//   - Publish sends every message to its target (env.Target if set, else the sink's
//     default target for env.Route) with the outgoing headers of DESIGN §2 (see
//     OutgoingHeaders), and waits until the broker confirmed each one (Kafka acks=all,
//     AMQP publisher confirm with mandatory routing).
//   - It returns a slice with one error per message, in order; nil means the broker has
//     it. A returned (unroutable) or nacked message is an error. Errors for which
//     retrying cannot help are wrapped with ErrPermanent.
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

// HealthChecker is implemented by sinks that can tell whether their broker is reachable
// even while nothing is being published (readiness must not wait for the first failed
// publish). Healthy returns nil when the broker answered recently, otherwise an error
// saying what failed. It must be cheap (the last result of a background probe or of the
// last publish, no broker call of its own) and safe for concurrent use.
type HealthChecker interface {
	Healthy() error
}
