package storetest

import (
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

func init() {
	register("ParkClaim", caseParkClaim)
	register("ParkClaimNeedsTheLease", caseParkClaimNeedsTheLease)
	register("ParkClaimLeavesOrderedKeysPending", caseParkClaimOrdered)
	register("ParkClaimKafkaIDs", caseParkClaimKafkaIDs)
	register("ParkClaimAnsweredByAnIdempotentClaim", caseParkClaimAnsweredAgain)
}

// parkClaim calls ParkClaimEach and fails the test on an error.
func parkClaim(t *testing.T, s storeapi.Store, envs []*envelope.Envelope, c storeapi.ParkClaim) ([]storeapi.State, []bool, map[int]int64) {
	t.Helper()
	prior, claimed, minDue, err := s.ParkClaimEach(storeCtx(t), envs, c)
	if err != nil || len(prior) != len(envs) || len(claimed) != len(envs) {
		t.Fatalf("ParkClaimEach: %v, %d states, %d flags for %d messages", err, len(prior), len(claimed), len(envs))
	}
	return prior, claimed, minDue
}

// caseParkClaim: the new messages a park wants claimed, in a shard the caller holds,
// go in flight under the call's lease deadline as a claim would leave them (Get,
// counts, FireAt, ClaimedBytes, ClaimedFrom); the others of the call are pending as
// ParkEach leaves them, a duplicate is refused and not claimed, minDue counts pending
// ones only. A claim does not take them again; Ack finishes one and Recover re-fires
// one whose deadline passed; the same park replayed refuses them all as in flight.
func caseParkClaim(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 4, "pc")
	b := idsOnShard(s, 2, 1, "pc")
	mustPark(t, s, env(a[3], t0+50))
	tok := mustLease(t, s, 1, "i1")
	deadline := t0 + 30_000
	envs := []*envelope.Envelope{env(a[0], t0+10), env(a[1], t0+20), env(a[2], t0+30), env(b[0], t0+40), env(a[3], t0+60)}
	c := storeapi.ParkClaim{Instance: "i1", Want: []bool{true, true, false, true, true},
		Leases: map[int]storeapi.ParkLease{1: {Token: tok, LeaseDeadline: deadline}}}
	prior, claimed, minDue := parkClaim(t, s, envs, c)
	wantPrior := []storeapi.State{storeapi.StateUnknown, storeapi.StateUnknown, storeapi.StateUnknown, storeapi.StateUnknown, storeapi.StatePending}
	if !slices.Equal(prior, wantPrior) || !slices.Equal(claimed, []bool{true, true, false, false, false}) {
		t.Fatalf("ParkClaimEach: prior %v claimed %v; want %v, [true true false false false]", prior, claimed, wantPrior)
	}
	if minDue[1] != t0+30 || minDue[2] != t0+40 {
		t.Fatalf("minDue %v, want shard 1 at %d (the pending one, not the claimed ones), shard 2 at %d", minDue, t0+30, t0+40)
	}
	for _, e := range envs[:2] {
		if e.FireAt != e.DueAt || e.ClaimedFrom != 2 || e.ClaimedBytes <= storeapi.MemOverhead {
			t.Fatalf("claimed %s: FireAt %d (due %d), ClaimedFrom %d, ClaimedBytes %d; want a claim's", e.ID, e.FireAt, e.DueAt, e.ClaimedFrom, e.ClaimedBytes)
		}
		wantState(t, s, e.ID, storeapi.StateInflight, deadline)
	}
	wantState(t, s, a[2], storeapi.StatePending, t0+30)
	wantState(t, s, b[0], storeapi.StatePending, t0+40)
	wantState(t, s, a[3], storeapi.StatePending, t0+50)
	wantCounts(t, s, "after the park", map[string]rc{"orders": {Pending: 3, Inflight: 2}})

	items, _ := mustClaim(t, s, 1, tok, t0+1000, 10)
	if !slices.Equal(ids(items), []string{a[2], a[3]}) {
		t.Fatalf("claim after the park: %v, want only the pending %v", ids(items), []string{a[2], a[3]})
	}
	if err := s.Ack(ctx, 1, []string{a[0]}, t0+100); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a[0], storeapi.StateDelivered, -1)
	if moved, _, err := s.Recover(ctx, 1, deadline, 10); err != nil || moved != 1 {
		t.Fatalf("Recover at the park's deadline: moved %d, %v; want 1 (%s; the claim's deadline is later)", moved, err, a[1])
	}
	wantState(t, s, a[1], storeapi.StatePending, -1)

	prior, claimed, _ = parkClaim(t, s, []*envelope.Envelope{env(a[0], t0+10), env(a[1], t0+20)}, c)
	if !slices.Equal(prior, []storeapi.State{storeapi.StateDelivered, storeapi.StatePending}) || slices.Contains(claimed, true) {
		t.Fatalf("the park replayed: prior %v claimed %v; want [delivered pending], none claimed", prior, claimed)
	}
}

// caseParkClaimNeedsTheLease: a park that wants its messages claimed in a shard whose
// lease the caller does not hold (never had, another token, lapsed) parks them
// pending, without an error.
func caseParkClaimNeedsTheLease(t *testing.T, newSubject func(Config) Subject) {
	sub := newSubject(defaults)
	s := sub.Store
	a := idsOnShard(s, 0, 3, "pl")
	tok := mustLease(t, s, 0, "i1")
	try := func(step, id string, c storeapi.ParkClaim) {
		t.Helper()
		c.Want = []bool{true}
		prior, claimed, minDue := parkClaim(t, s, []*envelope.Envelope{env(id, t0)}, c)
		if prior[0] != storeapi.StateUnknown || claimed[0] || minDue[0] != t0 {
			t.Fatalf("%s: prior %v claimed %v minDue %v; want parked pending, not claimed", step, prior, claimed, minDue)
		}
		wantState(t, s, id, storeapi.StatePending, t0)
	}
	try("another instance", a[0], storeapi.ParkClaim{Instance: "i2", Leases: map[int]storeapi.ParkLease{0: {Token: tok, LeaseDeadline: t0 + 30_000}}})
	try("another token", a[1], storeapi.ParkClaim{Instance: "i1", Leases: map[int]storeapi.ParkLease{0: {Token: tok + 1, LeaseDeadline: t0 + 30_000}}})
	sub.ExpireLease(0)
	try("a lapsed lease", a[2], storeapi.ParkClaim{Instance: "i1", Leases: map[int]storeapi.ParkLease{0: {Token: tok, LeaseDeadline: t0 + 30_000}}})
}

// caseParkClaimOrdered: a message of an `order: key` route is never claimed as it is
// parked: it waits in its key's queue behind the key's earlier messages.
func caseParkClaimOrdered(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	e := env("ord-1", t0)
	sh := s.ShardOfEnv(e)
	tok := mustLease(t, s, sh, "i1")
	prior, claimed, _ := parkClaim(t, s, []*envelope.Envelope{e}, storeapi.ParkClaim{Instance: "i1", Want: []bool{true},
		Leases: map[int]storeapi.ParkLease{sh: {Token: tok, LeaseDeadline: t0 + 30_000}}})
	if prior[0] != storeapi.StateUnknown || claimed[0] {
		t.Fatalf("an ordered message: prior %v claimed %v; want parked, not claimed", prior, claimed)
	}
	wantState(t, s, e.ID, storeapi.StatePending, -1)
}

// caseParkClaimKafkaIDs: a fetch of Kafka default ids (a store's batch path for them),
// every other one wanted: the wanted ones go in flight, the others pending, whatever
// their order in the call; replayed under another deadline, the whole fetch is refused
// and none is claimed; the same call sent again answers its claimed ones as claimed.
func caseParkClaimKafkaIDs(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	fetch := kafkaRange("orders.delay", 3, 0, 11)
	sh := wantKafkaPlaced(t, s, fetch)[0]
	tok := mustLease(t, s, sh, "i1")
	deadline := t0 + 30_000
	c := storeapi.ParkClaim{Instance: "i1", Leases: map[int]storeapi.ParkLease{sh: {Token: tok, LeaseDeadline: deadline}}}
	var envs []*envelope.Envelope
	for i, id := range fetch {
		envs = append(envs, env(id, t0+int64(i)))
		c.Want = append(c.Want, i%2 == 0)
	}
	prior, claimed, _ := parkClaim(t, s, envs, c)
	if !slices.Equal(claimed, c.Want) {
		t.Fatalf("claimed %v, want %v", claimed, c.Want)
	}
	for i, id := range fetch {
		if prior[i] != storeapi.StateUnknown {
			t.Fatalf("%s: prior %q, want new", id, prior[i])
		}
		if c.Want[i] {
			wantState(t, s, id, storeapi.StateInflight, deadline)
		} else {
			wantState(t, s, id, storeapi.StatePending, t0+int64(i))
		}
	}
	wantCounts(t, s, "after the park", map[string]rc{"orders": {Pending: 6, Inflight: 6}})
	again := make([]*envelope.Envelope, len(fetch))
	for i, id := range fetch {
		again[i] = env(id, t0+int64(i))
	}
	replay := c
	replay.Leases = map[int]storeapi.ParkLease{sh: {Token: tok, LeaseDeadline: deadline + 1}}
	prior, claimed, _ = parkClaim(t, s, again, replay)
	if slices.Contains(claimed, true) {
		t.Fatalf("the fetch replayed claimed %v", claimed)
	}
	wantPriorByWant(t, "the fetch replayed", fetch, prior, c.Want, storeapi.StateInflight)
	// The same call sent again (its deadline: a client re-sending it after its reply
	// was lost) answers what its first run claimed as claimed, and writes nothing.
	prior, claimed, _ = parkClaim(t, s, again, c)
	if !slices.Equal(claimed, c.Want) {
		t.Fatalf("the call sent again: claimed %v, want %v", claimed, c.Want)
	}
	wantPriorByWant(t, "the call sent again", fetch, prior, c.Want, storeapi.StateUnknown)
	wantCounts(t, s, "after the call sent again", map[string]rc{"orders": {Pending: 6, Inflight: 6}})
}

// caseParkClaimAnsweredAgain: what a park claimed is answered by a Claim marked
// Idempotent with that park's lease deadline (the caller lost the park's reply), each
// message no earlier than its due time; a park that never ran leaves that claim an
// ordinary one.
func caseParkClaimAnsweredAgain(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 2, 3, "pa")
	tok := mustLease(t, s, 2, "i1")
	deadline := t0 + 30_000
	c := storeapi.ParkClaim{Instance: "i1", Want: []bool{true, true},
		Leases: map[int]storeapi.ParkLease{2: {Token: tok, LeaseDeadline: deadline}}}
	if _, claimed, _ := parkClaim(t, s, []*envelope.Envelope{env(a[0], t0+10), env(a[1], t0+20)}, c); !slices.Equal(claimed, []bool{true, true}) {
		t.Fatalf("claimed %v", claimed)
	}
	mustPark(t, s, env(a[2], t0+30))
	req := storeapi.ClaimRequest{Shard: 2, Instance: "i1", Token: tok, UpTo: t0 + 15, LeaseDeadline: deadline, Limit: 10, Idempotent: true}
	out := s.ClaimMany(ctx, []storeapi.ClaimRequest{req})
	if out[0].Err != nil || !out[0].Replayed || !sameIDs(out[0].Items, a[:2]) {
		t.Fatalf("the idempotent claim with the park's deadline: %v replayed %v, %v; want %v again", ids(out[0].Items), out[0].Replayed, out[0].Err, a[:2])
	}
	for _, e := range out[0].Items {
		if e.FireAt < e.DueAt || e.FireAt < req.UpTo {
			t.Fatalf("%s answered to fire at %d, due %d", e.ID, e.FireAt, e.DueAt)
		}
	}
	req.LeaseDeadline, req.UpTo = deadline+1, t0+100
	out = s.ClaimMany(ctx, []storeapi.ClaimRequest{req})
	if out[0].Err != nil || out[0].Replayed || !slices.Equal(ids(out[0].Items), a[2:]) {
		t.Fatalf("an idempotent claim of a deadline no park used: %v replayed %v, %v; want %v claimed", ids(out[0].Items), out[0].Replayed, out[0].Err, a[2:])
	}
}

// wantPriorByWant checks that prior reads wanted for each id want marks and pending
// for the others.
func wantPriorByWant(t *testing.T, step string, idList []string, prior []storeapi.State, want []bool, wanted storeapi.State) {
	t.Helper()
	for i, id := range idList {
		w := storeapi.StatePending
		if want[i] {
			w = wanted
		}
		if prior[i] != w {
			t.Fatalf("%s: %s prior %q, want %q", step, id, prior[i], w)
		}
	}
}
