package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The done window's granularity and its later states (the Redis store keeps it by
// slice: docs/CONTRACT.md §3).

func init() {
	register("DoneWindowKeepsTheLatestState", caseDoneWindowKeepsTheLatestState)
	register("DoneWindowByCancel", caseDoneWindowByCancel)
	register("DoneWindowManyIDsInOneShard", caseDoneWindowManyIDsInOneShard)
}

// Thousands of ids delivered in one shard (enough to make the Redis store's index split
// its sub-hashes several times, docs/ARCHITECTURE.md "The id index") are all remembered:
// every replay is refused as delivered, and a new id among them is not.
func caseDoneWindowManyIDsInOneShard(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(Config{Shards: 1, DoneWindow: time.Hour}).Store
	ctx := storeCtx(t)
	const n = 4000
	tok := mustLease(t, s, 0, "i1")
	var replay []*envelope.Envelope
	for start := 0; start < n; start += 500 {
		var envs []*envelope.Envelope
		for i := start; i < start+500; i++ {
			envs = append(envs, env(fmt.Sprintf("many-%d", i), t0))
		}
		mustPark(t, s, envs...)
		items, _ := mustClaim(t, s, 0, tok, t0, 500)
		if len(items) != 500 {
			t.Fatalf("claimed %d of 500", len(items))
		}
		if err := s.Ack(ctx, 0, ids(items), t0+int64(start)); err != nil {
			t.Fatal(err)
		}
		replay = append(replay, envs...)
	}
	replay = append(replay, env("many-new", t0))
	prior, _, err := s.ParkEach(ctx, replay)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range prior[:n] {
		if st != storeapi.StateDelivered {
			t.Fatalf("replay of %s = %q, want delivered", replay[i].ID, st)
		}
	}
	if prior[n] != storeapi.StateUnknown {
		t.Fatalf("a new id among %d remembered ones = %q, want parked", n, prior[n])
	}
	wantState(t, s, "many-3999", storeapi.StateDelivered, doneSec(t0+3500))
}

// An id's done state is forgotten a window and a slice after its LAST state, not its
// first: a tombstone, then an ack of that id's message (delivered later), then trims of
// the tombstone's slice leave the delivered state alone.
func caseDoneWindowKeepsTheLatestState(t *testing.T, newSubject func(Config) Subject) {
	const window = 10 * time.Second
	s := newSubject(Config{Shards: 1, DoneWindow: window}).Store
	ctx := storeCtx(t)
	w, slice := window.Milliseconds(), storeapi.DoneSliceMs(window.Milliseconds())
	if _, _, err := s.Cancel(ctx, "x", t0, storeapi.CancelOptions{Route: "B", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	mustPark(t, s, envOn("x", "A", t0))
	tok := mustLease(t, s, 0, "i1")
	if items, _ := mustClaim(t, s, 0, tok, t0, 10); len(items) != 1 {
		t.Fatalf("claimed %v", ids(items))
	}
	delivered := t0 + 3*slice
	if err := s.Ack(ctx, 0, []string{"x"}, delivered); err != nil {
		t.Fatal(err)
	}
	// Trim everything of the tombstone's time (a tombstone trims on its way).
	trimAt(t, s, t0+w+slice+1)
	wantState(t, s, "x", storeapi.StateDelivered, delivered)
	if p := mustPark(t, s, envOn("x", "A", t0)); p[0] {
		t.Fatal("a delivered id was parked again after its older tombstone's slice was trimmed")
	}
	// A window and a slice after the delivery it goes.
	trimAt(t, s, delivered+w+slice)
	wantState(t, s, "x", storeapi.StateUnknown, -1)
}

// Cancelled ids (of a pending message, and tombstones) are remembered for at least the
// window and forgotten a slice after it, like delivered ones.
func caseDoneWindowByCancel(t *testing.T, newSubject func(Config) Subject) {
	const window = 30 * time.Second
	s := newSubject(Config{Shards: 1, DoneWindow: window}).Store
	ctx := storeCtx(t)
	w, slice := window.Milliseconds(), storeapi.DoneSliceMs(window.Milliseconds())
	mustPark(t, s, env("p", t0+w))
	if st, _, err := s.Cancel(ctx, "p", t0, storeapi.CancelOptions{}); err != nil || st != storeapi.StatePending {
		t.Fatalf("Cancel(p) = %q %v", st, err)
	}
	if _, _, err := s.Cancel(ctx, "q", t0+1, storeapi.CancelOptions{Route: "orders", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	// Exactly a window later both are still there.
	trimAt(t, s, t0+1+w)
	wantState(t, s, "p", storeapi.StateCancelled, t0)
	wantState(t, s, "q", storeapi.StateCancelled, doneSec(t0+1))
	if prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{env("p", t0), env("q", t0)}); err != nil ||
		prior[0] != storeapi.StateCancelled || prior[1] != storeapi.StateCancelled {
		t.Fatalf("replays inside the window = %v %v, want cancelled twice", prior, err)
	}
	trimAt(t, s, t0+1+w+slice)
	wantState(t, s, "p", storeapi.StateUnknown, -1)
	wantState(t, s, "q", storeapi.StateUnknown, -1)
}

// trimAt runs the done window's trim at now as a side effect of tombstones (a few, each
// trimming a bounded number of old ids), on ids of their own.
func trimAt(t *testing.T, s storeapi.Store, now int64) {
	t.Helper()
	for i := range 3 {
		id := fmt.Sprintf("trimmer-%d-%d", now, i)
		if _, _, err := s.Cancel(storeCtx(t), id, now, storeapi.CancelOptions{Route: "trimmer", Tombstone: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// doneSec is the time Get reports for an id delivered or cancelled at ms: whole seconds,
// rounded down (docs/CONTRACT.md §3: the done window keeps seconds).
func doneSec(ms int64) int64 { return ms - ms%1000 }
