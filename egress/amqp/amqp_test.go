package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/egress/amqp"
	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// broker is the test's own connection, to set up targets and read what arrived.
type broker struct{ *testkit.Rabbit }

func newBroker(t *testing.T) *broker { return &broker{testkit.DialRabbit(t)} }

// target declares a durable topic exchange and, when bind, a queue bound with "#";
// both are deleted at cleanup.
func (b *broker) target(bind bool) (exchange, queue string) {
	b.T.Helper()
	exchange = testkit.Uniq(b.T, "target-x")
	ch := b.Channel()
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		b.T.Fatal(err)
	}
	if bind {
		queue = testkit.Uniq(b.T, "target-q")
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			b.T.Fatal(err)
		}
		if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
			b.T.Fatal(err)
		}
	}
	b.DeleteAtCleanup([]string{queue}, []string{exchange})
	return exchange, queue
}

// reader consumes queue (auto-ack) for the rest of the test.
type reader struct {
	t  testing.TB
	in <-chan amqp091.Delivery
}

func (b *broker) read(queue string) *reader {
	b.T.Helper()
	ch := b.Channel()
	in, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		b.T.Fatal(err)
	}
	return &reader{t: b.T, in: in}
}

func (r *reader) next(n int, within time.Duration) []amqp091.Delivery {
	r.t.Helper()
	var out []amqp091.Delivery
	deadline := time.After(within)
	for len(out) < n {
		select {
		case d := <-r.in:
			out = append(out, d)
		case <-deadline:
			r.t.Fatalf("%d of %d messages arrived within %s", len(out), n, within)
		}
	}
	return out
}

// none asserts nothing more arrives for a while.
func (r *reader) none(within time.Duration) {
	r.t.Helper()
	select {
	case d := <-r.in:
		r.t.Fatalf("unexpected message %q (headers %v)", d.Body, d.Headers)
	case <-time.After(within):
	}
}

func manager(t *testing.T, url string) *amqpconn.Manager {
	t.Helper()
	m, err := amqpconn.New(amqpconn.Config{URL: url, Name: t.Name(), MinBackoff: 20 * time.Millisecond, MaxBackoff: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func newSink(t *testing.T, m *amqpconn.Manager, routes map[string]amqp.Route, opts amqp.Options) *amqp.Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := amqp.New(ctx, m, routes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func publish(t *testing.T, s *amqp.Sink, msgs ...*envelope.Envelope) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := s.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d errors for %d messages", len(errs), len(msgs))
	}
	return errs
}

func mustPublish(t *testing.T, s *amqp.Sink, msgs ...*envelope.Envelope) {
	t.Helper()
	for i, err := range publish(t, s, msgs...) {
		if err != nil {
			t.Fatalf("message %d (%s): %v", i, msgs[i].ID, err)
		}
	}
}

// TestAMQPOriginPropertiesAndTypedHeaders: every property and every header value type
// comes out as it went in; x-delay negated as the delayed-message plugin writes it (a
// signed 32-bit integer); the bridge headers added.
func TestAMQPOriginPropertiesAndTypedHeaders(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	r := b.read(q)
	m := manager(t, testkit.AMQPURL())
	s := newSink(t, m, map[string]amqp.Route{"billing": {Exchange: ex}}, amqp.Options{})

	ts := time.Unix(time.Now().Unix(), 0)
	props := &envelope.AMQPProperties{ContentType: "application/json", ContentEncoding: "gzip", DeliveryMode: 2, Priority: 5,
		CorrelationID: "corr-1", ReplyTo: "rpc.replies", Expiration: "600000", MessageID: "mid-1", Timestamp: ts,
		Type: "invoice.due", UserID: "guest", AppID: "billing"}
	headers := []envelope.Header{
		{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Key: "i8", Value: int8(-8)}, {Key: "i16", Value: int16(-16)}, {Key: "i32", Value: int32(-32)}, {Key: "i64", Value: int64(-64)},
		{Key: "u8", Value: uint8(8)}, {Key: "u16", Value: uint16(16)}, {Key: "u32", Value: uint32(32)},
		{Key: "f32", Value: float32(1.5)}, {Key: "f64", Value: 2.25},
		{Key: "dec", Value: envelope.Decimal{Scale: 2, Value: 1999}},
		{Key: "bin", Value: []byte{0, 1, 0xff}}, {Key: "flag", Value: true}, {Key: "when", Value: ts}, {Key: "void", Value: nil},
		{Key: "table", Value: map[string]any{"n": int16(3), "d": envelope.Decimal{Scale: 1, Value: 7}, "deep": map[string]any{"s": "x"}}},
		{Key: "array", Value: []any{"a", int32(1), envelope.Decimal{Scale: 0, Value: 2}}},
		{Key: "big", Value: uint64(1 << 63)},
	}
	cases := []struct {
		name  string
		delay any
		neg   any
	}{
		{"int32", int32(1500), int32(-1500)},
		{"uint16", uint16(1500), int32(-1500)},
		{"int64", int64(1500), int32(-1500)},
		{"float64", 1500.9, int32(-1500)},
		{"decimal", envelope.Decimal{Scale: 1, Value: 15009}, int32(-1500)},
		{"longstr", "1500", int32(-1500)},
		{"bytes", []byte("1500"), int32(-1500)},
		{"huge", int64(5_000_000_000), int64(-5_000_000_000)},
		{"garbage", "soon", "soon"},
	}
	var msgs []*envelope.Envelope
	for i, c := range cases {
		hs := append([]envelope.Header{{Key: "x-delay", Value: c.delay}}, headers...)
		msgs = append(msgs, &envelope.Envelope{
			ID: "id-" + c.name, Route: "billing", SourceBroker: envelope.BrokerAMQP, Source: "billing.delay",
			DueAt: 1_700_000_000_000 + int64(i), Attempt: int32(i), RoutingKey: "invoice." + c.name,
			Payload: []byte("body " + c.name), Headers: hs, AMQP: props,
		})
	}
	mustPublish(t, s, msgs...)
	got := map[string]amqp091.Delivery{}
	for _, d := range r.next(len(cases), 10*time.Second) {
		got[d.Headers[envelope.HeaderMessageID].(string)] = d
	}
	for i, c := range cases {
		d, ok := got["id-"+c.name]
		if !ok {
			t.Errorf("%s: did not arrive", c.name)
			continue
		}
		if d.RoutingKey != "invoice."+c.name || string(d.Body) != "body "+c.name || d.Exchange != ex {
			t.Errorf("%s: exchange %q key %q body %q", c.name, d.Exchange, d.RoutingKey, d.Body)
		}
		gp := envelope.AMQPProperties{ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
			Priority: d.Priority, CorrelationID: d.CorrelationId, ReplyTo: d.ReplyTo, Expiration: d.Expiration,
			MessageID: d.MessageId, Timestamp: props.Timestamp, Type: d.Type, UserID: d.UserId, AppID: d.AppId}
		if gp != *props || !d.Timestamp.Equal(ts) {
			t.Errorf("%s: properties\n got %+v (ts %v)\nwant %+v", c.name, gp, d.Timestamp, *props)
		}
		h := d.Headers
		if fmt.Sprintf("%T %v", h["x-delay"], h["x-delay"]) != fmt.Sprintf("%T %v", c.neg, c.neg) {
			t.Errorf("%s: x-delay = %T %v, want %T %v", c.name, h["x-delay"], h["x-delay"], c.neg, c.neg)
		}
		want := amqp091.Table{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"i8":          int8(-8), "i16": int16(-16), "i32": int32(-32), "i64": int64(-64),
			"u8": uint8(8), "u16": uint16(16), "u32": uint32(32), "f32": float32(1.5), "f64": 2.25,
			"dec": amqp091.Decimal{Scale: 2, Value: 1999}, "bin": []byte{0, 1, 0xff}, "flag": true, "when": ts, "void": nil,
			"table":                  amqp091.Table{"n": int16(3), "d": amqp091.Decimal{Scale: 1, Value: 7}, "deep": amqp091.Table{"s": "x"}},
			"array":                  []any{"a", int32(1), amqp091.Decimal{Scale: 0, Value: 2}},
			"big":                    "9223372036854775808",
			envelope.HeaderMessageID: "id-" + c.name, envelope.HeaderDueAt: int64(1_700_000_000_000 + i),
			envelope.HeaderSource: "billing.delay", envelope.HeaderAttempt: int64(i + 1),
		}
		for k, v := range want {
			if fmt.Sprintf("%T %v", h[k], h[k]) != fmt.Sprintf("%T %v", v, v) {
				t.Errorf("%s: header %s = %T %v, want %T %v", c.name, k, h[k], h[k], v, v)
			}
		}
		if len(h) != len(want)+1 {
			t.Errorf("%s: %d headers, want %d: %v", c.name, len(h), len(want)+1, h)
		}
	}
}

// TestKafkaOriginMessage: string headers become long strings, the Kafka key is the
// routing key, the message is persistent with message_id = the bridge id.
func TestKafkaOriginMessage(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	r := b.read(q)
	fixedEx, fixedQ := b.target(true)
	rf := b.read(fixedQ)
	m := manager(t, testkit.AMQPURL())
	s := newSink(t, m, map[string]amqp.Route{
		"orders": {Exchange: ex},
		"fixed":  {Exchange: fixedEx, RoutingKey: "always.this"},
	}, amqp.Options{})
	env := &envelope.Envelope{ID: "orders/0/42", Route: "orders", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
		DueAt: 1_700_000_000_123, Key: []byte("customer-7"), Payload: []byte{0, 1, 2},
		Headers: []envelope.Header{{Key: "x-delay", Value: "60000"}, {Key: "traceparent", Value: "tp"}, {Key: "dup", Value: "first"}, {Key: "dup", Value: "last"}}}
	fixed := *env
	fixed.ID, fixed.Route = "orders/0/43", "fixed"
	mustPublish(t, s, env, &fixed)
	d := r.next(1, 10*time.Second)[0]
	if d.RoutingKey != "customer-7" || d.DeliveryMode != amqp091.Persistent || d.MessageId != "orders/0/42" || string(d.Body) != "\x00\x01\x02" {
		t.Errorf("key %q mode %d id %q body %q", d.RoutingKey, d.DeliveryMode, d.MessageId, d.Body)
	}
	for k, v := range map[string]any{"x-delay": int32(-60000), "traceparent": "tp", "dup": "last", envelope.HeaderDueAt: int64(1_700_000_000_123),
		envelope.HeaderSource: "orders.delay", envelope.HeaderAttempt: int64(1), envelope.HeaderMessageID: "orders/0/42"} {
		if d.Headers[k] != v {
			t.Errorf("header %s = %T %v, want %T %v", k, d.Headers[k], d.Headers[k], v, v)
		}
	}
	if d := rf.next(1, 10*time.Second)[0]; d.RoutingKey != "always.this" {
		t.Errorf("fixed routing key: got %q", d.RoutingKey)
	}
}

// TestUserIDOfAnotherUserIsDropped: RabbitMQ would close the channel on a user_id that
// is not the publishing user.
func TestUserIDOfAnotherUserIsDropped(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	r := b.read(q)
	m := manager(t, testkit.AMQPURL())
	s := newSink(t, m, map[string]amqp.Route{"r": {Exchange: ex}}, amqp.Options{Channels: 1})
	mk := func(id, user string) *envelope.Envelope {
		return &envelope.Envelope{ID: id, Route: "r", SourceBroker: envelope.BrokerAMQP, AMQP: &envelope.AMQPProperties{UserID: user}}
	}
	mustPublish(t, s, mk("other", "alice"), mk("self", m.Username()))
	for _, d := range r.next(2, 10*time.Second) {
		id := d.Headers[envelope.HeaderMessageID]
		if (id == "other" && d.UserId != "") || (id == "self" && d.UserId != m.Username()) {
			t.Errorf("%v: user_id %q", id, d.UserId)
		}
	}
}

// TestUnroutableIsAFailedPublish: an exchange with no binding returns the message
// (mandatory): that message fails, retryably; its neighbours do not.
func TestUnroutableIsAFailedPublish(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	r := b.read(q)
	lonely, _ := b.target(false)
	m := manager(t, testkit.AMQPURL())
	s := newSink(t, m, map[string]amqp.Route{"ok": {Exchange: ex}, "lonely": {Exchange: lonely}}, amqp.Options{Channels: 1})
	var msgs []*envelope.Envelope
	for i := range 20 {
		route := "ok"
		if i%4 == 1 {
			route = "lonely"
		}
		msgs = append(msgs, &envelope.Envelope{ID: fmt.Sprintf("m-%d", i), Route: route, SourceBroker: envelope.BrokerKafka, Payload: []byte("x")})
	}
	errs := publish(t, s, msgs...)
	for i, err := range errs {
		if msgs[i].Route == "lonely" {
			if !errors.Is(err, amqp.ErrUnroutable) || fault.IsPermanent(err) {
				t.Errorf("message %d to an unbound exchange: %v, want retryable ErrUnroutable", i, err)
			}
		} else if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	r.next(15, 10*time.Second)
	r.none(200 * time.Millisecond)
	// The channel survived: the next publish works.
	mustPublish(t, s, &envelope.Envelope{ID: "after", Route: "ok"})
}

// TestMissingExchange: New refuses a route whose exchange does not exist (permanent),
// declare: true creates it, and an exchange deleted later fails its messages permanently
// without failing others for good.
func TestMissingExchange(t *testing.T) {
	b := newBroker(t)
	m := manager(t, testkit.AMQPURL())
	missing := testkit.Uniq(t, "missing-x")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := amqp.New(ctx, m, map[string]amqp.Route{"r": {Exchange: missing}}, amqp.Options{})
	if !fault.IsPermanent(err) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("New with a missing exchange: %v, want a permanent error naming it", err)
	}

	declared := testkit.Uniq(t, "declared-x")
	t.Cleanup(func() {
		ch := b.Channel()
		_ = ch.ExchangeDelete(declared, false, false)
		_ = ch.Close()
	})
	s := newSink(t, m, map[string]amqp.Route{"r": {Exchange: declared, Declare: true}}, amqp.Options{Channels: 1})
	ch := b.Channel()
	if err := ch.ExchangeDeclarePassive(declared, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("declare: true did not create the exchange: %v", err)
	}
	_ = ch.Close()

	// Deleted behind the bridge's back while it thinks it exists.
	ex, q := b.target(true)
	r := b.read(q)
	s2 := newSink(t, m, map[string]amqp.Route{"gone": {Exchange: declared}, "ok": {Exchange: ex}}, amqp.Options{Channels: 1})
	ch = b.Channel()
	if err := ch.ExchangeDelete(declared, false, false); err != nil {
		t.Fatal(err)
	}
	_ = ch.Close()
	errs := publish(t, s2,
		&envelope.Envelope{ID: "to-gone", Route: "gone"},
		&envelope.Envelope{ID: "ok-1", Route: "ok"})
	if !fault.IsPermanent(errs[0]) {
		t.Errorf("publish to a deleted exchange: %v, want a permanent error", errs[0])
	}
	// ok-1 shared the channel the broker closed: it may fail, but only retryably.
	if errs[1] != nil && fault.IsPermanent(errs[1]) {
		t.Errorf("neighbour of a missing exchange failed permanently: %v", errs[1])
	}
	errs = publish(t, s2, &envelope.Envelope{ID: "to-gone-2", Route: "gone"}, &envelope.Envelope{ID: "ok-2", Route: "ok"})
	if !fault.IsPermanent(errs[0]) || errs[1] != nil {
		t.Errorf("second publish: %v / %v, want permanent / nil", errs[0], errs[1])
	}
	got := r.next(1, 10*time.Second)
	if id := got[len(got)-1].Headers[envelope.HeaderMessageID]; id != "ok-2" && id != "ok-1" {
		t.Errorf("arrived %v", id)
	}
	_ = s
}

// TestDeadLetterPublisher: dead letters go to dead_letter.amqp.exchange with the reason.
func TestDeadLetterPublisher(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	r := b.read(q)
	m := manager(t, testkit.AMQPURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := amqp.NewDeadLetter(ctx, m, testkit.Uniq(t, "no-dlx"), amqp.Options{}); !fault.IsPermanent(err) {
		t.Fatalf("missing dead-letter exchange: %v, want a permanent error", err)
	}
	dl, err := amqp.NewDeadLetter(ctx, m, ex, amqp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	env := &envelope.Envelope{ID: "dead-1", Route: "some-route", SourceBroker: envelope.BrokerAMQP, Source: "billing.delay",
		RoutingKey: "invoice.x", Attempt: 10, Reason: "unroutable: returned by the broker",
		Headers: []envelope.Header{{Key: "x-delay", Value: int32(100)}}, AMQP: &envelope.AMQPProperties{ContentType: "text/plain"}}
	if errs := dl.Publish(ctx, []*envelope.Envelope{env}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	d := r.next(1, 10*time.Second)[0]
	if d.RoutingKey != "invoice.x" || d.ContentType != "text/plain" || d.Headers[amqp.HeaderDeadReason] != env.Reason ||
		d.Headers[envelope.HeaderAttempt] != int64(10) || d.Headers["x-delay"] != int32(-100) {
		t.Errorf("dead letter: key %q type %q headers %v", d.RoutingKey, d.ContentType, d.Headers)
	}
}

// TestConnectionCutMidFlight: publishes go on while the connection is cut repeatedly.
// Every message Publish reported as published must be in the target queue, and every
// failed one is retried (as the dispatcher would) until it is published: nothing lost.
func TestConnectionCutMidFlight(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	m := manager(t, p.URL(testkit.AMQPURL()))
	s := newSink(t, m, map[string]amqp.Route{"r": {Exchange: ex}}, amqp.Options{Channels: 3, MaxInflight: 64})

	const publishers, per, batch = 4, 1500, 50
	var failures atomic.Int64
	var okMu sync.Mutex
	confirmed := map[string]bool{}
	var wg sync.WaitGroup
	stopCuts := make(chan struct{})
	var cuts atomic.Int64
	go func() {
		for {
			select {
			case <-stopCuts:
				return
			case <-time.After(40 * time.Millisecond):
				// Cut only a live connection: a cut while the sink is still redialing
				// lands on nothing in flight.
				if cuts.Load() < 10 && p.Active() > 0 {
					p.Cut()
					cuts.Add(1)
				}
			}
		}
	}()
	for w := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var todo []*envelope.Envelope
			for i := range per {
				todo = append(todo, &envelope.Envelope{ID: fmt.Sprintf("w%d-%d", w, i), Route: "r", SourceBroker: envelope.BrokerKafka, Payload: []byte("x")})
			}
			deadline := time.Now().Add(60 * time.Second)
			for len(todo) > 0 && time.Now().Before(deadline) {
				n := min(batch, len(todo))
				chunk := todo[:n]
				todo = todo[n:]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				errs := s.Publish(ctx, chunk)
				cancel()
				for i, err := range errs {
					if err == nil {
						okMu.Lock()
						confirmed[chunk[i].ID] = true
						okMu.Unlock()
						continue
					}
					if fault.IsPermanent(err) {
						t.Errorf("%s: permanent error on a connection cut: %v", chunk[i].ID, err)
						continue
					}
					failures.Add(1)
					todo = append(todo, chunk[i]) // retry later, like the dispatcher
				}
			}
			if len(todo) > 0 {
				t.Errorf("publisher %d: %d messages never published", w, len(todo))
			}
		}()
	}
	wg.Wait()
	close(stopCuts)
	if cuts.Load() < 3 {
		t.Fatalf("only %d cuts while publishing", cuts.Load())
	}
	if len(confirmed) != publishers*per {
		t.Fatalf("%d of %d confirmed", len(confirmed), publishers*per)
	}
	r := b.read(q)
	arrived := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(arrived) < len(confirmed) && time.Now().Before(deadline) {
		select {
		case d := <-r.in:
			arrived[d.Headers[envelope.HeaderMessageID].(string)]++
		case <-time.After(time.Second):
		}
	}
	missing := 0
	for id := range confirmed {
		if arrived[id] == 0 {
			missing++
		}
	}
	dups := 0
	for _, n := range arrived {
		dups += n - 1
	}
	t.Logf("%d messages, %d cuts, %d failed publishes retried, %d duplicates in the target", len(confirmed), cuts.Load(), failures.Load(), dups)
	if missing > 0 {
		t.Fatalf("%d confirmed messages are not in the target queue", missing)
	}
	if failures.Load() == 0 {
		t.Error("no publish failed: the cuts did not land mid-flight")
	}
}

// TestPublishWhileBrokerDown: with no connection possible Publish fails within
// ConnectWait (retryable), and recovers when the broker is back.
func TestPublishWhileBrokerDown(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	r := b.read(q)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	m := manager(t, p.URL(testkit.AMQPURL()))
	s := newSink(t, m, map[string]amqp.Route{"r": {Exchange: ex}}, amqp.Options{Channels: 2, ConnectWait: 300 * time.Millisecond})
	p.SetDown(true)
	p.Cut()
	start := time.Now()
	errs := publish(t, s, &envelope.Envelope{ID: "down", Route: "r"})
	if errs[0] == nil || fault.IsPermanent(errs[0]) {
		t.Fatalf("publish while down: %v, want a retryable error", errs[0])
	}
	if took := time.Since(start); took > 10*time.Second { // ConnectWait 300 ms; generous for a loaded machine
		t.Errorf("publish while down took %v, want about ConnectWait", took)
	}
	p.SetDown(false)
	// The manager redials with backoff, and each Publish waits only ConnectWait (300 ms)
	// for a connection: on a loaded machine the first tries may still fail, retryably.
	deadline := time.Now().Add(15 * time.Second)
	for {
		errs := publish(t, s, &envelope.Envelope{ID: "up", Route: "r"})
		if errs[0] == nil {
			break
		}
		if fault.IsPermanent(errs[0]) || time.Now().After(deadline) {
			t.Fatalf("publish after the broker came back: %v", errs[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := r.next(1, 10*time.Second)[0]; d.Headers[envelope.HeaderMessageID] != "up" {
		t.Errorf("arrived %v", d.Headers[envelope.HeaderMessageID])
	}
}

// TestThroughput measures confirmed publishes per second (logged, not asserted).
func TestThroughput(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	m := manager(t, testkit.AMQPURL())
	s := newSink(t, m, map[string]amqp.Route{"r": {Exchange: ex}}, amqp.Options{})
	const n, batch = 20000, 500
	msgs := make([]*envelope.Envelope, n)
	for i := range msgs {
		msgs[i] = &envelope.Envelope{ID: fmt.Sprintf("t-%d", i), Route: "r", SourceBroker: envelope.BrokerKafka, Payload: make([]byte, 200),
			Headers: []envelope.Header{{Key: "x-delay", Value: "1000"}}}
	}
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < n; i += batch {
		wg.Add(1)
		go func(chunk []*envelope.Envelope) {
			defer wg.Done()
			for _, err := range s.Publish(context.Background(), chunk) {
				if err != nil {
					failed.Add(1)
				}
			}
		}(msgs[i:min(i+batch, n)])
	}
	wg.Wait()
	took := time.Since(start)
	if failed.Load() > 0 {
		t.Fatalf("%d publishes failed", failed.Load())
	}
	t.Logf("%d persistent 200-byte messages confirmed in %v: %.0f msgs/s (4 confirm channels x 256 in flight)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	ch := b.Channel()
	defer ch.Close()
	if _, err := ch.QueuePurge(q, false); err != nil {
		t.Fatal(err)
	}
}

// TestAMQPToolsConsume: what the sink publishes is read by rabbitmq-c's amqp-get.
func TestAMQPToolsConsume(t *testing.T) {
	bin, err := exec.LookPath("amqp-get")
	if err != nil {
		t.Fatal("amqp-get not installed (apt-get install -y amqp-tools): this interoperability test needs it")
	}
	b := newBroker(t)
	ex, q := b.target(true)
	m := manager(t, testkit.AMQPURL())
	s := newSink(t, m, map[string]amqp.Route{"r": {Exchange: ex}}, amqp.Options{})
	mustPublish(t, s, &envelope.Envelope{ID: "tools", Route: "r", RoutingKey: "k", Payload: []byte("hello from the bridge")})
	url := strings.TrimSuffix(testkit.AMQPURL(), "/") // amqp-tools read a trailing "/" as vhost ""
	var out []byte
	for range 50 {
		out, err = exec.Command(bin, "-u", url, "-q", q).CombinedOutput()
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || string(out) != "hello from the bridge" {
		t.Fatalf("amqp-get: %v: %q", err, out)
	}
}
