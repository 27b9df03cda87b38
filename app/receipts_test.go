package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

// receipt is what the tests read back of a receipt (docs/receipt.schema.json).
type receipt struct {
	V           int    `json:"v"`
	Outcome     string `json:"outcome"`
	ID          string `json:"id"`
	Route       string `json:"route"`
	At          string `json:"at"`
	DueAt       string `json:"due_at"`
	PublishedAt string `json:"published_at"`
	LatenessMs  *int64 `json:"lateness_ms"`
	Target      *struct {
		Broker     string `json:"broker"`
		Topic      string `json:"topic"`
		Exchange   string `json:"exchange"`
		RoutingKey string `json:"routing_key"`
		Partition  *int32 `json:"partition"`
		Offset     *int64 `json:"offset"`
	} `json:"target"`
	Reason      string `json:"reason"`
	Attempts    *int32 `json:"attempts"`
	Traceparent string `json:"traceparent"`
	Correlation string `json:"correlation_id"`
}

// receiptOf checks payload against the JSON Schema and decodes it.
func receiptOf(t *testing.T, valid func([]byte) error, payload []byte) receipt {
	t.Helper()
	if err := valid(payload); err != nil {
		t.Fatalf("receipt %s does not match docs/receipt.schema.json: %v", payload, err)
	}
	var r receipt
	if err := json.Unmarshal(payload, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (c *counts) SidePublished(q, target string, n int) { c.add("side_published "+q+" "+target, n) }

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestReceiptsOnKafka: routes a and b send receipts to the Kafka topic receipts. A
// delivered message's receipt names its target and the partition and offset the
// broker assigned (those of the record on a.out), its lateness, traceparent and
// x-correlation-id; an invalid message's receipt is dead_lettered with its reason and
// 0 attempts; cancels by the admin API (HTTP DELETE), by a cancel record and by a bulk
// job each give a cancelled receipt. Every receipt is keyed by the message id and
// matches docs/receipt.schema.json.
func TestReceiptsOnKafka(t *testing.T) {
	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 3, "a.delay", "a.out", "b.delay", "b.out", "receipts")
	env := &testEnv{redisAddr: rds.Addr(), kaddr: kaddr, prefix: testkit.Uniq(t, "rc"), group: testkit.Uniq(t, "g")}
	tb := env.run(t, "routes.0.receipts.kafka.topic=receipts", "routes.1.receipts.kafka.topic=receipts")
	valid := testkit.ReceiptSchema(t)
	ctx := context.Background()

	tb.produce(t, "a.delay",
		rec("one", "x-message-id", "rk-d1", "x-delay", "100", "traceparent", traceparent, "x-correlation-id", "corr-1"),
		rec("bad", "x-message-id", "rk-bad", "x-delay", "soon", "x-correlation-id", "corr-bad"),
		rec("later", "x-message-id", "rk-c1", "x-delay", "3600000"),
		rec("later", "x-message-id", "rk-c2", "x-delay", "3600000"))
	tb.produce(t, "b.delay", rec("job", "x-message-id", "rk-j1", "x-delay", "3600000"))
	waitUntil(t, "rk-c1, rk-c2 and rk-j1 parked", 30*time.Second, func() bool {
		return tb.state(t, "rk-c1") == "pending" && tb.state(t, "rk-c2") == "pending" && tb.state(t, "rk-j1") == "pending"
	})
	if _, err := tb.Cancel(ctx, "rk-c1"); err != nil {
		t.Fatal(err)
	}
	tb.produce(t, "a.delay", rec("", "x-delay-cancel", "rk-c2"))
	if _, err := tb.StartJob(ctx, admin.JobSpec{Kind: admin.JobCancel, Filter: admin.Filter{Route: "b"}}); err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("receipts", "a.out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]receipt{}
	var delivered *kgo.Record // rk-d1 on a.out
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for len(got) < 5 || delivered == nil {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("receipts within 60 s: %v (delivered record seen: %v)", got, delivered != nil)
		}
		for _, r := range fs.Records() {
			if r.Topic == "a.out" {
				if headerOf(r, "x-message-id") == "rk-d1" {
					delivered = r
				}
				continue
			}
			rc := receiptOf(t, valid, r.Value)
			if string(r.Key) != rc.ID {
				t.Errorf("receipt of %s has key %q, want the message id", rc.ID, r.Key)
			}
			if prev, seen := got[rc.ID]; seen && prev.Outcome != rc.Outcome {
				t.Errorf("%s: receipts %s and %s", rc.ID, prev.Outcome, rc.Outcome)
			}
			got[rc.ID] = rc
		}
	}

	d := got["rk-d1"]
	if d.Outcome != "delivered" || d.Route != "a" || d.Target == nil || d.Target.Broker != "kafka" || d.Target.Topic != "a.out" {
		t.Fatalf("rk-d1 receipt: %+v", d)
	}
	if d.Target.Partition == nil || d.Target.Offset == nil || *d.Target.Partition != delivered.Partition || *d.Target.Offset != delivered.Offset {
		t.Errorf("rk-d1 receipt says partition/offset %s; the record is at %d/%d",
			placement(d.Target.Partition, d.Target.Offset), delivered.Partition, delivered.Offset)
	}
	if d.LatenessMs == nil || *d.LatenessMs < 0 || d.Traceparent != traceparent || d.Correlation != "corr-1" {
		t.Errorf("rk-d1 receipt: lateness %v (must not be early), traceparent %q, correlation %q", d.LatenessMs, d.Traceparent, d.Correlation)
	}
	b := got["rk-bad"]
	if b.Outcome != "dead_lettered" || !strings.Contains(b.Reason, "bad_delay") || b.Attempts == nil || *b.Attempts != 0 || b.Correlation != "corr-bad" {
		t.Errorf("rk-bad receipt: %+v", b)
	}
	for id, route := range map[string]string{"rk-c1": "a", "rk-c2": "a", "rk-j1": "b"} {
		if c := got[id]; c.Outcome != "cancelled" || c.Route != route {
			t.Errorf("%s receipt: %+v, want cancelled on route %s", id, c, route)
		}
	}
	waitUntil(t, "receipts_published_total", 10*time.Second, func() bool {
		return tb.obs.get("side_published receipts kafka") >= 5
	})
}

func placement(p *int32, o *int64) string {
	if p == nil || o == nil {
		return "absent"
	}
	return fmt.Sprintf("%d/%d", *p, *o)
}

// receiptsOutage is how long TestReceiptsAMQPTargetDown keeps the receipts target
// frozen: DELAYBRIDGE_RECEIPTS_OUTAGE (a Go duration; 60s is the target ride-out),
// default 5 s for CI time.
func receiptsOutage(t *testing.T) time.Duration {
	if v := os.Getenv("DELAYBRIDGE_RECEIPTS_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("DELAYBRIDGE_RECEIPTS_OUTAGE: %v", err)
		}
		return d
	}
	return 5 * time.Second
}

// TestReceiptsAMQPTargetDown: route a (Kafka to Kafka) sends receipts to a RabbitMQ
// exchange whose connection is frozen (a TCP proxy forwards nothing) for the whole
// outage. Messages due throughout the outage are all delivered while it lasts, their
// receipts wait in the backlog (the gauge shows them), an invalid message is
// dead-lettered and a cancel answers; after the thaw every receipt — delivered,
// dead_lettered, cancelled — arrives, matches the schema and carries the message id as
// message_id, and the backlog drains to 0.
func TestReceiptsAMQPTargetDown(t *testing.T) {
	outage := receiptsOutage(t)
	rb := testkit.DialRabbit(t)
	ex, q := testkit.Uniq(t, "receipts-x"), testkit.Uniq(t, "receipts-q")
	ch := rb.FanoutQueue(ex, q)
	proxy := tcpproxy.Start(t, "127.0.0.1:5672")
	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 2, "a.delay", "a.out", "b.delay", "b.out")
	env := &testEnv{redisAddr: rds.Addr(), kaddr: kaddr, prefix: testkit.Uniq(t, "rc"), group: testkit.Uniq(t, "g")}
	tb := env.run(t, "routes.0.receipts.amqp.exchange="+ex, "amqp.url="+proxy.URL(testkit.AMQPURL()))
	valid := testkit.ReceiptSchema(t)
	ctx := context.Background()

	const n = 40
	proxy.Freeze()
	frozenAt := time.Now()
	var recs []*kgo.Record
	for i := range n {
		delay := time.Duration(i) * (outage - time.Second) / n
		recs = append(recs, rec("m", "x-message-id", fmt.Sprintf("rd-%02d", i), "x-delay", fmt.Sprint(delay.Milliseconds()),
			"traceparent", traceparent))
	}
	recs = append(recs, rec("bad", "x-message-id", "rd-bad", "x-delay", "soon"),
		rec("later", "x-message-id", "rd-cancel", "x-delay", "3600000"))
	tb.produce(t, "a.delay", recs...)
	waitUntil(t, "rd-cancel parked", 30*time.Second, func() bool { return tb.state(t, "rd-cancel") == "pending" })
	if _, err := tb.Cancel(ctx, "rd-cancel"); err != nil {
		t.Fatal(err)
	}

	// Every message is delivered while the receipts target is still frozen.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("a.out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]bool{}
	dctx, cancel := context.WithTimeout(ctx, outage+60*time.Second)
	defer cancel()
	for len(out) < n {
		fs := cl.PollFetches(dctx)
		if dctx.Err() != nil {
			t.Fatalf("%d of %d messages delivered while the receipts target was frozen", len(out), n)
		}
		for _, r := range fs.Records() {
			out[headerOf(r, "x-message-id")] = true
			due, err := strconv.ParseInt(headerOf(r, "x-delay-due-at"), 10, 64)
			if err != nil {
				t.Fatalf("x-delay-due-at: %v", err)
			}
			if r.Timestamp.UnixMilli() < due {
				t.Errorf("%s published at %d, before its due time %d", headerOf(r, "x-message-id"), r.Timestamp.UnixMilli(), due)
			}
		}
	}
	if backlog := tb.obs.get("side_backlog amqp"); backlog == 0 {
		t.Errorf("receipts backlog while frozen = %d, want the waiting receipts", backlog)
	}
	if rest := outage - time.Since(frozenAt); rest > 0 {
		time.Sleep(rest)
	}
	t.Logf("all %d messages delivered while the receipts target was frozen; thaw after %s (backlog %d)",
		n, time.Since(frozenAt).Round(time.Millisecond), tb.obs.get("side_backlog amqp"))
	proxy.Thaw()

	deliveries, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]receipt{}
	deadline := time.After(120 * time.Second)
	for len(got) < n+2 {
		select {
		case d := <-deliveries:
			rc := receiptOf(t, valid, d.Body)
			if d.MessageId != rc.ID || d.ContentType != "application/json" {
				t.Errorf("receipt of %s: message_id %q, content type %q", rc.ID, d.MessageId, d.ContentType)
			}
			got[rc.ID] = rc
		case <-deadline:
			t.Fatalf("%d of %d receipts after the thaw (backlog %d)", len(got), n+2, tb.obs.get("side_backlog amqp"))
		}
	}
	for i := range n {
		id := fmt.Sprintf("rd-%02d", i)
		if r := got[id]; r.Outcome != "delivered" || r.Target == nil || r.Target.Topic != "a.out" || r.Traceparent != traceparent {
			t.Errorf("%s receipt: %+v", id, r)
		}
	}
	if r := got["rd-bad"]; r.Outcome != "dead_lettered" {
		t.Errorf("rd-bad receipt: %+v", r)
	}
	if r := got["rd-cancel"]; r.Outcome != "cancelled" {
		t.Errorf("rd-cancel receipt: %+v", r)
	}
	waitUntil(t, "the receipts backlog to drain", 30*time.Second, func() bool { return tb.obs.get("side_backlog amqp") == 0 })
}

// TestReceiptsKafkaTargetDown: route a (RabbitMQ to RabbitMQ) sends receipts to Kafka,
// whose only broker becomes unreachable for the outage (a proxy cuts its connections and
// refuses new ones, as a stopped broker). Messages due throughout the outage are all
// delivered while it lasts, none early; the receipts wait in the backlog; after the
// broker is back every receipt — delivered, dead_lettered, cancelled — is on the
// receipts topic and the backlog drains to 0.
func TestReceiptsKafkaTargetDown(t *testing.T) {
	outage := receiptsOutage(t)
	rb := testkit.DialRabbit(t)
	srcEx, srcQ := testkit.Uniq(t, "rk-src-x"), testkit.Uniq(t, "rk-src-q")
	outEx, outQ := testkit.Uniq(t, "rk-out-x"), testkit.Uniq(t, "rk-out-q")
	rb.DeleteAtCleanup([]string{srcQ, outQ}, []string{srcEx, outEx})
	ch := rb.Channel()
	if err := ch.ExchangeDeclare(outEx, "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(outQ, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(outQ, "", outEx, false, nil); err != nil {
		t.Fatal(err)
	}
	kaddr, _, proxy := testkit.StartKafkaBehindProxy(t, 2, "receipts")
	rds := testkit.StartRedis(t)
	env := &testEnv{redisAddr: rds.Addr(), kaddr: kaddr}
	tb := env.runSet(t, []string{
		"redis.addrs=" + rds.Addr(), "kafka.brokers=" + kaddr, "shards=4", "prefix=" + testkit.Uniq(t, "rk"),
		"amqp.url=" + testkit.AMQPURL(),
		"routes.0.name=a", "routes.0.from.amqp.queue=" + srcQ, "routes.0.from.amqp.exchange=" + srcEx,
		"routes.0.to.amqp.exchange=" + outEx, "routes.0.receipts.kafka.topic=receipts",
	})
	valid := testkit.ReceiptSchema(t)
	ctx := context.Background()

	const n = 40
	proxy.SetDown(true)
	proxy.Cut()
	downAt := time.Now()
	publish := func(id string, delay any) {
		t.Helper()
		if err := ch.PublishWithContext(ctx, srcEx, "k", false, false, amqp.Publishing{Body: []byte("m"),
			Headers: amqp.Table{"x-delay": delay, "x-message-id": id, "traceparent": traceparent}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		publish(fmt.Sprintf("rk-%02d", i), (time.Duration(i) * (outage - time.Second) / n).Milliseconds())
	}
	publish("rk-bad", "soon")
	publish("rk-cancel", int64(3_600_000))
	waitUntil(t, "rk-cancel parked", 30*time.Second, func() bool { return tb.state(t, "rk-cancel") == "pending" })
	if _, err := tb.Cancel(ctx, "rk-cancel"); err != nil {
		t.Fatal(err)
	}

	deliveries, err := ch.Consume(outQ, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	deadline := time.After(outage + 60*time.Second)
	for len(out) < n {
		select {
		case d := <-deliveries:
			id := fmt.Sprint(d.Headers["x-message-id"])
			out[id] = true
			if due, ok := d.Headers["x-delay-due-at"].(int64); !ok || time.Now().UnixMilli() < due {
				t.Errorf("%s: delivered before its due time %v", id, d.Headers["x-delay-due-at"])
			}
		case <-deadline:
			t.Fatalf("%d of %d messages delivered while the receipts broker was down", len(out), n)
		}
	}
	if backlog := tb.obs.get("side_backlog kafka"); backlog == 0 {
		t.Errorf("receipts backlog while the broker is down = 0, want the waiting receipts")
	}
	if rest := outage - time.Since(downAt); rest > 0 {
		time.Sleep(rest)
	}
	t.Logf("all %d messages delivered while the receipts broker was down; back after %s (backlog %d)",
		n, time.Since(downAt).Round(time.Millisecond), tb.obs.get("side_backlog kafka"))
	proxy.SetDown(false)

	cl, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("receipts"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]receipt{}
	rctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	for len(got) < n+2 {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("%d of %d receipts after the broker came back (backlog %d)", len(got), n+2, tb.obs.get("side_backlog kafka"))
		}
		for _, r := range fs.Records() {
			rc := receiptOf(t, valid, r.Value)
			got[rc.ID] = rc
		}
	}
	for i := range n {
		id := fmt.Sprintf("rk-%02d", i)
		if r := got[id]; r.Outcome != "delivered" || r.Target == nil || r.Target.Broker != "amqp" || r.Target.Exchange != outEx || r.Traceparent != traceparent {
			t.Errorf("%s receipt: %+v", id, r)
		}
	}
	if r := got["rk-bad"]; r.Outcome != "dead_lettered" {
		t.Errorf("rk-bad receipt: %+v", r)
	}
	if r := got["rk-cancel"]; r.Outcome != "cancelled" {
		t.Errorf("rk-cancel receipt: %+v", r)
	}
	waitUntil(t, "the receipts backlog to drain", 30*time.Second, func() bool { return tb.obs.get("side_backlog kafka") == 0 })
}
