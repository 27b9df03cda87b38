package amqp_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/egress/amqp"
	"github.com/delaybridge/delay-bridge/ingress"
	ingressamqp "github.com/delaybridge/delay-bridge/ingress/amqp"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
)

// TestDropInPathWithAMQPTools is the plugin user's path without the scheduler in between:
// a third-party client (rabbitmq-c's amqp-publish) publishes to the delay exchange with
// x-delay, the AMQP source consumes it, the AMQP sink republishes it to the target
// exchange, and amqp-consume reads it there. Headers are checked on a second message
// with the Go client.
func TestDropInPathWithAMQPTools(t *testing.T) {
	publishBin, err1 := exec.LookPath("amqp-publish")
	consumeBin, err2 := exec.LookPath("amqp-consume")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("amqp-tools not installed (apt-get install -y amqp-tools): %v", err)
	}
	b := newBroker(t)
	target, targetQ := b.target(true)
	from := config.AMQPEndpoint{Queue: testkit.Uniq(t, "dropin-q"), Exchange: testkit.Uniq(t, "dropin-x")}
	t.Cleanup(func() {
		ch := b.Channel()
		_, _ = ch.QueueDelete(from.Queue, false, false, false)
		_ = ch.ExchangeDelete(from.Exchange, false, false)
		_ = ch.Close()
	})
	in := manager(t, testkit.AMQPURL())
	out := manager(t, testkit.AMQPURL())
	sink := newSink(t, out, map[string]amqp.Route{"billing": {Exchange: target}}, amqp.Options{})
	src, err := ingressamqp.New(in, ingressamqp.Config{Endpoint: ingressamqp.Endpoint{Queue: from.Queue, Exchange: from.Exchange},
		Rules: ingress.Rules{Route: "billing", MaxDelay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(ctx context.Context, items []ingress.Item) error {
			envs := make([]*envelope.Envelope, len(items))
			for i, it := range items {
				envs[i] = it.Env
			}
			return errors.Join(sink.Publish(ctx, envs)...)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// Wait for the source to declare and bind its queue.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch := b.Channel()
		q, err := ch.QueueDeclarePassive(from.Queue, true, false, false, false, nil)
		_ = ch.Close()
		if err == nil && q.Consumers > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("source did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}

	url := strings.TrimSuffix(testkit.AMQPURL(), "/") // amqp-tools read a trailing "/" as vhost ""
	pub := func(id, body string) {
		t.Helper()
		out, err := exec.Command(publishBin, "-u", url, "-e", from.Exchange, "-r", "invoice.eu", "-p", "-C", "text/plain",
			"-H", "x-delay: 1500", "-H", "x-message-id: "+id, "-H", "tenant: acme", "-b", body).CombinedOutput()
		if err != nil {
			t.Fatalf("amqp-publish: %v: %s", err, out)
		}
	}
	pub("tools-1", "hello through the bridge")
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	got, err := exec.CommandContext(cctx, consumeBin, "-u", url, "-q", targetQ, "-c", "1", "cat").CombinedOutput()
	if err != nil || string(got) != "hello through the bridge" {
		t.Fatalf("amqp-consume: %v: %q", err, got)
	}

	pub("tools-2", "second")
	d := b.read(targetQ).next(1, 10*time.Second)[0]
	want := map[string]any{"x-delay": int32(-1500), "tenant": "acme", envelope.HeaderMessageID: "tools-2",
		envelope.HeaderSource: from.Queue, envelope.HeaderAttempt: int64(1)}
	for k, v := range want {
		if d.Headers[k] != v {
			t.Errorf("header %s = %T %v, want %T %v", k, d.Headers[k], d.Headers[k], v, v)
		}
	}
	if due, _ := d.Headers[envelope.HeaderDueAt].(int64); due <= 0 {
		t.Errorf("x-delay-due-at = %v", d.Headers[envelope.HeaderDueAt])
	}
	if d.RoutingKey != "invoice.eu" || d.ContentType != "text/plain" || d.DeliveryMode != 2 || string(d.Body) != "second" {
		t.Errorf("key %q type %q mode %d body %q", d.RoutingKey, d.ContentType, d.DeliveryMode, d.Body)
	}
}
