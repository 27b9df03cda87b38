package wheel

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// wheelT0 is the fake clock's start, a whole second so tick boundaries are easy to read.
var wheelT0 = time.UnixMilli(1_700_000_000_000)

func wheelEnv(id string, due time.Time) *envelope.Envelope {
	return &envelope.Envelope{ID: id, DueAt: due.UnixMilli()}
}

type wheelFiring struct {
	ids []string
	now time.Time
}

type wheelPark struct {
	armed bool
	d     time.Duration
}

// wheelHarness runs a Wheel on a fake clock and records what it fires and each time the
// loop parks. The loop fires before it parks, so once a park is observed every firing of
// that round is already recorded: tests step action → park → assert, with no sleeping.
type wheelHarness struct {
	t      *testing.T
	fc     *clock.Fake
	w      *Wheel
	fired  chan wheelFiring
	parked chan wheelPark
	cancel context.CancelFunc
	done   chan struct{}
}

func newWheelHarness(t *testing.T, tick time.Duration, slots int) *wheelHarness {
	t.Helper()
	h := &wheelHarness{
		t:      t,
		fc:     clock.NewFake(wheelT0),
		fired:  make(chan wheelFiring, 4096),
		parked: make(chan wheelPark, 4096),
	}
	h.w = mustNew(h.fc, tick, slots, func(batch []*envelope.Envelope, now time.Time) {
		f := wheelFiring{now: now}
		for _, e := range batch {
			f.ids = append(f.ids, e.ID)
		}
		h.fired <- f
	})
	h.w.testHookParked = func(armed bool, d time.Duration) { h.parked <- wheelPark{armed, d} }
	return h
}

func (h *wheelHarness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		h.w.Run(ctx)
	}()
	h.t.Cleanup(h.stop)
}

func (h *wheelHarness) stop() {
	h.t.Helper()
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		h.t.Fatal("Run did not return after ctx cancel")
	}
}

// park waits for the loop's next park and checks whether it armed a timer for d.
func (h *wheelHarness) park(armed bool, d time.Duration) {
	h.t.Helper()
	select {
	case p := <-h.parked:
		if p.armed != armed || (armed && p.d != d) {
			h.t.Fatalf("loop parked with armed=%v d=%v, want armed=%v d=%v", p.armed, p.d, armed, d)
		}
	case <-time.After(5 * time.Second):
		h.t.Fatal("wheel loop did not park")
	}
	if want := map[bool]int{false: 0, true: 1}[armed]; h.fc.Timers() != want {
		h.t.Fatalf("fake clock has %d timers armed, want %d", h.fc.Timers(), want)
	}
}

// firings takes everything fired so far.
func (h *wheelHarness) firings() []wheelFiring {
	var out []wheelFiring
	for {
		select {
		case f := <-h.fired:
			out = append(out, f)
		default:
			return out
		}
	}
}

func (h *wheelHarness) expectFired(want ...wheelFiring) {
	h.t.Helper()
	got := h.firings()
	if len(got) != len(want) {
		h.t.Fatalf("got %d fire calls %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if !slices.Equal(got[i].ids, want[i].ids) || !got[i].now.Equal(want[i].now) {
			h.t.Fatalf("fire call %d = %v at %v, want %v at %v",
				i, got[i].ids, got[i].now, want[i].ids, want[i].now)
		}
	}
}

func wheelMs(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestWheelNeverEarly(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond, 64)
	h.start()
	h.park(false, 0)

	due := wheelT0.Add(wheelMs(100))
	h.w.Schedule(wheelEnv("a", due))
	h.park(true, wheelMs(100)) // sleeps straight to the due time, not tick by tick

	h.fc.Advance(wheelMs(99)) // due − 1 ms: the timer is not due, nothing can fire
	h.expectFired()
	if h.w.Len() != 1 {
		t.Fatalf("Len = %d, want 1", h.w.Len())
	}
	h.fc.Advance(wheelMs(1))
	h.park(false, 0)
	h.expectFired(wheelFiring{[]string{"a"}, due})
	if h.w.Len() != 0 {
		t.Fatalf("Len = %d after firing, want 0", h.w.Len())
	}
}

// TestWheelNeverEarlyStep drives the loop body directly over random due times, tick
// sizes and clock steps: nothing fires before its due time, everything fires by the end
// of the tick containing it (plus the clock step), exactly once.
func TestWheelNeverEarlyStep(t *testing.T) {
	for _, tick := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 250 * time.Microsecond} {
		t.Run(tick.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tick)))
			fc := clock.NewFake(wheelT0)
			fired := map[string]time.Time{}
			w := mustNew(fc, tick, 8, func(batch []*envelope.Envelope, now time.Time) {
				for _, e := range batch {
					if _, dup := fired[e.ID]; dup {
						t.Fatalf("%s fired twice", e.ID)
					}
					fired[e.ID] = now
					if now.UnixMilli() < e.DueAt {
						t.Fatalf("%s due %d fired early at %d", e.ID, e.DueAt, now.UnixMilli())
					}
				}
			})
			dues := map[string]int64{}
			for i := range 2000 {
				id := fmt.Sprint(i)
				due := wheelT0.UnixMilli() + rng.Int64N(500) - 20 // some already past
				dues[id] = due
				w.Schedule(&envelope.Envelope{ID: id, DueAt: due})
			}
			for fc.Now().Before(wheelT0.Add(600 * time.Millisecond)) {
				fc.Advance(time.Duration(rng.Int64N(int64(3 * time.Millisecond))))
				wheelDrive(w, fc.Now())
			}
			if len(fired) != len(dues) || w.Len() != 0 {
				t.Fatalf("fired %d of %d, Len %d", len(fired), len(dues), w.Len())
			}
		})
	}
}

// wheelDrive runs the loop body until nothing more is due at now.
func wheelDrive(w *Wheel, now time.Time) {
	for {
		batch, processed, _ := w.step(now)
		if !processed {
			return
		}
		if len(batch) > 0 {
			w.fire(batch, now)
		}
	}
}

func TestWheelBatchesPerTick(t *testing.T) {
	t.Run("same ms", func(t *testing.T) {
		h := newWheelHarness(t, time.Millisecond, 64)
		h.start()
		h.park(false, 0)
		var envs []*envelope.Envelope
		var want []string
		for i := range 100 {
			envs = append(envs, wheelEnv(fmt.Sprint("a", i), wheelT0.Add(wheelMs(5))))
			want = append(want, fmt.Sprint("a", i))
		}
		h.w.ScheduleBatch(envs, nil)
		h.w.Schedule(wheelEnv("b", wheelT0.Add(wheelMs(6))))
		h.park(true, wheelMs(5))
		h.fc.Advance(wheelMs(5))
		h.park(true, wheelMs(1))
		h.expectFired(wheelFiring{want, wheelT0.Add(wheelMs(5))}) // one call, schedule order
		h.fc.Advance(wheelMs(1))
		h.park(false, 0)
		h.expectFired(wheelFiring{[]string{"b"}, wheelT0.Add(wheelMs(6))})
	})
	t.Run("within one 10ms tick", func(t *testing.T) {
		h := newWheelHarness(t, 10*time.Millisecond, 64)
		h.start()
		h.park(false, 0)
		var want []string
		for i := 1; i <= 10; i++ { // due T0+1ms … T0+10ms: all in tick (T0, T0+10ms]
			id := fmt.Sprint("x", i)
			h.w.Schedule(wheelEnv(id, wheelT0.Add(wheelMs(i))))
			want = append(want, id)
		}
		h.park(true, wheelMs(10))
		h.w.Schedule(wheelEnv("late", wheelT0.Add(wheelMs(11)))) // later than the wake-up: no signal
		h.fc.Advance(wheelMs(9))
		h.expectFired()
		h.fc.Advance(wheelMs(1))
		h.park(true, wheelMs(10))
		h.expectFired(wheelFiring{want, wheelT0.Add(wheelMs(10))})
		h.fc.Advance(wheelMs(10))
		h.park(false, 0)
		h.expectFired(wheelFiring{[]string{"late"}, wheelT0.Add(wheelMs(20))})
	})
}

// A pause (GC, suspended VM, clock jump) makes the loop wake late: every missed tick is
// processed in order, one fire call each, and the empty ones cost nothing.
func TestWheelCatchesUpMissedTicks(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond, 64)
	h.start()
	h.park(false, 0)
	h.w.ScheduleBatch([]*envelope.Envelope{
		wheelEnv("c", wheelT0.Add(wheelMs(3))),
		wheelEnv("a", wheelT0.Add(wheelMs(1))),
		wheelEnv("b", wheelT0.Add(wheelMs(2))),
		wheelEnv("d", wheelT0.Add(wheelMs(50))),
	}, nil)
	h.park(true, wheelMs(1))
	h.fc.Advance(wheelMs(10))
	h.park(true, wheelMs(40))
	now := wheelT0.Add(wheelMs(10))
	h.expectFired(
		wheelFiring{[]string{"a"}, now},
		wheelFiring{[]string{"b"}, now},
		wheelFiring{[]string{"c"}, now},
	)
}

// Entries further out than one rotation (slots·tick) stay in their slot for later rounds
// and the loop sleeps to the earliest one rather than once per rotation.
func TestWheelRemainingRounds(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond, 8) // one rotation = 8 ms
	h.start()
	h.park(false, 0)
	// All three hash to the same slot.
	h.w.Schedule(wheelEnv("far", wheelT0.Add(wheelMs(803))))
	h.park(true, wheelMs(803))
	h.w.Schedule(wheelEnv("next", wheelT0.Add(wheelMs(11))))
	h.park(true, wheelMs(11))
	h.w.Schedule(wheelEnv("now", wheelT0.Add(wheelMs(3))))
	h.park(true, wheelMs(3))

	h.fc.Advance(wheelMs(3))
	h.park(true, wheelMs(8))
	h.expectFired(wheelFiring{[]string{"now"}, wheelT0.Add(wheelMs(3))})
	h.fc.Advance(wheelMs(8))
	h.park(true, wheelMs(792))
	h.expectFired(wheelFiring{[]string{"next"}, wheelT0.Add(wheelMs(11))})
	h.fc.Advance(wheelMs(791))
	h.expectFired()
	if h.w.Len() != 1 {
		t.Fatalf("Len = %d, want 1", h.w.Len())
	}
	h.fc.Advance(wheelMs(1))
	h.park(false, 0)
	h.expectFired(wheelFiring{[]string{"far"}, wheelT0.Add(wheelMs(803))})
}

func TestWheelPastDueFiresNextTick(t *testing.T) {
	t.Run("scheduled while running", func(t *testing.T) {
		h := newWheelHarness(t, time.Millisecond, 64)
		h.start()
		h.park(false, 0)
		h.w.Schedule(wheelEnv("old", wheelT0.Add(-5*time.Second)))
		h.w.Schedule(wheelEnv("now", wheelT0)) // due at the current tick, already processed
		h.park(true, wheelMs(1))
		h.expectFired()
		h.fc.Advance(wheelMs(1))
		h.park(false, 0)
		h.expectFired(wheelFiring{[]string{"old", "now"}, wheelT0.Add(wheelMs(1))})
	})
	t.Run("scheduled before Run", func(t *testing.T) {
		h := newWheelHarness(t, time.Millisecond, 64)
		h.w.Schedule(wheelEnv("old", wheelT0.Add(-time.Hour)))
		h.start()
		h.park(true, wheelMs(1))
		h.fc.Advance(wheelMs(1))
		h.park(false, 0)
		h.expectFired(wheelFiring{[]string{"old"}, wheelT0.Add(wheelMs(1))})
	})
	t.Run("after an idle stretch", func(t *testing.T) {
		// The idle loop has not looked at the clock for 10 s; the tick it processes on
		// waking is long past, so the envelope goes out at once.
		h := newWheelHarness(t, time.Millisecond, 64)
		h.start()
		h.park(false, 0)
		h.fc.Advance(10 * time.Second)
		h.w.Schedule(wheelEnv("old", wheelT0.Add(time.Second)))
		h.park(false, 0)
		h.expectFired(wheelFiring{[]string{"old"}, wheelT0.Add(10 * time.Second)})
	})
}

func TestWheelCancel(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond, 64)
	h.start()
	h.park(false, 0)
	hs := make([]Handle, 4)
	h.w.ScheduleBatch([]*envelope.Envelope{
		wheelEnv("a", wheelT0.Add(wheelMs(5))),
		wheelEnv("b", wheelT0.Add(wheelMs(5))),
		wheelEnv("c", wheelT0.Add(wheelMs(5))),
		wheelEnv("past", wheelT0.Add(-wheelMs(5))),
	}, hs)
	h.park(true, wheelMs(1))
	b := hs[1] // a copy: Cancel clears the handle it is given, not its copies
	for _, c := range []struct {
		name string
		h    *Handle
		want bool
	}{{"b", &hs[1], true}, {"b again", &hs[1], false}, {"b's copy", &b, false}, {"zero", &Handle{}, false}, {"nil", nil, false}, {"past", &hs[3], true}} {
		if got := h.w.Cancel(c.h); got != c.want {
			t.Fatalf("Cancel(%s) = %v, want %v", c.name, got, c.want)
		}
	}
	if h.w.Len() != 2 {
		t.Fatalf("Len = %d, want 2", h.w.Len())
	}
	h.fc.Advance(wheelMs(1)) // the overdue entry was cancelled: this wake-up finds nothing
	h.park(true, wheelMs(4))
	h.expectFired()
	h.fc.Advance(wheelMs(4))
	h.park(false, 0)
	h.expectFired(wheelFiring{[]string{"a", "c"}, wheelT0.Add(wheelMs(5))})
	if h.w.Cancel(&hs[0]) {
		t.Fatal("Cancel of a fired entry reported true")
	}

	// Cancelling the only entry: the loop wakes once at the old deadline, then idles.
	x := h.w.Schedule(wheelEnv("x", wheelT0.Add(time.Second)))
	h.park(true, wheelMs(995))
	if !h.w.Cancel(&x) || h.w.Len() != 0 {
		t.Fatal("Cancel(x) failed")
	}
	h.fc.Advance(wheelMs(995))
	h.park(false, 0)
	h.expectFired()
}

// The wheel does not look at ids: the same id scheduled twice fires twice (the
// scheduler cancels an older copy itself). A handle whose envelope fired cancels
// nothing, even once its entry is recycled for the next envelope scheduled.
func TestWheelHandleOutlivesItsEntry(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond, 64)
	h.start()
	h.park(false, 0)
	first := h.w.Schedule(wheelEnv("m", wheelT0.Add(wheelMs(2))))
	h.park(true, wheelMs(2))
	second := h.w.Schedule(wheelEnv("m", wheelT0.Add(wheelMs(2))))
	if h.w.Len() != 2 {
		t.Fatalf("Len = %d, want 2", h.w.Len())
	}
	h.fc.Advance(wheelMs(2))
	h.park(false, 0)
	h.expectFired(wheelFiring{[]string{"m", "m"}, wheelT0.Add(wheelMs(2))})

	// Both entries are on the free list, the last released first: the next two
	// Schedules take them back.
	n := h.w.Schedule(wheelEnv("n", wheelT0.Add(wheelMs(10))))
	h.park(true, wheelMs(8))
	o := h.w.Schedule(wheelEnv("o", wheelT0.Add(wheelMs(10))))
	if (n.e != first.e && o.e != first.e) || (n.e != second.e && o.e != second.e) {
		t.Fatal("the fired entries were not recycled: the test cannot reach its case")
	}
	if h.w.Cancel(&first) || h.w.Cancel(&second) {
		t.Fatal("the handle of a fired envelope cancelled the envelope its entry now holds")
	}
	if h.w.Len() != 2 || !h.w.Cancel(&n) || !h.w.Cancel(&o) {
		t.Fatal("Cancel(n), Cancel(o) failed")
	}
}

func TestWheelIdleArmsNoTimer(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond, 64)
	h.start()
	h.park(false, 0) // checks fc.Timers() == 0: an empty wheel sleeps on its channel only
	h.fc.Advance(time.Hour)
	h.expectFired()

	// One entry an hour out, far beyond the 64 ms rotation: one timer, for the hour.
	h.w.Schedule(wheelEnv("h", wheelT0.Add(2*time.Hour)))
	h.park(true, time.Hour)
	h.fc.Advance(time.Hour)
	h.park(false, 0)
	h.expectFired(wheelFiring{[]string{"h"}, wheelT0.Add(2 * time.Hour)})

	// The earliest entry decides the wake-up, whatever order they arrive in.
	h.w.Schedule(wheelEnv("late", wheelT0.Add(3*time.Hour)))
	h.park(true, time.Hour)
	h.w.Schedule(wheelEnv("soon", wheelT0.Add(2*time.Hour+wheelMs(30))))
	h.park(true, wheelMs(30))
	h.w.Schedule(wheelEnv("later", wheelT0.Add(2*time.Hour+wheelMs(40))))
	select { // not earlier than the armed wake-up: Schedule does not wake the loop
	case p := <-h.parked:
		t.Fatalf("loop woke for a later entry: %+v", p)
	default:
	}
}

func TestWheelRunStopsAndDrain(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond, 64)
	h.start()
	h.park(false, 0)
	hs := make([]Handle, 4)
	h.w.ScheduleBatch([]*envelope.Envelope{
		wheelEnv("a", wheelT0.Add(wheelMs(1))),
		wheelEnv("b", wheelT0.Add(wheelMs(5))),
		wheelEnv("c", wheelT0.Add(time.Minute)),
		wheelEnv("d", wheelT0.Add(-time.Second)),
	}, hs)
	h.park(true, wheelMs(1))
	h.fc.Advance(wheelMs(1))
	h.park(true, wheelMs(4))
	h.expectFired(wheelFiring{[]string{"d", "a"}, wheelT0.Add(wheelMs(1))})

	h.stop() // Run returns on ctx cancel with b and c still held, unfired
	if n := h.fc.Timers(); n != 0 {
		t.Fatalf("%d timers left armed after Run returned", n)
	}
	h.fc.Advance(time.Hour)
	h.expectFired()
	if h.w.Len() != 2 {
		t.Fatalf("Len = %d, want 2", h.w.Len())
	}
	var got []string
	for _, e := range h.w.Drain() {
		got = append(got, e.ID)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Drain = %v, want [b c]", got)
	}
	if h.w.Len() != 0 || len(h.w.Drain()) != 0 || h.w.Cancel(&hs[1]) {
		t.Fatal("wheel not empty after Drain")
	}

	// The wheel is reusable after a drain.
	due := h.fc.Now().Add(wheelMs(2))
	h.w.Schedule(wheelEnv("e", due))
	h.start()
	h.park(true, wheelMs(2))
	h.fc.Advance(wheelMs(2))
	h.park(false, 0)
	h.expectFired(wheelFiring{[]string{"e"}, due})
}

func TestWheelRunTwicePanics(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond, 64)
	h.start()
	h.park(false, 0)
	defer func() {
		if recover() == nil {
			t.Fatal("second concurrent Run did not panic")
		}
	}()
	h.w.Run(context.Background())
}

// Many goroutines schedule, batch-schedule and cancel while the clock moves and the loop
// fires. Every envelope ends up exactly once in fired, cancelled or drained, and none
// fires early. Run it with -race.
func TestWheelConcurrent(t *testing.T) {
	fc := clock.NewFake(wheelT0)
	var mu sync.Mutex
	fired := map[string]int{}
	var early []string
	w := mustNew(fc, time.Millisecond, 256, func(batch []*envelope.Envelope, now time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range batch {
			fired[e.ID]++
			if now.UnixMilli() < e.DueAt {
				early = append(early, e.ID)
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()

	const goroutines, per = 32, 300
	cancelled := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var batch []*envelope.Envelope
			handles := map[string]*Handle{}
			flush := func() {
				hs := make([]Handle, len(batch))
				w.ScheduleBatch(batch, hs)
				for j, e := range batch {
					handles[e.ID] = &hs[j]
				}
				batch = nil
			}
			for i := range per {
				id := fmt.Sprintf("g%d-%d", g, i)
				env := wheelEnv(id, wheelT0.Add(time.Duration(rng.Int64N(300)-20)*time.Millisecond))
				if i%3 == 0 {
					batch = append(batch, env)
					if len(batch) == 10 {
						flush()
					}
				} else {
					h := w.Schedule(env)
					handles[id] = &h
				}
				if i%7 == 0 && i > 0 {
					victim := fmt.Sprintf("g%d-%d", g, i-1)
					if w.Cancel(handles[victim]) {
						cancelled[g] = append(cancelled[g], victim)
					}
				}
				_ = w.Len()
			}
			flush()
		})
	}
	wg.Go(func() {
		for range 200 {
			fc.Advance(time.Millisecond)
		}
	})
	wg.Wait()
	cancel()
	<-done
	drained := w.Drain()

	mu.Lock()
	defer mu.Unlock()
	seen := map[string]string{}
	note := func(id, how string) {
		if prev, ok := seen[id]; ok {
			t.Fatalf("%s both %s and %s", id, prev, how)
		}
		seen[id] = how
	}
	for id, n := range fired {
		if n != 1 {
			t.Fatalf("%s fired %d times", id, n)
		}
		note(id, "fired")
	}
	for _, ids := range cancelled {
		for _, id := range ids {
			note(id, "cancelled")
		}
	}
	for _, e := range drained {
		note(e.ID, "drained")
	}
	if len(seen) != goroutines*per {
		t.Fatalf("accounted for %d of %d envelopes", len(seen), goroutines*per)
	}
	if len(early) > 0 {
		t.Fatalf("fired early: %v", early)
	}
	if w.Len() != 0 {
		t.Fatalf("Len = %d after Drain", w.Len())
	}
}

// A clock stepping back must not strand entries scheduled afterwards behind the old,
// later time.
func TestWheelClockStepsBack(t *testing.T) {
	fc := clock.NewFake(wheelT0.Add(time.Hour))
	var got []string
	w := mustNew(fc, time.Millisecond, 64, func(batch []*envelope.Envelope, now time.Time) {
		for _, e := range batch {
			got = append(got, e.ID)
		}
	})
	wheelDrive(w, fc.Now())
	// Scheduled while the wheel still believes it is T0+1h: looks past due.
	w.Schedule(wheelEnv("a", wheelT0.Add(wheelMs(5))))
	back := wheelT0 // the clock went back an hour
	wheelDrive(w, back)
	if len(got) != 0 {
		t.Fatalf("fired %v before its due time", got)
	}
	wheelDrive(w, back.Add(wheelMs(4)))
	if len(got) != 0 {
		t.Fatalf("fired %v before its due time", got)
	}
	wheelDrive(w, back.Add(wheelMs(5)))
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("fired %v, want [a]", got)
	}
}

func TestWheelNewDefaults(t *testing.T) {
	fire := func([]*envelope.Envelope, time.Time) {}
	for _, c := range []struct {
		tick      time.Duration
		slots     int
		wantTick  time.Duration
		wantSlots int
	}{
		{0, 0, time.Millisecond, 4096},
		{-1, -5, time.Millisecond, 4096},
		{5 * time.Millisecond, 1, 5 * time.Millisecond, 1},
		{time.Millisecond, 100, time.Millisecond, 128},
		{time.Millisecond, 64, time.Millisecond, 64},
	} {
		w := mustNew(clock.Real{}, c.tick, c.slots, fire)
		if time.Duration(w.tickNs) != c.wantTick || len(w.buckets) != c.wantSlots {
			t.Errorf("New(%v, %d): tick %v slots %d, want %v %d",
				c.tick, c.slots, time.Duration(w.tickNs), len(w.buckets), c.wantTick, c.wantSlots)
		}
	}
	// Extreme due times neither overflow nor fire early.
	fc := clock.NewFake(wheelT0)
	n := 0
	w := mustNew(fc, time.Millisecond, 1, func(b []*envelope.Envelope, _ time.Time) { n += len(b) })
	hmax := w.Schedule(&envelope.Envelope{ID: "max", DueAt: math.MaxInt64})
	w.Schedule(&envelope.Envelope{ID: "min", DueAt: math.MinInt64})
	w.Schedule(&envelope.Envelope{DueAt: 0}) // no id: fires like any other
	wheelDrive(w, fc.Now().Add(wheelMs(1)))
	if n != 2 || w.Len() != 1 || !w.Cancel(&hmax) {
		t.Fatalf("fired %d, Len %d", n, w.Len())
	}
}

// nextTickLocked against a brute-force minimum over wide wheels (the bitmap walk wraps
// across many words): never later than the earliest pending tick, and exact while no
// cancel has left a slot's minimum stale.
func TestWheelNextTickMatchesMinimum(t *testing.T) {
	for _, c := range []struct {
		slots   int
		cancels bool
	}{{64, false}, {256, false}, {4096, false}, {64, true}, {256, true}, {4096, true}} {
		slots := c.slots
		rng := rand.New(rand.NewPCG(uint64(slots), 3))
		fc := clock.NewFake(wheelT0)
		w := mustNew(fc, time.Millisecond, slots, func([]*envelope.Envelope, time.Time) {})
		pending := map[string]int64{}
		handles := map[string]Handle{}
		for round := range 300 {
			for range rng.IntN(20) {
				id := fmt.Sprint(round, "-", rng.Int())
				due := fc.Now().UnixMilli() + rng.Int64N(int64(3*slots)) + 1
				handles[id] = w.Schedule(&envelope.Envelope{ID: id, DueAt: due})
				pending[id] = due
			}
			if c.cancels && round%5 == 0 {
				for id := range pending {
					h := handles[id]
					if !w.Cancel(&h) {
						t.Fatalf("%+v round %d: Cancel of pending %s failed", c, round, id)
					}
					delete(pending, id)
					break
				}
			}
			fc.Advance(time.Duration(rng.Int64N(int64(slots/2))) * time.Millisecond)
			now := fc.Now().UnixMilli()
			wheelDrive(w, fc.Now())
			for id, due := range pending {
				if due <= now {
					delete(pending, id)
				}
			}
			want := int64(math.MaxInt64)
			for _, due := range pending {
				want = min(want, due) // tick = 1 ms: tick number = due ms
			}
			w.mu.Lock()
			got := w.nextTickLocked()
			w.mu.Unlock()
			if got > want || (!c.cancels && got != want) {
				t.Fatalf("%+v round %d: next tick %d, earliest pending %d", c, round, got, want)
			}
			if len(pending) != w.Len() {
				t.Fatalf("Len %d, want %d", w.Len(), len(pending))
			}
		}
	}
}

// A tick's batch comes out by fire time, then receive time, then schedule order: same-key
// messages due together reach the wheel in claim order (shard by shard) but leave it in
// the order ingress received them.
func TestWheelOrdersBatchByDueThenReceived(t *testing.T) {
	h := newWheelHarness(t, 10*time.Millisecond, 64)
	h.start()
	h.park(false, 0)
	env := func(id string, dueMs, recvMs int) *envelope.Envelope {
		e := wheelEnv(id, wheelT0.Add(wheelMs(dueMs)))
		e.ReceivedAt = wheelT0.UnixMilli() - 1000 + int64(recvMs)
		return e
	}
	// Claimed in the order two shards' pumps ran, not in receive order.
	h.w.ScheduleBatch([]*envelope.Envelope{env("r3", 10, 3), env("r1", 10, 1), env("tie-a", 10, 5), env("early", 9, 9)}, nil)
	h.w.ScheduleBatch([]*envelope.Envelope{env("r2", 10, 2), env("tie-b", 10, 5), env("r0", 10, 0)}, nil)
	h.park(true, wheelMs(10))
	h.fc.Advance(wheelMs(10))
	h.park(false, 0)
	h.expectFired(wheelFiring{[]string{"early", "r0", "r1", "r2", "r3", "tie-a", "tie-b"}, wheelT0.Add(wheelMs(10))})
}

// mustNew is New with the options spelled positionally, failing on an error.
func mustNew(clk clock.Clock, tick time.Duration, slots int, fire FireFunc) *Wheel {
	w, err := New(Options{Clock: clk, Tick: tick, Slots: slots, Fire: fire})
	if err != nil {
		panic(err)
	}
	return w
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Options{Tick: time.Millisecond}); err == nil {
		t.Error("New without Fire: no error")
	}
	fire := func([]*envelope.Envelope, time.Time) {}
	if _, err := New(Options{Fire: fire, Slots: maxSlots + 1}); err == nil {
		t.Error("New with too many slots: no error")
	}
	w, err := New(Options{Fire: fire})
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(w.tickNs) != time.Millisecond || len(w.buckets) != 4096 {
		t.Errorf("defaults: tick %v slots %d", time.Duration(w.tickNs), len(w.buckets))
	}
}
