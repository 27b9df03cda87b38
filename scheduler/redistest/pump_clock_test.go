package redistest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/testkit"
)

// firedRecorder records, per message, the lateness the wheel reported when it fired
// (fake-clock time minus due time).
type firedRecorder struct {
	observe.Nop
	mu       sync.Mutex
	lateness map[string]time.Duration
	order    []string
	healed   atomic.Int32 // ClaimHealed calls
	recov    sync.Map     // Recovered: reason -> *atomic.Int64 of messages
}

func (f *firedRecorder) ClaimHealed() { f.healed.Add(1) }

func (f *firedRecorder) Recovered(reason string, n int) {
	c, _ := f.recov.LoadOrStore(reason, new(atomic.Int64))
	c.(*atomic.Int64).Add(int64(n))
}

// recovered is how many messages Recovered counted for reason.
func (f *firedRecorder) recovered(reason string) int64 {
	if c, ok := f.recov.Load(reason); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

func (f *firedRecorder) Fired(route string, late time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.order = append(f.order, route) // the test puts the message id in Route's place below
	f.lateness[route] = late
}

func (f *firedRecorder) get(id string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.lateness[id]
	return l, ok
}

// TestPumpOnInjectedClock drives the pump, wheel and ownership loop with a fake clock
// against a real redis-server: a message fires exactly at its due time on the fake
// clock, never a millisecond before, however long the pump sleeps; and a message parked
// earlier than the pump's planned wake-up is claimed at once through Notify instead of
// waiting for the safety scan.
func TestPumpOnInjectedClock(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	rdb := r.Client()
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "clk", Cluster: "c", Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.UnixMilli(1_800_000_000_000))
	t0 := fake.Now().UnixMilli()
	rec := &firedRecorder{lateness: map[string]time.Duration{}}
	s := newScheduler(t, scheduler.Options{
		Store: shardStore, Clock: fake, Instance: "fake",
		// A safety scan far longer than the test's fake time span: every timely claim
		// below comes from the pump's own planning (sleep until next due - lookahead)
		// or from Notify, never from a periodic scan.
		Tick: time.Millisecond, Lookahead: 50 * time.Millisecond, ClaimBatch: 100,
		InflightLease: 30 * time.Second, LeaseTTL: 3 * time.Second, SafetyScan: time.Hour,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: time.Second, BackoffMax: time.Second,
		Observer: rec,
	})
	sink := &recordingSink{}
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes:    map[string]egress.RouteSink{"late": {Sink: sink}, "early": {Sink: sink}},
		Completer: s, Owned: s.Owns,
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx, disp) }()
	t.Cleanup(func() { cancel(); <-done })

	waitFor(t, "ownership of all shards", 5*time.Second, func() bool { return len(s.OwnedShards()) == 4 })

	park := func(id string, due int64) map[int]int64 {
		_, minDue, err := shardStore.Park(ctx, []*envelope.Envelope{{ID: id, Route: id, DueAt: due}})
		if err != nil {
			t.Fatal(err)
		}
		return minDue
	}
	// step advances the fake clock and gives the goroutines a moment of real time to
	// react (claims go to the real Redis).
	step := func(d time.Duration) {
		fake.Advance(d)
		time.Sleep(3 * time.Millisecond)
	}

	s.Notify(park("late", t0+5000))
	time.Sleep(20 * time.Millisecond) // the woken pump looks at Redis and plans its sleep
	for fake.Now().UnixMilli() < t0+4999-100 {
		step(100 * time.Millisecond)
	}
	step(time.Duration(t0+4999-fake.Now().UnixMilli()) * time.Millisecond)
	if _, fired := rec.get("late"); fired {
		t.Fatal("fired before its due time on the injected clock")
	}
	step(time.Millisecond)
	waitFor(t, "the message to fire at its due time", 5*time.Second, func() bool { _, ok := rec.get("late"); return ok })
	if l, _ := rec.get("late"); l != 0 {
		t.Fatalf("fired with lateness %s on the fake clock, want exactly 0", l)
	}

	// The pump now sleeps for the safety scan (an hour). A message due in 300 ms must
	// not wait for it: Notify wakes the pump, and it fires at its due time.
	now := fake.Now().UnixMilli()
	s.Notify(park("early", now+300))
	time.Sleep(20 * time.Millisecond) // the woken pump claims it from Redis in real time
	for i := 0; i < 3; i++ {
		step(100 * time.Millisecond)
	}
	waitFor(t, "the woken pump's message to fire", 5*time.Second, func() bool { _, ok := rec.get("early"); return ok })
	if l, _ := rec.get("early"); l != 0 {
		t.Fatalf("message parked after the pump went to sleep fired %s late; the wake-up did not reach the pump", l)
	}
	waitFor(t, "both published", 5*time.Second, func() bool { return len(sink.snapshot()) == 2 })
}

// TestPumpClaimsAheadInFewCalls: a pump wakes when its next message is half a lookahead
// from due, so one claim takes every message of the following half lookahead too. At
// low rates that is a few claim calls for many messages instead of one call per message
// (Redis work per message, BENCHMARKS finding 3), and every message is still in the
// wheel at least half a lookahead before it is due.
func TestPumpClaimsAheadInFewCalls(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	rdb := r.Client()
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "few", Cluster: "c", Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.UnixMilli(1_800_000_000_000))
	t0 := fake.Now().UnixMilli()
	const lookahead = time.Second
	s := newScheduler(t, scheduler.Options{
		Store: shardStore, Clock: fake, Instance: "fake",
		Tick: time.Millisecond, Lookahead: lookahead, ClaimBatch: 100,
		InflightLease: 30 * time.Second, LeaseTTL: 3 * time.Second, SafetyScan: time.Hour,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: time.Second, BackoffMax: time.Second,
	})
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes: map[string]egress.RouteSink{"r": {Sink: &recordingSink{}}}, Completer: s, Owned: s.Owns,
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx, disp) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "ownership of all shards", 5*time.Second, func() bool { return len(s.OwnedShards()) == 4 })

	// Ten messages on one shard, due 100 ms apart from t0+3 s.
	const shard, n = 2, 10
	ids := idsOnShard(shardStore, shard, n, "few")
	envs := make([]*envelope.Envelope, n)
	for i, id := range ids {
		envs[i] = &envelope.Envelope{ID: id, Route: "r", DueAt: t0 + 3000 + int64(i)*100}
	}
	_, minDue, err := shardStore.Park(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	s.Notify(minDue)
	time.Sleep(20 * time.Millisecond) // the woken pump plans its sleep

	// Claimed so far: in flight, or already fired and acknowledged (ack moves an id from
	// inflight to the done window in one script, so the sum never counts one twice; the
	// done window's entries are counted in the index state's "n", docs/ARCHITECTURE.md
	// "Redis layout").
	k := fmt.Sprintf("few:{c:%d}:", shard)
	inflight := func() int64 {
		done, _ := rdb.HGet(ctx, k+"ix", "n").Int64()
		return rdb.ZCard(ctx, k+"inflight").Val() + done
	}
	var increments []int64
	last := int64(0)
	for fake.Now().UnixMilli() < t0+3450 {
		fake.Advance(50 * time.Millisecond)
		now := fake.Now().UnixMilli()
		mustHave := int64(0) // messages within half a lookahead of due must be claimed
		for _, e := range envs {
			if e.DueAt < now+lookahead.Milliseconds()/2 {
				mustHave++
			}
		}
		var got int64
		waitFor(t, "the pump to claim what is within half a lookahead of due", 5*time.Second, func() bool {
			got = inflight()
			return got >= mustHave
		})
		time.Sleep(10 * time.Millisecond) // let a claim due at this instant land
		if got = inflight(); got > last {
			increments = append(increments, got-last)
			last = got
		}
	}
	if last != n {
		t.Fatalf("%d of %d messages claimed by t0+3.45 s (the last is due at t0+3.9 s, lookahead %s)", last, n, lookahead)
	}
	if len(increments) > 3 {
		t.Errorf("claimed in %d calls %v, want at most 3: the pump wakes for every message instead of claiming half a lookahead ahead", len(increments), increments)
	}
	t.Logf("%d messages due 100 ms apart claimed in %d steps: %v", n, len(increments), increments)
}
