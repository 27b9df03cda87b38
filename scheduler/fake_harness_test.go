package scheduler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The scheduler's own tests run on store/memstore and a fake clock: no Redis,
// no broker, time moved by the test. The same behaviour against a real redis-server and
// the real egress dispatcher is covered in scheduler/redistest.

var t0 = time.UnixMilli(1_800_000_000_000)

// world is one memstore and one fake clock shared by the schedulers of a test.
type world struct {
	t    *testing.T
	fc   *clock.Fake
	ms   *memstore.Store
	step time.Duration // how far drive and advance move the clock at a time
}

func newWorld(t *testing.T, shards int) *world {
	t.Helper()
	fc := clock.NewFake(t0)
	ms, err := memstore.New(memstore.Options{Shards: shards, DoneWindow: time.Hour, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, fc: fc, ms: ms, step: 10 * time.Millisecond}
}

// drive advances the fake clock by step until cond holds, giving the scheduler's
// goroutines a moment of real time after each step; it fails the test once limit of
// simulated time has passed. It returns the simulated time it took.
func (w *world) drive(what string, limit time.Duration, cond func() bool) time.Duration {
	w.t.Helper()
	start := w.fc.Now()
	for !cond() {
		if w.fc.Now().Sub(start) > limit {
			w.t.Fatalf("%s: not reached after %s of simulated time", what, limit)
		}
		w.settle()
		if cond() {
			break
		}
		w.fc.Advance(w.step)
	}
	return w.fc.Now().Sub(start)
}

// settle lets goroutines woken by the last step run before time moves on.
func (w *world) settle() {
	for i := 0; i < 2; i++ {
		time.Sleep(100 * time.Microsecond)
	}
}

// advance moves the clock forward by d in steps, whatever happens meanwhile.
func (w *world) advance(d time.Duration) {
	for end := w.fc.Now().Add(d); w.fc.Now().Before(end); {
		w.settle()
		w.fc.Advance(w.step)
	}
	w.settle()
}

func (w *world) state(id string) (storeapi.State, int64, *envelope.Envelope) {
	w.t.Helper()
	st, score, env, err := w.ms.Get(context.Background(), id)
	if err != nil {
		w.t.Fatalf("get %s: %v", id, err)
	}
	return st, score, env
}

func (w *world) park(ids []string, due time.Time) {
	w.t.Helper()
	envs := make([]*envelope.Envelope, len(ids))
	for i, id := range ids {
		envs[i] = &envelope.Envelope{ID: id, Route: "r", DueAt: due.UnixMilli(), ReceivedAt: w.fc.Now().UnixMilli(), Payload: []byte("p")}
	}
	parked, _, err := w.ms.Park(context.Background(), envs)
	if err != nil {
		w.t.Fatal(err)
	}
	for i, ok := range parked {
		if !ok {
			w.t.Fatalf("%s not parked", ids[i])
		}
	}
}

func (w *world) totals() (pending, inflight, dead int64) {
	w.t.Helper()
	st, err := w.ms.ShardStats(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	for _, s := range st {
		pending, inflight, dead = pending+s.Pending, inflight+s.Inflight, dead+s.Dead
	}
	return
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// publish is one publish attempt the fake dispatcher made.
type publish struct {
	id      string
	attempt int32
	at      time.Time // fake clock
	err     error
}

// fakeDispatcher stands in for egress.Dispatcher: it checks Owns like the real one,
// "publishes" each fired message by asking outcome for its result, and reports to the
// scheduler as the completer contract says (Published, Failed, Dropped, Unpublished).
type fakeDispatcher struct {
	fc      *clock.Fake
	s       *scheduler.Scheduler
	outcome func(env *envelope.Envelope) error // nil result: the broker has it
	ch      chan []*envelope.Envelope

	mu       sync.Mutex
	attempts []publish
	dropped  int
}

func (d *fakeDispatcher) Submit(batch []*envelope.Envelope) { d.ch <- batch }

func (d *fakeDispatcher) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case b := <-d.ch:
					d.s.Unpublished(b)
				default:
					return
				}
			}
		case b := <-d.ch:
			d.handle(ctx, b)
		}
	}
}

func (d *fakeDispatcher) handle(ctx context.Context, batch []*envelope.Envelope) {
	var ok, failed, dropped []*envelope.Envelope
	var errs []error
	for _, env := range batch {
		if !d.s.Owns(env) {
			dropped = append(dropped, env)
			continue
		}
		var err error
		if d.outcome != nil {
			err = d.outcome(env)
		}
		d.mu.Lock()
		d.attempts = append(d.attempts, publish{id: env.ID, attempt: env.Attempt, at: d.fc.Now(), err: err})
		d.mu.Unlock()
		if err != nil {
			failed, errs = append(failed, env), append(errs, err)
		} else {
			ok = append(ok, env)
		}
	}
	if len(dropped) > 0 {
		d.mu.Lock()
		d.dropped += len(dropped)
		d.mu.Unlock()
		d.s.Dropped(dropped)
	}
	if len(ok) > 0 {
		d.s.Published(ctx, ok)
	}
	if len(failed) > 0 {
		d.s.Failed(ctx, failed, errs)
	}
}

func (d *fakeDispatcher) published() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for _, p := range d.attempts {
		if p.err == nil {
			out[p.id]++
		}
	}
	return out
}

func (d *fakeDispatcher) tries(id string) []publish {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []publish
	for _, p := range d.attempts {
		if p.id == id {
			out = append(out, p)
		}
	}
	return out
}

// node is one running scheduler.
type node struct {
	s    *scheduler.Scheduler
	disp *fakeDispatcher
	stop func()
}

func (w *world) options(instance string) scheduler.Options {
	return scheduler.Options{
		Store: w.ms, Clock: w.fc, Instance: instance,
		Tick: time.Millisecond, Lookahead: 500 * time.Millisecond, ClaimBatch: 100,
		InflightLease: 10 * time.Second, LeaseTTL: 600 * time.Millisecond, SafetyScan: 200 * time.Millisecond,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: 200 * time.Millisecond, BackoffMax: 800 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// start runs a scheduler with opt on the world until the test ends (or stop).
func (w *world) start(opt scheduler.Options, outcome func(*envelope.Envelope) error) *node {
	w.t.Helper()
	s, err := scheduler.New(opt)
	if err != nil {
		w.t.Fatal(err)
	}
	d := &fakeDispatcher{fc: w.fc, s: s, outcome: outcome, ch: make(chan []*envelope.Envelope, 4096)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx, d) }()
	var once sync.Once
	n := &node{s: s, disp: d}
	n.stop = func() {
		once.Do(func() {
			cancel()
			// Shutdown waits on nothing timed; keep the clock moving anyway in case a
			// backoff is under way.
			for {
				select {
				case <-done:
					return
				default:
					w.fc.Advance(w.step)
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	w.t.Cleanup(n.stop)
	return n
}
