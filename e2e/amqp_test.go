package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

// amqpEnv is one bridge with AMQP routes, its Redis, and the test's RabbitMQ connection.
type amqpEnv struct {
	rb     *rabbit
	redis  *testkit.Redis
	bridge *bridgeProc
}

// startAMQPBridge starts redis-server and the bridge with routes (and extra config), and
// waits until every source queue in sources has the bridge as consumer. The source
// exchanges and queues the bridge declares are deleted at cleanup.
func startAMQPBridge(t *testing.T, rb *rabbit, kafkaAddr, routes, extra string, srcExchanges, srcQueues []string) *amqpEnv {
	t.Helper()
	rb.drop(srcExchanges, srcQueues) // registered first: runs after the bridge stopped
	r := testkit.StartRedis(t)
	if kafkaAddr == "" {
		kafkaAddr = "127.0.0.1:9" // no Kafka route: never dialed
	}
	cfg, admin := writeConfig(t, r.Addr(), kafkaAddr, routes, extra)
	e := &amqpEnv{rb: rb, redis: r, bridge: startBridge(t, cfg, admin)}
	for _, q := range srcQueues {
		rb.waitConsumer(q, 30*time.Second)
	}
	return e
}

func (e *amqpEnv) waitDrained(t *testing.T) {
	t.Helper()
	var stats struct {
		Totals struct{ Pending, Inflight, Dead int64 }
	}
	waitUntil(t, "shards empty", 20*time.Second, func() bool {
		e.bridge.api("GET", "/v1/stats", nil, &stats)
		return stats.Totals.Pending == 0 && stats.Totals.Inflight == 0
	})
}

// typeOf renders a header value with its Go type, as amqp091-go decoded it.
func typeOf(v any) string { return fmt.Sprintf("%T %v", v, v) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// TestAMQPToAMQPLikeThePlugin is the delayed-message plugin user's setup moved to the
// bridge: the producer publishes to the delay exchange (declared by the bridge, of the
// former x-delayed-type) with x-delay in the table types real clients send and a full
// set of properties and headers; the consumer, bound to the target exchange, gets each
// message once, never before publish time + x-delay, with routing key, body, properties
// and headers kept, x-delay negated (as a signed 32-bit int, like the plugin) and the
// bridge's headers added.
func TestAMQPToAMQPLikeThePlugin(t *testing.T) {
	rb := newRabbit(t)
	target := rb.exchange("billing", "topic")
	got := rb.collect(rb.queue("billing-consumer", target, "#"))
	srcX, srcQ := testkit.Uniq(t, "delayed"), testkit.Uniq(t, "billing-delay")
	routes := fmt.Sprintf("  - name: billing\n    from: %s\n    to:   { amqp: { exchange: %q } }", amqpFrom(srcQ, srcX, "topic"), target)
	e := startAMQPBridge(t, rb, "", routes, "", []string{srcX}, []string{srcQ})

	type want struct {
		ms    int64 // effective delay in ms (0 = due at once)
		neg   any   // x-delay as republished; nil = no x-delay header
		stamp bool  // timestamp property set: due = timestamp + ms exactly
	}
	cases := []struct {
		name  string
		delay any
		want
	}{
		{"int32", int32(1500), want{1500, int32(-1500), false}},
		{"int64", int64(2500), want{2500, int32(-2500), false}},
		{"longstr", "2000", want{2000, int32(-2000), false}},
		{"float64", 1200.7, want{1200, int32(-1200), false}},
		{"int16", int16(800), want{800, int32(-800), false}},
		{"uint8", uint8(200), want{200, int32(-200), false}},
		{"uint32", uint32(1700), want{1700, int32(-1700), false}},
		{"float32", float32(900.5), want{900, int32(-900), false}},
		{"decimal", amqp091.Decimal{Scale: 1, Value: 30005}, want{3000, int32(-3000), false}},
		{"bytes", []byte("1000"), want{1000, int32(-1000), false}},
		{"fraction-text", "1100.9", want{1100, int32(-1100), false}},
		{"negative", int32(-5000), want{0, int32(-5000), false}},
		{"zero", int32(0), want{0, int32(0), false}},
		{"absent", nil, want{0, nil, false}},
		{"timestamp", int32(3000), want{3000, int32(-3000), true}},
	}
	headers := func(name string) amqp091.Table {
		return amqp091.Table{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tenant":      "acme", "retries": int32(2), "flag": true, "ratio": 0.25,
			"nested": amqp091.Table{"case": name, "n": int64(7)},
		}
	}
	stamp := time.Unix(time.Now().Unix(), 0) // AMQP timestamps have 1 s resolution
	var msgs []amqp091.Publishing
	for _, c := range cases {
		h := headers(c.name)
		if c.delay != nil {
			h["x-delay"] = c.delay
		}
		p := amqp091.Publishing{
			Headers: h, ContentType: "application/json", ContentEncoding: "identity", CorrelationId: "corr-" + c.name,
			MessageId: "mid-" + c.name, Priority: 3, DeliveryMode: amqp091.Persistent, ReplyTo: "replies",
			Expiration: "600000", Type: "invoice.due", AppId: "billing", Body: []byte(`{"case":"` + c.name + `"}`),
		}
		if c.stamp {
			p.Timestamp = stamp
		}
		msgs = append(msgs, p)
	}
	// A message without any id: the bridge derives one from its content.
	msgs = append(msgs, amqp091.Publishing{Headers: amqp091.Table{"x-delay": int32(700)}, Body: []byte("anonymous"), DeliveryMode: amqp091.Persistent})
	// Volume, for the ledger: random delays up to 3 s, all types of ints.
	const bulk = 600
	rng := rand.New(rand.NewPCG(7, 8))
	bulkMs := make([]int64, bulk)
	for i := range bulk {
		bulkMs[i] = int64(rng.IntN(3000))
		var d any = int32(bulkMs[i])
		if i%2 == 1 {
			d = int64(bulkMs[i])
		}
		msgs = append(msgs, amqp091.Publishing{Headers: amqp091.Table{"x-delay": d}, MessageId: fmt.Sprintf("bulk-%d", i),
			DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprintf("bulk body %d", i))})
	}
	keyOf := func(i int) string {
		if i < len(cases) {
			return "invoice.eu." + cases[i].name
		}
		return "bulk." + strconv.Itoa(i%7)
	}
	pubAt := rb.publisher().publish(srcX, keyOf, msgs)

	total := len(msgs)
	waitUntil(t, "every message on the target", 60*time.Second, func() bool { return got.count() >= total })
	time.Sleep(time.Second) // room for a duplicate to show up
	arrived, dups := got.byID()
	if dups != 0 || got.count() != total {
		t.Errorf("%d arrivals for %d messages (%d duplicates)", got.count(), total, dups)
	}

	// Every message: on time (not before publish + delay, not before its due-at), once.
	var lateness []time.Duration
	check := func(id string, i int, ms int64, exactDue int64) (amqpArrival, bool) {
		a, ok := arrived[id]
		if !ok {
			t.Errorf("%s never arrived", id)
			return a, false
		}
		due, ok := a.d.Headers["x-delay-due-at"].(int64)
		if !ok {
			t.Errorf("%s: x-delay-due-at = %s, want int64", id, typeOf(a.d.Headers["x-delay-due-at"]))
			return a, false
		}
		earliest := pubAt[i].Add(time.Duration(ms) * time.Millisecond).Truncate(time.Millisecond)
		if exactDue != 0 {
			earliest = time.UnixMilli(exactDue)
			if due != exactDue {
				t.Errorf("%s: x-delay-due-at %d, want timestamp + x-delay = %d", id, due, exactDue)
			}
		} else if due < earliest.UnixMilli() || due > earliest.Add(10*time.Second).UnixMilli() {
			t.Errorf("%s: x-delay-due-at %d, want publish time + x-delay = %d (within 10 s after)", id, due, earliest.UnixMilli())
		}
		if a.at.Before(earliest) || a.at.UnixMilli() < due {
			t.Errorf("%s: arrived early: at %d, due %d, publish+delay %d", id, a.at.UnixMilli(), due, earliest.UnixMilli())
		}
		lateness = append(lateness, a.at.Sub(time.UnixMilli(due)))
		if a.d.Headers["x-delay-source"] != srcQ || a.d.Headers["x-delay-attempt"] != int64(1) {
			t.Errorf("%s: x-delay-source %s, x-delay-attempt %s; want %q and int64 1", id,
				typeOf(a.d.Headers["x-delay-source"]), typeOf(a.d.Headers["x-delay-attempt"]), srcQ)
		}
		if a.d.Exchange != target || a.d.RoutingKey != keyOf(i) {
			t.Errorf("%s: exchange %q routing key %q, want %q %q", id, a.d.Exchange, a.d.RoutingKey, target, keyOf(i))
		}
		if string(a.d.Body) != string(msgs[i].Body) {
			t.Errorf("%s: body %q, want %q", id, a.d.Body, msgs[i].Body)
		}
		return a, true
	}
	for i, c := range cases {
		id := "mid-" + c.name
		var exact int64
		if c.stamp {
			exact = stamp.UnixMilli() + c.ms
		}
		a, ok := check(id, i, c.ms, exact)
		if !ok {
			continue
		}
		d, p := a.d, msgs[i]
		if d.ContentType != p.ContentType || d.ContentEncoding != p.ContentEncoding || d.CorrelationId != p.CorrelationId ||
			d.MessageId != p.MessageId || d.Priority != p.Priority || d.DeliveryMode != p.DeliveryMode || d.ReplyTo != p.ReplyTo ||
			d.Expiration != p.Expiration || d.Type != p.Type || d.AppId != p.AppId || !d.Timestamp.Equal(p.Timestamp) {
			t.Errorf("%s: properties changed:\n got %+v\nwant %+v", c.name, d, p)
		}
		wantH := headers(c.name)
		wantH["x-message-id"] = id
		if c.neg != nil {
			wantH["x-delay"] = c.neg
		}
		for k, v := range wantH {
			if typeOf(d.Headers[k]) != typeOf(v) {
				t.Errorf("%s: header %s = %s, want %s", c.name, k, typeOf(d.Headers[k]), typeOf(v))
			}
		}
		if len(d.Headers) != len(wantH)+3 { // + x-delay-due-at, -source, -attempt
			t.Errorf("%s: headers %v, want %v + x-delay-due-at, x-delay-source, x-delay-attempt", c.name, d.Headers, wantH)
		}
	}
	// The id-less message: its id is derived from the source queue and its content.
	var anon string
	for id, a := range arrived {
		if string(a.d.Body) == "anonymous" {
			anon = id
		}
	}
	if !strings.HasPrefix(anon, srcQ+"/") {
		t.Errorf("id-less message arrived with x-message-id %q, want %q/<content hash>", anon, srcQ)
	} else {
		check(anon, len(cases), 700, 0)
		if v := arrived[anon].d.Headers["x-delay"]; v != int32(-700) {
			t.Errorf("id-less message: x-delay %s, want int32 -700", typeOf(v))
		}
	}
	for i := range bulk {
		check(fmt.Sprintf("bulk-%d", i), len(cases)+1+i, bulkMs[i], 0)
	}
	slices.Sort(lateness)
	t.Logf("%d messages, lateness after due: p50 %s p99 %s max %s", len(lateness),
		percentile(lateness, 0.5), percentile(lateness, 0.99), percentile(lateness, 1))
	e.waitDrained(t)
}

// TestAMQPCrossBrokerRoutes: Kafka → RabbitMQ and RabbitMQ → Kafka in one bridge, headers
// mapped both ways (Kafka header bytes become AMQP long strings; AMQP typed values become
// their text; x-delay negated either way).
func TestAMQPCrossBrokerRoutes(t *testing.T) {
	rb := newRabbit(t)
	kaddr, _ := testkit.StartKafka(t, 4, "k2a.delay", "a2k")
	target := rb.exchange("from-kafka", "topic")
	got := rb.collect(rb.queue("from-kafka-consumer", target, "#"))
	kgot := collect(t, kaddr, "a2k")
	srcX, srcQ := testkit.Uniq(t, "to-kafka"), testkit.Uniq(t, "to-kafka-delay")
	routes := fmt.Sprintf(`  - name: k2a
    from: { kafka: { topic: k2a.delay } }
    to:   { amqp: { exchange: %q } }
  - name: a2k
    from: %s
    to:   { kafka: { topic: a2k } }`, target, amqpFrom(srcQ, srcX, "fanout"))
	e := startAMQPBridge(t, rb, kaddr, routes, "", []string{srcX}, []string{srcQ})

	// Kafka → RabbitMQ.
	const n = 200
	w := newWriter(t, kaddr, "k2a.delay")
	defer w.Close()
	ksent := map[string]sent{}
	var recs []kafka.Message
	now := time.Now().Truncate(time.Millisecond)
	for i := range n {
		id := fmt.Sprintf("k2a-%d", i)
		d := time.Duration(500+(i%6)*300) * time.Millisecond
		ksent[id] = sent{id: id, key: fmt.Sprintf("order-%d", i%20), value: "kafka payload " + id, delay: d, at: now}
		recs = append(recs, kafka.Message{Key: []byte(ksent[id].key), Value: []byte(ksent[id].value), Time: now, Headers: []kafka.Header{
			{Key: "x-delay", Value: []byte(strconv.FormatInt(d.Milliseconds(), 10))},
			{Key: "x-message-id", Value: []byte(id)},
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
			{Key: "tenant", Value: []byte("acme")},
		}})
	}
	if err := w.WriteMessages(t.Context(), recs...); err != nil {
		t.Fatalf("produce: %v", err)
	}

	// RabbitMQ → Kafka: typed AMQP headers; the timestamp property fixes the base time.
	stamp := time.Unix(time.Now().Unix(), 0)
	asent := map[string]sent{}
	var msgs []amqp091.Publishing
	for i := range n {
		id := fmt.Sprintf("a2k-%d", i)
		d := time.Duration(1200+(i%5)*300) * time.Millisecond
		// The routing key becomes the Kafka key (egress/kafka), keeping per-key order.
		asent[id] = sent{id: id, key: "invoice." + strconv.Itoa(i%3), value: "amqp payload " + id, delay: d, at: stamp}
		msgs = append(msgs, amqp091.Publishing{MessageId: id, Timestamp: stamp, DeliveryMode: amqp091.Persistent, ContentType: "text/plain",
			Body: []byte(asent[id].value), Headers: amqp091.Table{
				"x-delay": int32(d.Milliseconds()), "tenant": "acme", "retries": int32(3), "ratio": 0.5, "flag": true,
				"nested": amqp091.Table{"a": "b"}, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			}})
	}
	rb.publisher().publish(srcX, func(i int) string { return "invoice." + strconv.Itoa(i%3) }, msgs)

	waitUntil(t, "Kafka → RabbitMQ messages", 60*time.Second, func() bool { return got.count() >= n })
	waitUntil(t, "RabbitMQ → Kafka messages", 60*time.Second, func() bool { return kgot.uniqueCount() >= n })
	time.Sleep(time.Second)

	// Kafka → RabbitMQ: routing key = Kafka key, persistent, message_id = the bridge's id,
	// Kafka headers as long strings, x-delay as the plugin writes it.
	arrived, dups := got.byID()
	if dups != 0 || len(arrived) != n {
		t.Errorf("Kafka → RabbitMQ: %d distinct of %d, %d duplicates", len(arrived), n, dups)
	}
	for id, s := range ksent {
		a, ok := arrived[id]
		if !ok {
			t.Errorf("%s never arrived on RabbitMQ", id)
			continue
		}
		d := a.d
		due := s.at.Add(s.delay).UnixMilli()
		if d.Headers["x-delay-due-at"] != due || a.at.UnixMilli() < due {
			t.Errorf("%s: x-delay-due-at %s (want %d), arrived at %d", id, typeOf(d.Headers["x-delay-due-at"]), due, a.at.UnixMilli())
		}
		if d.RoutingKey != s.key || string(d.Body) != s.value || d.DeliveryMode != amqp091.Persistent || d.MessageId != id {
			t.Errorf("%s: routing key %q body %q mode %d message_id %q", id, d.RoutingKey, d.Body, d.DeliveryMode, d.MessageId)
		}
		wantH := amqp091.Table{"x-delay": int32(-s.delay.Milliseconds()), "x-message-id": id, "tenant": "acme",
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-delay-source": "k2a.delay", "x-delay-attempt": int64(1)}
		for k, v := range wantH {
			if typeOf(d.Headers[k]) != typeOf(v) {
				t.Errorf("%s: header %s = %s, want %s", id, k, typeOf(d.Headers[k]), typeOf(v))
			}
		}
	}

	// RabbitMQ → Kafka: header values as text (numbers in decimal, tables as JSON).
	kar := kgot.snapshot()
	if dups := ledger(t, asent, kar, srcQ); dups != 0 {
		t.Errorf("RabbitMQ → Kafka: %d duplicates", dups)
	}
	for _, a := range kar {
		s := asent[a.headers["x-message-id"]]
		wantH := map[string]string{"x-delay": "-" + strconv.FormatInt(s.delay.Milliseconds(), 10), "tenant": "acme", "retries": "3",
			"ratio": "0.5", "flag": "true", "nested": `{"a":"b"}`, "x-delay-attempt": "1",
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		for k, v := range wantH {
			if a.headers[k] != v {
				t.Errorf("%s: Kafka header %s = %q, want %q", s.id, k, a.headers[k], v)
			}
		}
	}
	e.waitDrained(t)
}

// TestAMQPUnroutableTargetIsRetriedThenDeadLettered: the target exchange exists but no
// queue is bound (the plugin would drop such a message at fire time). The bridge's
// mandatory publish is returned, retried (retry.max_attempts: 3), then dead-lettered:
// GET /v1/dead lists it with the reason, and a copy goes to dead_letter.amqp.exchange
// with x-delay-dead-reason. Invalid delays go the same way at once (bad_delay,
// delay_out_of_range), unless the route says on_invalid: deliver (the plugin's way).
func TestAMQPUnroutableTargetIsRetriedThenDeadLettered(t *testing.T) {
	rb := newRabbit(t)
	nowhere := rb.exchange("nowhere", "topic") // nothing bound
	dlx := rb.exchange("dead", "topic")
	dead := rb.collect(rb.queue("dead-consumer", dlx, "#"))
	lenientX := rb.exchange("lenient", "topic")
	lenient := rb.collect(rb.queue("lenient-consumer", lenientX, "#"))
	srcX, srcQ := testkit.Uniq(t, "delayed"), testkit.Uniq(t, "strict-delay")
	lsrcX, lsrcQ := testkit.Uniq(t, "delayed-lenient"), testkit.Uniq(t, "lenient-delay")
	routes := fmt.Sprintf(`  - name: strict
    from: %s
    to:   { amqp: { exchange: %q } }
  - name: lenient
    from: %s
    to:   { amqp: { exchange: %q } }
    on_invalid: deliver`, amqpFrom(srcQ, srcX, "topic"), nowhere, amqpFrom(lsrcQ, lsrcX, "topic"), lenientX)
	extra := fmt.Sprintf("dead_letter: { amqp: { exchange: %q } }", dlx)
	e := startAMQPBridge(t, rb, "", routes, extra, []string{srcX, lsrcX}, []string{srcQ, lsrcQ})

	p := rb.publisher()
	bad := []amqp091.Publishing{
		{MessageId: "lost-1", Headers: amqp091.Table{"x-delay": int32(300), "tenant": "acme"}, Body: []byte("nobody listens")},
		{MessageId: "bad-1", Headers: amqp091.Table{"x-delay": "soon"}, Body: []byte("bad delay")},
		{MessageId: "far-1", Headers: amqp091.Table{"x-delay": int64(400 * 24 * time.Hour / time.Millisecond)}, Body: []byte("too far")},
	}
	p.publish(srcX, func(i int) string { return "invoice.eu" }, bad)
	lat := p.publish(lsrcX, func(int) string { return "lenient.key" }, []amqp091.Publishing{
		{MessageId: "soon-1", Headers: amqp091.Table{"x-delay": "soon"}, Body: []byte("delivered at once")},
	})

	var dl deadList
	reasons := map[string]string{}
	waitUntil(t, "all three in GET /v1/dead", 30*time.Second, func() bool {
		if e.bridge.api("GET", "/v1/dead?limit=100", nil, &dl) != 200 {
			return false
		}
		for _, m := range dl.Messages {
			reasons[m.ID] = m.Reason
		}
		return len(reasons) >= 3
	})
	for id, want := range map[string]string{"lost-1": "unroutable", "bad-1": "bad_delay", "far-1": "delay_out_of_range"} {
		if !strings.Contains(reasons[id], want) {
			t.Errorf("%s: dead-letter reason %q, want it to mention %q", id, reasons[id], want)
		}
	}
	for _, m := range dl.Messages {
		if m.ID == "lost-1" && (m.Attempt != 3 || m.Route != "strict" || m.Source != srcQ || m.Headers["tenant"] != "acme") {
			t.Errorf("lost-1 in /v1/dead: %+v, want attempt 3, route strict, source %s, headers kept", m, srcQ)
		}
	}
	var msg struct{ State string }
	if code := e.bridge.api("GET", "/v1/messages/lost-1", nil, &msg); code != 200 || msg.State != "dead" {
		t.Errorf("GET /v1/messages/lost-1: %d %q, want state dead", code, msg.State)
	}

	waitUntil(t, "dead-letter copies on dead_letter.amqp.exchange", 20*time.Second, func() bool { return dead.count() >= 3 })
	copies, dups := dead.byID()
	if dups != 0 {
		t.Errorf("%d duplicate dead-letter copies", dups)
	}
	for id, want := range map[string]string{"lost-1": "unroutable", "bad-1": "bad_delay", "far-1": "delay_out_of_range"} {
		c, ok := copies[id]
		if !ok {
			t.Errorf("%s: no copy on the dead-letter exchange", id)
			continue
		}
		if r, _ := c.d.Headers["x-delay-dead-reason"].(string); !strings.Contains(r, want) {
			t.Errorf("%s: x-delay-dead-reason %s, want it to mention %q", id, typeOf(c.d.Headers["x-delay-dead-reason"]), want)
		}
		if c.d.RoutingKey != "invoice.eu" || c.d.MessageId != id || c.d.Headers["x-delay-source"] != srcQ {
			t.Errorf("%s: dead-letter copy routing key %q message_id %q source %v", id, c.d.RoutingKey, c.d.MessageId, c.d.Headers["x-delay-source"])
		}
	}
	if a := copies["lost-1"]; a.d.Headers["x-delay-attempt"] != int64(3) || a.d.Headers["tenant"] != "acme" {
		t.Errorf("lost-1 copy: x-delay-attempt %s tenant %v, want int64 3 and acme", typeOf(a.d.Headers["x-delay-attempt"]), a.d.Headers["tenant"])
	}

	// on_invalid: deliver: the unparsable delay is delivered at once, like the plugin.
	waitUntil(t, "soon-1 delivered at once", 20*time.Second, func() bool { return lenient.count() >= 1 })
	a := lenient.snapshot()[0]
	if a.id() != "soon-1" || a.d.Headers["x-delay"] != "soon" || a.d.RoutingKey != "lenient.key" || a.at.Sub(lat[0]) > 10*time.Second {
		t.Errorf("lenient route: %q x-delay %s key %q after %s", a.id(), typeOf(a.d.Headers["x-delay"]), a.d.RoutingKey, a.at.Sub(lat[0]))
	}
}

// TestAMQPCancel: an AMQP-sourced pending message is cancelled over the admin API
// (DELETE /v1/messages/{id}) and another by a message carrying x-delay-cancel; neither
// is delivered, the one published beside them is. The target is a direct exchange (the
// plugin's most common x-delayed-type), its consumer bound with the exact key.
func TestAMQPCancel(t *testing.T) {
	rb := newRabbit(t)
	target := rb.exchange("cancel-target", "direct")
	got := rb.collect(rb.queue("cancel-consumer", target, "invoice.eu"))
	srcX, srcQ := testkit.Uniq(t, "delayed"), testkit.Uniq(t, "cancel-delay")
	routes := fmt.Sprintf("  - name: billing\n    from: %s\n    to:   { amqp: { exchange: %q } }", amqpFrom(srcQ, srcX, "topic"), target)
	e := startAMQPBridge(t, rb, "", routes, "", []string{srcX}, []string{srcQ})

	p := rb.publisher()
	key := func(int) string { return "invoice.eu" }
	p.publish(srcX, key, []amqp091.Publishing{
		{MessageId: "c-1", Headers: amqp091.Table{"x-delay": int32(3000)}, Body: []byte("cancel me over HTTP")},
		{MessageId: "c-2", Headers: amqp091.Table{"x-delay": int32(3000)}, Body: []byte("cancel me by message")},
		{MessageId: "ok-1", Headers: amqp091.Table{"x-delay": int32(3000)}, Body: []byte("keep me")},
	})
	var msg struct {
		State  string `json:"state"`
		Source string `json:"source"`
		Route  string `json:"route"`
	}
	waitUntil(t, "c-1 pending", 10*time.Second, func() bool {
		return e.bridge.api("GET", "/v1/messages/c-1", nil, &msg) == 200 && msg.State == "pending"
	})
	if msg.Source != srcQ || msg.Route != "billing" {
		t.Errorf("GET /v1/messages/c-1: source %q route %q", msg.Source, msg.Route)
	}
	var res struct {
		PriorState string `json:"prior_state"`
	}
	if code := e.bridge.api("DELETE", "/v1/messages/c-1", nil, &res); code != 200 || res.PriorState != "pending" {
		t.Fatalf("DELETE /v1/messages/c-1: %d %+v", code, res)
	}
	p.publish(srcX, key, []amqp091.Publishing{{Headers: amqp091.Table{"x-delay-cancel": "c-2"}, Body: []byte("cancel")}})

	waitUntil(t, "ok-1 delivered", 20*time.Second, func() bool { return got.count() >= 1 })
	time.Sleep(1500 * time.Millisecond) // c-1 and c-2 were due with ok-1: every chance to (wrongly) arrive
	for _, a := range got.snapshot() {
		if a.id() != "ok-1" {
			t.Errorf("%s (%q) arrived; only ok-1 should", a.id(), a.d.Body)
		}
	}
	for _, id := range []string{"c-1", "c-2"} {
		if code := e.bridge.api("GET", "/v1/messages/"+id, nil, &msg); code != 200 || msg.State != "cancelled" {
			t.Errorf("%s after cancel: %d state %q, want cancelled", id, code, msg.State)
		}
	}
	if code := e.bridge.api("DELETE", "/v1/messages/c-1", nil, nil); code != 409 {
		t.Errorf("second cancel of c-1: %d, want 409", code)
	}
}

// TestAMQPInteropWithAMQPTools: rabbitmq-c's amqp-publish (a non-Go client; its -H
// headers are long strings) publishes into the delay exchange; amqp-consume and amqp-get
// read the target. The Go consumer on a second queue checks the headers of the same
// messages.
func TestAMQPInteropWithAMQPTools(t *testing.T) {
	pub, consume, get := amqpTool(t, "amqp-publish"), amqpTool(t, "amqp-consume"), amqpTool(t, "amqp-get")
	rb := newRabbit(t)
	target := rb.exchange("tools-target", "topic")
	toolsQ := rb.queue("tools-consumer", target, "tools.#")
	copies := rb.collect(rb.queue("go-consumer", target, "#"))
	srcX, srcQ := testkit.Uniq(t, "delayed"), testkit.Uniq(t, "tools-delay")
	routes := fmt.Sprintf("  - name: tools\n    from: %s\n    to:   { amqp: { exchange: %q } }", amqpFrom(srcQ, srcX, "topic"), target)
	startAMQPBridge(t, rb, "", routes, "", []string{srcX}, []string{srcQ})

	url := toolsURL()
	publish := func(id, key, delay, body string) time.Time {
		t.Helper()
		at := time.Now()
		out, err := runTool(t, 20*time.Second, pub, "-u", url, "-e", srcX, "-r", key, "-p", "-C", "text/plain",
			"-H", "x-delay: "+delay, "-H", "x-message-id: "+id, "-H", "tenant: acme", "-b", body)
		if err != nil {
			t.Fatalf("amqp-publish: %v: %s", err, out)
		}
		return at
	}

	// amqp-consume blocks until the delayed message arrives.
	at1 := publish("tools-1", "tools.consume", "1500", "hello through the bridge")
	out, err := runTool(t, 30*time.Second, consume, "-u", url, "-q", toolsQ, "-c", "1", "cat")
	if err != nil || string(out) != "hello through the bridge" {
		t.Fatalf("amqp-consume: %v: %q", err, out)
	}
	if waited := time.Since(at1); waited < 1500*time.Millisecond {
		t.Errorf("amqp-consume got the message %s after amqp-publish, before its 1500 ms delay", waited)
	}

	// amqp-get polls: empty (exit status 2 "no messages") until the message is due.
	at2 := publish("tools-2", "tools.get", "1000", "second")
	var first time.Time
	for deadline := time.Now().Add(30 * time.Second); first.IsZero(); {
		out, err := runTool(t, 10*time.Second, get, "-u", url, "-q", toolsQ)
		if err == nil {
			if string(out) != "second" {
				t.Fatalf("amqp-get: %q", out)
			}
			first = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("amqp-get found no message within 30 s: %v: %s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if waited := first.Sub(at2); waited < time.Second {
		t.Errorf("amqp-get found the message %s after amqp-publish, before its 1000 ms delay", waited)
	}

	// The same messages, as a Go consumer sees them.
	waitUntil(t, "both copies on the Go consumer's queue", 20*time.Second, func() bool { return copies.count() >= 2 })
	for _, a := range copies.snapshot() {
		d := a.d
		want := map[string]any{"x-delay": int32(-1500), "x-message-id": "tools-1", "tenant": "acme",
			"x-delay-source": srcQ, "x-delay-attempt": int64(1)}
		key, body := "tools.consume", "hello through the bridge"
		if a.id() == "tools-2" {
			want["x-delay"], want["x-message-id"], key, body = int32(-1000), "tools-2", "tools.get", "second"
		}
		for k, v := range want {
			if typeOf(d.Headers[k]) != typeOf(v) {
				t.Errorf("%s: header %s = %s, want %s", a.id(), k, typeOf(d.Headers[k]), typeOf(v))
			}
		}
		if d.RoutingKey != key || string(d.Body) != body || d.ContentType != "text/plain" || d.DeliveryMode != 2 {
			t.Errorf("%s: key %q body %q type %q mode %d", a.id(), d.RoutingKey, d.Body, d.ContentType, d.DeliveryMode)
		}
	}
	raw, _ := json.Marshal(copies.snapshot()[0].d.Headers)
	t.Logf("headers as republished: %s", raw)
}

// TestAMQPDirectSourceExchangeWithCatchAllIsRefused: a plugin user's natural first
// config, exchange_type: direct (their x-delayed-type) with the default binding_key "#",
// would bind the bridge's queue with a key a direct exchange matches only literally, and
// RabbitMQ would silently drop every delayed message. The bridge refuses to start and
// says what to do.
func TestAMQPDirectSourceExchangeWithCatchAllIsRefused(t *testing.T) {
	rb := newRabbit(t)
	target := rb.exchange("billing", "direct")
	srcX, srcQ := testkit.Uniq(t, "delayed"), testkit.Uniq(t, "billing-delay")
	rb.drop([]string{srcX}, []string{srcQ})
	r := testkit.StartRedis(t)
	routes := fmt.Sprintf("  - name: billing\n    from: { amqp: { queue: %q, exchange: %q, exchange_type: direct } }\n    to:   { amqp: { exchange: %q } }", srcQ, srcX, target)
	cfg, _ := writeConfig(t, r.Addr(), "127.0.0.1:9", routes, "")
	out, err := runTool(t, 30*time.Second, bridgeBin, "run", "-c", cfg)
	if err == nil || !strings.Contains(string(out), "exchange_type") || !strings.Contains(string(out), `binding_key "#"`) || !strings.Contains(string(out), "topic or fanout") {
		t.Fatalf("bridge run with a direct source exchange and binding_key \"#\": %v, want a refusal naming the fix:\n%s", err, out)
	}
}
