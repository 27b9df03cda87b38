package redistest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/app/metrics"
	"github.com/delaybridge/delay-bridge/egress"
	kafkaout "github.com/delaybridge/delay-bridge/egress/kafka"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
	"github.com/delaybridge/delay-bridge/testkit"
)

// startWithSink runs a scheduler and dispatcher for route "r" over sink, observed by a
// real Metrics on a fresh registry.
func startWithSink(t *testing.T, r *testkit.Redis, sink egress.Sink, broker string, tweak func(*scheduler.Options)) (*harness, *prometheus.Registry) {
	t.Helper()
	ctx := context.Background()
	rdb := r.Client()
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "t", Cluster: "c", Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := metrics.NewMetrics(reg, "test", quiet)
	if err != nil {
		t.Fatal(err)
	}
	opt := scheduler.Options{
		Store: shardStore, Clock: clock.Real{}, Instance: "a",
		Tick: time.Millisecond, Lookahead: 500 * time.Millisecond, ClaimBatch: 100,
		InflightLease: 30 * time.Second, LeaseTTL: time.Second, SafetyScan: 200 * time.Millisecond,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Observer: m, Logger: quiet,
	}
	if tweak != nil {
		tweak(&opt)
	}
	s := newScheduler(t, opt)
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes:    map[string]egress.RouteSink{"r": {Sink: sink, Broker: broker}},
		Completer: s, Owned: s.Owns, Observer: m, Logger: quiet,
		PublishTimeout: opt.InflightLease / 2,
	})
	rctx, cancel := context.WithCancel(ctx)
	h := &harness{shardStore: shardStore, sched: s, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		_ = s.Run(rctx, disp)
	}()
	h.stop = func() {
		cancel()
		<-h.done
	}
	t.Cleanup(h.stop)
	return h, reg
}

// TestUnreachableBrokerRetriesWithoutDeadLetters: with the target Kafka broker stopped
// (connection refused), fired messages are retried however many attempts that takes —
// far beyond retry.max_attempts — and none is dead-lettered; every failed attempt is
// counted as unreachable and every put-back as a retry; when the broker is back, every
// message arrives.
func TestUnreachableBrokerRetriesWithoutDeadLetters(t *testing.T) {
	r := testkit.StartRedis(t)
	target := testkit.Uniq(t, "t")
	addr, c := testkit.StartKafka(t, 1, target)
	sink, err := kafkaout.New(kafkaconn.Config{Brokers: []string{addr}}, map[string]string{"r": target},
		kafkaout.Options{ProbeInterval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	c.Close()
	h, reg := startWithSink(t, r, sink, "kafka", nil)
	const n = 5
	now := time.Now().UnixMilli()
	parkN(t, h.shardStore, n, func(int) int64 { return now })

	failures := func() float64 {
		return testkit.CounterValue(t, reg, "delaybridge_publish_failures_total", map[string]string{"route": "r", "broker": "kafka", "reason": "unreachable"})
	}
	// MaxAttempts is 3: wait for twice that many failed attempts per message.
	waitFor(t, "6 failed attempts per message", 60*time.Second, func() bool { return failures() >= 6*n })
	if _, _, dead := totals(t, h.shardStore); dead != 0 {
		t.Fatalf("%d messages dead-lettered while the broker was unreachable", dead)
	}
	if err := sink.Healthy(); err == nil {
		t.Error("sink reports healthy while its broker is stopped")
	}
	if got := testkit.CounterValue(t, reg, "delaybridge_publish_retries_total", map[string]string{"route": "r"}); got < 5*n {
		t.Errorf("publish_retries_total = %v after %v failed attempts", got, failures())
	}

	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	c2, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, target))
	if err != nil {
		t.Fatalf("restart kfake: %v", err)
	}
	defer c2.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(target), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(ids) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			for _, hd := range rec.Headers {
				if hd.Key == envelope.HeaderMessageID {
					ids[string(hd.Value)]++
				}
			}
		})
	}
	if len(ids) != n {
		t.Fatalf("%d of %d messages arrived after the broker came back", len(ids), n)
	}
	if _, _, dead := totals(t, h.shardStore); dead != 0 {
		t.Fatalf("%d messages dead-lettered", dead)
	}
	if got := testkit.CounterValue(t, reg, "delaybridge_messages_dead_lettered_total", map[string]string{"route": "r"}); got > 0 {
		t.Errorf("messages_dead_lettered_total = %v", got)
	}
}

// TestUnknownOutcomeIsNotResentBeforeTheLease: a publish whose outcome is unknown (the
// broker may still apply the write) is not put back for an early retry; the message
// stays in flight and is fired again only once its in-flight lease has passed. The
// attempt is counted as a timeout failure and as one retry.
func TestUnknownOutcomeIsNotResentBeforeTheLease(t *testing.T) {
	r := testkit.StartRedis(t)
	var calls atomic.Int32
	sink := &recordingSink{failFor: func(env *envelope.Envelope) error {
		if calls.Add(1) == 1 {
			return fmt.Errorf("no answer: %w", fault.ErrUnknownOutcome)
		}
		return nil
	}}
	const lease = 2 * time.Second
	h, reg := startWithSink(t, r, sink, "test", func(o *scheduler.Options) { o.InflightLease = lease })
	now := time.Now().UnixMilli()
	parkN(t, h.shardStore, 1, func(int) int64 { return now })
	waitFor(t, "the first attempt", 10*time.Second, func() bool { return calls.Load() >= 1 })
	first := time.Now()
	st, _, _, err := h.shardStore.Get(context.Background(), "m-0")
	if err != nil || st != storeapi.StateInflight {
		t.Fatalf("after an unknown outcome: state %q, err %v; want inflight", st, err)
	}
	waitFor(t, "the message re-published", 30*time.Second, func() bool { return len(sink.snapshot()) == 1 })
	again := time.Now()
	// Claimed at most a lookahead (500 ms) before it fired: the lease ends no earlier
	// than lease - lookahead after the first attempt.
	if early := again.Sub(first); early < lease-600*time.Millisecond {
		t.Errorf("re-published %v after the unknown outcome, before the in-flight lease (%v) could pass", early, lease)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d publish attempts, want 2", n)
	}
	if got := testkit.CounterValue(t, reg, "delaybridge_publish_failures_total", map[string]string{"route": "r", "broker": "test", "reason": "timeout"}); got != 1 {
		t.Errorf("publish_failures_total{timeout} = %v, want 1", got)
	}
	if got := testkit.CounterValue(t, reg, "delaybridge_publish_retries_total", map[string]string{"route": "r"}); got != 1 {
		t.Errorf("publish_retries_total = %v, want 1", got)
	}
	if got := testkit.CounterValue(t, reg, "delaybridge_messages_recovered_total", map[string]string{"reason": "lease_expired"}); got != 1 {
		t.Errorf("messages_recovered_total{lease_expired} = %v, want 1 (the message fired again at its lease)", got)
	}
}

// stallSink is a broker that never answers: every Publish waits for its ctx to end,
// then fails its messages with an unknown outcome (they were "written").
type stallSink struct{ calls atomic.Int32 }

func (s *stallSink) Publish(ctx context.Context, msgs []*envelope.Envelope) []error {
	s.calls.Add(1)
	<-ctx.Done()
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = fmt.Errorf("no answer: %w: %w", fault.ErrUnknownOutcome, ctx.Err())
	}
	return errs
}

func (s *stallSink) Close() error { return nil }

// TestShutdownWithStalledBrokerPutsQueuedBack: during shutdown with a broker that does
// not answer, the publish under way waits out its timeout and its messages stay in
// flight (outcome unknown); the batches still queued are not handed to the stalled
// broker one publish timeout after another, but go back to pending unpublished once
// the drain time has passed.
func TestShutdownWithStalledBrokerPutsQueuedBack(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	rdb := r.Client()
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "t", Cluster: "c", Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := newScheduler(t, scheduler.Options{
		Store: shardStore, Clock: clock.Real{}, Instance: "a",
		Tick: time.Millisecond, Lookahead: 200 * time.Millisecond, ClaimBatch: 100,
		InflightLease: 30 * time.Second, LeaseTTL: time.Second, SafetyScan: 200 * time.Millisecond,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Logger: quiet,
	})
	sink := &stallSink{}
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes:    map[string]egress.RouteSink{"r": {Sink: sink, Broker: "test"}},
		Completer: s, Owned: s.Owns, Workers: 1, MaxBatch: 10,
		PublishTimeout: 2 * time.Second, ShutdownDrain: 100 * time.Millisecond, Logger: quiet,
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx, disp) }()
	defer func() { cancel(); <-done }()

	const n = 100
	now := time.Now().UnixMilli()
	parkN(t, shardStore, n, func(int) int64 { return now })
	waitFor(t, "one batch stalled, the rest queued", 20*time.Second, func() bool { return sink.calls.Load() == 1 && disp.Len() == n-10 })
	cancel()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatal("Run did not return")
	}
	if c := sink.calls.Load(); c != 1 {
		t.Errorf("%d publishes handed to the stalled broker during shutdown, want 1 (the one under way)", c)
	}
	pending, inflight, dead := totals(t, shardStore)
	if pending != n-10 || inflight != 10 || dead != 0 {
		t.Errorf("after shutdown: pending %d, inflight %d, dead %d; want %d pending (put back), 10 in flight (outcome unknown), 0 dead",
			pending, inflight, dead, n-10)
	}
}
