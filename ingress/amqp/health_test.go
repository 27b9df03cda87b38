package amqp_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/ingress/amqp"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

// stateObserver records the ingress events a source reports.
type stateObserver struct {
	observe.Nop
	mu        sync.Mutex
	consuming []bool
}

func (o *stateObserver) IngressConsuming(_ string, c bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.consuming = append(o.consuming, c)
}

func (o *stateObserver) events() []bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.consuming)
}

func waitHealth(t *testing.T, s *amqp.Source, what string, cond func(ingress.Health) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(s.Health()) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s (health %+v)", what, s.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHealthLagAndQueueDeleted: the source reports consuming with the queue's ready
// messages as lag; when the queue is deleted under it the server cancels the consumer,
// the source reports not consuming, declares the queue again and consumes again (one
// rebuild), and a message published afterwards arrives.
func TestHealthLagAndQueueDeleted(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	m := manager(t, testkit.AMQPURL())
	obs := &stateObserver{}
	src := source(t, m, ep, 10, func(o *amqp.Config) { o.Observer = obs; o.LagPeriod = 50 * time.Millisecond })
	if h := src.Health(); h.State != ingress.StateStarting || h.Lag != -1 {
		t.Errorf("before Run: %+v, want starting with lag -1", h)
	}
	gate := make(chan struct{})
	c := newCollector()
	stop := run(t, src, func(ctx context.Context, items []ingress.Item) error {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		return c.handle(ctx, items)
	})
	waitBound(t, b, ep)
	waitHealth(t, src, "consuming with lag 0", func(h ingress.Health) bool { return h.State == ingress.StateConsuming && h.Lag == 0 })

	// The handler holds the first batch (prefetch 10): 20 of 30 stay ready in the queue.
	for i := range 30 {
		b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: fmt.Sprintf("m-%d", i)})
	}
	waitHealth(t, src, "lag 20 (ready messages)", func(h ingress.Health) bool { return h.Lag == 20 })
	close(gate)
	c.wait(t, 30, 10*time.Second)
	waitHealth(t, src, "lag 0 after the handler drained the queue", func(h ingress.Health) bool { return h.Lag == 0 })

	if _, err := b.ch.QueueDelete(ep.Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, src, "consuming again after one rebuild", func(h ingress.Health) bool {
		return h.State == ingress.StateConsuming && h.Rebuilds == 1
	})
	if ev := obs.events(); len(ev) < 4 || !slices.Equal(ev[:2], []bool{false, true}) || ev[len(ev)-2] || !ev[len(ev)-1] {
		t.Errorf("IngressConsuming events %v: want false (start), true, then false while the queue was gone, true again", ev)
	}
	waitBound(t, b, ep)
	b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: "after-delete"})
	c.wait(t, 31, 10*time.Second)
	stop()
	if h := src.Health(); h.State != ingress.StateStopped {
		t.Errorf("after Run returned: %q, want stopped", h.State)
	}
}

// TestHealthUnreachableWhileBrokerDown: with the connection cut and new ones refused,
// the source reports unreachable; when the broker is back it consumes again.
func TestHealthUnreachableWhileBrokerDown(t *testing.T) {
	b := newBroker(t)
	ep := route(t, b)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	m := manager(t, p.URL(testkit.AMQPURL()))
	src := source(t, m, ep, 10)
	c := newCollector()
	run(t, src, c.handle)
	waitHealth(t, src, "consuming", func(h ingress.Health) bool { return h.State == ingress.StateConsuming })
	p.SetDown(true)
	p.Cut()
	waitHealth(t, src, "unreachable", func(h ingress.Health) bool { return h.State == ingress.StateUnreachable })
	p.SetDown(false)
	waitHealth(t, src, "consuming again", func(h ingress.Health) bool { return h.State == ingress.StateConsuming })
	b.publish(ep.Exchange, "k", amqp091.Publishing{MessageId: "after-outage"})
	c.wait(t, 1, 10*time.Second)
}
