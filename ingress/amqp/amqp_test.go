package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/ingress/amqp"
	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// broker is a direct connection the test uses to publish (with confirms) and inspect.
type broker struct {
	*testkit.Rabbit
	ch *amqp091.Channel
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	r := testkit.DialRabbit(t)
	ch := r.Channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return &broker{Rabbit: r, ch: ch}
}

// cleanup deletes queue and exchange on a fresh channel at test end.
func (b *broker) cleanup(queue, exchange string) {
	b.DeleteAtCleanup([]string{queue}, []string{exchange})
}

func (b *broker) publish(exchange, key string, p amqp091.Publishing) {
	b.T.Helper()
	dc, err := b.ch.PublishWithDeferredConfirm(exchange, key, true, false, p)
	if err != nil {
		b.T.Fatalf("publish: %v", err)
	}
	if !dc.Wait() {
		b.T.Fatal("publish nacked")
	}
}

// ready is the number of ready (not unacknowledged) messages in q.
func (b *broker) ready(q string) int {
	b.T.Helper()
	ch, err := b.Conn.Channel()
	if err != nil {
		b.T.Fatal(err)
	}
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		b.T.Fatalf("inspect %s: %v", q, err)
	}
	return st.Messages
}

func (b *broker) waitReady(q string, want int, within time.Duration) {
	b.T.Helper()
	deadline := time.Now().Add(within)
	for {
		n := b.ready(q)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			b.T.Fatalf("queue %s has %d ready messages, want %d", q, n, want)
		}
		time.Sleep(20 * time.Millisecond)
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

func route(t *testing.T, b *broker) amqp.Endpoint {
	ep := amqp.Endpoint{Queue: testkit.Uniq(t, "delay-q"), Exchange: testkit.Uniq(t, "delay-x")}
	b.cleanup(ep.Queue, ep.Exchange)
	return ep
}

func source(t *testing.T, m *amqpconn.Manager, ep amqp.Endpoint, prefetch int, tune ...func(*amqp.Config)) *amqp.Source {
	t.Helper()
	o := amqp.Config{
		Endpoint:   ep,
		Rules:      ingress.Rules{Route: "r", MaxDelay: 24 * time.Hour, MaxPayloadBytes: 1 << 20},
		Prefetch:   prefetch,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	}
	for _, f := range tune {
		f(&o)
	}
	s, err := amqp.New(m, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run starts s.Run; the returned stop cancels it and waits, failing if it errs or hangs.
func run(t *testing.T, s *amqp.Source, h ingress.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Run did not return within 5s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// collector is a handler that records items and can be made to fail.
type collector struct {
	mu    sync.Mutex
	items []ingress.Item
	calls int
	fail  func(call int, items []ingress.Item) error
	got   chan struct{}
}

func newCollector() *collector { return &collector{got: make(chan struct{}, 1<<16)} }

func (c *collector) handle(_ context.Context, items []ingress.Item) error {
	c.mu.Lock()
	c.calls++
	call := c.calls
	f := c.fail
	c.mu.Unlock()
	if f != nil {
		if err := f(call, items); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.items = append(c.items, items...)
	c.mu.Unlock()
	for range items {
		c.got <- struct{}{}
	}
	return nil
}

func (c *collector) wait(t *testing.T, n int, within time.Duration) []ingress.Item {
	t.Helper()
	deadline := time.After(within)
	for {
		c.mu.Lock()
		have := len(c.items)
		c.mu.Unlock()
		if have >= n {
			break
		}
		select {
		case <-c.got:
		case <-deadline:
			t.Fatalf("got %d items, want %d", have, n)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ingress.Item(nil), c.items...)
}

func byID(items []ingress.Item) map[string]ingress.Item {
	m := map[string]ingress.Item{}
	for _, it := range items {
		m[it.Env.ID] = it
	}
	return m
}

// TestDelayHeaderTypes publishes x-delay in every AMQP table type a client can send
// and checks the due time, with the timestamp property as base.
func TestDelayHeaderTypes(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	s := source(t, m, ep, 50)
	c := newCollector()
	run(t, s, c.handle)
	waitBound(t, b, ep)

	ts := time.Now().Truncate(time.Second)
	cases := []struct {
		name  string
		value any
		delay int64
	}{
		{"int8", int8(100), 100},
		{"int16", int16(1000), 1000},
		{"int32", int32(1500), 1500},
		{"int64", int64(2500), 2500},
		{"uint8", uint8(200), 200},
		{"uint16", uint16(3000), 3000},
		{"uint32", uint32(4000), 4000},
		{"float32", float32(1234.9), 1234},
		{"float64", float64(5678.7), 5678},
		{"decimal", amqp091.Decimal{Scale: 2, Value: 123456}, 1234},
		{"longstr", "7000", 7000},
		{"bytes", []byte("8000"), 8000},
		{"int-as-int32", 9000, 9000},
		{"negative", int32(-5000), 0},
	}
	for _, tc := range cases {
		b.publish(ep.Exchange, "k."+tc.name, amqp091.Publishing{
			MessageId: tc.name, Timestamp: ts, Body: []byte(tc.name),
			Headers: amqp091.Table{"x-delay": tc.value},
		})
	}
	got := byID(c.wait(t, len(cases), 10*time.Second))
	for _, tc := range cases {
		it, ok := got[tc.name]
		if !ok {
			t.Errorf("%s: not received", tc.name)
			continue
		}
		if it.Invalid != "" {
			t.Errorf("%s: invalid: %s", tc.name, it.Env.Reason)
			continue
		}
		want := ts.UnixMilli() + tc.delay
		if tc.delay == 0 {
			// <= 0 means due now: the receive time.
			want = it.Env.ReceivedAt
		}
		if it.Env.DueAt != want {
			t.Errorf("%s (%T): DueAt = %d, want %d (delta %d)", tc.name, tc.value, it.Env.DueAt, want, it.Env.DueAt-want)
		}
		v, _ := it.Env.Header("x-delay")
		if dec, ok := tc.value.(amqp091.Decimal); ok {
			if v != (envelope.Decimal{Scale: dec.Scale, Value: dec.Value}) {
				t.Errorf("decimal kept as %#v", v)
			}
		} else if fmt.Sprintf("%T", v) != fmt.Sprintf("%T", tc.value) && tc.name != "int-as-int32" {
			t.Errorf("%s: header type %T, want %T", tc.name, v, tc.value)
		}
		if it.Env.RoutingKey != "k."+tc.name || it.Env.Source != ep.Queue || it.Env.SourceBroker != envelope.BrokerAMQP {
			t.Errorf("%s: routing key %q source %q broker %q", tc.name, it.Env.RoutingKey, it.Env.Source, it.Env.SourceBroker)
		}
	}
}

// waitBound waits until the source declared and bound its queue (publishing earlier
// to the exchange would route nowhere).
func waitBound(t *testing.T, b *broker, ep amqp.Endpoint) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ch, err := b.Conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q, err := ch.QueueDeclarePassive(ep.Queue, true, false, false, false, nil)
		_ = ch.Close()
		if err == nil && q.Consumers > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("source did not start consuming %s", ep.Queue)
}

func TestNoTimestampUsesArrivalAndDeliverAt(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	c := newCollector()
	run(t, source(t, m, ep, 10), c.handle)
	waitBound(t, b, ep)

	before := time.Now().UnixMilli()
	b.publish(ep.Exchange, "a", amqp091.Publishing{MessageId: "arrival", Headers: amqp091.Table{"x-delay": int32(60000)}})
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	b.publish(ep.Exchange, "a", amqp091.Publishing{MessageId: "at-ts", Headers: amqp091.Table{"x-deliver-at": at}})
	b.publish(ep.Exchange, "a", amqp091.Publishing{MessageId: "at-text", Headers: amqp091.Table{"x-deliver-at": at.Format(time.RFC3339), "x-delay": int32(5)}})
	b.publish(ep.Exchange, "a", amqp091.Publishing{MessageId: "bad", Headers: amqp091.Table{"x-delay": "soon"}})
	b.publish(ep.Exchange, "a", amqp091.Publishing{MessageId: "too-far", Headers: amqp091.Table{"x-delay": int64(48 * time.Hour / time.Millisecond)}})
	got := byID(c.wait(t, 5, 10*time.Second))
	after := time.Now().UnixMilli()
	if d := got["arrival"].Env.DueAt; d < before+60000 || d > after+60000 {
		t.Errorf("arrival-based due %d not in [%d, %d]", d, before+60000, after+60000)
	}
	if d := got["at-ts"].Env.DueAt; d != at.UnixMilli() {
		t.Errorf("x-deliver-at timestamp: due %d, want %d", d, at.UnixMilli())
	}
	if d := got["at-text"].Env.DueAt; d != at.UnixMilli() {
		t.Errorf("x-deliver-at text wins over x-delay: due %d, want %d", d, at.UnixMilli())
	}
	if got["bad"].Invalid != ingress.InvalidBadDelay {
		t.Errorf("x-delay \"soon\": invalid = %q", got["bad"].Invalid)
	}
	if got["too-far"].Invalid != ingress.InvalidDelayOutOfRange {
		t.Errorf("x-delay 48h with max 24h: invalid = %q", got["too-far"].Invalid)
	}
	b.waitReady(ep.Queue, 0, 5*time.Second)
}

// TestPropertiesAndHeadersKept checks every property and typed header reaches the item.
func TestPropertiesAndHeadersKept(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	c := newCollector()
	run(t, source(t, m, ep, 10), c.handle)
	waitBound(t, b, ep)
	ts := time.Unix(time.Now().Unix(), 0)
	b.publish(ep.Exchange, "orders.eu", amqp091.Publishing{
		ContentType: "application/json", ContentEncoding: "gzip", DeliveryMode: 2, Priority: 7,
		CorrelationId: "corr", ReplyTo: "replies", Expiration: "600000", MessageId: "mid-1",
		Timestamp: ts, Type: "order.created", UserId: "guest", AppId: "shop",
		Headers: amqp091.Table{
			"x-delay":     int32(10),
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"nested":      amqp091.Table{"a": int8(1), "d": amqp091.Decimal{Scale: 1, Value: 5}},
			"list":        []any{"x", int16(2)},
			"flag":        true,
			"when":        ts,
			"nothing":     nil,
		},
		Body: []byte(`{"id":1}`),
	})
	it := c.wait(t, 1, 10*time.Second)[0]
	p := it.Env.AMQP
	want := envelope.AMQPProperties{ContentType: "application/json", ContentEncoding: "gzip", DeliveryMode: 2, Priority: 7,
		CorrelationID: "corr", ReplyTo: "replies", Expiration: "600000", MessageID: "mid-1", Timestamp: ts,
		Type: "order.created", UserID: "guest", AppID: "shop"}
	if p == nil || !p.Timestamp.Equal(want.Timestamp) {
		t.Fatalf("properties %+v", p)
	}
	p2 := *p
	p2.Timestamp = want.Timestamp
	if p2 != want {
		t.Errorf("properties\n got %+v\nwant %+v", p2, want)
	}
	if it.Env.ID != "mid-1" || string(it.Env.Payload) != `{"id":1}` || it.Env.RoutingKey != "orders.eu" {
		t.Errorf("id %q payload %q rk %q", it.Env.ID, it.Env.Payload, it.Env.RoutingKey)
	}
	n, _ := it.Env.Header("nested")
	nm, ok := n.(map[string]any)
	if !ok || nm["a"] != int8(1) || nm["d"] != (envelope.Decimal{Scale: 1, Value: 5}) {
		t.Errorf("nested table = %#v", n)
	}
	if l, _ := it.Env.Header("list"); fmt.Sprint(l) != "[x 2]" {
		t.Errorf("array = %#v", l)
	}
	if v, _ := it.Env.Header("when"); !ts.Equal(v.(time.Time)) {
		t.Errorf("timestamp header = %#v", v)
	}
	if _, ok := it.Env.Header("nothing"); !ok {
		t.Error("void header dropped")
	}
	// The envelope must survive the Redis codec with these types.
	if _, err := envelope.Encode(it.Env); err != nil {
		t.Errorf("envelope.Encode: %v", err)
	}
}

// TestHandlerFailureRedeliversAndContentID: a failing handler gets the same messages
// again (here rejected with requeue after every failure, RetryInPlace 1, so the broker
// redelivers them), nothing is acked before it succeeds, and a
// message without message_id keeps the same content-derived id across the redelivery,
// also on a quorum queue (which adds x-delivery-count).
func TestHandlerFailureRedeliversAndContentID(t *testing.T) {
	for _, quorum := range []bool{false, true} {
		t.Run(fmt.Sprintf("quorum=%v", quorum), func(t *testing.T) {
			b := newBroker(t)
			ep := route(t, b)
			if quorum {
				// Pre-created by an operator with other arguments: the source must use it.
				if _, err := b.ch.QueueDeclare(ep.Queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
					t.Fatal(err)
				}
			}
			m := manager(t, testkit.AMQPURL())
			c := newCollector()
			var ids sync.Map
			var seen atomic.Int32
			c.fail = func(call int, items []ingress.Item) error {
				for _, it := range items {
					ids.Store(fmt.Sprintf("%d/%s", call, string(it.Env.Payload)), it.Env.ID)
				}
				seen.Add(int32(len(items)))
				if call <= 2 {
					return errors.New("redis down")
				}
				return nil
			}
			run(t, source(t, m, ep, 10, func(o *amqp.Config) { o.RetryInPlace = 1 }), c.handle)
			waitBound(t, b, ep)
			b.publish(ep.Exchange, "k", amqp091.Publishing{Body: []byte("same"), Headers: amqp091.Table{"x-delay": int32(1)}})
			items := c.wait(t, 1, 15*time.Second)
			c.mu.Lock()
			calls := c.calls
			c.mu.Unlock()
			if calls < 3 {
				t.Fatalf("handler called %d times, want >= 3", calls)
			}
			var first string
			ids.Range(func(k, v any) bool {
				if first == "" {
					first = v.(string)
				} else if v.(string) != first {
					t.Errorf("content id changed across redelivery: %v vs %s", v, first)
				}
				return true
			})
			if items[0].Env.ID != first || !strings.HasPrefix(first, ep.Queue+"/") {
				t.Errorf("id %q (first %q)", items[0].Env.ID, first)
			}
			b.waitReady(ep.Queue, 0, 5*time.Second)
		})
	}
}

// TestGaveUpBatchKeepsQueueOrder: a batch the handler fails RetryInPlace times goes back
// to the queue together with the deliveries that reached the channel after it, so the
// handler gets all of them again in queue order. (Rejecting only the batch, with
// basic.nack, let the later deliveries through first: on an `order: key` route that
// reorders a key's messages of equal due times.)
func TestGaveUpBatchKeepsQueueOrder(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	c := newCollector()
	firstCall := make(chan struct{})
	later := make(chan struct{})
	c.fail = func(call int, items []ingress.Item) error {
		switch call {
		case 1:
			close(firstCall)
			<-later // the second half is on the channel, behind this batch
			return errors.New("redis down")
		case 2:
			return errors.New("redis down")
		}
		return nil
	}
	run(t, source(t, m, ep, 20, func(o *amqp.Config) { o.RetryInPlace = 2 }), c.handle)
	waitBound(t, b, ep)
	pub := func(from, to int) {
		for i := from; i < to; i++ {
			b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: fmt.Sprintf("m%02d", i),
				Body: []byte{byte(i)}, Headers: amqp091.Table{"x-delay": int32(1000)}})
		}
	}
	pub(0, 5)
	<-firstCall
	pub(5, 10)
	time.Sleep(300 * time.Millisecond) // delivered to the source's channel (prefetch 20)
	close(later)
	items := c.wait(t, 10, 15*time.Second)
	var got []string
	for _, it := range items {
		got = append(got, it.Env.ID)
	}
	for i, id := range got {
		if want := fmt.Sprintf("m%02d", i); id != want {
			t.Fatalf("handled in the order %v, want m00..m09 (queue order)", got)
		}
	}
	b.waitReady(ep.Queue, 0, 5*time.Second)
}

func TestContentIDDistinguishesMessages(t *testing.T) {
	d1 := &amqp091.Delivery{Exchange: "x", RoutingKey: "k", Body: []byte("a"), Headers: amqp091.Table{"x-delay": int32(5), "n": amqp091.Table{"b": 1, "a": 2}}}
	d2 := *d1
	d2.Headers = amqp091.Table{"x-delay": int32(5), "n": amqp091.Table{"a": 2, "b": 1}, amqp.HeaderDeliveryCount: int64(3)}
	d2.Redelivered, d2.DeliveryTag = true, 99
	if amqp.ContentID("q", d1) != amqp.ContentID("q", &d2) {
		t.Error("redelivered copy (x-delivery-count, other tag) got another id")
	}
	d3 := *d1
	d3.Headers = amqp091.Table{"x-delay": int64(5), "n": amqp091.Table{"b": 1, "a": 2}}
	d4 := *d1
	d4.Body = []byte("b")
	for _, d := range []*amqp091.Delivery{&d3, &d4} {
		if amqp.ContentID("q", d1) == amqp.ContentID("q", d) {
			t.Errorf("different message, same id: %+v", d)
		}
	}
	if amqp.ContentID("q", d1) == amqp.ContentID("q2", d1) {
		t.Error("same id on two queues")
	}
}

// TestConnectionCutMidFlight: the connection is cut repeatedly (through a proxy, the
// shared server keeps running) while 3000 messages are consumed by a slow, sometimes
// failing handler. Every message must reach a successful handler call (nothing acked
// early: a message acked without the handler accepting it would be missing), and the
// queue must end empty (everything acked after all).
func TestConnectionCutMidFlight(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	m := manager(t, p.URL(testkit.AMQPURL()))

	const n = 3000
	var mu sync.Mutex
	parked := map[string]int{}
	var calls, failed atomic.Int64
	h := func(ctx context.Context, items []ingress.Item) error {
		calls.Add(1)
		// Slow enough that cuts land while batches are in the handler.
		select {
		case <-time.After(time.Duration(2+rand.IntN(5)) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		if rand.IntN(10) == 0 {
			failed.Add(1)
			return errors.New("injected park failure")
		}
		mu.Lock()
		for _, it := range items {
			parked[it.Env.ID]++
		}
		mu.Unlock()
		return nil
	}
	stop := run(t, source(t, m, ep, 50), h)
	waitBound(t, b, ep)
	for i := range n {
		if err := b.ch.Publish(ep.Exchange, "k", false, false, amqp091.Publishing{
			MessageId: fmt.Sprintf("m-%d", i), Headers: amqp091.Table{"x-delay": int32(1000)}, Body: []byte("x"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	cuts := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		have := len(parked)
		mu.Unlock()
		if have == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d messages parked after %d cuts", have, n, cuts)
		}
		if cuts < 8 {
			time.Sleep(40 * time.Millisecond)
			p.Cut()
			cuts++
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop()
	// Run closed its channel: anything still unacknowledged is back in the queue now.
	time.Sleep(200 * time.Millisecond)
	b.waitReady(ep.Queue, 0, time.Second)
	dups := 0
	for _, c := range parked {
		dups += c - 1
	}
	t.Logf("%d messages, %d cuts, %d handler calls, %d injected failures, %d duplicates (redelivered after park)", n, cuts, calls.Load(), failed.Load(), dups)
	if cuts < 3 {
		t.Fatalf("only %d cuts happened while consuming; the test did not exercise reconnects", cuts)
	}
}

// TestShutdownWhileHandlerBlocks: Run returns promptly on cancel while the handler
// blocks, and the unacknowledged message goes back to the queue.
func TestShutdownWhileHandlerBlocks(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	entered := make(chan struct{}, 1)
	h := func(ctx context.Context, items []ingress.Item) error {
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	stop := run(t, source(t, m, ep, 10), h)
	waitBound(t, b, ep)
	b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: "blocked", Body: []byte("x")})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not called")
	}
	start := time.Now()
	stop()
	if took := time.Since(start); took > 10*time.Second { // the handler returns at once on cancel
		t.Errorf("Run took %v to return", took)
	}
	b.waitReady(ep.Queue, 1, 5*time.Second)
}

// TestExchangeTypeConflictIsPermanent: an existing exchange of another type (as the
// plugin's x-delayed-message exchange would be) stops Run with a permanent error.
func TestExchangeTypeConflictIsPermanent(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	if err := b.ch.ExchangeDeclare(ep.Exchange, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	m := manager(t, testkit.AMQPURL())
	s := source(t, m, ep, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.Run(ctx, func(context.Context, []ingress.Item) error { return nil })
	if !fault.IsPermanent(err) || !strings.Contains(err.Error(), ep.Exchange) {
		t.Fatalf("Run: %v, want a permanent error naming the exchange", err)
	}
}

// TestDirectExchangeWithCatchAllKeyIsRefused: "#" is no wildcard on a direct exchange
// (the plugin's most common x-delayed-type), so New refuses it rather than letting
// RabbitMQ drop every message published with another routing key; a direct exchange
// with one exact key, and "#" on topic, fanout and headers exchanges, are fine.
func TestDirectExchangeWithCatchAllKeyIsRefused(t *testing.T) {
	m, err := amqpconn.New(amqpconn.Config{URL: testkit.AMQPURL(), Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		kind, key string
		ok        bool
	}{{"direct", "", false}, {"direct", "#", false}, {"direct", "invoice", true},
		{"topic", "", true}, {"fanout", "", true}, {"headers", "", true}} {
		_, err := amqp.New(m, amqp.Config{Endpoint: amqp.Endpoint{Queue: "q", Exchange: "x", ExchangeType: c.kind, BindingKey: c.key},
			Rules: ingress.Rules{Route: "r"}})
		if c.ok != (err == nil) || (err != nil && (!fault.IsPermanent(err) || !strings.Contains(err.Error(), "topic or fanout"))) {
			t.Errorf("%s exchange, binding key %q: New error %v, want ok=%v (else a permanent error suggesting topic or fanout)", c.kind, c.key, err, c.ok)
		}
	}
}

// TestQueueDeletedWhileConsuming: the source notices the consumer cancel, redeclares
// and keeps consuming.
func TestQueueDeletedWhileConsuming(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	c := newCollector()
	run(t, source(t, m, ep, 10), c.handle)
	waitBound(t, b, ep)
	if _, err := b.ch.QueueDelete(ep.Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	waitBound(t, b, ep)
	b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: "after-delete"})
	if got := c.wait(t, 1, 10*time.Second); got[0].Env.ID != "after-delete" {
		t.Fatalf("got %q", got[0].Env.ID)
	}
}

// TestAMQPToolsPublish: a message published with rabbitmq-c's amqp-publish (x-delay as
// a long string header) is parsed like the plugin would.
func TestAMQPToolsPublish(t *testing.T) {
	bin, err := exec.LookPath("amqp-publish")
	if err != nil {
		t.Fatal("amqp-publish not installed (apt-get install -y amqp-tools): this interoperability test needs it")
	}
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	c := newCollector()
	run(t, source(t, m, ep, 10), c.handle)
	waitBound(t, b, ep)
	// No trailing "/": amqp-tools would read it as vhost "" (docs/CONTRACT.md §8).
	url := strings.TrimSuffix(testkit.AMQPURL(), "/")
	before := time.Now().UnixMilli()
	out, err := exec.Command(bin, "-u", url, "-e", ep.Exchange, "-r", "tools.key", "-p",
		"-C", "text/plain", "-H", "x-delay: 1500", "-H", "x-message-id: tools-1", "-b", "hello").CombinedOutput()
	if err != nil {
		t.Fatalf("amqp-publish: %v: %s", err, out)
	}
	it := c.wait(t, 1, 10*time.Second)[0]
	after := time.Now().UnixMilli()
	if it.Invalid != "" || it.Env.ID != "tools-1" || string(it.Env.Payload) != "hello" || it.Env.RoutingKey != "tools.key" {
		t.Fatalf("item %+v env %+v", it, it.Env)
	}
	if it.Env.DueAt < before+1500 || it.Env.DueAt > after+1500 {
		t.Errorf("due %d not in [%d, %d]", it.Env.DueAt, before+1500, after+1500)
	}
	if it.Env.AMQP.ContentType != "text/plain" || it.Env.AMQP.DeliveryMode != 2 {
		t.Errorf("properties %+v", it.Env.AMQP)
	}
}

// TestThroughput measures consume + parse + batch ack with a no-op handler (logged, not
// asserted).
func TestThroughput(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	var got atomic.Int64
	var batches atomic.Int64
	all := make(chan struct{})
	const n = 20000
	h := func(_ context.Context, items []ingress.Item) error {
		batches.Add(1)
		if got.Add(int64(len(items))) == n {
			close(all)
		}
		return nil
	}
	// Declare and fill the queue first, then measure draining it.
	if err := b.ch.ExchangeDeclare(ep.Exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ch.QueueDeclare(ep.Queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.ch.QueueBind(ep.Queue, "#", ep.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 200)
	for i := range n {
		if err := b.ch.Publish(ep.Exchange, "k", false, false, amqp091.Publishing{
			MessageId: fmt.Sprintf("t-%d", i), Headers: amqp091.Table{"x-delay": int32(1000)}, Body: body,
		}); err != nil {
			t.Fatal(err)
		}
	}
	b.waitReady(ep.Queue, n, 30*time.Second)
	start := time.Now()
	stop := run(t, source(t, m, ep, 500), h)
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d consumed", got.Load(), n)
	}
	took := time.Since(start)
	stop()
	t.Logf("%d messages consumed, parsed and acked in %v: %.0f msgs/s, %d batches (prefetch 500)", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), batches.Load())
	b.waitReady(ep.Queue, 0, 5*time.Second)
}
