package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Refusal reasons, bury, cancel (route scope, tombstones), reschedule, requeue, get,
// dead letters.

func init() {
	register("ParkEachSaysWhyRefused", caseParkEachSaysWhyRefused)
	register("BuryReportsOnlyNew", caseBuryReportsOnlyNew)
	register("BuryListPurgeDead", caseBuryListPurgeDead)
	register("Cancel", caseCancel)
	register("CancelScopedToRoute", caseCancelScopedToRoute)
	register("CancelUnknownLeavesNoTrace", caseCancelUnknownLeavesNoTrace)
	register("TombstoneRouteNamesAreExact", caseTombstoneRouteNamesAreExact)
	register("AckOverTombstoneAndTrim", caseAckOverTombstoneAndTrim)
	register("RescheduleAndRequeue", caseRescheduleAndRequeue)
	register("Get", caseGet)
}

// A replay of ids in every state is refused with the state as reason (the Duplicate
// metric's label), a repeat inside one batch reads pending, and new ids read
// StateUnknown.
func caseParkEachSaysWhyRefused(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 2, 6, "why")
	mustPark(t, s, env(a[0], t0+60_000), env(a[1], t0), env(a[2], t0), env(a[3], t0))
	tok := mustLease(t, s, 2, "i1")
	mustClaim(t, s, 2, tok, t0, 10) // a1..a3 in flight
	if err := s.Retry(ctx, 2, []storeapi.RetryItem{{Env: env(a[2], t0), Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, 2, []string{a[3]}, t0); err != nil {
		t.Fatal(err)
	}
	if st, _, err := s.Cancel(ctx, a[4], t0, storeapi.CancelOptions{Route: "orders", Tombstone: true}); err != nil || st != storeapi.StateUnknown {
		t.Fatalf("tombstone cancel = %q %v", st, err)
	}
	prior, minDue, err := s.ParkEach(ctx, []*envelope.Envelope{
		env(a[0], 1), env(a[1], 1), env(a[2], 1), env(a[3], 1), env(a[4], 1), env(a[5], t0+5), env(a[5], t0+6),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []storeapi.State{storeapi.StatePending, storeapi.StateInflight, storeapi.StateDead, storeapi.StateDelivered, storeapi.StateCancelled, storeapi.StateUnknown, storeapi.StatePending}
	if !slices.Equal(prior, want) {
		t.Fatalf("ParkEach prior = %q, want %q", prior, want)
	}
	if minDue[2] != t0+5 || len(minDue) != 1 {
		t.Fatalf("minDue = %v, want only the new id's due", minDue)
	}
	wantState(t, s, a[5], storeapi.StatePending, t0+5)
}

// Burying a batch again reports every id as already dead, and an invalid record whose
// id is pending is not buried (reported pending).
func caseBuryReportsOnlyNew(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
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
	if want := []storeapi.State{storeapi.StateUnknown, storeapi.StateUnknown, storeapi.StateUnknown, storeapi.StatePending}; !slices.Equal(prior, want) {
		t.Fatalf("first Bury prior = %q, want %q", prior, want)
	}
	prior, err = s.Bury(ctx, bad, t0+1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []storeapi.State{storeapi.StateDead, storeapi.StateDead, storeapi.StateDead}; !slices.Equal(prior, want) {
		t.Fatalf("replayed Bury prior = %q, want %q", prior, want)
	}
	wantState(t, s, "bury-2", storeapi.StateDead, t0)
	wantState(t, s, "bury-p", storeapi.StatePending, t0+1000)
}

func caseBuryListPurgeDead(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	var envs []*envelope.Envelope
	for i := range 30 {
		e := env(fmt.Sprintf("bd-%02d", i), t0)
		e.Reason = "bad_delay"
		envs = append(envs, e)
	}
	if _, err := s.Bury(ctx, envs[:20], t0); err != nil {
		t.Fatal(err)
	}
	mustPark(t, s, envs[20:]...)
	// Burying is idempotent and never overrides a pending message.
	if _, err := s.Bury(ctx, envs, t0+1); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "bd-25", storeapi.StatePending, t0)
	wantState(t, s, "bd-05", storeapi.StateDead, t0)
	dead, err := s.ListDead(ctx, 100)
	if err != nil || len(dead) != 20 {
		t.Fatalf("ListDead = %d %v", len(dead), err)
	}
	for _, e := range dead {
		if e.Reason != "bad_delay" {
			t.Fatalf("dead letter without reason: %+v", e)
		}
	}
	if few, _ := s.ListDead(ctx, 3); len(few) != 3 {
		t.Fatalf("ListDead(3) = %d", len(few))
	}
	n, err := s.PurgeDead(ctx)
	if err != nil || n != 20 {
		t.Fatalf("PurgeDead = %d %v", n, err)
	}
	if dead, _ := s.ListDead(ctx, 100); len(dead) != 0 {
		t.Fatalf("dead letters left after purge: %d", len(dead))
	}
	wantState(t, s, "bd-05", storeapi.StateUnknown, 0)
	wantState(t, s, "bd-25", storeapi.StatePending, t0)
}

func caseCancel(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 0, 4, "x")
	mustPark(t, s, env(a[0], t0+50_000), env(a[1], t0), env(a[2], t0), env(a[3], t0))
	tok := mustLease(t, s, 0, "i1")
	mustClaim(t, s, 0, tok, t0, 10) // a1..a3 in flight
	if err := s.Retry(ctx, 0, []storeapi.RetryItem{{Env: env(a[2], t0), Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, 0, []string{a[3]}, t0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		want storeapi.State
	}{{a[0], storeapi.StatePending}, {a[1], storeapi.StateInflight}, {a[2], storeapi.StateDead}, {a[3], storeapi.StateDelivered}, {"nobody", storeapi.StateUnknown}} {
		got, _, err := s.Cancel(ctx, tc.id, t0+1, storeapi.CancelOptions{Route: "orders", Tombstone: true})
		if err != nil || got != tc.want {
			t.Fatalf("Cancel(%s) = %q, %v; want %q", tc.id, got, err, tc.want)
		}
		if tc.want == storeapi.StateDelivered {
			wantState(t, s, tc.id, storeapi.StateDelivered, -1)
		} else {
			wantState(t, s, tc.id, storeapi.StateCancelled, -1)
		}
		if p := mustPark(t, s, env(tc.id, t0)); p[0] {
			t.Fatalf("cancelled id %s (was %s) parked again", tc.id, tc.want)
		}
	}
	// The cancelled in-flight message's ack is a no-op and it stays done.
	if err := s.Ack(ctx, 0, []string{a[1]}, t0+2); err != nil {
		t.Fatal(err)
	}
	if items, _ := mustClaim(t, s, 0, tok, t0+100_000, 10); len(items) != 0 {
		t.Fatalf("claimed cancelled messages %v", ids(items))
	}
	stats, _ := s.ShardStats(ctx)
	if st := stats[0]; st.Pending+st.Inflight+st.Dead != 0 {
		t.Fatalf("stats %+v", st)
	}
	if got, _, _ := s.Cancel(ctx, a[0], t0+3, storeapi.CancelOptions{}); got != storeapi.StateCancelled {
		t.Fatalf("second cancel = %q, want cancelled", got)
	}
}

// A cancel of route B leaves route A's message alone; a tombstone of route B does not
// stop route A's message with that id but does stop route B's; route A's own cancel
// cancels it.
func caseCancelScopedToRoute(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	mustPark(t, s, envOn("x", "A", t0+60_000))
	st, _, err := s.Cancel(ctx, "x", t0, storeapi.CancelOptions{Route: "B", Tombstone: true})
	if !errors.Is(err, storeapi.ErrOtherRoute) || st != storeapi.StatePending || fault.IsTransient(err) {
		t.Fatalf("route B's cancel of route A's message = %q %v, want pending + ErrOtherRoute", st, err)
	}
	wantState(t, s, "x", storeapi.StatePending, t0+60_000)

	// A tombstone of route B for an id not seen yet.
	if st, _, err := s.Cancel(ctx, "y", t0, storeapi.CancelOptions{Route: "B", Tombstone: true}); err != nil || st != storeapi.StateUnknown {
		t.Fatalf("tombstone = %q %v", st, err)
	}
	wantState(t, s, "y", storeapi.StateCancelled, t0)
	prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{envOn("y", "B", t0+1), envOn("y", "A", t0+2)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []storeapi.State{storeapi.StateCancelled, storeapi.StateUnknown}; !slices.Equal(prior, want) {
		t.Fatalf("park y on B then A = %q, want %q (B's tombstone stops only B)", prior, want)
	}
	wantState(t, s, "y", storeapi.StatePending, t0+2)
	if st, _, err := s.Cancel(ctx, "y", t0+3, storeapi.CancelOptions{Route: "A", Tombstone: true}); err != nil || st != storeapi.StatePending {
		t.Fatalf("route A's cancel of its message = %q %v", st, err)
	}
	wantState(t, s, "y", storeapi.StateCancelled, doneSec(t0+3))
	prior, _, err = s.ParkEach(ctx, []*envelope.Envelope{envOn("y", "A", t0), envOn("y", "B", t0)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []storeapi.State{storeapi.StateCancelled, storeapi.StateCancelled}; !slices.Equal(prior, want) {
		t.Fatalf("park y on A and B after A's cancel = %q, want %q (A's cancel keeps B's tombstone)", prior, want)
	}
	if st, _, err := s.Cancel(ctx, "x", t0, storeapi.CancelOptions{Route: "A"}); err != nil || st != storeapi.StatePending {
		t.Fatalf("route A's cancel of x = %q %v", st, err)
	}

	// Two routes' tombstones for one id both hold.
	for _, r := range []string{"B", "A"} {
		if st, _, err := s.Cancel(ctx, "z", t0, storeapi.CancelOptions{Route: r, Tombstone: true}); err != nil || st != storeapi.StateUnknown {
			t.Fatalf("tombstone of %s = %q %v", r, st, err)
		}
	}
	if st, _, err := s.Cancel(ctx, "z", t0, storeapi.CancelOptions{Route: "A", Tombstone: true}); err != nil || st != storeapi.StateCancelled {
		t.Fatalf("repeated tombstone of A = %q %v, want cancelled", st, err)
	}
	prior, _, err = s.ParkEach(ctx, []*envelope.Envelope{envOn("z", "A", t0), envOn("z", "B", t0), envOn("z", "C", t0)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []storeapi.State{storeapi.StateCancelled, storeapi.StateCancelled, storeapi.StateUnknown}; !slices.Equal(prior, want) {
		t.Fatalf("park z on A, B, C = %q, want %q", prior, want)
	}
}

// Without Tombstone an unknown id is reported unknown and nothing is recorded: a later
// message with that id parks. (store/redisstore also checks that no key was written.)
func caseCancelUnknownLeavesNoTrace(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	if st, _, err := s.Cancel(ctx, "ghost", t0, storeapi.CancelOptions{}); err != nil || st != storeapi.StateUnknown {
		t.Fatalf("Cancel(unknown) = %q %v", st, err)
	}
	wantState(t, s, "ghost", storeapi.StateUnknown, -1)
	if p := mustPark(t, s, env("ghost", t0)); !p[0] {
		t.Fatal("a message with an id once cancelled while unknown was refused")
	}
	if _, _, err := s.Cancel(ctx, "ghost", t0, storeapi.CancelOptions{Tombstone: true}); !errors.Is(err, storeapi.ErrInvalid) {
		t.Fatalf("tombstone without a route: %v, want ErrInvalid", err)
	}
}

// Route names that contain each other, digits, colons or newlines are told apart in a
// tombstone's route list.
func caseTombstoneRouteNamesAreExact(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	for _, r := range []string{"a\nb", "5:x", "ab"} {
		if st, _, err := s.Cancel(ctx, "n", t0, storeapi.CancelOptions{Route: r, Tombstone: true}); err != nil || st != storeapi.StateUnknown {
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
	want := []storeapi.State{storeapi.StateCancelled, storeapi.StateCancelled, storeapi.StateCancelled, storeapi.StateUnknown, storeapi.StatePending, storeapi.StatePending, storeapi.StatePending, storeapi.StatePending, storeapi.StatePending, storeapi.StatePending}
	if !slices.Equal(prior, want) {
		t.Fatalf("park n on %q = %q, want %q", routes, prior, want)
	}
}

// An ack turns another route's tombstone into delivered; trimming forgets tombstones
// with their done entries (the behavioural part of store/redisstore's
// TestStoreDoneLayout, which also checks the keys).
func caseAckOverTombstoneAndTrim(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(Config{Shards: 1, DoneWindow: time.Minute}).Store
	ctx := storeCtx(t)
	if _, _, err := s.Cancel(ctx, "t", t0, storeapi.CancelOptions{Route: "B", Tombstone: true}); err != nil {
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
	wantState(t, s, "t", storeapi.StateDelivered, doneSec(t0+1))

	if _, _, err := s.Cancel(ctx, "u", t0+2, storeapi.CancelOptions{Route: "B", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "u", storeapi.StateCancelled, doneSec(t0+2))
	// A minute and a done slice later every entry above is past the window: the next
	// ack trims them.
	late := t0 + time.Minute.Milliseconds() + storeapi.DoneSliceMs(time.Minute.Milliseconds()) + 10
	mustPark(t, s, env("late", late-1000))
	if items, _ := mustClaim(t, s, 0, tok, late-1000, 10); len(items) != 1 {
		t.Fatalf("claimed %v", ids(items))
	}
	if err := s.Ack(ctx, 0, []string{"late"}, late); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "u", storeapi.StateUnknown, -1)
	wantState(t, s, "t", storeapi.StateUnknown, -1)
	wantState(t, s, "late", storeapi.StateDelivered, doneSec(late))
	if prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{envOn("u", "B", t0)}); err != nil || prior[0] != storeapi.StateUnknown {
		t.Fatalf("park over a trimmed tombstone = %q %v, want parked", prior, err)
	}
}

func caseRescheduleAndRequeue(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 3, 3, "rs")
	mustPark(t, s, env(a[0], t0+100), env(a[1], t0), env(a[2], t0))
	tok := mustLease(t, s, 3, "i1")
	items, _ := mustClaim(t, s, 3, tok, t0, 10) // a1, a2
	d := items[1]
	d.Attempt, d.Reason = 10, "boom"
	if err := s.Retry(ctx, 3, []storeapi.RetryItem{{Env: d, Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}

	if st, err := s.Reschedule(ctx, a[0], t0+7777); err != nil || st != storeapi.StatePending {
		t.Fatalf("reschedule pending = %q %v", st, err)
	}
	if e := wantState(t, s, a[0], storeapi.StatePending, t0+7777); e.DueAt != t0+7777 {
		t.Fatalf("reschedule must keep the envelope's DueAt equal to the score (recovery relies on it): DueAt %d", e.DueAt)
	}
	if st, err := s.Reschedule(ctx, items[0].ID, t0+5); err != nil || st != storeapi.StateInflight {
		t.Fatalf("reschedule inflight = %q %v, want unchanged inflight", st, err)
	}
	wantState(t, s, items[0].ID, storeapi.StateInflight, -1)
	if st, err := s.Reschedule(ctx, "nobody", t0); err != nil || st != storeapi.StateUnknown {
		t.Fatalf("reschedule unknown = %q %v", st, err)
	}
	// A dead letter is requeued with a clean slate.
	if st, err := s.Reschedule(ctx, d.ID, t0+20); err != nil || st != storeapi.StateDead {
		t.Fatalf("reschedule dead = %q %v", st, err)
	}
	if e := wantState(t, s, d.ID, storeapi.StatePending, t0+20); e.Reason != "" || e.Attempt != 0 {
		t.Fatalf("requeued envelope %+v", e)
	}
	if err := s.RequeueDead(ctx, d.ID, t0); !errors.Is(err, storeapi.ErrNotFound) {
		t.Fatalf("requeue of a pending message: %v, want ErrNotFound", err)
	}
	// Through RequeueDead directly.
	items, _ = mustClaim(t, s, 3, tok, t0+20, 10)
	if err := s.Retry(ctx, 3, []storeapi.RetryItem{{Env: items[0], Dead: true}}, t0+21); err != nil {
		t.Fatal(err)
	}
	if err := s.RequeueDead(ctx, d.ID, t0+30); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, d.ID, storeapi.StatePending, t0+30)
}

func caseGet(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	e := env("get-me", t0+42)
	e.AMQP = &envelope.AMQPProperties{ContentType: "application/json", MessageID: "get-me", DeliveryMode: 2}
	e.Headers = append(e.Headers, envelope.Header{Key: "n", Value: int32(7)})
	mustPark(t, s, e)
	got := wantState(t, s, "get-me", storeapi.StatePending, t0+42)
	if got.AMQP == nil || got.AMQP.ContentType != "application/json" || got.Headers[1].Value != int32(7) {
		t.Fatalf("Get envelope %+v", got)
	}
	st, score, ge, err := s.Get(ctx, "missing")
	if err != nil || st != storeapi.StateUnknown || score != 0 || ge != nil {
		t.Fatalf("Get(missing) = %q %d %v %v", st, score, ge, err)
	}
	// Envelopes reads stored envelopes by id: nil for none.
	envs, err := s.Envelopes(ctx, []string{"get-me", "missing"})
	if err != nil || len(envs) != 2 || envs[0] == nil || envs[0].ID != "get-me" || envs[1] != nil {
		t.Fatalf("Envelopes = %v %v", envs, err)
	}
}
