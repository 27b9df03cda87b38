package store

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

func envOn(id, route string, due int64) *envelope.Envelope {
	e := env(id, due)
	e.Route = route
	return e
}

// TestStoreParkEachSaysWhyRefused: a replay of ids in every state is refused with the
// state as reason (the Duplicate metric's label), a repeat inside one batch reads
// pending, and new ids read StateUnknown.
func TestStoreParkEachSaysWhyRefused(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	a := idsOnShard(s, 2, 6, "why")
	mustPark(t, s, env(a[0], t0+60_000), env(a[1], t0), env(a[2], t0), env(a[3], t0))
	tok := mustLease(t, s, 2, "i1")
	mustClaim(t, s, 2, tok, t0, 10) // a1..a3 in flight
	if err := s.Retry(ctx, 2, []RetryItem{{Env: env(a[2], t0), Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, 2, []string{a[3]}, t0); err != nil {
		t.Fatal(err)
	}
	if st, _, err := s.Cancel(ctx, a[4], t0, CancelOptions{Route: "orders", Tombstone: true}); err != nil || st != StateUnknown {
		t.Fatalf("tombstone cancel = %q %v", st, err)
	}
	prior, minDue, err := s.ParkEach(ctx, []*envelope.Envelope{
		env(a[0], 1), env(a[1], 1), env(a[2], 1), env(a[3], 1), env(a[4], 1), env(a[5], t0+5), env(a[5], t0+6),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []State{StatePending, StateInflight, StateDead, StateDelivered, StateCancelled, StateUnknown, StatePending}
	if !slices.Equal(prior, want) {
		t.Fatalf("ParkEach prior = %q, want %q", prior, want)
	}
	if minDue[2] != t0+5 || len(minDue) != 1 {
		t.Fatalf("minDue = %v, want only the new id's due", minDue)
	}
	wantState(t, s, a[5], StatePending, t0+5)
}

// TestStoreBuryReportsOnlyNew: burying a batch again reports every id as already dead,
// and an invalid record whose id is pending is not buried (reported pending).
func TestStoreBuryReportsOnlyNew(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	bad := []*envelope.Envelope{env("bury-1", t0), env("bury-2", t0), env("bury-3", t0)}
	for _, e := range bad {
		e.Reason = "bad_delay: x"
	}
	mustPark(t, s, env("bury-p", t0+1000))
	prior, err := s.Bury(ctx, append(bad, env("bury-p", t0)), t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []State{StateUnknown, StateUnknown, StateUnknown, StatePending}; !slices.Equal(prior, want) {
		t.Fatalf("first Bury prior = %q, want %q", prior, want)
	}
	prior, err = s.Bury(ctx, bad, t0+1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []State{StateDead, StateDead, StateDead}; !slices.Equal(prior, want) {
		t.Fatalf("replayed Bury prior = %q, want %q", prior, want)
	}
	wantState(t, s, "bury-2", StateDead, t0)
	wantState(t, s, "bury-p", StatePending, t0+1000)
}

// TestStoreCancelScopedToRoute: a cancel of route B leaves route A's message alone; a
// tombstone of route B does not stop route A's message with that id but does stop route
// B's; route A's own cancel cancels it.
func TestStoreCancelScopedToRoute(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	mustPark(t, s, envOn("x", "A", t0+60_000))
	st, _, err := s.Cancel(ctx, "x", t0, CancelOptions{Route: "B", Tombstone: true})
	if !errors.Is(err, ErrOtherRoute) || st != StatePending || IsRetryable(err) {
		t.Fatalf("route B's cancel of route A's message = %q %v, want pending + ErrOtherRoute", st, err)
	}
	wantState(t, s, "x", StatePending, t0+60_000)

	// A tombstone of route B for an id not seen yet.
	if st, _, err := s.Cancel(ctx, "y", t0, CancelOptions{Route: "B", Tombstone: true}); err != nil || st != StateUnknown {
		t.Fatalf("tombstone = %q %v", st, err)
	}
	wantState(t, s, "y", StateCancelled, t0)
	prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{envOn("y", "B", t0+1), envOn("y", "A", t0+2)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []State{StateCancelled, StateUnknown}; !slices.Equal(prior, want) {
		t.Fatalf("park y on B then A = %q, want %q (B's tombstone stops only B)", prior, want)
	}
	wantState(t, s, "y", StatePending, t0+2)
	if st, _, err := s.Cancel(ctx, "y", t0+3, CancelOptions{Route: "A", Tombstone: true}); err != nil || st != StatePending {
		t.Fatalf("route A's cancel of its message = %q %v", st, err)
	}
	wantState(t, s, "y", StateCancelled, t0+3)
	prior, _, err = s.ParkEach(ctx, []*envelope.Envelope{envOn("y", "A", t0), envOn("y", "B", t0)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []State{StateCancelled, StateCancelled}; !slices.Equal(prior, want) {
		t.Fatalf("park y on A and B after A's cancel = %q, want %q (A's cancel keeps B's tombstone)", prior, want)
	}
	if st, _, err := s.Cancel(ctx, "x", t0, CancelOptions{Route: "A"}); err != nil || st != StatePending {
		t.Fatalf("route A's cancel of x = %q %v", st, err)
	}

	// Two routes' tombstones for one id both hold.
	for _, r := range []string{"B", "A"} {
		if st, _, err := s.Cancel(ctx, "z", t0, CancelOptions{Route: r, Tombstone: true}); err != nil || st != StateUnknown {
			t.Fatalf("tombstone of %s = %q %v", r, st, err)
		}
	}
	if st, _, err := s.Cancel(ctx, "z", t0, CancelOptions{Route: "A", Tombstone: true}); err != nil || st != StateCancelled {
		t.Fatalf("repeated tombstone of A = %q %v, want cancelled", st, err)
	}
	prior, _, err = s.ParkEach(ctx, []*envelope.Envelope{envOn("z", "A", t0), envOn("z", "B", t0), envOn("z", "C", t0)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []State{StateCancelled, StateCancelled, StateUnknown}; !slices.Equal(prior, want) {
		t.Fatalf("park z on A, B, C = %q, want %q", prior, want)
	}
}

// TestStoreCancelUnknownLeavesNoTrace: without Tombstone an unknown id is reported
// unknown and nothing is recorded: a later message with that id parks.
func TestStoreCancelUnknownLeavesNoTrace(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	if st, _, err := s.Cancel(ctx, "ghost", t0, CancelOptions{}); err != nil || st != StateUnknown {
		t.Fatalf("Cancel(unknown) = %q %v", st, err)
	}
	wantState(t, s, "ghost", StateUnknown, -1)
	k := s.keys[s.ShardOf("ghost")]
	if n := c.ZCard(ctx, k.done).Val() + c.HLen(ctx, k.cancelled).Val(); n != 0 {
		t.Fatalf("a cancel of an unknown id left %d entries", n)
	}
	if p := mustPark(t, s, env("ghost", t0)); !p[0] {
		t.Fatal("a message with an id once cancelled while unknown was refused")
	}
	if _, _, err := s.Cancel(ctx, "ghost", t0, CancelOptions{Tombstone: true}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("tombstone without a route: %v, want ErrInvalid", err)
	}
}

// TestStoreCancelScriptRefusesStaleEnvelope: the script cancels only the envelope the
// caller checked; after a change (here: a retry re-encoded it) it answers stale and
// changes nothing, and Store.Cancel reads again and succeeds.
func TestStoreCancelScriptRefusesStaleEnvelope(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	mustPark(t, s, env("st", t0+1000))
	k := s.keys[s.ShardOf("st")]
	raw, err := c.HGet(ctx, k.msg, "st").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(append(raw, 'x'))
	remember, before, limit := s.trimArgs(t0, 1)
	v, err := s.eval(ctx, s.cancel, s.idKeys("st"), "st", t0, remember, before, limit, "orders", hex.EncodeToString(sum[:]), 0).Text()
	if err != nil || v != "stale" {
		t.Fatalf("cancel with another envelope's sum = %q %v, want stale", v, err)
	}
	v, err = s.eval(ctx, s.cancel, s.idKeys("st"), "st", t0, remember, before, limit, "orders", "", 0).Text()
	if err != nil || v != "stale" {
		t.Fatalf("cancel by a caller that saw no envelope = %q %v, want stale", v, err)
	}
	wantState(t, s, "st", StatePending, t0+1000)
	if st, _, err := s.Cancel(ctx, "st", t0, CancelOptions{Route: "orders"}); err != nil || st != StatePending {
		t.Fatalf("Cancel = %q %v", st, err)
	}
	wantState(t, s, "st", StateCancelled, t0)
}

// TestStoreDoneLayout: a done entry without a cancelled field (an older bridge's, which
// recorded cancels there too) reads delivered; an ack turns another route's tombstone
// into delivered; trimming forgets done entries and their cancelled fields together.
func TestStoreDoneLayout(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	k := s.keys[0]
	c.ZAdd(ctx, k.done, redis.Z{Score: float64(t0), Member: "old"})
	wantState(t, s, "old", StateDelivered, t0)
	if prior, _, _ := s.ParkEach(ctx, []*envelope.Envelope{env("old", t0)}); prior[0] != StateDelivered {
		t.Fatalf("park over an old done entry = %q, want delivered", prior[0])
	}

	if _, _, err := s.Cancel(ctx, "t", t0, CancelOptions{Route: "B", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	mustPark(t, s, envOn("t", "A", t0))
	tok := mustLease(t, s, 0, "i1")
	if items, _ := mustClaim(t, s, 0, tok, t0, 10); len(items) != 1 {
		t.Fatalf("claimed %v", ids(items))
	}
	if err := s.Ack(ctx, 0, []string{"t"}, t0+1); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "t", StateDelivered, t0+1)

	if _, _, err := s.Cancel(ctx, "u", t0+2, CancelOptions{Route: "B", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	if n := c.HLen(ctx, k.cancelled).Val(); n != 1 {
		t.Fatalf("cancelled hash has %d fields, want 1", n)
	}
	// A minute later every entry above is past the window: the next ack trims them.
	mustPark(t, s, env("late", t0+61_000))
	if items, _ := mustClaim(t, s, 0, tok, t0+61_000, 10); len(items) != 1 {
		t.Fatalf("claimed %v", ids(items))
	}
	if err := s.Ack(ctx, 0, []string{"late"}, t0+62_010); err != nil {
		t.Fatal(err)
	}
	if n, h := c.ZCard(ctx, k.done).Val(), c.HLen(ctx, k.cancelled).Val(); n != 1 || h != 0 {
		t.Fatalf("after the trim done has %d entries and cancelled %d fields, want 1 (late) and 0", n, h)
	}
	wantState(t, s, "u", StateUnknown, -1)
}

// TestStoreTombstoneRouteNamesAreExact: route names that contain each other, digits,
// colons or newlines are told apart in a tombstone's route list.
func TestStoreTombstoneRouteNamesAreExact(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	for _, r := range []string{"a\nb", "5:x", "ab"} {
		if st, _, err := s.Cancel(ctx, "n", t0, CancelOptions{Route: r, Tombstone: true}); err != nil || st != StateUnknown {
			t.Fatalf("tombstone of %q = %q %v", r, st, err)
		}
	}
	var envs []*envelope.Envelope
	routes := []string{"a\nb", "5:x", "ab", "a", "b", "x", "5", "a\n", ":x", "2:ab"}
	for _, r := range routes {
		envs = append(envs, envOn("n", r, t0))
	}
	prior, _, err := s.ParkEach(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	want := []State{StateCancelled, StateCancelled, StateCancelled, StateUnknown, StatePending, StatePending, StatePending, StatePending, StatePending, StatePending}
	if !slices.Equal(prior, want) {
		t.Fatalf("park n on %q = %q, want %q", routes, prior, want)
	}
}
