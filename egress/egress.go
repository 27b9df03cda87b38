// Package egress publishes fired messages to their targets. Implementations live in
// egress/kafka and egress/amqp; the Dispatcher batches fired envelopes into them and
// reports each outcome (ack, retry, dead letter) back to the scheduler.
package egress

import (
	"context"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
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
//     retrying cannot help are marked fault.Permanent; errors are marked
//     fault.ErrUnreachable, fault.ErrRejected or fault.ErrUnroutable when they are of
//     that kind (see fault.ReasonOf and FailReason).
//   - A message whose write was handed to the broker's connection but not answered is
//     failed with an error marked fault.ErrUnknownOutcome: the broker may still apply it.
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

// Errors are classified with internal/fault, where the scheduler reads them too:
// fault.Permanent (retrying cannot help: the message goes straight to the dead
// letters), and the publish outcomes fault.ErrUnreachable, fault.ErrRejected,
// fault.ErrUnroutable and fault.ErrUnknownOutcome (see fault.ReasonOf).

// failReasons maps fault's publish failure reasons to the observe.Fail* metric labels.
var failReasons = map[fault.Reason]string{
	fault.ReasonTimeout:     observe.FailTimeout,
	fault.ReasonUnreachable: observe.FailUnreachable,
	fault.ReasonRejected:    observe.FailRejected,
	fault.ReasonUnroutable:  observe.FailUnroutable,
	fault.ReasonOther:       observe.FailOther,
}

// FailReason maps a publish error to its observe.Fail* reason (fault.ReasonOf): ""
// for nil, observe.FailOther for anything unclassified.
func FailReason(err error) string {
	if err == nil {
		return ""
	}
	if r, ok := failReasons[fault.ReasonOf(err)]; ok {
		return r
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

// Tracer follows publish attempts with trace spans (internal/tracing implements it with
// OpenTelemetry; a nil DispatcherOptions.Tracer costs nothing per message).
type Tracer interface {
	// Start opens the span of one publish attempt of env to broker, fired by the wheel
	// at fired and handed to the sink at sent. It returns the headers to publish env
	// with (env's own, with the trace context replaced by the new span's; env is not
	// changed) and end, called once with the broker's answer for env (nil: confirmed)
	// and its time.
	Start(env *envelope.Envelope, broker string, fired, sent time.Time) (headers []envelope.Header, end func(at time.Time, err error))
}
