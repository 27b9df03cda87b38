package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

// rabbit is the test's own connection to the RabbitMQ server on 127.0.0.1:5672: it
// declares the targets a user would have, publishes like a plugin user's producer and
// consumes what the bridge republishes. Every exchange and queue it declares, or that
// the test names with drop, is deleted at cleanup (after the bridge stopped, when the
// bridge was started later in the test).
type rabbit struct{ *testkit.Rabbit }

func newRabbit(t *testing.T) *rabbit { return &rabbit{testkit.DialRabbit(t)} }

// drop deletes the named exchanges and queues at cleanup. Register it before starting
// the bridge that declares them, so it runs after the bridge stopped.
func (r *rabbit) drop(exchanges []string, queues []string) { r.DeleteAtCleanup(queues, exchanges) }

// exchange declares a durable exchange of kind, deleted at cleanup.
func (r *rabbit) exchange(base, kind string) string {
	r.T.Helper()
	name := testkit.Uniq(r.T, base)
	ch := r.Channel()
	defer ch.Close()
	if err := ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		r.T.Fatalf("declare exchange %s: %v", name, err)
	}
	r.drop([]string{name}, nil)
	return name
}

// queue declares a durable queue bound to exchange with key, deleted at cleanup.
func (r *rabbit) queue(base, exchange, key string) string {
	r.T.Helper()
	name := testkit.Uniq(r.T, base)
	ch := r.Channel()
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		r.T.Fatalf("declare queue %s: %v", name, err)
	}
	r.drop(nil, []string{name})
	if err := ch.QueueBind(name, key, exchange, false, nil); err != nil {
		r.T.Fatalf("bind %s to %s: %v", name, exchange, err)
	}
	return name
}

// waitConsumer waits until queue exists and has a consumer (the bridge's source).
func (r *rabbit) waitConsumer(queue string, limit time.Duration) {
	r.T.Helper()
	deadline := time.Now().Add(limit)
	for {
		// A failed passive declare closes its channel: one channel per attempt.
		ch := r.Channel()
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		_ = ch.Close()
		if err == nil && q.Consumers > 0 {
			return
		}
		if time.Now().After(deadline) {
			r.T.Fatalf("queue %s has no consumer after %s (last error %v)", queue, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publisher publishes on one confirm channel and waits for every confirm.
type publisher struct {
	t  testing.TB
	ch *amqp091.Channel
}

func (r *rabbit) publisher() *publisher {
	r.T.Helper()
	ch := r.Channel()
	if err := ch.Confirm(false); err != nil {
		r.T.Fatalf("confirm.select: %v", err)
	}
	r.T.Cleanup(func() { _ = ch.Close() })
	return &publisher{t: r.T, ch: ch}
}

// publish sends msgs to exchange with routing key key and returns when the broker
// confirmed them all; at[i] is when message i was handed to the broker.
func (p *publisher) publish(exchange string, key func(i int) string, msgs []amqp091.Publishing) (at []time.Time) {
	p.t.Helper()
	at, confirmed := p.publishAsync(exchange, key, msgs)
	confirmed()
	return at
}

// publishAsync hands msgs to the broker (exchange, routing key key) without waiting
// for their confirms: at[i] is when message i was handed over, and confirmed waits
// (up to 30 s) until the broker confirmed them all, failing the test otherwise. A
// producer that must keep a pace (a storm within 1 s) waits for its confirms after the
// storm: waiting per burst would put the broker's disk sync on the storm's clock.
func (p *publisher) publishAsync(exchange string, key func(i int) string, msgs []amqp091.Publishing) (at []time.Time, confirmed func()) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dcs := make([]*amqp091.DeferredConfirmation, 0, len(msgs))
	at = make([]time.Time, len(msgs))
	for i, m := range msgs {
		at[i] = time.Now()
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key(i), false, false, m)
		if err != nil {
			p.t.Fatalf("publish %d to %s: %v", i, exchange, err)
		}
		dcs = append(dcs, dc)
	}
	return at, func() {
		p.t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i, dc := range dcs {
			ok, err := dc.WaitContext(ctx)
			if err != nil || !ok {
				p.t.Fatalf("publish %d to %s: confirm %v %v", i, exchange, ok, err)
			}
		}
	}
}

// amqpArrival is one delivery consumed from a target queue and when it arrived.
type amqpArrival struct {
	d  amqp091.Delivery
	at time.Time
}

func (a amqpArrival) id() string {
	s, _ := a.d.Headers["x-message-id"].(string)
	return s
}

// amqpCollector consumes a queue (auto-ack) in the background and records every
// delivery.
type amqpCollector struct {
	mu   sync.Mutex
	got  []amqpArrival
	done chan struct{}
}

func (r *rabbit) collect(queue string) *amqpCollector {
	r.T.Helper()
	ch := r.Channel()
	in, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		r.T.Fatalf("consume %s: %v", queue, err)
	}
	c := &amqpCollector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for d := range in {
			a := amqpArrival{d: d, at: time.Now()}
			c.mu.Lock()
			c.got = append(c.got, a)
			c.mu.Unlock()
		}
	}()
	r.T.Cleanup(func() { _ = ch.Close(); <-c.done })
	return c
}

func (c *amqpCollector) snapshot() []amqpArrival {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]amqpArrival(nil), c.got...)
}

func (c *amqpCollector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// byID returns the arrivals by x-message-id and the number of duplicates.
func (c *amqpCollector) byID() (map[string]amqpArrival, int) {
	out := map[string]amqpArrival{}
	dups := 0
	for _, a := range c.snapshot() {
		if _, ok := out[a.id()]; ok {
			dups++
			continue
		}
		out[a.id()] = a
	}
	return out, dups
}

// amqpRoute renders one route from an AMQP delay exchange/queue.
func amqpFrom(queue, exchange, kind string) string {
	return fmt.Sprintf(`{ amqp: { queue: %q, exchange: %q, exchange_type: %s, binding_key: "#" } }`, queue, exchange, kind)
}

// deadList is the answer of GET /v1/dead.
type deadList struct {
	Messages []struct {
		ID      string            `json:"id"`
		Reason  string            `json:"reason"`
		Route   string            `json:"route"`
		Attempt int               `json:"attempt"`
		Source  string            `json:"source"`
		Headers map[string]string `json:"headers"`
	} `json:"messages"`
}

// amqpTool returns the path of an amqp-tools program, failing (never skipping) with
// what to install when it is missing.
func amqpTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH: install amqp-tools (apt-get install -y amqp-tools; .ci/run does): %v", name, err)
	}
	return p
}

// toolsURL is the server URL for amqp-tools, which read a trailing "/" as vhost ""
// (docs/CONTRACT.md §8).
func toolsURL() string { return strings.TrimSuffix(testkit.AMQPURL(), "/") }

// runTool runs a short-lived command (an amqp-tools program, or the bridge binary in a
// test that expects it to refuse its configuration) with a deadline and returns its
// output; callers judge the exit status. A data race report in the output fails the
// test whatever the status.
func runTool(t *testing.T, limit time.Duration, bin string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("%s did not finish within %s", bin, limit))
	}
	if bytes.Contains(out, []byte(raceMarker)) {
		t.Errorf("%s: data race reported:\n%s", bin, out)
	}
	return out, err
}
