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

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/segmentio/kafka-go"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/delaybridge/delay-bridge/testkit"
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
	w := newWriter(t, kaddr, "orders.delay")
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

// TestTracingAMQPSpansAndFailedAttempts: RabbitMQ to RabbitMQ with tracing on. The
// producer's traceparent arrives as bytes in the header table; the delivered message
// carries our span's context as a string, and a message to an exchange with nothing
// bound gets one span per attempt (3, then dead-lettered), each a child of the
// producer's span with status error and error.type unroutable.
func TestTracingAMQPSpansAndFailedAttempts(t *testing.T) {
	col := testkit.StartOTLP(t)
	rb := newRabbit(t)
	okX := rb.exchange("traced", "topic")
	delivered := rb.collect(rb.queue("traced-consumer", okX, "#"))
	nowhere := rb.exchange("nowhere", "topic") // nothing bound: unroutable
	srcX, srcQ := testkit.Uniq(t, "delayed"), testkit.Uniq(t, "traced-delay")
	routes := fmt.Sprintf(`  - name: traced
    from: %s
    to:   { amqp: { exchange: %q } }
    allow_targets: [%q]`, amqpFrom(srcQ, srcX, "topic"), okX, nowhere)
	rb.drop([]string{srcX}, []string{srcQ})
	r := testkit.StartRedis(t)
	cfg, admin := writeConfig(t, r.Addr(), "127.0.0.1:9", routes, "")
	startBridgeEnv(t, cfg, admin, []string{
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + col.Endpoint() + "/v1/traces",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	})
	rb.waitConsumer(srcQ, 30*time.Second)

	const (
		okTrace, okSpan     = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		lostTrace, lostSpan = "5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13"
	)
	rb.publisher().publish(srcX, func(int) string { return "k" }, []amqp091.Publishing{
		{MessageId: "ok-1", Body: []byte("ok"), Headers: amqp091.Table{
			"x-delay": int32(300), "traceparent": []byte("00-" + okTrace + "-" + okSpan + "-01")}},
		{MessageId: "lost-1", Body: []byte("lost"), Headers: amqp091.Table{
			"x-delay": int32(300), "x-delay-target": nowhere, "traceparent": "00-" + lostTrace + "-" + lostSpan + "-01"}},
	})
	waitUntil(t, "ok-1 delivered", 30*time.Second, func() bool { return delivered.count() >= 1 })
	var lost []*tracepb.Span
	var okSpans []*tracepb.Span
	waitUntil(t, "1 span of ok-1 and 3 of lost-1 exported", 30*time.Second, func() bool {
		spans, _ := col.Spans()
		okSpans, lost = nil, nil
		for _, s := range spans {
			switch spanAttr(s, "messaging.message.id") {
			case "ok-1":
				okSpans = append(okSpans, s)
			case "lost-1":
				lost = append(lost, s)
			}
		}
		return len(okSpans) >= 1 && len(lost) >= 3
	})
	if len(okSpans) != 1 {
		t.Fatalf("ok-1: %d spans, want 1", len(okSpans))
	}
	s := okSpans[0]
	tp, isString := delivered.snapshot()[0].d.Headers["traceparent"].(string)
	if want := "00-" + okTrace + "-" + hex.EncodeToString(s.GetSpanId()) + "-01"; !isString || tp != want {
		t.Errorf("delivered traceparent %s, want the string %q", typeOf(delivered.snapshot()[0].d.Headers["traceparent"]), want)
	}
	if hex.EncodeToString(s.GetParentSpanId()) != okSpan || spanAttr(s, "messaging.system") != "rabbitmq" {
		t.Errorf("ok-1 span: parent %x system %q, want %s rabbitmq", s.GetParentSpanId(), spanAttr(s, "messaging.system"), okSpan)
	}
	attempts := map[string]bool{}
	for _, s := range lost {
		attempts[spanAttr(s, "delaybridge.attempt")] = true
		if hex.EncodeToString(s.GetTraceId()) != lostTrace || hex.EncodeToString(s.GetParentSpanId()) != lostSpan {
			t.Errorf("lost-1 attempt %s: trace %x parent %x, want the producer's", spanAttr(s, "delaybridge.attempt"), s.GetTraceId(), s.GetParentSpanId())
		}
		if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || spanAttr(s, "error.type") != "unroutable" {
			t.Errorf("lost-1 attempt %s: status %v error.type %q, want error, unroutable", spanAttr(s, "delaybridge.attempt"), s.GetStatus(), spanAttr(s, "error.type"))
		}
	}
	if len(lost) != 3 || !attempts["1"] || !attempts["2"] || !attempts["3"] {
		t.Errorf("lost-1: %d spans with attempts %v, want attempts 1, 2 and 3", len(lost), attempts)
	}
}
