package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// TestTracingJoinsProducerTrace runs the bridge with OTLP/HTTP export to an in-test
// collector, produces messages that each carry their own producer traceparent, and
// checks what the collector received after SIGTERM (the batch processor's delay is
// longer than the test, so only the shutdown flush exports): one span per message, in
// the producer's trace, child of the producer's span, from the receive time to after
// the due time with park, fire and publish events; and the consumed message's
// traceparent names that span.
func TestTracingJoinsProducerTrace(t *testing.T) {
	col := testkit.StartOTLP(t)
	r := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 4, "orders.delay", "orders")
	cfg, admin := writeConfig(t, r.Addr(), kaddr, kafkaRoute, "")
	target := collect(t, kaddr, "orders")
	bridge := startBridgeEnv(t, cfg, admin, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.Endpoint(),
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=600000",
		"OTEL_SERVICE_NAME=bridge-e2e",
	})
	w := newWriter(kaddr, "orders.delay")
	defer w.Close()

	type producerSpan struct{ trace, span string }
	const n = 40
	rng := rand.New(rand.NewPCG(7, 21))
	producers := map[string]producerSpan{}
	msgs := make([]kafka.Message, 0, n)
	for i := range n {
		id := fmt.Sprintf("tr-%d", i)
		p := producerSpan{trace: randHex(rng, 16), span: randHex(rng, 8)}
		producers[id] = p
		msgs = append(msgs, kafka.Message{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("payload " + id), Time: time.Now(),
			Headers: []kafka.Header{
				{Key: "x-delay", Value: []byte(strconv.Itoa(300 + rng.IntN(1200)))},
				{Key: "x-message-id", Value: []byte(id)},
				{Key: "traceparent", Value: []byte("00-" + p.trace + "-" + p.span + "-01")},
			}})
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
	waitUntil(t, "all messages on the target", 60*time.Second, func() bool { return target.uniqueCount() >= n })
	if spans, _ := col.Spans(); len(spans) != 0 {
		t.Fatalf("%d spans exported before shutdown; the test relies on the shutdown flush", len(spans))
	}
	bridge.stop() // SIGTERM: the spans still queued are exported within the bound

	spans, services := col.Spans()
	byID := map[string][]*tracepb.Span{}
	for i, s := range spans {
		id := spanAttr(s, "messaging.message.id")
		byID[id] = append(byID[id], s)
		if services[i] != "bridge-e2e" {
			t.Errorf("span of %s: service.name %q, want OTEL_SERVICE_NAME's", id, services[i])
		}
	}
	consumed := map[string]string{}
	for _, a := range target.snapshot() {
		consumed[a.headers["x-message-id"]] = a.headers["traceparent"]
	}
	for id, p := range producers {
		got := byID[id]
		if len(got) != 1 {
			t.Errorf("%s: %d spans, want 1", id, len(got))
			continue
		}
		s := got[0]
		traceID, spanID := hex.EncodeToString(s.GetTraceId()), hex.EncodeToString(s.GetSpanId())
		if traceID != p.trace {
			t.Errorf("%s: trace id %s, want the producer's %s", id, traceID, p.trace)
		}
		if parent := hex.EncodeToString(s.GetParentSpanId()); parent != p.span {
			t.Errorf("%s: parent span %s, want the producer's %s", id, parent, p.span)
		}
		if want := "00-" + p.trace + "-" + spanID + "-01"; consumed[id] != want {
			t.Errorf("%s: consumed traceparent %q, want our span's %q", id, consumed[id], want)
		}
		checkSpanShape(t, id, s)
	}
	if len(spans) != n {
		t.Errorf("%d spans exported, want %d (one per message)", len(spans), n)
	}
}

// checkSpanShape checks a message's span: a producer span on the orders route, from
// before its due time to after it, with the events park, fire and publish in order.
func checkSpanShape(t *testing.T, id string, s *tracepb.Span) {
	t.Helper()
	if s.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER || s.GetName() != "send orders" {
		t.Errorf("%s: span %q kind %v, want \"send orders\" producer", id, s.GetName(), s.GetKind())
	}
	if spanAttr(s, "delaybridge.route") != "orders" || spanAttr(s, "messaging.destination.name") != "orders" {
		t.Errorf("%s: route %q destination %q, want orders", id, spanAttr(s, "delaybridge.route"), spanAttr(s, "messaging.destination.name"))
	}
	due, _ := strconv.ParseInt(spanAttr(s, "delaybridge.due_at_ms"), 10, 64)
	start, end := int64(s.GetStartTimeUnixNano()/1e6), int64(s.GetEndTimeUnixNano()/1e6)
	if !(start < due && due <= end) {
		t.Errorf("%s: span %d–%d ms does not cover receive to confirm around due %d", id, start, end, due)
	}
	var names []string
	last := uint64(0)
	for _, e := range s.GetEvents() {
		names = append(names, e.GetName())
		if e.GetTimeUnixNano() < last {
			t.Errorf("%s: event %s before the previous one", id, e.GetName())
		}
		last = e.GetTimeUnixNano()
	}
	if got := strings.Join(names, ","); got != "park,fire,publish" {
		t.Errorf("%s: events %s, want park,fire,publish", id, got)
	}
}

// spanAttr is a span attribute's value as text ("" if absent).
func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() != key {
			continue
		}
		if v, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_IntValue); ok {
			return strconv.FormatInt(v.IntValue, 10)
		}
		return kv.GetValue().GetStringValue()
	}
	return ""
}

func randHex(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	b[0] |= 1 // never all zero (invalid in W3C Trace Context)
	return hex.EncodeToString(b)
}
