package scheduler_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

func shardsOf(owners []string, name string) []int {
	var out []int
	for i, o := range owners {
		if o == name {
			out = append(out, i)
		}
	}
	return out
}

// Two instances split the shards as Owners says; when one leaves, the other takes
// every shard over, and every message is published once.
func TestOwnershipSplitsAndTakesOverOnLeave(t *testing.T) {
	w := newWorld(t, 8)
	a := w.start(w.options("a"), nil)
	b := w.start(w.options("b"), nil)
	owners := membership.Owners([]string{"a", "b"}, 8)
	w.drive("a and b split the shards", 10*time.Second, func() bool {
		return slices.Equal(a.s.OwnedShards(), shardsOf(owners, "a")) && slices.Equal(b.s.OwnedShards(), shardsOf(owners, "b"))
	})
	msgs := ids("m", 40)
	w.park(msgs, w.fc.Now().Add(2*time.Second))
	b.stop()
	if got := b.s.OwnedShards(); len(got) != 0 {
		t.Fatalf("b still owns %v after stopping", got)
	}
	w.drive("a owns all 8 shards", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 8 })
	w.drive("all published", 10*time.Second, func() bool { return len(a.disp.published()) == len(msgs) })
	w.advance(time.Second)
	for _, id := range msgs {
		if n := a.disp.published()[id] + b.disp.published()[id]; n != 1 {
			t.Errorf("%s published %d times", id, n)
		}
		if st, _, _ := w.state(id); st != storeapi.StateDelivered {
			t.Errorf("%s: %s, want delivered", id, st)
		}
	}
}

// Fencing: an instance whose leases another holder took stops firing what it had
// claimed, drops it from the wheel without writing, and leaves it in flight for the
// new owner.
func TestLostLeaseStopsFiring(t *testing.T) {
	w := newWorld(t, 4)
	opt := w.options("a")
	opt.Lookahead = 5 * time.Second
	a := w.start(opt, nil)
	w.drive("a owns all shards", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 4 })
	msgs := ids("f", 20)
	due := w.fc.Now().Add(3 * time.Second)
	w.park(msgs, due)
	w.drive("claimed into the wheel", 10*time.Second, func() bool { return a.s.InMemory().Wheel == len(msgs) })
	// In one step: an ownership round of a's still under way (started by the last
	// step of drive) must not find a lease lapsed and take it back before the intruder.
	if tokens := w.ms.StealLeases([]int{0, 1, 2, 3}, "intruder#1", time.Hour); slices.Contains(tokens, 0) {
		t.Fatalf("intruder acquire: %v", tokens)
	}
	w.drive("a notices the lost leases", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 0 })
	if n := a.s.InMemory().Wheel; n != 0 {
		t.Fatalf("%d messages of lost shards still in the wheel", n)
	}
	w.fc.Set(due.Add(2 * time.Second))
	w.advance(time.Second)
	if got := a.disp.published(); len(got) != 0 {
		t.Fatalf("a published %d messages of shards it lost", len(got))
	}
	if _, inflight, _ := w.totals(); inflight != int64(len(msgs)) {
		t.Fatalf("in flight %d, want %d left for the new owner", inflight, len(msgs))
	}
	if m := a.s.InMemory(); m.FreeCredits != opt.MaxInMemory {
		t.Fatalf("credits %d free, want %d", m.FreeCredits, opt.MaxInMemory)
	}
}

// The pump claims what is due within the lookahead and nothing later, sleeps until the
// next message is half a lookahead from due (no claims meanwhile), and a park through
// the intake of something earlier wakes it at once.
func TestPumpClaimsWithinLookaheadSleepsAndIsWoken(t *testing.T) {
	w := newWorld(t, 1)
	w.step = 50 * time.Millisecond
	opt := w.options("a")
	opt.Lookahead, opt.SafetyScan = time.Second, time.Hour
	opt.ParkOnly = true // the wake rule: every park waits for a claim
	start := w.fc.Now()
	w.park([]string{"soon"}, start.Add(300*time.Millisecond))
	w.park([]string{"later"}, start.Add(10*time.Second))
	a := w.start(opt, nil)
	w.drive("soon claimed", 5*time.Second, func() bool { st, _, _ := w.state("soon"); return st != storeapi.StatePending })
	if st, _, _ := w.state("later"); st != storeapi.StatePending {
		t.Fatalf("later: %s, claimed beyond the lookahead", st)
	}
	w.drive("soon published", 5*time.Second, func() bool { return a.disp.published()["soon"] == 1 })
	if p := a.disp.tries("soon"); p[0].at.Before(start.Add(300 * time.Millisecond)) {
		t.Fatalf("soon published at %s, before its due time", p[0].at.Sub(start))
	}
	claims := w.ms.Calls(memstore.OpClaim)
	w.advance(start.Add(8 * time.Second).Sub(w.fc.Now()))
	if n := w.ms.Calls(memstore.OpClaim); n != claims {
		t.Fatalf("%d claims while nothing was due within the lookahead, want none", n-claims)
	}
	// A park through the intake wakes the pump without the clock moving; its claim
	// takes what is due within the lookahead (woken), not later.
	env := &envelope.Envelope{ID: "woken", Route: "r", DueAt: w.fc.Now().Add(100 * time.Millisecond).UnixMilli(), Payload: []byte("p")}
	if _, err := a.s.Park(context.Background(), []*envelope.Envelope{env}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st, _, _ := w.state("woken"); st == storeapi.StatePending; st, _, _ = w.state("woken") {
		if time.Now().After(deadline) {
			t.Fatal("the park did not wake the pump")
		}
		time.Sleep(time.Millisecond)
	}
	if st, _, _ := w.state("later"); st != storeapi.StatePending {
		t.Fatalf("later: %s after the wake-up claim, want pending", st)
	}
	// later is claimed half a lookahead before due, not earlier.
	w.drive("later claimed", 5*time.Second, func() bool { st, _, _ := w.state("later"); return st != storeapi.StatePending })
	if at := w.fc.Now().Sub(start); at < 9500*time.Millisecond {
		t.Fatalf("later claimed at %s, want ≥ 9.5s (due 10s, half a lookahead)", at)
	}
	w.drive("later published", 5*time.Second, func() bool { return a.disp.published()["later"] == 1 })
}

// Published acknowledges: the id is delivered, memory and credits come back.
func TestCompleterAcksOnPublish(t *testing.T) {
	w := newWorld(t, 2)
	opt := w.options("a")
	a := w.start(opt, nil)
	msgs := ids("ack", 10)
	w.park(msgs, w.fc.Now().Add(time.Second))
	w.drive("all delivered", 10*time.Second, func() bool {
		for _, id := range msgs {
			if st, _, _ := w.state(id); st != storeapi.StateDelivered {
				return false
			}
		}
		return true
	})
	for _, id := range msgs {
		if n := a.disp.published()[id]; n != 1 {
			t.Errorf("%s published %d times", id, n)
		}
	}
	w.drive("credits back", time.Second, func() bool { return a.s.InMemory().FreeCredits == opt.MaxInMemory })
}

// With Options.AckInterval the acker writes the acknowledgements in batches: the first
// after a quiet interval at once, later ones no sooner than the interval after the
// previous write, holding their credits meanwhile; stopping writes the acks still
// queued before the shards are released. Every message is published once.
func TestCompleterBatchedAcks(t *testing.T) {
	w := newWorld(t, 2)
	opt := w.options("a")
	opt.AckInterval = time.Hour // nothing after the first write is acked before the stop
	a := w.start(opt, nil)
	inState := func(msgs []string, want storeapi.State) func() bool {
		return func() bool {
			for _, id := range msgs {
				if st, _, _ := w.state(id); st != want {
					return false
				}
			}
			return true
		}
	}
	first := ids("first", 20)
	w.park(first, w.fc.Now().Add(time.Second))
	w.drive("first delivered", 10*time.Second, inState(first, storeapi.StateDelivered))
	second := ids("second", 20)
	w.park(second, w.fc.Now().Add(time.Second))
	w.drive("second published", 10*time.Second, func() bool {
		pub := a.disp.published()
		for _, id := range second {
			if pub[id] == 0 {
				return false
			}
		}
		return true
	})
	w.advance(time.Second)
	if !inState(second, storeapi.StateInflight)() {
		t.Fatal("the second batch was acknowledged within the ack interval")
	}
	// A pump may be between taking a claim's credits and settling them when this reads
	// (its safety scan fires as the clock advances): read until no claim holds any,
	// which on the memory store is at once. The queued acks' credits stay taken.
	free := a.s.InMemory().FreeCredits
	for i := 0; i < 200 && free != opt.MaxInMemory-len(second); i++ {
		time.Sleep(time.Millisecond)
		free = a.s.InMemory().FreeCredits
	}
	if free != opt.MaxInMemory-len(second) {
		t.Fatalf("%d free credits while %d acks are queued, want %d", free, len(second), opt.MaxInMemory-len(second))
	}
	a.stop()
	if !inState(second, storeapi.StateDelivered)() {
		t.Fatal("queued acknowledgements not written by the time Run returned")
	}
	for _, id := range append(first, second...) {
		if n := a.disp.published()[id]; n != 1 {
			t.Errorf("%s published %d times", id, n)
		}
	}
}

// A failed publish goes back to pending at fail time + AttemptBackoff(attempt), with
// the attempt counted, and is published again then.
func TestCompleterRetriesWithAttemptBackoff(t *testing.T) {
	w := newWorld(t, 1)
	opt := w.options("a")
	var mu sync.Mutex
	fails := 2
	a := w.start(opt, func(*envelope.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return errors.New("broker said no")
		}
		return nil
	})
	w.park([]string{"x"}, w.fc.Now().Add(time.Second))
	w.drive("x delivered", 20*time.Second, func() bool { st, _, _ := w.state("x"); return st == storeapi.StateDelivered })
	tries := a.disp.tries("x")
	if len(tries) != 3 {
		t.Fatalf("%d attempts, want 3", len(tries))
	}
	for i := 1; i < 3; i++ {
		if tries[i].attempt != int32(i) {
			t.Errorf("attempt %d published with Attempt %d", i+1, tries[i].attempt)
		}
		wait := clock.AttemptBackoff(i, opt.BackoffInitial, opt.BackoffMax)
		if gap := tries[i].at.Sub(tries[i-1].at); gap < wait {
			t.Errorf("retry %d after %s, before its backoff %s", i, gap, wait)
		}
	}
}

// After MaxAttempts failures a message is dead (with its reason) and handed to
// OnDead; a permanent failure is dead at once.
func TestCompleterDeadAfterMaxAttemptsOrPermanent(t *testing.T) {
	w := newWorld(t, 1)
	opt := w.options("a")
	var mu sync.Mutex
	var dead []string
	opt.OnDead = func(envs []*envelope.Envelope) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range envs {
			dead = append(dead, e.ID)
		}
	}
	a := w.start(opt, func(env *envelope.Envelope) error {
		if env.ID == "perm" {
			return fault.Permanent(errors.New("no such target"))
		}
		return errors.New("broker said no")
	})
	w.park([]string{"perm", "tries"}, w.fc.Now().Add(time.Second))
	w.drive("both dead", 20*time.Second, func() bool {
		p, _, _ := w.state("perm")
		q, _, _ := w.state("tries")
		return p == storeapi.StateDead && q == storeapi.StateDead
	})
	if n := len(a.disp.tries("perm")); n != 1 {
		t.Errorf("perm: %d attempts, want 1", n)
	}
	if n := len(a.disp.tries("tries")); n != opt.MaxAttempts {
		t.Errorf("tries: %d attempts, want %d", n, opt.MaxAttempts)
	}
	_, _, env := w.state("tries")
	if env == nil || !strings.Contains(env.Reason, "after 3 attempt(s)") {
		t.Errorf("dead letter reason %+v", env)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(dead)
	if !slices.Equal(dead, []string{"perm", "tries"}) {
		t.Errorf("OnDead got %v", dead)
	}
}

// A broker that cannot be reached is never a reason to dead-letter: far more failures
// than MaxAttempts, the message keeps being retried, and is delivered once it is back.
func TestCompleterNeverDeadForUnreachable(t *testing.T) {
	w := newWorld(t, 1)
	opt := w.options("a")
	opt.MaxAttempts, opt.BackoffMax = 2, 200*time.Millisecond
	var mu sync.Mutex
	down := true
	a := w.start(opt, func(*envelope.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return fault.Unreachable(errors.New("connection refused"))
		}
		return nil
	})
	w.park([]string{"u"}, w.fc.Now().Add(time.Second))
	w.drive("six attempts", 30*time.Second, func() bool { return len(a.disp.tries("u")) >= 6 })
	if st, _, _ := w.state("u"); st == storeapi.StateDead {
		t.Fatal("dead-lettered for an unreachable broker")
	}
	mu.Lock()
	down = false
	mu.Unlock()
	w.drive("delivered", 10*time.Second, func() bool { st, _, _ := w.state("u"); return st == storeapi.StateDelivered })
	if _, _, dead := w.totals(); dead != 0 {
		t.Fatalf("%d dead letters", dead)
	}
}

// A publish whose outcome is unknown is not re-sent at once: the message stays in
// flight and fires again only after its in-flight lease passed.
func TestCompleterUnknownOutcomeStaysInFlight(t *testing.T) {
	w := newWorld(t, 1)
	w.step = 50 * time.Millisecond
	opt := w.options("a")
	opt.InflightLease = 4 * time.Second
	var mu sync.Mutex
	first := true
	a := w.start(opt, func(*envelope.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if first {
			first = false
			return fault.UnknownOutcome(errors.New("no answer"))
		}
		return nil
	})
	w.park([]string{"q"}, w.fc.Now().Add(time.Second))
	w.drive("first attempt", 10*time.Second, func() bool { return len(a.disp.tries("q")) == 1 })
	w.advance(time.Second)
	if st, _, _ := w.state("q"); st != storeapi.StateInflight {
		t.Fatalf("q: %s after an unknown outcome, want inflight", st)
	}
	w.drive("delivered", 20*time.Second, func() bool { st, _, _ := w.state("q"); return st == storeapi.StateDelivered })
	tries := a.disp.tries("q")
	if len(tries) != 2 {
		t.Fatalf("%d attempts, want 2", len(tries))
	}
	if gap := tries[1].at.Sub(tries[0].at); gap < opt.InflightLease-opt.Lookahead {
		t.Fatalf("re-sent after %s, before the in-flight lease (%s, claimed up to %s ahead)", gap, opt.InflightLease, opt.Lookahead)
	}
}

// Store failures (claims, acks, retries failing, an ack whose reply was lost) are
// retried with backoff on the clock: every message is delivered, none twice.
func TestStoreFailuresRetriedNothingLost(t *testing.T) { storeFailuresRetried(t, 0) }

// The same with batched acknowledgements (Options.AckInterval): failed and lost acks are
// retried by the acker.
func TestStoreFailuresRetriedNothingLostBatchedAcks(t *testing.T) {
	storeFailuresRetried(t, 20*time.Millisecond)
}

func storeFailuresRetried(t *testing.T, ackInterval time.Duration) {
	w := newWorld(t, 4)
	opt := w.options("a")
	opt.AckInterval = ackInterval
	var mu sync.Mutex
	failed := map[string]bool{}
	a := w.start(opt, func(env *envelope.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasSuffix(env.ID, "7") && !failed[env.ID] {
			failed[env.ID] = true
			return errors.New("broker said no")
		}
		return nil
	})
	w.drive("a owns all shards", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 4 })
	w.ms.FailNext(memstore.OpClaim, 5, nil)
	w.ms.FailNext(memstore.OpAck, 3, nil)
	w.ms.LoseReplyNext(memstore.OpAck, 1, nil)
	w.ms.FailNext(memstore.OpRetry, 2, nil)
	msgs := ids("s", 60)
	w.park(msgs, w.fc.Now().Add(time.Second))
	w.drive("all delivered", 30*time.Second, func() bool {
		pending, inflight, _ := w.totals()
		return pending == 0 && inflight == 0
	})
	pub := a.disp.published()
	for _, id := range msgs {
		if st, _, _ := w.state(id); st != storeapi.StateDelivered {
			t.Errorf("%s: %s", id, st)
		}
		if pub[id] != 1 {
			t.Errorf("%s published %d times", id, pub[id])
		}
	}
	if _, _, dead := w.totals(); dead != 0 {
		t.Errorf("%d dead letters", dead)
	}
}

func TestNewFillsDefaultsAndValidates(t *testing.T) {
	w := newWorld(t, 2)
	if _, err := scheduler.New(scheduler.Options{Store: w.ms, Instance: "a"}); err != nil {
		t.Fatalf("zero options but store and instance: %v", err)
	}
	for name, opt := range map[string]scheduler.Options{
		"no store":           {Instance: "a"},
		"no instance":        {Store: w.ms},
		"negative tick":      {Store: w.ms, Instance: "a", Tick: -time.Millisecond},
		"negative lookahead": {Store: w.ms, Instance: "a", Lookahead: -time.Second},
		"backoff max < init": {Store: w.ms, Instance: "a", BackoffInitial: time.Second, BackoffMax: time.Millisecond},
		"lease ttl too low":  {Store: w.ms, Instance: "a", LeaseTTL: time.Millisecond},
	} {
		if _, err := scheduler.New(opt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A park wakes the pump only when its planned claim would take the new message less
// than lookahead/8 before due: a message due after that is left to the planned claim
// (no extra claim), one due earlier wakes it at once. A park while the pump is claiming
// always wakes it (that claim may have read the shard before the message was there).
func TestParkWakesThePumpOnlyWhenThePlannedClaimWouldBeLate(t *testing.T) {
	w := newWorld(t, 1)
	w.step = 50 * time.Millisecond
	opt := w.options("a")
	opt.Lookahead, opt.SafetyScan = time.Second, time.Hour // margin 125 ms
	opt.ParkOnly = true                                    // the wake rule: every park waits for a claim
	start := w.fc.Now()
	w.park([]string{"planned"}, start.Add(10*time.Second)) // the pump plans its claim at 9.5 s
	a := w.start(opt, nil)
	w.advance(time.Second)
	claims := w.ms.Calls(memstore.OpClaim)
	park := func(id string, due time.Time) {
		t.Helper()
		env := &envelope.Envelope{ID: id, Route: "r", DueAt: due.UnixMilli(), Payload: []byte("p")}
		if _, err := a.s.Park(context.Background(), []*envelope.Envelope{env}, nil); err != nil {
			t.Fatal(err)
		}
		w.settle()
		time.Sleep(20 * time.Millisecond) // real time for a woken pump to claim
	}
	park("after-margin", start.Add(9700*time.Millisecond)) // ≥ 9.5 s + 125 ms
	if n := w.ms.Calls(memstore.OpClaim) - claims; n != 0 {
		t.Fatalf("%d claims for a message the planned claim takes 200 ms ahead, want none", n)
	}
	park("within-margin", start.Add(9600*time.Millisecond)) // < 9.5 s + 125 ms
	deadline := time.Now().Add(5 * time.Second)
	for w.ms.Calls(memstore.OpClaim) == claims {
		if time.Now().After(deadline) {
			t.Fatal("a message the planned claim would take only 100 ms ahead did not wake the pump")
		}
		time.Sleep(time.Millisecond)
	}
	// Parks while a claim is under way, after it read the shard (so it cannot take
	// them): one due much later adds no claim now, but the pump plans its next claim for
	// it (half a lookahead from due, as for anything the claim had seen); one already
	// within half a lookahead of due is claimed at once.
	var armed atomic.Bool // the next claim is held (once)
	held, release := make(chan struct{}), make(chan struct{})
	w.ms.SetAfterClaimHook(func(ctx context.Context, op string) error {
		if armed.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
		return nil
	})
	defer w.ms.SetAfterClaimHook(nil)
	armed.Store(true)
	stop := make(chan struct{})
	go func() { // move the clock to the pump's planned claim, then hold it still
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.fc.Advance(w.step)
			time.Sleep(time.Millisecond)
		}
	}()
	<-held
	close(stop)
	before := w.ms.Calls(memstore.OpClaim)
	lateDue := w.fc.Now().Add(3 * time.Second)
	park("during-claim", lateDue)
	close(release)
	time.Sleep(200 * time.Millisecond) // real time for a (wrongly) woken pump to claim
	if n := w.ms.Calls(memstore.OpClaim) - before; n != 0 {
		t.Fatalf("%d claims right after a park during a claim of a message due in 3 s, want none (it is planned for)", n)
	}
	w.drive("during-claim claimed half a lookahead before due", 10*time.Second, func() bool {
		return w.ms.Calls(memstore.OpClaim) > before && !w.fc.Now().Before(lateDue.Add(-opt.Lookahead))
	})
	if now := w.fc.Now(); now.After(lateDue.Add(-opt.Lookahead / 4)) {
		t.Fatalf("the message parked during a claim was claimed %s before due, want about lookahead/2 (%s)", lateDue.Sub(now), opt.Lookahead/2)
	}
	// The clock stands still from here: only an immediate claim can take "soon". The
	// claim drive saw started may still be under way (Calls counts it at its start):
	// a park during it would be noted for a claim planned ahead, not wake the pump.
	time.Sleep(100 * time.Millisecond)
	release = make(chan struct{})
	armed.Store(true)
	anchorDue := w.fc.Now().Add(2 * opt.Lookahead)
	anchorErr := make(chan error, 1)
	go func() { // wakes the pump (its plan was the hour-long safety scan)
		env := &envelope.Envelope{ID: "anchor", Route: "r", DueAt: anchorDue.UnixMilli(), Payload: []byte("p")}
		_, err := a.s.Park(context.Background(), []*envelope.Envelope{env}, nil)
		anchorErr <- err
	}()
	<-held
	if err := <-anchorErr; err != nil {
		t.Fatal(err)
	}
	before = w.ms.Calls(memstore.OpClaim)
	soonDue := w.fc.Now().Add(opt.Lookahead / 4)
	park("soon-during-claim", soonDue)
	close(release)
	deadline = time.Now().Add(5 * time.Second)
	for w.ms.Calls(memstore.OpClaim) == before {
		if time.Now().After(deadline) {
			t.Fatal("a park during a claim of a message due within half a lookahead did not make the pump claim at once")
		}
		time.Sleep(time.Millisecond)
	}
	dues := map[string]time.Time{"planned": start.Add(10 * time.Second), "after-margin": start.Add(9700 * time.Millisecond),
		"within-margin": start.Add(9600 * time.Millisecond), "during-claim": lateDue, "anchor": anchorDue, "soon-during-claim": soonDue}
	w.drive("all published", 20*time.Second, func() bool {
		p := a.disp.published()
		for id := range dues {
			if p[id] != 1 {
				return false
			}
		}
		return true
	})
	for id, due := range dues {
		if at := a.disp.tries(id)[0].at; at.Before(due) {
			t.Fatalf("%s published %s early", id, due.Sub(at))
		}
	}
}
