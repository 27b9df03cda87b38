// Package tracing follows each delayed message with an OpenTelemetry span
// (docs/ARCHITECTURE.md "Tracing"). A message is received on one instance and may fire
// on another, much later, so no span stays open across the delay: the instance that
// publishes the message creates its span when it fires, back-dated to the envelope's
// receive time, as a child of the producer's span named by the parked `traceparent`,
// and ends it at the broker's confirm. The published copy carries the new span's
// context, so the consumer's span is a child of the bridge's.
//
// Tracer implements egress.Tracer; Setup builds the SDK from the standard OTEL_*
// environment variables. Only this package and the composition root import
// OpenTelemetry.
package tracing

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// Names of the span's events and of the attributes that no messaging semantic
// convention covers.
const (
	EventPark    = "park"    // at the envelope's receive time (it was parked right after)
	EventFire    = "fire"    // when the timing wheel fired the message
	EventPublish = "publish" // when it was handed to the broker

	AttrRoute     = attribute.Key("delaybridge.route")
	AttrSource    = attribute.Key("delaybridge.source")        // delay topic or queue
	AttrSourceSys = attribute.Key("delaybridge.source.broker") // kafka, amqp or http
	AttrAttempt   = attribute.Key("delaybridge.attempt")       // 1 for the first publish
	AttrDueAt     = attribute.Key("delaybridge.due_at_ms")     // unix ms
	AttrLateness  = attribute.Key("delaybridge.lateness_ms")   // confirm (or failure) time − due time
	AttrReason    = attribute.Key("delaybridge.fail_reason")   // fault.ReasonOf of a failed publish
)

// Header names of the W3C Trace Context.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Tracer opens one span per publish attempt (see the package doc). It is safe for
// concurrent use.
type Tracer struct {
	tracer  trace.Tracer
	prop    propagation.TraceContext
	targets map[string]string
}

// NewTracer returns a Tracer that makes its spans with tp. targets maps each route to
// its default target (topic or exchange), the span's destination when a message names
// none of its own.
func NewTracer(tp trace.TracerProvider, targets map[string]string) *Tracer {
	return &Tracer{tracer: tp.Tracer("github.com/delaybridge/delay-bridge"), targets: targets}
}

// Start opens the span of one publish attempt of env to broker (envelope.BrokerKafka
// or BrokerAMQP): it starts at env's receive time, as a child of the producer's span
// when env's headers carry a valid traceparent (else it starts a trace of its own),
// with the events park (receive time), fire (fired) and publish (sent). It returns the
// headers to publish env with — env's, with traceparent and tracestate replaced by the
// new span's (env itself is not changed, so a retry is again a child of the
// producer's span) — and end, which the caller calls once with the broker's answer for
// this message (nil: confirmed) and its time.
func (t *Tracer) Start(env *envelope.Envelope, broker string, fired, sent time.Time) ([]envelope.Header, func(time.Time, error)) {
	parent := t.prop.Extract(context.Background(), carrier{hs: &env.Headers})
	received := time.UnixMilli(env.ReceivedAt)
	if env.ReceivedAt == 0 {
		received = fired
	}
	target := env.Target
	if target == "" {
		target = t.targets[env.Route]
	}
	system := semconv.MessagingSystemKafka
	if broker == envelope.BrokerAMQP {
		system = semconv.MessagingSystemRabbitMQ
	}
	ctx, span := t.tracer.Start(parent, "send "+target,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(received),
		trace.WithAttributes(
			system,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("send"),
			semconv.MessagingDestinationName(target),
			semconv.MessagingMessageID(env.ID),
			AttrRoute.String(env.Route),
			AttrSource.String(env.Source),
			AttrSourceSys.String(env.SourceBroker),
			AttrAttempt.Int64(int64(env.Attempt)+1),
			AttrDueAt.Int64(env.DueAt),
		))
	span.AddEvent(EventPark, trace.WithTimestamp(received))
	span.AddEvent(EventFire, trace.WithTimestamp(fired))
	span.AddEvent(EventPublish, trace.WithTimestamp(sent))

	hs := make([]envelope.Header, 0, len(env.Headers)+1)
	for _, h := range env.Headers {
		if !isTraceHeader(h.Key) {
			hs = append(hs, h)
		}
	}
	t.prop.Inject(ctx, carrier{hs: &hs})
	due := env.DueAt
	return hs, func(at time.Time, err error) {
		span.SetAttributes(AttrLateness.Int64(at.UnixMilli() - due))
		if err != nil {
			reason := string(fault.ReasonOf(err))
			span.SetAttributes(semconv.ErrorTypeKey.String(reason), AttrReason.String(reason))
			span.RecordError(err, trace.WithTimestamp(at))
			span.SetStatus(codes.Error, err.Error())
		}
		span.End(trace.WithTimestamp(at))
	}
}

func isTraceHeader(key string) bool {
	return strings.EqualFold(key, HeaderTraceparent) || strings.EqualFold(key, HeaderTracestate)
}

// carrier reads and writes the W3C headers in a message's header list. Kafka header
// values are parked as strings (a Go string holds the bytes), AMQP values as whatever
// the table held (a producer's traceparent is a string, possibly bytes); Set writes a
// string, which the Kafka sink sends as its bytes and the AMQP sink as a long string —
// one carrier serves both brokers. Keys match case-insensitively (a header written as
// "Traceparent" is still the producer's context).
type carrier struct{ hs *[]envelope.Header }

func (c carrier) Get(key string) string {
	for _, h := range *c.hs {
		if !strings.EqualFold(h.Key, key) {
			continue
		}
		switch v := h.Value.(type) {
		case string:
			return v
		case []byte:
			return string(v)
		}
		return ""
	}
	return ""
}

func (c carrier) Set(key, value string) {
	*c.hs = append(*c.hs, envelope.Header{Key: key, Value: value})
}

func (c carrier) Keys() []string {
	keys := make([]string, len(*c.hs))
	for i, h := range *c.hs {
		keys[i] = h.Key
	}
	return keys
}
