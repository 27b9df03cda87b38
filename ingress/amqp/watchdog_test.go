package amqp

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

// TestStallRules drives the no-progress rule on the fake clock through the cases the
// watchdog decides on (the broker-facing path is TestStalledConsumerIsRebuilt).
func TestStallRules(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	w := newStallWatch(clk, 15*time.Second)
	expect := func(what string, stalled, rebuild bool) {
		t.Helper()
		if v := w.evaluate(); v.stalled != stalled || v.rebuild != rebuild || (v.stalled && v.detail == "") {
			t.Fatalf("%s: %+v; want stalled %v, rebuild %v (with a detail)", what, v, stalled, rebuild)
		}
	}
	w.consuming()

	// Lag unknown or zero: never stalled, however long nothing arrives.
	clk.Advance(time.Minute)
	expect("a minute, lag unknown", false, false)
	w.polled(0)
	clk.Advance(time.Minute)
	expect("a minute after an empty queue", false, false)

	// Ready messages and no delivery: stalled at a third of the timeout, rebuilt at it.
	w.polled(0)
	w.polled(20)
	clk.Advance(4 * time.Second)
	expect("4s with 20 ready", false, false)
	clk.Advance(time.Second)
	expect("5s with 20 ready", true, false)
	w.polled(20)
	clk.Advance(10 * time.Second)
	expect("15s with 20 ready", true, true)

	// A delivery is progress.
	w.delivered()
	expect("just delivered", false, false)

	// Time in the handler never counts (Redis down, prefetch exhausted meanwhile).
	w.handlerBegin()
	clk.Advance(time.Hour)
	w.polled(500)
	expect("an hour in the handler with 500 ready", false, false)
	w.handlerEnd()
	clk.Advance(4 * time.Second)
	expect("4s after the handler returned", false, false)
	clk.Advance(time.Second)
	expect("5s outside the handler", true, false)

	// A falling depth is progress: another consumer takes the messages (a competing
	// instance, the active consumer of a single-active-consumer queue).
	w.polled(400)
	expect("depth fell", false, false)
	clk.Advance(14 * time.Second)
	w.polled(400)
	expect("14s at the same depth", true, false)
	w.polled(450) // growing: the queue is not moving
	clk.Advance(time.Second)
	expect("15s, depth grew", true, true)

	// Rebuilds that do not help back off: the next one waits 2, then 4 timeouts after
	// the consumer was registered again; a delivery resets that.
	for i, wait := range []time.Duration{30 * time.Second, 60 * time.Second, 60 * time.Second} {
		w.rebuilt()
		w.consuming()
		w.polled(450)
		clk.Advance(wait - time.Second)
		w.polled(450)
		expect("rebuilt, one second before the backoff", true, false)
		clk.Advance(time.Second)
		if v := w.evaluate(); !v.rebuild {
			t.Fatalf("rebuild %d: not rebuilt after %s", i+2, wait)
		}
	}
	w.rebuilt()
	w.consuming()
	w.delivered()
	w.polled(450)
	w.polled(450)
	clk.Advance(15 * time.Second)
	expect("a delivery reset the backoff", true, true)
}

// TestPollPeriod: a fifth of the stall timeout, within 200ms..5s and LagPeriod.
func TestPollPeriod(t *testing.T) {
	for _, c := range []struct{ stall, lag, want time.Duration }{
		{15 * time.Second, DefaultLagPeriod, 3 * time.Second},
		{time.Minute, DefaultLagPeriod, 5 * time.Second},
		{time.Second, DefaultLagPeriod, 200 * time.Millisecond},
		{15 * time.Second, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		if got := pollPeriod(c.stall, c.lag); got != c.want {
			t.Errorf("pollPeriod(%s, %s) = %s, want %s", c.stall, c.lag, got, c.want)
		}
	}
}
