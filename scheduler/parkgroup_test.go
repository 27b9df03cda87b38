package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/testkit/memstore"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

type parkAnswer struct {
	prior  []storeapi.State
	minDue map[int]int64
	err    error
}

// Parks that arrive while one is under way go to the store together in one call, and
// each caller gets its own messages' states; a combined call that could try nothing
// (one caller's envelope does not encode) is made again caller by caller, so only that
// caller fails.
func TestParkGroupMergesParksQueuedBehindOne(t *testing.T) {
	ms, err := memstore.New(memstore.Options{Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msg := func(id string) *envelope.Envelope {
		return &envelope.Envelope{ID: id, Route: "r", DueAt: time.Now().Add(time.Hour).UnixMilli(), Payload: []byte("p")}
	}
	if _, _, err := ms.ParkEach(ctx, []*envelope.Envelope{msg("old")}); err != nil {
		t.Fatal(err)
	}
	var g parkGroup
	// The first store call of a round is held until the others are queued.
	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	ms.SetHook(func(ctx context.Context, op string) error {
		if op == memstore.OpPark && armed.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
		return nil
	})
	defer ms.SetHook(nil)
	// round parks first (held in the store), then the others while it is held; it
	// returns the answers in the order of the batches.
	round := func(first []*envelope.Envelope, others ...[]*envelope.Envelope) []parkAnswer {
		t.Helper()
		out := make([]parkAnswer, 1+len(others))
		done := make(chan int, len(out))
		start := func(i int, envs []*envelope.Envelope) {
			go func() {
				a := &out[i]
				a.prior, a.minDue, a.err = g.park(ctx, envs, true, ms.ParkEach)
				done <- i
			}()
		}
		armed.Store(true)
		start(0, first)
		<-held
		for i, envs := range others {
			start(i+1, envs)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			g.mu.Lock()
			n := len(g.queue)
			g.mu.Unlock()
			if n == len(others) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d parks queued, want %d", n, len(others))
			}
		}
		close(release)
		for range out {
			<-done
		}
		release = make(chan struct{})
		return out
	}

	calls := ms.Calls(memstore.OpPark)
	out := round([]*envelope.Envelope{msg("a")}, []*envelope.Envelope{msg("b1"), msg("b2")}, []*envelope.Envelope{msg("old"), msg("c")})
	if n := ms.Calls(memstore.OpPark) - calls; n != 2 {
		t.Fatalf("%d store calls for three parks, two of them queued behind the first: want 2", n)
	}
	want := [][]storeapi.State{{storeapi.StateUnknown}, {storeapi.StateUnknown, storeapi.StateUnknown}, {storeapi.StatePending, storeapi.StateUnknown}}
	for i, a := range out {
		if a.err != nil || len(a.prior) != len(want[i]) {
			t.Fatalf("park %d: %v, %v", i, a.prior, a.err)
		}
		for j := range want[i] {
			if a.prior[j] != want[i][j] {
				t.Fatalf("park %d message %d: %v, want %v", i, j, a.prior[j], want[i][j])
			}
		}
	}
	// The combined call's minDue goes to whichever of the two led it, whole.
	if (len(out[1].minDue) == 0) == (len(out[2].minDue) == 0) {
		t.Fatalf("minDue of the combined call: %v and %v; want it all with one caller", out[1].minDue, out[2].minDue)
	}
	if got, want := len(out[1].minDue)+len(out[2].minDue), shardsOf(ms, "b1", "b2", "c"); got != want {
		t.Fatalf("minDue of the combined call names %d shards, want %d (those of b1, b2, c)", got, want)
	}

	bad := &envelope.Envelope{Route: "r", DueAt: time.Now().UnixMilli(), Payload: []byte("p")} // no id: does not encode
	out = round([]*envelope.Envelope{msg("d")}, []*envelope.Envelope{msg("e")}, []*envelope.Envelope{bad})
	if out[1].err != nil || len(out[1].prior) != 1 || out[1].prior[0] != storeapi.StateUnknown {
		t.Fatalf("a park queued beside one that does not encode: %v, %v; want parked", out[1].prior, out[1].err)
	}
	if !errors.Is(out[2].err, storeapi.ErrInvalid) || out[2].prior != nil {
		t.Fatalf("the park that does not encode: %v, %v; want ErrInvalid and no states", out[2].prior, out[2].err)
	}
	for _, id := range []string{"a", "b1", "b2", "c", "d", "e"} {
		if st, _, _, err := ms.Get(ctx, id); err != nil || st != storeapi.StatePending {
			t.Fatalf("%s: %v, %v; want pending", id, st, err)
		}
	}
}

// shardsOf is how many distinct shards ids fall in.
func shardsOf(ms *memstore.Store, ids ...string) int {
	seen := map[int]bool{}
	for _, id := range ids {
		seen[ms.ShardOf(id)] = true
	}
	return len(seen)
}

// The linger: a leader whose queue holds only messages due far ahead waits up to
// ParkLinger for more parks and sends them all in one call; a park with a message due
// sooner ends the wait at once, and a leader with such a message does not wait at all.
func TestParkGroupLingersForFarDueParks(t *testing.T) {
	ms, err := memstore.New(memstore.Options{Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	g := newParkGroup(clk, 20*time.Millisecond, 2*time.Second, 4) // ends at 16 messages queued
	ctx := context.Background()
	msg := func(id string, in time.Duration) []*envelope.Envelope {
		return []*envelope.Envelope{{ID: id, Route: "r", DueAt: clk.Now().Add(in).UnixMilli(), Payload: []byte("p")}}
	}
	type answer struct {
		id  string
		st  []storeapi.State
		err error
	}
	answers := make(chan answer, 8)
	var startAs func(envs []*envelope.Envelope, linger bool)
	start := func(envs []*envelope.Envelope) { startAs(envs, true) }
	startAs = func(envs []*envelope.Envelope, linger bool) {
		go func() {
			st, _, err := g.park(ctx, envs, linger, ms.ParkEach)
			answers <- answer{envs[0].ID, st, err}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	queued := func() int { return len(g.queued()) }
	collect := func(n int) {
		t.Helper()
		for range n {
			select {
			case a := <-answers:
				if a.err != nil || len(a.st) == 0 || slices.ContainsFunc(a.st, func(st storeapi.State) bool { return st != storeapi.StateUnknown }) {
					t.Fatalf("park %s: %v, %v; want parked", a.id, a.st, a.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("a park did not return")
			}
		}
	}

	// Three far-due parks: the leader waits (its timer is the only one), the others
	// queue, and nothing reaches the store until the linger has passed.
	calls := ms.Calls(memstore.OpPark)
	start(msg("a", time.Hour))
	waitFor("the leader's linger timer", func() bool { return clk.Timers() == 1 })
	start(msg("b", time.Minute))
	start(msg("c", 3*time.Second))
	waitFor("three parks queued", func() bool { return queued() == 3 })
	time.Sleep(20 * time.Millisecond) // a leader that did not wait would have called by now
	if n := ms.Calls(memstore.OpPark) - calls; n != 0 {
		t.Fatalf("%d store calls while the leader lingers, want 0", n)
	}
	clk.Advance(20 * time.Millisecond)
	collect(3)
	if n := ms.Calls(memstore.OpPark) - calls; n != 1 {
		t.Fatalf("%d store calls for three far-due parks in one linger, want 1", n)
	}

	// A park due within lookahead + 2 x linger, queued while the leader lingers, ends
	// the linger without the clock moving.
	calls = ms.Calls(memstore.OpPark)
	start(msg("d", time.Hour))
	waitFor("the leader's linger timer", func() bool { return clk.Timers() == 1 })
	start(msg("e", 2*time.Second+30*time.Millisecond))
	collect(2)
	if n := ms.Calls(memstore.OpPark) - calls; n != 1 {
		t.Fatalf("%d store calls, want 1 (the lingering leader's, with the near-due park)", n)
	}

	// A park that may not wait (the planner's, far-due too) ends the linger as well,
	// and a leader that may not wait does not.
	calls = ms.Calls(memstore.OpPark)
	start(msg("p", time.Hour))
	waitFor("the leader's linger timer", func() bool { return clk.Timers() == 1 })
	startAs(msg("q", time.Hour), false)
	collect(2)
	startAs(msg("r", time.Hour), false)
	collect(1)
	if n := ms.Calls(memstore.OpPark) - calls; n != 2 || clk.Timers() != 0 {
		t.Fatalf("parks that may not wait: %d store calls, %d timers; want 2 and none", n, clk.Timers())
	}

	// Sixteen messages queued (four per shard) end the linger too.
	calls = ms.Calls(memstore.OpPark)
	start(msg("g", time.Hour))
	waitFor("the leader's linger timer", func() bool { return clk.Timers() == 1 })
	big := make([]*envelope.Envelope, 15)
	for i := range big {
		big[i] = msg(fmt.Sprintf("h%d", i), time.Hour)[0]
	}
	start(big)
	collect(2) // without the clock moving
	if n := ms.Calls(memstore.OpPark) - calls; n != 1 {
		t.Fatalf("%d store calls, want 1", n)
	}

	// A leader with a message due soon sends at once.
	calls = ms.Calls(memstore.OpPark)
	start(msg("f", time.Second))
	collect(1)
	if n := ms.Calls(memstore.OpPark) - calls; n != 1 || clk.Timers() != 0 {
		t.Fatalf("near-due park: %d store calls, %d timers; want 1 and none", n, clk.Timers())
	}
}
