package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/store/memstore"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// A replace that meets its message in flight, still held in the wheel (claimed a
// lookahead before due): the old version is not published; the new one is, once, at
// its own due time, as the last version; counted as replaced.
func TestReplaceInWheelReleasesOldVersion(t *testing.T) {
	w := newWorld(t, 2)
	opt := w.options("a")
	opt.Lookahead = 5 * time.Second
	a := w.start(opt, nil)
	w.drive("a owns all shards", 10*time.Second, func() bool { return len(a.s.OwnedShards()) == 2 })
	due := w.fc.Now().Add(2 * time.Second)
	w.park([]string{"cart"}, due)
	w.drive("claimed into the wheel", 10*time.Second, func() bool { return a.s.InMemory().Wheel == 1 })

	later := due.Add(2 * time.Second)
	res, err := a.s.Replace(context.Background(), []*envelope.Envelope{{
		ID: "cart", Route: "r", DueAt: later.UnixMilli(), ReceivedAt: w.fc.Now().UnixMilli(), Payload: []byte("v2"),
	}})
	if err != nil || res[0] != (storeapi.ReplaceResult{Prior: storeapi.StateInflight, Outcome: storeapi.ReplaceReplaced}) {
		t.Fatalf("Replace = %+v %v, want replaced in flight", res, err)
	}
	if n := a.s.InMemory().Wheel; n != 0 {
		t.Fatalf("%d in the wheel after the replace, want the old version taken out", n)
	}
	// The old version put back: the successor is pending (or claimed again already).
	w.drive("the successor in place", 10*time.Second, func() bool {
		st, score, env := w.state("cart")
		_, inflight, _ := w.totals()
		return st == storeapi.StatePending && score == later.UnixMilli() && inflight == 0 ||
			st == storeapi.StateInflight && string(env.Payload) == "v2"
	})
	w.fc.Set(later.Add(-50 * time.Millisecond))
	w.advance(20 * time.Millisecond)
	if got := a.disp.published(); len(got) != 0 {
		t.Fatalf("published %v %+v before the new due time %s (the old version fired?)", got, a.disp.tries("cart"), later)
	}
	w.drive("published", 10*time.Second, func() bool { return a.disp.published()["cart"] == 1 })
	w.advance(time.Second)
	tries := a.disp.tries("cart")
	if len(tries) != 1 || tries[0].at.Before(later) {
		t.Fatalf("publishes %+v, want one at or after %s", tries, later)
	}
	if st, _, _ := w.state("cart"); st != storeapi.StateDelivered {
		t.Fatalf("state %q after the publish, want delivered", st)
	}
}

// x-delay-replace on a route with `order: key` replaces inside the key's shard
// (docs/CONTRACT.md "Replace"): the stored message takes the new version and its key's
// order is recomputed; an unknown id is parked in its key; a replace naming the stored
// id under another key is refused, the stored message left as it was.
func TestReplaceOnOrderedRoute(t *testing.T) {
	w := newWorld(t, 2)
	ms, err := memstore.New(memstore.Options{Shards: 2, DoneWindow: time.Hour, Clock: w.fc, Ordered: []string{"r"}})
	if err != nil {
		t.Fatal(err)
	}
	w.ms = ms
	a := w.start(w.options("a"), nil)
	due := w.fc.Now().Add(time.Minute)
	keyed := func(id, key string, at time.Time, p string) *envelope.Envelope {
		return &envelope.Envelope{ID: id, Route: "r", Key: []byte(key), DueAt: at.UnixMilli(), ReceivedAt: w.fc.Now().UnixMilli(), Payload: []byte(p)}
	}
	if _, _, err := ms.Park(context.Background(), []*envelope.Envelope{keyed("cart", "K", due, "p")}); err != nil {
		t.Fatal(err)
	}
	later := due.Add(time.Minute)
	in := []scheduler.Incoming{
		{Env: keyed("cart", "K", later, "v2"), Replace: true},
		{Env: keyed("fresh", "K", later, "v1"), Replace: true},
		{Env: keyed("cart", "other", later, "x"), Replace: true},
	}
	if err := a.s.Accept(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if st, score, env := w.state("cart"); st != storeapi.StatePending || score != later.UnixMilli() || string(env.Payload) != "v2" {
		t.Fatalf("cart = %s at %d %q, want pending at %d with v2", st, score, env.Payload, later.UnixMilli())
	}
	if st, _, env := w.state("fresh"); st != storeapi.StatePending || string(env.Payload) != "v1" {
		t.Fatalf("fresh = %s %+v, want parked pending", st, env)
	}
	km, err := ms.KeyMessages(context.Background(), "r", "K")
	if err != nil || len(km) != 2 || km[0].Env.ID != "cart" || !km[0].Head {
		t.Fatalf("KeyMessages(r, K) = %+v, %v: want cart (head) then fresh", km, err)
	}
	if km, _ := ms.KeyMessages(context.Background(), "r", "other"); len(km) != 0 {
		t.Fatalf("KeyMessages(r, other) = %+v, want nothing (no second copy)", km)
	}
}
