package amqp_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/ingress/amqp"
	"github.com/delaybridge/delay-bridge/testkit"
)

// logBuffer collects a source's log lines.
type logBuffer struct{ testkit.Buffer }

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// distinct is the number of distinct ids among items.
func distinct(items []ingress.Item) int { return len(byID(items)) }

// noStall fails when the source ever left consuming after it first consumed, or
// was rebuilt.
func noStall(t *testing.T, what string, src *amqp.Source, obs *stateObserver, logs *logBuffer) {
	t.Helper()
	ev := obs.events()
	if h := src.Health(); h.State != ingress.StateConsuming || h.Rebuilds != 0 || len(ev) != 2 ||
		strings.Contains(logs.String(), "state=stalled") {
		t.Fatalf("%s: health %+v, IngressConsuming events %v, want consuming throughout and no rebuild; log:\n%s",
			what, h, ev, logs.String())
	}
}

// TestStalledConsumerIsRebuilt: a registered consumer whose deliveries stop arriving
// (injected fault: the session stops reading its deliveries while the channel stays open
// and the consumer registered — no real-server way wedges a consumer like that) while
// its queue has ready messages is reported stalled (info log, IngressConsuming false),
// rebuilt (Health().Rebuilds), and then every message is consumed.
func TestStalledConsumerIsRebuilt(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	obs, logs := &stateObserver{}, &logBuffer{}
	src := source(t, m, ep, 10, func(o *amqp.Config) {
		o.Observer, o.Logger, o.StallTimeout = obs, logs.logger(), 2*time.Second
	})
	c := newCollector()
	run(t, src, c.handle)
	waitBound(t, b, ep)
	waitHealth(t, src, "consuming", func(h ingress.Health) bool { return h.State == ingress.StateConsuming })
	for i := range 5 {
		b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: fmt.Sprintf("before-%d", i)})
	}
	c.wait(t, 5, 10*time.Second)

	src.StopDeliveries()
	for i := range 30 {
		b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: fmt.Sprintf("wedged-%d", i)})
	}
	waitHealth(t, src, "rebuilt once and consuming", func(h ingress.Health) bool {
		return h.Rebuilds == 1 && h.State == ingress.StateConsuming
	})
	deadline := time.Now().Add(30 * time.Second)
	for distinct(c.wait(t, 35, 30*time.Second)) < 35 {
		if time.Now().After(deadline) {
			t.Fatalf("%d distinct messages consumed, want 35", distinct(c.wait(t, 0, time.Second)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	log := logs.String()
	for _, want := range []string{"state=stalled", "amqp ingress watchdog: rebuilding the consumer", "received nothing for"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "state=stalled"); n != 1 {
		t.Errorf("stalled logged %d times, want once:\n%s", n, log)
	}
	ev := obs.events()
	// false (start), true, false (stalled; joining while rebuilt reports false again), true.
	if len(ev) < 4 || ev[0] || !ev[1] || slices.Contains(ev[2:len(ev)-1], true) || !ev[len(ev)-1] {
		t.Errorf("IngressConsuming events %v: want false (start), true, false while stalled and rebuilt, true", ev)
	}
	b.waitReady(ep.Queue, 0, 10*time.Second)
	if h := src.Health(); h.Rebuilds != 1 || h.State != ingress.StateConsuming {
		t.Errorf("after draining: %+v, want consuming with one rebuild", h)
	}
}

// TestSlowHandlerIsNoStall: while the handler holds a batch (Redis slow or down) no
// delivery arrives (prefetch exhausted) and the queue has ready messages, for several
// stall timeouts: the consumer stays consuming and is not rebuilt.
func TestSlowHandlerIsNoStall(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	obs, logs := &stateObserver{}, &logBuffer{}
	const stall = time.Second
	src := source(t, m, ep, 10, func(o *amqp.Config) {
		o.Observer, o.Logger, o.StallTimeout = obs, logs.logger(), stall
	})
	gate := make(chan struct{})
	c := newCollector()
	run(t, src, func(ctx context.Context, items []ingress.Item) error {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		return c.handle(ctx, items)
	})
	waitBound(t, b, ep)
	waitHealth(t, src, "consuming", func(h ingress.Health) bool { return h.State == ingress.StateConsuming })
	for i := range 30 {
		b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: fmt.Sprintf("m-%d", i)})
	}
	waitHealth(t, src, "lag 20", func(h ingress.Health) bool { return h.Lag == 20 })
	time.Sleep(4 * stall) // a stall would show within this; a slow machine only sees less
	noStall(t, "handler held a batch for 4 stall timeouts", src, obs, logs)
	close(gate)
	c.wait(t, 30, 10*time.Second)
	noStall(t, "after the handler drained the queue", src, obs, logs)
}

// TestStandbyOfSingleActiveConsumerIsNoStall: on a single-active-consumer queue whose
// active consumer (another client) takes messages slowly, the source waits as standby
// and receives nothing while the queue has ready messages; the falling depth shows the
// queue is moving, so it is not stalled and not rebuilt.
func TestStandbyOfSingleActiveConsumerIsNoStall(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	if _, err := b.ch.QueueDeclare(ep.Queue, true, false, false, false, amqp091.Table{"x-single-active-consumer": true}); err != nil {
		t.Fatal(err)
	}
	active := b.Channel()
	if err := active.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := active.Consume(ep.Queue, "active", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := manager(t, testkit.AMQPURL())
	obs, logs := &stateObserver{}, &logBuffer{}
	const stall = time.Second
	src := source(t, m, ep, 10, func(o *amqp.Config) {
		o.Observer, o.Logger, o.StallTimeout = obs, logs.logger(), stall
	})
	c := newCollector()
	run(t, src, c.handle)
	waitBound(t, b, ep)
	waitHealth(t, src, "consuming", func(h ingress.Health) bool { return h.State == ingress.StateConsuming })
	const n = 150
	for i := range n {
		b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: fmt.Sprintf("m-%d", i)})
	}
	// The active consumer takes one message every 30ms: about 4.5s, several stall
	// timeouts, with ready messages all along.
	maxLag := int64(0)
	for i := range n {
		maxLag = max(maxLag, src.Health().Lag)
		select {
		case d := <-deliveries:
			time.Sleep(30 * time.Millisecond)
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("active consumer got %d of %d", i, n)
		}
	}
	if maxLag < 10 {
		t.Fatalf("the source never saw ready messages while standby (max lag %d): the test proves nothing", maxLag)
	}
	noStall(t, "standby while the active consumer drained the queue", src, obs, logs)
	if got := len(c.wait(t, 0, time.Second)); got != 0 {
		t.Errorf("standby consumed %d messages, want 0", got)
	}
}
