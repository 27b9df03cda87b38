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
	b.ReportAllocs()
	for b.Loop() {
		hs := kafkaHeaders(egress.OutgoingHeaders(env, env.Attempt+1))
		if len(hs) != 6 {
			b.Fatalf("%d headers", len(hs))
		}
	}
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
