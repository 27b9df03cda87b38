package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/testkit"
)

// stuckTarget is a dead-letter target that takes nothing until its gate opens (a
// broker that stalls); it counts what it took.
type stuckTarget struct {
	gate chan struct{}
	once sync.Once
	mu   sync.Mutex
	took int
}

func (s *stuckTarget) open() { s.once.Do(func() { close(s.gate) }) }

func (s *stuckTarget) Publish(ctx context.Context, envs []*envelope.Envelope) []error {
	errs := make([]error, len(envs))
	select {
	case <-s.gate:
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	s.mu.Lock()
	s.took += len(envs)
	s.mu.Unlock()
	return errs
}

func (s *stuckTarget) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.took
}

// backlogRecorder keeps the side publisher's backlog gauge.
type backlogRecorder struct {
	observe.Nop
	mu sync.Mutex
	n  int
}

func (b *backlogRecorder) SideBacklog(_, _ string, n int) { b.mu.Lock(); b.n = n; b.mu.Unlock() }
func (b *backlogRecorder) get() int                       { b.mu.Lock(); defer b.mu.Unlock(); return b.n }

// TestDeadLetterCopiesDoNotHoldTheDispatcher: a message the target refuses for good is
// dead-lettered on the dispatcher's only worker, whose OnDead queues its copy
// (egress.SidePublisher) for a dead-letter target that takes nothing; the worker goes
// on — ten messages due after it are published while the copy waits in the backlog —
// and the copy is published once the target takes it. (With the copy published on the
// worker, as before, the worker waited for the stalled target and the ten waited too.)
func TestDeadLetterCopiesDoNotHoldTheDispatcher(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	shardStore, err := redisstore.New(ctx, r.Client(), redisstore.Options{Prefix: "dc", Cluster: "c", Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	target := &stuckTarget{gate: make(chan struct{})}
	obs := &backlogRecorder{}
	side, err := egress.NewSidePublisher(egress.SideOptions{Queue: observe.SideQueueDeadLetters,
		Targets: map[string]egress.SideTarget{"t": target}, PublishTimeout: time.Hour, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	side.Start()
	sink := &recordingSink{failFor: func(env *envelope.Envelope) error {
		if strings.HasPrefix(env.ID, "bad") {
			return fault.Permanent(errors.New("refused by the target"))
		}
		return nil
	}}
	s := newScheduler(t, scheduler.Options{
		Store: shardStore, Clock: clock.Real{}, Instance: "dc",
		Tick: time.Millisecond, Lookahead: 200 * time.Millisecond, ClaimBatch: 100,
		InflightLease: 30 * time.Second, LeaseTTL: time.Second, SafetyScan: 100 * time.Millisecond,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		OnDead: side.Offer,
	})
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes: map[string]egress.RouteSink{"r": {Sink: sink, Broker: "test"}}, Completer: s, Owned: s.Owns, Workers: 1,
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx, disp) }()
	defer func() { target.open(); cancel(); <-done; side.Stop() }()
	waitFor(t, "ownership of all shards", 5*time.Second, func() bool { return len(s.OwnedShards()) == 4 })

	park := func(id string, due int64) {
		_, minDue, err := shardStore.Park(ctx, []*envelope.Envelope{{ID: id, Route: "r", DueAt: due, Payload: []byte("p")}})
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(minDue)
	}
	park("bad-0", time.Now().UnixMilli())
	waitFor(t, "the dead letter's copy in the backlog", 10*time.Second, func() bool { return obs.get() == 1 })
	for i := range 10 {
		park(fmt.Sprintf("ok-%d", i), time.Now().UnixMilli()+50)
	}
	waitFor(t, "the ten messages published while the dead-letter target is stuck", 30*time.Second,
		func() bool { return len(sink.snapshot()) == 10 })
	if n := target.count(); n != 0 || obs.get() != 1 {
		t.Fatalf("the stuck target took %d copies, backlog %d; want 0 and 1", n, obs.get())
	}
	target.open()
	waitFor(t, "the copy published", 10*time.Second, func() bool { return target.count() == 1 && obs.get() == 0 })
}
