package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

func (c *counts) SideBacklog(_, target string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m["side_backlog "+target] = n
}

// TestDeadLetterCopiesOffTheHandler: with the dead-letter exchange's connection frozen
// (a TCP proxy in front of RabbitMQ forwards nothing), the ingress handler buries
// invalid messages and returns without waiting for their copies — the dead letters are
// in Redis, the copies wait in the backlog (gauge) — and a valid message of the same
// batch parks; after the thaw every copy arrives and the backlog drains. Before the
// copies had their own queue the handler published them itself, waited out the
// publish timeout and gave them up.
func TestDeadLetterCopiesOffTheHandler(t *testing.T) {
	rb := testkit.DialRabbit(t)
	ex, q := testkit.Uniq(t, "app-dlx"), testkit.Uniq(t, "app-dlq")
	ch := rb.FanoutQueue(ex, q)
	proxy := tcpproxy.Start(t, "127.0.0.1:5672")
	tb := startBridge(t, "dead_letter.amqp.exchange="+ex, "amqp.url="+proxy.URL(testkit.AMQPURL()))

	proxy.Freeze()
	batch := []ingress.Item{item(t, "a", "ok", "x-message-id", "d-ok", "x-delay", "3600000")}
	for i := range 3 {
		batch = append(batch, item(t, "a", "bad", "x-message-id", fmt.Sprintf("d-bad-%d", i), "x-delay", "soon"))
	}
	handled := make(chan error, 1)
	go func() { handled <- tb.handle(context.Background(), batch) }()
	select {
	case err := <-handled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the ingress handler waited for the frozen dead-letter target")
	}
	if st := tb.state(t, "d-ok"); st != "pending" {
		t.Errorf("d-ok is %q, want pending", st)
	}
	for i := range 3 {
		if st := tb.state(t, fmt.Sprintf("d-bad-%d", i)); st != "dead" {
			t.Errorf("d-bad-%d is %q, want dead", i, st)
		}
	}
	if n := tb.obs.get("side_backlog amqp"); n != 3 {
		t.Errorf("dead-letter copies backlog while frozen = %d, want 3", n)
	}
	proxy.Thaw()

	deliveries, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for len(seen) < 3 {
		select {
		case d := <-deliveries:
			seen[fmt.Sprint(d.Headers["x-message-id"])] = true
		case <-deadline:
			t.Fatalf("copies after the thaw: %v, want d-bad-0..2", seen)
		}
	}
	waitUntil(t, "the backlog to drain", 30*time.Second, func() bool { return tb.obs.get("side_backlog amqp") == 0 })
}
