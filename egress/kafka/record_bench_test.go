package kafka

import (
	"bytes"
	"testing"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// BenchmarkRecordHeaders measures the per-message cost of rendering a fired message's
// outgoing headers into Kafka record headers (the sink's work besides kafka-go's own):
// allocations here are paid once per fired message.
func BenchmarkRecordHeaders(b *testing.B) {
	env := &envelope.Envelope{
		ID: "orders.delay/3/1234567", Route: "orders", Source: "orders.delay", SourceBroker: envelope.BrokerKafka,
		DueAt: 1795371368865, Key: []byte("customer-42"), Payload: bytes.Repeat([]byte("x"), 100),
		Headers: []envelope.Header{{Key: envelope.HeaderDelay, Value: "5000"}, {Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	}
	b.Run("typed", func(b *testing.B) { // the typed-header path the sink used before rendering bytes directly
		b.ReportAllocs()
		for b.Loop() {
			if hs := kafkaHeaders(egress.OutgoingHeaders(env, env.Attempt+1)); len(hs) != 6 {
				b.Fatalf("%d headers", len(hs))
			}
		}
	})
	b.Run("direct", func(b *testing.B) { // what the sink does
		b.ReportAllocs()
		for b.Loop() {
			if hs := outgoingKafkaHeaders(env, env.Attempt+1); len(hs) != 6 {
				b.Fatalf("%d headers", len(hs))
			}
		}
	})
}

// kafkaHeaders shares one buffer between the values: each must equal HeaderBytes of its
// value, keep null (nil) apart from empty text, and be capacity-limited so that a
// consumer appending to one value cannot overwrite the next.
func TestKafkaHeadersMatchHeaderBytes(t *testing.T) {
	hs := []envelope.Header{
		{Key: "text", Value: "abc"}, {Key: "empty", Value: ""}, {Key: "null", Value: nil},
		{Key: "bytes", Value: []byte{0, 1}}, {Key: "int", Value: int64(-5000)}, {Key: "u8", Value: uint8(7)},
		{Key: "float", Value: 2.5}, {Key: "bool", Value: true}, {Key: "dec", Value: envelope.Decimal{Scale: 2, Value: 12345}},
		{Key: "table", Value: map[string]any{"a": int64(1)}}, {Key: "long", Value: string(bytes.Repeat([]byte("y"), 300))},
	}
	kh := kafkaHeaders(hs)
	if len(kh) != len(hs) {
		t.Fatalf("%d headers, want %d", len(kh), len(hs))
	}
	for i, h := range hs {
		want := egress.HeaderBytes(h.Value)
		got := kh[i].Value
		if kh[i].Key != h.Key || !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%s: got %q (nil %v), want %q (nil %v)", h.Key, got, got == nil, want, want == nil)
		}
		if cap(got) != len(got) {
			t.Errorf("%s: cap %d > len %d: appending to it would overwrite the next value", h.Key, cap(got), len(got))
		}
	}
}

// TestOutgoingKafkaHeadersMatch: the sink's own rendering of the outgoing headers is
// byte for byte kafkaHeaders(egress.OutgoingHeaders(...)) — the replaced headers dropped,
// x-delay negated in every form, null values kept null, the four added last — and every
// value is capacity-limited.
func TestOutgoingKafkaHeadersMatch(t *testing.T) {
	base := envelope.Envelope{ID: "orders.delay/3/1234567", Source: "orders.delay", DueAt: 1795371368865, Attempt: 2}
	for _, hs := range [][]envelope.Header{
		nil,
		{{Key: envelope.HeaderDelay, Value: "5000"}, {Key: "traceparent", Value: "00-4bf9-01"}},
		{{Key: envelope.HeaderDelay, Value: int32(7)}, {Key: "null", Value: nil}, {Key: "b", Value: []byte{}}},
		{{Key: envelope.HeaderDelay, Value: " 2.5e3 "}, {Key: envelope.HeaderMessageID, Value: "old"},
			{Key: envelope.HeaderDueAt, Value: int64(1)}, {Key: envelope.HeaderSource, Value: "x"},
			{Key: envelope.HeaderAttempt, Value: "9"}, {Key: "f", Value: 1.5}, {Key: "tbl", Value: map[string]any{"a": int64(1)}}},
		{{Key: envelope.HeaderDelay, Value: []byte("-300")}, {Key: envelope.HeaderDelay, Value: "not a number"},
			{Key: "long", Value: string(bytes.Repeat([]byte("y"), 300))}},
		{{Key: envelope.HeaderDelay, Value: "-0"}, {Key: envelope.HeaderDelay, Value: "+1500"}, {Key: envelope.HeaderDelay, Value: ""},
			{Key: envelope.HeaderDelay, Value: "99999999999999999999"}, {Key: envelope.HeaderDelay, Value: "-9223372036854775808"},
			{Key: envelope.HeaderDelay, Value: "9223372036854775807"}, {Key: envelope.HeaderDelay, Value: "0"}},
	} {
		env := base
		env.Headers = hs
		want := kafkaHeaders(egress.OutgoingHeaders(&env, env.Attempt+1))
		got := outgoingKafkaHeaders(&env, env.Attempt+1)
		if len(got) != len(want) {
			t.Fatalf("%v: %d headers, want %d", hs, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Key != w.Key || !bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) {
				t.Errorf("%v: header %d = %s=%q (nil %v), want %s=%q (nil %v)", hs, i, g.Key, g.Value, g.Value == nil, w.Key, w.Value, w.Value == nil)
			}
			if cap(g.Value) != len(g.Value) {
				t.Errorf("%s: cap %d > len %d", g.Key, cap(g.Value), len(g.Value))
			}
		}
	}
}

// TestOutgoingKafkaHeadersAllocations: rendering a fired message's headers costs two
// allocations (the values' buffer and the header slice), whatever it carries, the
// x-delay text a producer sends (negated in place) included.
func TestOutgoingKafkaHeadersAllocations(t *testing.T) {
	env := &envelope.Envelope{ID: "orders.delay/3/1234567", Source: "orders.delay", DueAt: 1795371368865,
		Headers: []envelope.Header{{Key: envelope.HeaderDelay, Value: "5000"}, {Key: "traceparent", Value: "00-4bf9-01"}}}
	if n := testing.AllocsPerRun(100, func() { outgoingKafkaHeaders(env, 1) }); n != 2 {
		t.Fatalf("outgoingKafkaHeaders allocates %.0f times, want 2", n)
	}
}
