package amqp_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delay-bridge/app/metrics"
	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/egress/amqp"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

func waitHealthy(t *testing.T, s *amqp.Sink, healthy bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for (s.Healthy() == nil) != healthy {
		if time.Now().After(deadline) {
			t.Fatalf("Healthy() = %v after 30s, want healthy=%v", s.Healthy(), healthy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHealthFollowsTheConnection: the sink is healthy while connected; with the broker
// unreachable (proxy refusing connections, the live one cut) it reports not healthy
// without any publish, and a publish fails as unreachable (retryable); once the broker
// is reachable again the sink's own probe reconnects and it is healthy again, still
// without a publish.
func TestHealthFollowsTheConnection(t *testing.T) {
	b := newBroker(t)
	ex, q := b.target(true)
	r := b.read(q)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	m := manager(t, p.URL(testkit.AMQPURL()))
	s := newSink(t, m, map[string]amqp.Route{"r": {Exchange: ex}},
		amqp.Options{Channels: 1, ConnectWait: 300 * time.Millisecond, ProbeInterval: 50 * time.Millisecond})
	waitHealthy(t, s, true)

	p.SetDown(true)
	p.Cut()
	waitHealthy(t, s, false)
	t.Logf("down: %v", s.Healthy())
	errs := publish(t, s, &envelope.Envelope{ID: "down", Route: "r"})
	if errs[0] == nil || fault.IsPermanent(errs[0]) || egress.FailReason(errs[0]) != "unreachable" {
		t.Fatalf("publish while down: %v (reason %q), want a retryable unreachable error", errs[0], egress.FailReason(errs[0]))
	}

	p.SetDown(false)
	waitHealthy(t, s, true)
	if errs := publish(t, s, &envelope.Envelope{ID: "up", Route: "r"}); errs[0] != nil {
		t.Fatalf("publish after the broker came back: %v", errs[0])
	}
	if d := r.next(1, 10*time.Second)[0]; d.Headers[envelope.HeaderMessageID] != "up" {
		t.Errorf("arrived %v", d.Headers[envelope.HeaderMessageID])
	}
}

// dropRecorder is the dispatcher's completer in TestAtMostOnceFailuresAreCountedDrops.
type dropRecorder struct {
	acked, failed chan int
}

func (d *dropRecorder) Published(_ context.Context, envs []*envelope.Envelope) { d.acked <- len(envs) }
func (d *dropRecorder) Failed(_ context.Context, envs []*envelope.Envelope, _ []error) {
	d.failed <- len(envs)
}
func (d *dropRecorder) Dropped([]*envelope.Envelope)     {}
func (d *dropRecorder) Unpublished([]*envelope.Envelope) {}

// TestAtMostOnceFailuresAreCountedDrops: with delivery at-most-once, messages the broker
// refuses (here unroutable: no queue bound) are acknowledged before publishing and then
// given up; each is counted in publish_failures_total and messages_dropped_total with
// its reason, and none is handed back for a retry.
func TestAtMostOnceFailuresAreCountedDrops(t *testing.T) {
	b := newBroker(t)
	ex, _ := b.target(false)
	m := manager(t, testkit.AMQPURL())
	s := newSink(t, m, map[string]amqp.Route{"r": {Exchange: ex}}, amqp.Options{})
	reg := prometheus.NewRegistry()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	obs, err := metrics.NewMetrics(reg, "test", quiet)
	if err != nil {
		t.Fatal(err)
	}
	obs.Declare([]metrics.RouteSeries{{Name: "r", Broker: envelope.BrokerAMQP}}, nil)
	rec := &dropRecorder{acked: make(chan int, 10), failed: make(chan int, 10)}
	d := egress.NewDispatcher(egress.DispatcherOptions{
		Routes:    map[string]egress.RouteSink{"r": {Sink: s, Broker: envelope.BrokerAMQP}},
		Completer: rec, AtMostOnce: true, Observer: obs, Logger: quiet,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	const n = 3
	batch := make([]*envelope.Envelope, n)
	for i := range batch {
		batch[i] = &envelope.Envelope{ID: testkit.Uniq(t, "amo"), Route: "r", SourceBroker: envelope.BrokerKafka, Payload: []byte("x")}
	}
	d.Submit(batch)
	select {
	case got := <-rec.acked:
		if got != n {
			t.Errorf("acknowledged %d before publishing, want %d", got, n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing acknowledged")
	}
	drops := func() float64 {
		return testkit.CounterValue(t, reg, "delaybridge_messages_dropped_total", map[string]string{"route": "r", "reason": "unroutable"})
	}
	deadline := time.Now().Add(30 * time.Second)
	for drops() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if got := drops(); got != n {
		t.Errorf("messages_dropped_total{unroutable} = %v, want %d", got, n)
	}
	if got := testkit.CounterValue(t, reg, "delaybridge_publish_failures_total", map[string]string{"route": "r", "broker": "amqp", "reason": "unroutable"}); got != n {
		t.Errorf("publish_failures_total{unroutable} = %v, want %d", got, n)
	}
	if got := testkit.CounterValue(t, reg, "delaybridge_messages_dropped_total", map[string]string{"route": "r", "reason": "timeout"}); got != 0 {
		t.Errorf("messages_dropped_total{timeout} = %v, want 0 (declared at start)", got)
	}
	select {
	case n := <-rec.failed:
		t.Errorf("%d messages handed back for a retry under at-most-once", n)
	default:
	}
}
