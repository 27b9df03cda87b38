package egress_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/egress"
	amqpout "github.com/delaybridge/delay-bridge/egress/amqp"
	kafkaout "github.com/delaybridge/delay-bridge/egress/kafka"
	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

// sideRecorder keeps what a side publisher reports.
type sideRecorder struct {
	observe.Nop
	mu                       sync.Mutex
	backlog                  map[string]int
	published, failed, drops map[string]int // by target; drops by target|reason
}

func newSideRecorder() *sideRecorder {
	return &sideRecorder{backlog: map[string]int{}, published: map[string]int{}, failed: map[string]int{}, drops: map[string]int{}}
}

func (r *sideRecorder) SideBacklog(_, t string, n int) { r.mu.Lock(); r.backlog[t] = n; r.mu.Unlock() }
func (r *sideRecorder) SidePublished(_, t string, n int) {
	r.mu.Lock()
	r.published[t] += n
	r.mu.Unlock()
}
func (r *sideRecorder) SideFailed(_, t string, n int) { r.mu.Lock(); r.failed[t] += n; r.mu.Unlock() }
func (r *sideRecorder) SideDropped(_, t, reason string, n int) {
	r.mu.Lock()
	r.drops[t+"|"+reason] += n
	r.mu.Unlock()
}
func (r *sideRecorder) get(m map[string]int, k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[k]
}

func deadEnvs(from, n int) []*envelope.Envelope {
	out := make([]*envelope.Envelope, n)
	for i := range out {
		out[i] = &envelope.Envelope{ID: fmt.Sprintf("dead-%d", from+i), Route: "r", SourceBroker: envelope.BrokerKafka,
			Source: "r.delay", DueAt: time.Now().UnixMilli(), Payload: []byte("p"), Reason: "bad_delay"}
	}
	return out
}

func waitSide(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// offerAll offers 50 batches of 10 on another goroutine and fails the test if the
// offers do not all return while the target cannot take anything: Offer must never
// wait for a broker.
func offerAll(t *testing.T, p *egress.SidePublisher) {
	t.Helper()
	offered := make(chan struct{})
	go func() {
		defer close(offered)
		for i := range 50 {
			p.Offer(deadEnvs(i*10, 10))
		}
	}()
	select {
	case <-offered:
	case <-time.After(30 * time.Second):
		t.Fatal("Offer blocked while the target could not take anything")
	}
}

// TestSideCopiesRabbitMQFrozen: dead-letter copies to a RabbitMQ exchange whose
// connection is frozen (a TCP proxy forwards nothing, as if the broker stalled): every
// Offer returns at once, the backlog shows all 500 waiting and failed attempts are
// counted; after the thaw every copy arrives in a queue bound to the exchange and the
// backlog drains to 0.
func TestSideCopiesRabbitMQFrozen(t *testing.T) {
	rb := testkit.DialRabbit(t)
	ex, q := testkit.Uniq(t, "side-dlx"), testkit.Uniq(t, "side-dlq")
	ch := rb.FanoutQueue(ex, q)
	proxy := tcpproxy.Start(t, "127.0.0.1:5672")
	m, err := amqpconn.New(amqpconn.Config{URL: proxy.URL(testkit.AMQPURL()), Name: "side test", Heartbeat: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dl, err := amqpout.NewDeadLetter(context.Background(), m, ex, amqpout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	obs := newSideRecorder()
	p, err := egress.NewSidePublisher(egress.SideOptions{Queue: observe.SideQueueDeadLetters, Targets: map[string]egress.SideTarget{"amqp": dl},
		PublishTimeout: 500 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Stop()

	proxy.Freeze()
	offerAll(t, p)
	if n := obs.get(obs.backlog, "amqp"); n != 500 || p.Backlog("amqp") != 500 {
		t.Fatalf("backlog while frozen: gauge %d, Backlog %d; want 500", n, p.Backlog("amqp"))
	}
	waitSide(t, "a failed attempt while frozen", 30*time.Second, func() bool { return obs.get(obs.failed, "amqp") > 0 })
	proxy.Thaw()

	deliveries, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for len(seen) < 500 {
		select {
		case d := <-deliveries:
			seen[fmt.Sprint(d.Headers["x-message-id"])] = true
		case <-deadline:
			t.Fatalf("%d of 500 copies arrived after the thaw (backlog %d)", len(seen), p.Backlog("amqp"))
		}
	}
	waitSide(t, "the backlog to drain", 30*time.Second, func() bool { return obs.get(obs.backlog, "amqp") == 0 })
	if n := obs.get(obs.published, "amqp"); n < 500 {
		t.Errorf("published counted %d, want at least 500", n)
	}
}

// gateTarget holds every publish until its gate opens (or the call's context ends);
// ids listed in refuse are refused permanently.
type gateTarget struct {
	gate   chan struct{}
	refuse map[string]bool
}

func (g *gateTarget) Publish(ctx context.Context, envs []*envelope.Envelope) []error {
	errs := make([]error, len(envs))
	select {
	case <-g.gate:
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	for i, e := range envs {
		if g.refuse[e.ID] {
			errs[i] = fault.Permanent(errors.New("too large"))
		}
	}
	return errs
}

// TestSideCopiesBoundedDropsCounted: the backlog is bounded; what does not fit is
// dropped, counted (reason full) and logged; a copy the target refuses for good is
// dropped (reason permanent); what is still queued at Stop is dropped (reason shutdown),
// and so is an offer after Stop. Nothing blocks meanwhile.
func TestSideCopiesBoundedDropsCounted(t *testing.T) {
	logs := &testkit.Buffer{}
	obs := newSideRecorder()
	g := &gateTarget{gate: make(chan struct{}), refuse: map[string]bool{"dead-3": true}}
	p, err := egress.NewSidePublisher(egress.SideOptions{Queue: observe.SideQueueDeadLetters, Targets: map[string]egress.SideTarget{"t": g},
		MaxBacklog: 10, PublishTimeout: time.Hour, StopGrace: 100 * time.Millisecond, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	for i := range 25 {
		p.Offer(deadEnvs(i, 1))
	}
	if n := obs.get(obs.drops, "t|full"); n != 15 {
		t.Errorf("dropped (full) = %d, want 15 of 25 offered with a backlog of 10", n)
	}
	if !strings.Contains(logs.String(), "side copies dropped") {
		t.Errorf("no log line for the drop:\n%s", logs.String())
	}
	close(g.gate) // the target takes everything but dead-3
	waitSide(t, "the backlog to drain", 10*time.Second, func() bool { return obs.get(obs.backlog, "t") == 0 })
	if pub, perm := obs.get(obs.published, "t"), obs.get(obs.drops, "t|permanent"); pub != 9 || perm != 1 {
		t.Errorf("published %d, dropped as refused %d; want 9 and 1", pub, perm)
	}

	g2 := &gateTarget{gate: make(chan struct{})}
	obs2 := newSideRecorder()
	p2, err := egress.NewSidePublisher(egress.SideOptions{Queue: observe.SideQueueDeadLetters, Targets: map[string]egress.SideTarget{"t": g2},
		StopGrace: 100 * time.Millisecond, Observer: obs2})
	if err != nil {
		t.Fatal(err)
	}
	p2.Start()
	p2.Offer(deadEnvs(0, 7))
	p.Stop()
	p2.Stop()
	p2.Offer(deadEnvs(7, 2))
	if n := obs2.get(obs2.drops, "t|shutdown"); n != 9 {
		t.Errorf("dropped at shutdown = %d, want 7 queued + 2 offered after Stop", n)
	}
}

// TestSideCopiesKafkaBrokerDown: copies to a dead-letter topic while its broker is down
// (the in-process Kafka broker stopped) are queued and retried, never waited for by
// Offer; once a broker answers on the same address again every copy arrives there.
func TestSideCopiesKafkaBrokerDown(t *testing.T) {
	port := testkit.FreePort(t)
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, "side.dlq"))
		if err != nil {
			t.Fatalf("start kfake: %v", err)
		}
		return c
	}
	first := start()
	addr := first.ListenAddrs()[0]
	sink, err := kafkaout.New(kafkaconn.Config{Brokers: []string{addr}}, map[string]string{}, kafkaout.Options{AnswerTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	obs := newSideRecorder()
	p, err := egress.NewSidePublisher(egress.SideOptions{Queue: observe.SideQueueDeadLetters,
		Targets: map[string]egress.SideTarget{"kafka": sink.DeadLetters("side.dlq")}, PublishTimeout: 2 * time.Second, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Stop()
	first.Close()

	offerAll(t, p)
	waitSide(t, "a failed attempt with the broker down", 30*time.Second, func() bool { return obs.get(obs.failed, "kafka") > 0 })
	if n := obs.get(obs.backlog, "kafka"); n != 500 {
		t.Fatalf("backlog with the broker down: %d, want 500", n)
	}
	second := start()
	defer second.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("side.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(seen) < 500 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "x-message-id" {
					seen[string(h.Value)] = true
				}
			}
		})
	}
	if len(seen) < 500 {
		t.Fatalf("%d of 500 copies arrived after the broker came back (backlog %d)", len(seen), p.Backlog("kafka"))
	}
	waitSide(t, "the backlog to drain", 30*time.Second, func() bool { return obs.get(obs.backlog, "kafka") == 0 })
}

// TestSideBacklogBytesCountWholeCopy: MaxBacklogBytes bounds each copy's memory
// (SideSize: payload, key, headers and SideEntryOverhead), not its payload alone, so a
// backlog of small copies stays within its bytes; the count is given back as copies
// are published.
func TestSideBacklogBytesCountWholeCopy(t *testing.T) {
	obs := newSideRecorder()
	g := &gateTarget{gate: make(chan struct{})}
	envs := func(from, n int) []*envelope.Envelope {
		out := deadEnvs(from, n)
		for _, e := range out {
			e.Key = []byte("key-0123456789")
			e.Headers = []envelope.Header{{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
		}
		return out
	}
	size := egress.SideSize(envs(0, 1)[0])
	if want := 1 + 14 + 11 + 55 + egress.SideEntryOverhead; size != want {
		t.Fatalf("SideSize = %d, want %d (payload, key, header, overhead)", size, want)
	}
	p, err := egress.NewSidePublisher(egress.SideOptions{Queue: observe.SideQueueDeadLetters, Targets: map[string]egress.SideTarget{"t": g},
		MaxBacklogBytes: 10 * size, PublishTimeout: time.Hour, StopGrace: 100 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Stop()
	for i := range 25 {
		p.Offer(envs(i, 1))
	}
	if n, q := obs.get(obs.drops, "t|full"), p.Backlog("t"); n != 15 || q != 10 {
		t.Errorf("dropped (full) %d, queued %d; want 15 and 10 of 25 offered with room for 10 copies' bytes", n, q)
	}
	close(g.gate)
	waitSide(t, "the backlog to drain", 10*time.Second, func() bool { return p.Backlog("t") == 0 })
	p.Offer(envs(100, 10))
	if n := obs.get(obs.drops, "t|full"); n != 15 {
		t.Errorf("after draining: dropped (full) %d, want still 15: the published copies' bytes are given back", n)
	}
}
