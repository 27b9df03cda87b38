package redistest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/testkit"
)

// redisTimeSink publishes nothing: it records, for every message it is asked to
// publish, Redis's own time (TIME) at that moment — the fire time from Redis's point of
// view, since a message is published after it fired.
type redisTimeSink struct {
	rdb redis.UniversalClient
	mu  sync.Mutex
	at  map[string]int64 // id -> Redis time of the first publish
	due map[string]int64
}

func (s *redisTimeSink) Publish(ctx context.Context, msgs []*envelope.Envelope) []error {
	errs := make([]error, len(msgs))
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if _, ok := s.at[m.ID]; !ok {
			s.at[m.ID], s.due[m.ID] = now.UnixMilli(), m.DueAt
		}
	}
	return errs
}

func (s *redisTimeSink) Close() error { return nil }

// early lists the messages published before their due time on Redis's clock, and
// returns how many were published.
func (s *redisTimeSink) early() (early []string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.at {
		if at < s.due[id] {
			early = append(early, fmt.Sprintf("%s %d ms early", id, s.due[id]-at))
		}
	}
	return early, len(s.at)
}

// offsetRecorder keeps the last clock offset the scheduler reported.
type offsetRecorder struct {
	observe.Nop
	mu   sync.Mutex
	last time.Duration
	n    int
}

func (o *offsetRecorder) ClockOffset(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last, o.n = d, o.n+1
}

func (o *offsetRecorder) get() (time.Duration, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last, o.n
}

// TestClockSkewNeverFiresEarly runs the scheduler on a clock skewed against a real
// redis-server (testkit.SkewedClock) with scheduler.max_clock_offset 500 ms, and judges
// every publish by Redis's clock: a clock 5 s ahead from the start claims nothing (the
// clock check fails and says so, the offset is reported), and once it is right again
// everything fires, none early; a clock that steps 5 s ahead while messages are in the
// wheel fires none of them early (they go back to `due`); 5 s behind fails the check
// too; each state flips back when the clock is right.
func TestClockSkewNeverFiresEarly(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	rdb := r.Client()
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "skew", Cluster: "c", Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewSkewedClock(5 * time.Second)
	obs := &offsetRecorder{}
	s := newScheduler(t, scheduler.Options{
		Store: shardStore, Clock: clk, Instance: "skewed",
		Tick: time.Millisecond, Lookahead: time.Second, ClaimBatch: 100,
		InflightLease: 30 * time.Second, LeaseTTL: 600 * time.Millisecond, SafetyScan: 100 * time.Millisecond,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		MaxClockOffset: 500 * time.Millisecond, Observer: obs,
	})
	sink := &redisTimeSink{rdb: rdb, at: map[string]int64{}, due: map[string]int64{}}
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes: map[string]egress.RouteSink{"r": {Sink: sink, Broker: "test"}}, Completer: s, Owned: s.Owns,
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx, disp) }()
	t.Cleanup(func() { cancel(); <-done })

	redisNow := func() int64 {
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	park := func(prefix string, n int, from, step int64) {
		envs := make([]*envelope.Envelope, n)
		for i := range envs {
			envs[i] = &envelope.Envelope{ID: fmt.Sprintf("%s-%d", prefix, i), Route: "r", DueAt: from + int64(i)*step, Payload: []byte("p")}
		}
		_, minDue, err := shardStore.Park(ctx, envs)
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(minDue)
	}
	offsetNear := func(want time.Duration) func() bool {
		return func() bool {
			off, n := obs.get()
			return n > 0 && off > want-300*time.Millisecond && off < want+300*time.Millisecond
		}
	}

	// 5 s ahead from the start: the check fails, nothing is claimed.
	waitFor(t, "ownership of all shards", 5*time.Second, func() bool { return len(s.OwnedShards()) == 4 })
	waitFor(t, "offset +5s reported", 5*time.Second, offsetNear(5*time.Second))
	if s.ClockCheck() == nil {
		t.Fatal("ClockCheck passes with the clock 5 s ahead of Redis's")
	}
	park("a", 20, redisNow()+300, 100) // due 0.3–2.2 s from now on Redis's clock
	time.Sleep(2500 * time.Millisecond)
	if early, n := sink.early(); n != 0 {
		t.Fatalf("%d messages published while the clock was 5 s ahead (early: %v)", n, early)
	}

	// Right again: the state flips back, everything fires, nothing early.
	clk.Set(0)
	waitFor(t, "offset ~0 reported", 5*time.Second, offsetNear(0))
	waitFor(t, "the clock check to pass", 5*time.Second, func() bool { return s.ClockCheck() == nil })
	waitFor(t, "the first 20 published", 10*time.Second, func() bool { _, n := sink.early(); return n == 20 })

	// A step of +5 s while messages are claimed into the wheel (lookahead 1 s): none of
	// them fires early.
	park("b", 20, redisNow()+1500, 50)  // due 1.5–2.45 s from now
	time.Sleep(1000 * time.Millisecond) // the first ones are claimed by now
	clk.Set(5 * time.Second)
	time.Sleep(2500 * time.Millisecond) // past every due time on Redis's clock
	if s.ClockCheck() == nil {
		t.Error("ClockCheck passes after the clock stepped 5 s ahead")
	}
	clk.Set(0)
	waitFor(t, "the clock check to pass again", 5*time.Second, func() bool { return s.ClockCheck() == nil })
	waitFor(t, "all 40 published", 10*time.Second, func() bool { _, n := sink.early(); return n == 40 })

	// 5 s behind: the check fails as well (its messages would fire late, not early),
	// and passes again when the clock is right.
	clk.Set(-5 * time.Second)
	waitFor(t, "offset -5s reported", 5*time.Second, offsetNear(-5*time.Second))
	waitFor(t, "the clock check to fail with the clock behind", 5*time.Second, func() bool { return s.ClockCheck() != nil })
	clk.Set(0)
	waitFor(t, "the clock check to pass after being behind", 5*time.Second, func() bool { return s.ClockCheck() == nil })

	if early, n := sink.early(); len(early) > 0 {
		t.Fatalf("%d of %d messages published before their due time on Redis's clock: %v", len(early), n, early)
	}
}
