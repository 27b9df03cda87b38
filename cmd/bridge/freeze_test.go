package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/internal/amqpconn/tcpproxy"
	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// TestBrokerFreezeAroundShutdownNoDuplicates measures duplicates when the target
// broker stalls: two bridges share a route; 1500 messages come due together while the
// target broker is frozen (a proxy that stops forwarding both ways, as a SIGSTOPed
// broker: what was written waits and is applied after the thaw); one bridge is stopped
// (SIGTERM) during the freeze; the freeze lasts 20 s. Every message must arrive, and
// fewer than 1 % of them twice (a publish whose outcome is unknown must not be re-sent
// while the first write can still complete).
//
//	go test -count=1 -run TestBrokerFreezeAroundShutdownNoDuplicates -v ./cmd/bridge/
func TestBrokerFreezeAroundShutdownNoDuplicates(t *testing.T) {
	for _, broker := range []string{"kafka", "amqp"} {
		t.Run(broker, func(t *testing.T) { freezeRun(t, broker) })
	}
}

const (
	freezeMessages = 1500
	freezeFor      = 20 * time.Second
)

func freezeRun(t *testing.T, broker string) {
	rds := testkit.StartRedis(t)
	var kaddr string
	var frozen *tcpproxy.Proxy
	set := []string{"redis.addrs=" + rds.Addr(), "shards=8", "prefix=" + testkit.Uniq(t, "frz"),
		"routes.0.name=r", "routes.0.from.kafka.topic=r.delay"}
	var count func(ctx context.Context) (map[string]int, error)
	switch broker {
	case "kafka":
		// Ingress and egress both through the proxy: the whole broker stalls.
		kaddr, _, frozen = testkit.StartKafkaBehindProxy(t, 4, "r.delay", "r.out")
		set = append(set, "kafka.brokers="+kaddr, "routes.0.to.kafka.topic=r.out")
		count = kafkaCounter(t, kaddr, "r.out")
	case "amqp":
		kaddr, _ = testkit.StartKafka(t, 4, "r.delay")
		frozen = tcpproxy.Start(t, "127.0.0.1:5672")
		ex := testkit.Uniq(t, "frz-ex")
		set = append(set, "kafka.brokers="+kaddr, "amqp.url="+frozen.URL(testkit.AMQPURL()),
			"routes.0.to.amqp.exchange="+ex, "routes.0.to.amqp.declare=true")
		count = amqpCounter(t, ex)
	}

	type instance struct {
		cancel context.CancelFunc
		done   chan error
	}
	start := func(name string) *instance {
		port := strconv.Itoa(testkit.FreePort(t))
		cfg, err := config.Load(config.LoadOptions{Env: []string{}, Set: append(set, "instance="+name, "admin.listen=127.0.0.1:"+port)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		in := &instance{cancel: cancel, done: make(chan error, 1)}
		go func() { in.done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
		t.Cleanup(func() { cancel(); <-in.done })
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := http.Get("http://127.0.0.1:" + port + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return in
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready after 60s", name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	a, _ := start("frz-a"), start("frz-b")

	prod, err := kgo.NewClient(kgo.SeedBrokers(kaddr))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// Due over 3 s (500 a second); the freeze starts in the middle of that stream, so
	// writes are on the wire when it begins and the rest are written into it.
	due := time.Now().Add(5 * time.Second)
	recs := make([]*kgo.Record, freezeMessages)
	for i := range recs {
		deliverAt := []byte(strconv.FormatInt(due.UnixMilli()+int64(i*3000/freezeMessages), 10))
		recs[i] = &kgo.Record{Topic: "r.delay", Key: []byte(strconv.Itoa(i % 50)), Value: []byte(strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: "x-deliver-at", Value: deliverAt}, {Key: "x-message-id", Value: []byte("f-" + strconv.Itoa(i))}}}
	}
	if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	time.Sleep(time.Until(due.Add(1500 * time.Millisecond)))
	frozen.Freeze()
	t.Logf("%s frozen 1.5 s into the 3 s during which %d messages come due", broker, freezeMessages)
	time.Sleep(2500 * time.Millisecond)
	a.cancel() // SIGTERM to one bridge while its publishes hang
	time.Sleep(freezeFor - 2500*time.Millisecond)
	frozen.Thaw()
	t.Logf("thawed after %v", freezeFor)
	select {
	case err := <-a.done:
		a.done <- err
		if err != nil {
			t.Errorf("stopped bridge: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the stopped bridge did not finish shutting down 90 s after the thaw")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var seen map[string]int
	for {
		seen, err = count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) >= freezeMessages || ctx.Err() != nil {
			break
		}
	}
	// Whatever is still to come (a re-send after a lease) shows up within the lease.
	time.Sleep(5 * time.Second)
	if seen, err = count(ctx); err != nil {
		t.Fatal(err)
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("%s: %d of %d messages arrived, %d duplicates (%.2f %%) under a %v freeze around a shutdown",
		broker, len(seen), freezeMessages, dups, 100*float64(dups)/freezeMessages, freezeFor)
	if len(seen) != freezeMessages {
		t.Errorf("%d of %d messages arrived", len(seen), freezeMessages)
	}
	if dups*100 >= freezeMessages {
		t.Errorf("%d duplicates: 1 %% or more of %d in flight", dups, freezeMessages)
	}
}

// kafkaCounter returns a function that reads what arrived on topic so far and counts
// each x-message-id (the consumer keeps its position between calls).
func kafkaCounter(t *testing.T, addr, topic string) func(context.Context) (map[string]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	seen := map[string]int{}
	return func(ctx context.Context) (map[string]int, error) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "x-message-id" {
					seen[string(h.Value)]++
				}
			}
		})
		return seen, nil
	}
}

// amqpCounter declares a queue bound to exchange (declared here too, as the bridge
// would) on a direct connection and returns a function counting each x-message-id
// delivered so far.
func amqpCounter(t *testing.T, exchange string) func(context.Context) (map[string]int, error) {
	conn, err := amqp.Dial(testkit.AMQPURL())
	if err != nil {
		t.Fatalf("RabbitMQ at %s: %v", testkit.AMQPURL(), err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	return func(ctx context.Context) (map[string]int, error) {
		for {
			select {
			case d := <-deliveries:
				id, _ := d.Headers["x-message-id"].(string)
				mu.Lock()
				seen[id]++
				mu.Unlock()
			case <-time.After(500 * time.Millisecond):
				return seen, nil
			case <-ctx.Done():
				return seen, nil
			}
		}
	}
}
