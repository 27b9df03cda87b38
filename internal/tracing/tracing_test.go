package tracing

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
	producerTP    = "00-" + producerTrace + "-" + producerSpan + "-01"
)

func newRecorded(t *testing.T) (*Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return NewTracer(tp, map[string]string{"orders": "orders.out"}), sr
}

func message(headers ...envelope.Header) *envelope.Envelope {
	return &envelope.Envelope{
		ID: "m-1", Route: "orders", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
		DueAt: 1_700_000_060_000, ReceivedAt: 1_700_000_000_000, Attempt: 0, Headers: headers,
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// The span of a confirmed publish: child of the producer's span, from the receive time
// to the confirm, with park, fire and publish events, the messaging attributes, and the
// published headers naming it.
func TestSpanJoinsProducerTraceAndIsInjected(t *testing.T) {
	tr, sr := newRecorded(t)
	env := message(
		envelope.Header{Key: "x-delay", Value: "60000"},
		envelope.Header{Key: HeaderTraceparent, Value: producerTP},
		envelope.Header{Key: HeaderTracestate, Value: "vendor=abc"},
		envelope.Header{Key: "x-correlation-id", Value: "c-9"},
	)
	orig := append([]envelope.Header(nil), env.Headers...)
	fired := time.UnixMilli(env.DueAt + 2)
	sent := fired.Add(time.Millisecond)
	confirmed := sent.Add(3 * time.Millisecond)

	hs, end := tr.Start(env, envelope.BrokerKafka, fired, sent)
	if len(sr.Ended()) != 0 {
		t.Fatal("span ended before end was called")
	}
	end(confirmed, nil)

	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if got := s.SpanContext().TraceID().String(); got != producerTrace {
		t.Errorf("trace id %s, want the producer's %s", got, producerTrace)
	}
	if got := s.Parent().SpanID().String(); got != producerSpan || !s.Parent().IsRemote() {
		t.Errorf("parent %s (remote %v), want the producer's span %s", got, s.Parent().IsRemote(), producerSpan)
	}
	if s.Name() != "send orders.out" || s.SpanKind() != trace.SpanKindProducer {
		t.Errorf("name %q kind %v, want \"send orders.out\" producer", s.Name(), s.SpanKind())
	}
	if !s.StartTime().Equal(time.UnixMilli(env.ReceivedAt)) || !s.EndTime().Equal(confirmed) {
		t.Errorf("span %s – %s, want receive time %s – confirm %s", s.StartTime(), s.EndTime(), time.UnixMilli(env.ReceivedAt), confirmed)
	}
	var events []string
	for _, e := range s.Events() {
		events = append(events, fmt.Sprintf("%s@%d", e.Name, e.Time.UnixMilli()))
	}
	want := fmt.Sprintf("park@%d fire@%d publish@%d", env.ReceivedAt, fired.UnixMilli(), sent.UnixMilli())
	if got := strings.Join(events, " "); got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	a := attrs(s)
	for k, v := range map[attribute.Key]string{
		"messaging.system": "kafka", "messaging.operation.type": "send", "messaging.destination.name": "orders.out",
		"messaging.message.id": "m-1", AttrRoute: "orders", AttrSource: "orders.delay", AttrSourceSys: "kafka",
	} {
		if a[k].AsString() != v {
			t.Errorf("attribute %s = %q, want %q", k, a[k].AsString(), v)
		}
	}
	for k, v := range map[attribute.Key]int64{AttrAttempt: 1, AttrDueAt: env.DueAt, AttrLateness: confirmed.UnixMilli() - env.DueAt} {
		if a[k].AsInt64() != v {
			t.Errorf("attribute %s = %d, want %d", k, a[k].AsInt64(), v)
		}
	}
	if s.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset on a confirmed publish", s.Status())
	}

	// The published headers: the rest in order, the trace context naming our span.
	wantTP := "00-" + producerTrace + "-" + s.SpanContext().SpanID().String() + "-01"
	got := map[string]any{}
	var keys []string
	for _, h := range hs {
		if _, dup := got[h.Key]; dup {
			t.Errorf("header %s twice", h.Key)
		}
		got[h.Key] = h.Value
		keys = append(keys, h.Key)
	}
	if got[HeaderTraceparent] != wantTP {
		t.Errorf("published traceparent %v, want our span's %s", got[HeaderTraceparent], wantTP)
	}
	if got[HeaderTracestate] != "vendor=abc" {
		t.Errorf("published tracestate %v, want the producer's vendor=abc", got[HeaderTracestate])
	}
	if k := strings.Join(keys[:2], ","); k != "x-delay,x-correlation-id" || got["x-delay"] != "60000" || got["x-correlation-id"] != "c-9" {
		t.Errorf("other headers %v, want x-delay and x-correlation-id first, unchanged", keys)
	}
	for i, h := range env.Headers {
		if h != orig[i] {
			t.Errorf("env.Headers[%d] changed to %v (a retry must be the producer's child again)", i, h)
		}
	}
}

// An AMQP producer may write the header as bytes and with another case: the context is
// still read, and only our traceparent is published.
func TestSpanReadsBytesAndAnyCase(t *testing.T) {
	tr, sr := newRecorded(t)
	env := message(envelope.Header{Key: "Traceparent", Value: []byte(producerTP)})
	hs, end := tr.Start(env, envelope.BrokerAMQP, time.UnixMilli(env.DueAt), time.UnixMilli(env.DueAt))
	end(time.UnixMilli(env.DueAt+1), nil)
	s := sr.Ended()[0]
	if s.Parent().SpanID().String() != producerSpan {
		t.Errorf("parent %s, want %s", s.Parent().SpanID(), producerSpan)
	}
	if a := attrs(s); a["messaging.system"].AsString() != "rabbitmq" {
		t.Errorf("messaging.system %q, want rabbitmq", a["messaging.system"].AsString())
	}
	if len(hs) != 1 || hs[0].Key != HeaderTraceparent || !strings.Contains(hs[0].Value.(string), s.SpanContext().SpanID().String()) {
		t.Errorf("published headers %v, want only our traceparent", hs)
	}
}

// Without a producer context the span starts a trace, and the message carries it.
func TestSpanWithoutProducerContextStartsTrace(t *testing.T) {
	tr, sr := newRecorded(t)
	env := message(envelope.Header{Key: HeaderTraceparent, Value: "garbage"})
	env.Target = "other"
	hs, end := tr.Start(env, envelope.BrokerKafka, time.UnixMilli(env.DueAt), time.UnixMilli(env.DueAt))
	end(time.UnixMilli(env.DueAt), nil)
	s := sr.Ended()[0]
	if s.Parent().IsValid() {
		t.Errorf("parent %v, want none", s.Parent())
	}
	if s.Name() != "send other" {
		t.Errorf("name %q, want the message's own target", s.Name())
	}
	want := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
	if len(hs) != 1 || hs[0].Value != want {
		t.Errorf("headers %v, want only traceparent %s", hs, want)
	}
}

// A failed publish ends the span with an error status and the failure's reason.
func TestSpanOfFailedPublishHasErrorStatus(t *testing.T) {
	tr, sr := newRecorded(t)
	env := message(envelope.Header{Key: HeaderTraceparent, Value: producerTP})
	env.Attempt = 2
	_, end := tr.Start(env, envelope.BrokerKafka, time.UnixMilli(env.DueAt), time.UnixMilli(env.DueAt))
	end(time.UnixMilli(env.DueAt+5), fmt.Errorf("kafka: %w", fault.ErrUnroutable))
	s := sr.Ended()[0]
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "unroutable") {
		t.Errorf("status %v, want error naming the failure", s.Status())
	}
	a := attrs(s)
	if a["error.type"].AsString() != string(fault.ReasonUnroutable) || a[AttrAttempt].AsInt64() != 3 {
		t.Errorf("error.type %q attempt %d, want %q and 3", a["error.type"].AsString(), a[AttrAttempt].AsInt64(), fault.ReasonUnroutable)
	}
	if len(s.Events()) != 4 || s.Events()[3].Name != "exception" {
		t.Errorf("events %v, want park, fire, publish and the exception", s.Events())
	}
}
