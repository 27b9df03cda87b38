package egress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// fakeSink is an in-test Sink (our own interface, not a broker): it records batches and
// fails messages whose id is in fail.
type fakeSink struct {
	mu      sync.Mutex
	batches [][]string
	times   []time.Time
	fail    map[string]bool
	short   bool // break the contract: return fewer results than messages
}

func (s *fakeSink) Publish(_ context.Context, msgs []*envelope.Envelope) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(msgs))
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
		s.times = append(s.times, time.Now())
		if s.fail[m.ID] {
			errs[i] = errors.New("refused")
		}
	}
	s.batches = append(s.batches, ids)
	if s.short {
		return errs[:0]
	}
	return errs
}

func (s *fakeSink) Close() error { return nil }

type outcomes struct {
	mu          sync.Mutex
	published   []string
	failed      []string
	dropped     []string
	unpublished []string
	order       []string // "ack:<id>" / "fail:<id>" in call order
}

func (o *outcomes) Published(_ context.Context, envs []*envelope.Envelope) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range envs {
		o.published = append(o.published, e.ID)
		o.order = append(o.order, "ack:"+e.ID)
	}
}

func (o *outcomes) Failed(_ context.Context, envs []*envelope.Envelope, errs []error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, e := range envs {
		if errs[i] == nil {
			panic("Failed called with a nil error")
		}
		o.failed = append(o.failed, e.ID)
		o.order = append(o.order, "fail:"+e.ID)
	}
}

func (o *outcomes) Dropped(envs []*envelope.Envelope) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range envs {
		o.dropped = append(o.dropped, e.ID)
	}
}

func (o *outcomes) Unpublished(envs []*envelope.Envelope) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range envs {
		o.unpublished = append(o.unpublished, e.ID)
	}
}

func (o *outcomes) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.published) + len(o.failed) + len(o.dropped)
}

func envs(route string, n int, prefix string) []*envelope.Envelope {
	out := make([]*envelope.Envelope, n)
	for i := range out {
		out[i] = &envelope.Envelope{ID: fmt.Sprintf("%s%d", prefix, i), Route: route}
	}
	return out
}

func runDispatcher(t *testing.T, opt DispatcherOptions) (*Dispatcher, func()) {
	t.Helper()
	d := NewDispatcher(opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return d, stop
}

func waitTotal(t *testing.T, o *outcomes, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for o.total() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d outcomes after 10s, want %d", o.total(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDispatcherRoutesOutcomesPerMessage(t *testing.T) {
	a := &fakeSink{fail: map[string]bool{"a1": true}}
	b := &fakeSink{}
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{
		Routes:    map[string]RouteSink{"ra": {Sink: a, Broker: "kafka"}, "rb": {Sink: b, Broker: "amqp"}},
		Completer: o,
	})
	batch := append(envs("ra", 3, "a"), envs("rb", 2, "b")...)
	batch = append(batch, &envelope.Envelope{ID: "x", Route: "unknown"})
	d.Submit(batch)
	waitTotal(t, o, 6)
	stop()
	if len(o.published) != 4 || len(o.failed) != 2 {
		t.Fatalf("published %v failed %v; want 4 published, a1 and x failed", o.published, o.failed)
	}
	for _, id := range o.failed {
		if id != "a1" && id != "x" {
			t.Fatalf("unexpected failure %s", id)
		}
	}
	for _, batch := range a.batches {
		for _, id := range batch {
			if id[0] != 'a' {
				t.Fatalf("route ra's sink got %s", id)
			}
		}
	}
}

func TestDispatcherUnknownRouteIsPermanent(t *testing.T) {
	var got error
	o := &errCapture{f: func(err error) { got = err }}
	d, stop := runDispatcher(t, DispatcherOptions{Routes: map[string]RouteSink{}, Completer: o})
	d.Submit([]*envelope.Envelope{{ID: "x", Route: "nope"}})
	deadline := time.Now().Add(5 * time.Second)
	for o.n() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if !fault.IsPermanent(got) {
		t.Fatalf("unknown route error %v, want it marked fault.Permanent", got)
	}
}

type errCapture struct {
	mu    sync.Mutex
	count int
	f     func(error)
}

func (e *errCapture) Published(context.Context, []*envelope.Envelope) {}
func (e *errCapture) Dropped([]*envelope.Envelope)                    {}
func (e *errCapture) Unpublished([]*envelope.Envelope)                {}
func (e *errCapture) Failed(_ context.Context, _ []*envelope.Envelope, errs []error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count++
	e.f(errs[0])
}
func (e *errCapture) n() int { e.mu.Lock(); defer e.mu.Unlock(); return e.count }

func TestDispatcherSinkContractBreachFailsEverything(t *testing.T) {
	s := &fakeSink{short: true}
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{Routes: map[string]RouteSink{"r": {Sink: s}}, Completer: o})
	d.Submit(envs("r", 5, "m"))
	waitTotal(t, o, 5)
	stop()
	if len(o.failed) != 5 {
		t.Fatalf("a sink returning too few results must fail every message (retry, never lose): %v", o.failed)
	}
}

func TestDispatcherDropsMessagesOfShardsNoLongerOwned(t *testing.T) {
	s := &fakeSink{}
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{
		Routes: map[string]RouteSink{"r": {Sink: s}}, Completer: o,
		Owned: func(e *envelope.Envelope) bool { return e.ID != "m1" },
	})
	d.Submit(envs("r", 3, "m"))
	waitTotal(t, o, 3)
	stop()
	if len(o.dropped) != 1 || o.dropped[0] != "m1" || len(o.published) != 2 {
		t.Fatalf("dropped %v published %v", o.dropped, o.published)
	}
	for _, b := range s.batches {
		for _, id := range b {
			if id == "m1" {
				t.Fatal("a message of a lost shard was published")
			}
		}
	}
}

func TestDispatcherAtMostOnceAcksBeforePublishing(t *testing.T) {
	s := &fakeSink{fail: map[string]bool{"m0": true}}
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{Routes: map[string]RouteSink{"r": {Sink: s}}, Completer: o, AtMostOnce: true})
	d.Submit(envs("r", 2, "m"))
	waitTotal(t, o, 2)
	stop() // waits for the workers: a Failed call would have been recorded by now
	if len(o.failed) != 0 || len(o.published) != 2 {
		t.Fatalf("at-most-once: published %v failed %v; want both acked up front and no retry", o.published, o.failed)
	}
}

func TestDispatcherMaxRateSpreadsPublishes(t *testing.T) {
	s := &fakeSink{}
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{
		Routes: map[string]RouteSink{"r": {Sink: s, MaxRate: 200}}, Completer: o, Workers: 1, MaxBatch: 10,
	})
	start := time.Now()
	d.Submit(envs("r", 100, "m"))
	waitTotal(t, o, 100)
	stop()
	// 100 messages at 200/s with a burst of 20 take at least (100-20)/200 s = 400 ms.
	// Only a lower bound is checked: a slow machine may take longer, never shorter.
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Fatalf("100 messages at max_rate 200/s took %s, want >= 400ms", took)
	}
}

func TestDispatcherFinishesQueueOnShutdown(t *testing.T) {
	s := &fakeSink{}
	o := &outcomes{}
	d := NewDispatcher(DispatcherOptions{Routes: map[string]RouteSink{"r": {Sink: s}}, Completer: o})
	d.Submit(envs("r", 2500, "m"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // already stopping: what was queued must still be published and recorded
	d.Run(ctx)
	if len(o.published) != 2500 || d.Len() != 0 {
		t.Fatalf("published %d of 2500 queued before shutdown, %d left", len(o.published), d.Len())
	}
}

// TestDispatcherThrottledRouteDoesNotHoldUpOthers: a route waiting for its max_rate has
// its own lane; the shared workers keep publishing every other route meanwhile.
func TestDispatcherThrottledRouteDoesNotHoldUpOthers(t *testing.T) {
	slow, fast := &fakeSink{}, &fakeSink{}
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{
		Routes:    map[string]RouteSink{"slow": {Sink: slow, MaxRate: 10}, "fast": {Sink: fast}},
		Completer: o, Workers: 1,
	})
	d.Submit(append(envs("slow", 30, "s"), envs("fast", 100, "f")...)) // slow needs ~3 s
	deadline := time.Now().Add(10 * time.Second)
	for {
		fast.mu.Lock()
		n := 0
		for _, b := range fast.batches {
			n += len(b)
		}
		fast.mu.Unlock()
		if n == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fast route published %d of 100 within 10 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	slow.mu.Lock()
	slowDone := 0
	for _, b := range slow.batches {
		slowDone += len(b)
	}
	slow.mu.Unlock()
	if slowDone == 30 {
		t.Fatal("the fast route finished only after the throttled route: it waited behind max_rate")
	}
	waitTotal(t, o, 130)
	stop()
}

// TestDispatcherMaxRateWaitsOnTheClock: the max_rate wait is slept on the injected
// clock, so nothing beyond the burst is published until that clock has moved on.
func TestDispatcherMaxRateWaitsOnTheClock(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	s := &fakeSink{}
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{
		Routes: map[string]RouteSink{"r": {Sink: s, MaxRate: 10}}, Completer: o, Clock: fake, // burst 1
	})
	d.Submit(envs("r", 3, "m"))
	for want := 1; want <= 3; want++ {
		waitTotal(t, o, want)
		if want < 3 {
			deadline := time.Now().Add(5 * time.Second)
			for fake.Timers() == 0 { // the lane sleeps for its next token
				if time.Now().After(deadline) {
					t.Fatalf("after %d published, no wait armed on the injected clock", want)
				}
				time.Sleep(time.Millisecond)
			}
		}
		if got := o.total(); got != want {
			t.Fatalf("%d published before the clock moved %d × 100ms, want %d", got, want-1, want)
		}
		fake.Advance(100 * time.Millisecond)
	}
	stop()
	if len(o.published) != 3 {
		t.Fatalf("published %v, want m0..m2", o.published)
	}
}

// waitRecorder keeps every EgressWait.
type waitRecorder struct {
	observe.Nop
	mu    sync.Mutex
	waits []time.Duration
}

func (r *waitRecorder) EgressWait(_ string, wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, wait)
}

// TestDispatcherReportsEgressWait: each message's wait from Submit (its fire time) to the
// start of its publish is reported on the dispatcher's clock, max_rate waits included.
func TestDispatcherReportsEgressWait(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	o := &outcomes{}
	rec := &waitRecorder{}
	d, stop := runDispatcher(t, DispatcherOptions{
		Routes: map[string]RouteSink{"r": {Sink: &fakeSink{}, MaxRate: 10}}, Completer: o, Clock: fake, Observer: rec, // burst 1
	})
	d.Submit(envs("r", 3, "m"))
	for want := 1; want <= 3; want++ {
		waitTotal(t, o, want)
		if want < 3 {
			deadline := time.Now().Add(5 * time.Second)
			for fake.Timers() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("after %d published, no wait armed on the injected clock", want)
				}
				time.Sleep(time.Millisecond)
			}
		}
		fake.Advance(100 * time.Millisecond)
	}
	stop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}
	if !slices.Equal(rec.waits, want) {
		t.Fatalf("egress waits %v, want %v", rec.waits, want)
	}
}
