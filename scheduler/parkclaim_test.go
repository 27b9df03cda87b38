package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// A park through the intake claims, in the same store call, what is due within the
// lookahead in a shard the scheduler holds: right after Park returns (the clock not
// moved, no claim made) it is in flight and in the wheel, and it fires at its due
// time; what is due later is pending for the pump. The caller's envelopes are left as
// they were. With ParkOnly everything waits for the pump.
func TestParkClaimsWhatIsDueWithinTheLookahead(t *testing.T) {
	for _, parkOnly := range []bool{false, true} {
		w := newWorld(t, 2)
		opt := w.options("a")
		opt.Lookahead, opt.SafetyScan, opt.ParkOnly = time.Second, time.Hour, parkOnly
		// "later" is parked first: the pumps plan their claims for it, so the park of the
		// others needs no claim, only (under ParkOnly) a wake-up.
		later := &envelope.Envelope{ID: "later", Route: "r", DueAt: w.fc.Now().Add(20 * time.Second).UnixMilli(), Payload: []byte("p")}
		a := w.start(opt, nil)
		w.drive("a owns both shards", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 2 })
		if _, err := a.s.Park(context.Background(), []*envelope.Envelope{later}, nil); err != nil {
			t.Fatal(err)
		}
		w.advance(100 * time.Millisecond) // the pumps' claims are made and planned
		claims := w.ms.Calls(memstore.OpClaim)
		now := w.fc.Now()
		soon := []*envelope.Envelope{
			{ID: "soon-1", Route: "r", DueAt: now.Add(300 * time.Millisecond).UnixMilli(), Payload: []byte("p")},
			{ID: "soon-2", Route: "r", DueAt: now.UnixMilli(), Payload: []byte("p")},
		}
		if _, err := a.s.Park(context.Background(), soon, nil); err != nil {
			t.Fatal(err)
		}
		for _, e := range soon {
			// With ParkOnly the pump, woken by the park, may have claimed it already.
			if st, _, _ := w.state(e.ID); st != storeapi.StateInflight && st != storeapi.StateDelivered && !parkOnly {
				t.Fatalf("%s right after Park: %s, want in flight (or, due now, published already)", e.ID, st)
			}
			if e.Claim != nil || e.FireAt != 0 || e.ClaimedBytes != 0 {
				t.Fatalf("Park wrote to the caller's envelope %s: %+v", e.ID, e)
			}
		}
		if st, _, _ := w.state("later"); st != storeapi.StatePending {
			t.Fatalf("later right after Park: %s, want pending", st)
		}
		if !parkOnly {
			if n := w.ms.Calls(memstore.OpClaim) - claims; n != 0 {
				t.Fatalf("%d claims made; want none (claimed as parked)", n)
			}
		}
		w.drive("soon published", 5*time.Second, func() bool {
			p := a.disp.published()
			return p["soon-1"] == 1 && p["soon-2"] == 1
		})
		for _, e := range soon {
			if at := a.disp.tries(e.ID)[0].at; at.UnixMilli() < e.DueAt {
				t.Fatalf("%s published %s early", e.ID, time.UnixMilli(e.DueAt).Sub(at))
			}
		}
		if parkOnly && w.ms.Calls(memstore.OpClaim) == claims {
			t.Fatal("ParkOnly: published without a claim")
		}
		// The metrics' count of how they came in (messages_claimed_total{via}).
		wantAtPark := int64(2)
		if parkOnly {
			wantAtPark = 0
		}
		if ms := a.s.MemoryStats(); ms.ClaimedAtPark != wantAtPark || ms.ClaimedByPump+ms.ClaimedAtPark != 2 {
			t.Fatalf("claimed at park %d, by the pumps %d; want %d of the 2 fired at park", ms.ClaimedAtPark, ms.ClaimedByPump, wantAtPark)
		}
		a.stop()
	}
}

// A park claims only what the free credits take at once: the rest is parked pending,
// and the credits come back when the claimed message is published.
func TestParkClaimsOnlyWhatCreditsHold(t *testing.T) {
	w := newWorld(t, 1)
	opt := w.options("a")
	opt.Lookahead, opt.SafetyScan, opt.MaxInMemory = time.Second, time.Hour, 1
	a := w.start(opt, nil)
	w.drive("a owns the shard", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 1 })
	w.advance(100 * time.Millisecond)
	due := w.fc.Now().Add(500 * time.Millisecond)
	var envs []*envelope.Envelope
	for _, id := range ids("c", 3) {
		envs = append(envs, &envelope.Envelope{ID: id, Route: "r", DueAt: due.UnixMilli(), Payload: []byte("p")})
	}
	if _, err := a.s.Park(context.Background(), envs, nil); err != nil {
		t.Fatal(err)
	}
	if pending, inflight, _ := w.totals(); pending != 2 || inflight != 1 || a.s.InMemory().FreeCredits != 0 {
		t.Fatalf("pending %d, in flight %d, free credits %d; want 2, 1, 0", pending, inflight, a.s.InMemory().FreeCredits)
	}
	w.drive("all published", 10*time.Second, func() bool { return len(a.disp.published()) == 3 })
	w.drive("credits back", 5*time.Second, func() bool { return a.s.InMemory().FreeCredits == 1 })
}

// A park claims nothing into a shard whose previous holder's in-flight set is still
// being recovered: the recovery would move that park's message back to due under the
// wheel, and the pump would claim and fire it a second time. Parked pending, it fires
// once.
func TestParkClaimsNothingBeforeTheShardIsRecovered(t *testing.T) {
	w := newWorld(t, 1)
	opt := w.options("a")
	opt.Lookahead, opt.SafetyScan = time.Second, time.Hour
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.ms.SetHook(func(ctx context.Context, op string) error {
		if op == memstore.OpRecover {
			once.Do(func() { close(held); <-release })
		}
		return nil
	})
	a := w.start(opt, nil)
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the scheduler stops (cleanups run last first)
	select {
	case <-held: // the shard is taken, its recovery under way
	case <-time.After(10 * time.Second):
		t.Fatal("the shard was not acquired")
	}
	env := &envelope.Envelope{ID: "early", Route: "r", DueAt: w.fc.Now().UnixMilli(), Payload: []byte("p")}
	if _, err := a.s.Park(context.Background(), []*envelope.Envelope{env}, nil); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := w.state("early"); st != storeapi.StatePending || a.s.InMemory().Wheel != 0 {
		t.Fatalf("parked while the shard is recovered: %s, %d in the wheel; want pending, none", st, a.s.InMemory().Wheel)
	}
	unblock()
	w.ms.SetHook(nil)
	w.drive("published", 10*time.Second, func() bool { return a.disp.published()["early"] == 1 })
	w.advance(time.Second)
	if n := a.disp.published()["early"]; n != 1 {
		t.Fatalf("published %d times, want once", n)
	}
}

// A park that claimed what it parked and lost its reply (it ran; the caller got an
// error) is healed by the shard's pump, which sends its next claim with that park's
// lease deadline: the message fires well before the in-flight lease would have
// recovered it, and once, though the ingress's replay of the batch is refused.
func TestParkClaimWithALostReplyIsClaimedAgain(t *testing.T) {
	w := newWorld(t, 1)
	opt := w.options("a")
	opt.Lookahead, opt.SafetyScan = time.Second, time.Hour
	a := w.start(opt, nil)
	w.drive("a owns the shard", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 1 })
	w.advance(100 * time.Millisecond)
	due := w.fc.Now().Add(200 * time.Millisecond)
	env := &envelope.Envelope{ID: "lost", Route: "r", DueAt: due.UnixMilli(), Payload: []byte("p")}
	w.ms.LoseReplyNext(memstore.OpPark, 1, nil)
	if _, err := a.s.Park(context.Background(), []*envelope.Envelope{env}, nil); err == nil {
		t.Fatal("Park with its reply lost: no error")
	}
	if st, _, _ := w.state("lost"); st != storeapi.StateInflight {
		t.Fatalf("after the lost reply: %s, want in flight (the park ran)", st)
	}
	if prior, err := a.s.Park(context.Background(), []*envelope.Envelope{env}, nil); err != nil || prior[0] != storeapi.StateInflight {
		t.Fatalf("the batch replayed: %v, %v; want refused as in flight", prior, err)
	}
	took := w.drive("published", opt.InflightLease, func() bool { return a.disp.published()["lost"] == 1 })
	if took >= opt.InflightLease/2 {
		t.Fatalf("published %s after the lost reply, want well within half the in-flight lease (%s)", took, opt.InflightLease/2)
	}
	if at := a.disp.tries("lost")[0].at; at.Before(due) {
		t.Fatalf("published %s early", due.Sub(at))
	}
	w.advance(time.Second)
	if n := a.disp.published()["lost"]; n != 1 {
		t.Fatalf("published %d times, want once", n)
	}
}

// With ParkClaimHorizon beyond the lookahead, a park claims what it parks due within
// the horizon too, while at least half the credits stay free. With four credits, one
// due within the lookahead is claimed first (as without a horizon); of four due beyond
// the lookahead one is claimed, which leaves two credits free, and three are parked
// pending for the pump; one due beyond the horizon is pending. All fire once, none
// early.
func TestParkClaimHorizonKeepsHalfTheCreditsForThePumps(t *testing.T) {
	w := newWorld(t, 1)
	opt := w.options("a")
	opt.Lookahead, opt.ParkClaimHorizon, opt.InflightLease, opt.SafetyScan, opt.MaxInMemory = time.Second, 10*time.Second, 30*time.Second, time.Hour, 4
	a := w.start(opt, nil)
	w.drive("a owns the shard", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 1 })
	w.advance(100 * time.Millisecond)
	now := w.fc.Now()
	var envs []*envelope.Envelope
	for _, id := range ids("mid", 4) {
		envs = append(envs, &envelope.Envelope{ID: id, Route: "r", DueAt: now.Add(5 * time.Second).UnixMilli(), Payload: []byte("p")})
	}
	envs = append(envs,
		&envelope.Envelope{ID: "far", Route: "r", DueAt: now.Add(20 * time.Second).UnixMilli(), Payload: []byte("p")},
		&envelope.Envelope{ID: "near", Route: "r", DueAt: now.Add(500 * time.Millisecond).UnixMilli(), Payload: []byte("p")})
	if _, err := a.s.Park(context.Background(), envs, nil); err != nil {
		t.Fatal(err)
	}
	// (Free credits are not read here: a pump woken by the park may hold them all for
	// a claim that takes none of these.)
	if pending, inflight, _ := w.totals(); pending != 4 || inflight != 2 {
		t.Fatalf("pending %d, in flight %d right after Park; want 4 (three mid, far), 2 (one mid, near)", pending, inflight)
	}
	for _, id := range []string{"near", "far"} {
		want := map[string]storeapi.State{"near": storeapi.StateInflight, "far": storeapi.StatePending}[id]
		if st, _, _ := w.state(id); st != want {
			t.Fatalf("%s right after Park: %s, want %s", id, st, want)
		}
	}
	w.drive("all published", 40*time.Second, func() bool { return len(a.disp.published()) == 6 })
	for _, e := range envs {
		if n := a.disp.published()[e.ID]; n != 1 {
			t.Fatalf("%s published %d times, want once", e.ID, n)
		}
		if at := a.disp.tries(e.ID)[0].at; at.UnixMilli() < e.DueAt {
			t.Fatalf("%s published %s early", e.ID, time.UnixMilli(e.DueAt).Sub(at))
		}
	}
	if ms := a.s.MemoryStats(); ms.ClaimedAtPark != 2 {
		t.Fatalf("claimed at park %d, want 2", ms.ClaimedAtPark)
	}
}
