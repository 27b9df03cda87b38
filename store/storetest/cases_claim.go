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

// Park, claim, ack, retry, recover.

func init() {
	register("ShardOf", caseShardOf)
	register("ParkIdempotent", caseParkIdempotent)
	register("ClaimOrderLimitNextDue", caseClaimOrderLimitNextDue)
	register("ClaimDueAtIsScore", caseClaimDueAtIsScore)
	register("ClaimFenced", caseClaimFenced)
	register("AckAndDoneTrim", caseAckAndDoneTrim)
	register("AckManyAndNoDoneWindow", caseAckManyAndNoDoneWindow)
	register("Retry", caseRetry)
	register("RetryMany", caseRetryMany)
	register("Recover", caseRecover)
}

// ShardOf is FNV-1a 32 of the id modulo the shard count for ids not of the Kafka
// default form (docs/CONTRACT.md §3; those: ShardOfKafkaBlock).
func caseShardOf(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(Config{Shards: 7, DoneWindow: time.Hour}).Store
	if s.Shards() != 7 {
		t.Fatalf("Shards() = %d, want 7", s.Shards())
	}
	for i := range 200 {
		id := fmt.Sprintf("id-%d", i)
		if got, want := s.ShardOf(id), fnvShard(id, 7); got != want {
			t.Fatalf("ShardOf(%s) = %d, want %d", id, got, want)
		}
	}
}

func caseParkIdempotent(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 5, "p")

	parked, minDue, err := s.Park(ctx, []*envelope.Envelope{env(a[0], t0+500), env(a[1], t0+100), env(a[0], t0+1)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(parked, []bool{true, true, false}) {
		t.Fatalf("parked = %v, want the repeated id in one batch to be a duplicate", parked)
	}
	if len(minDue) != 1 || minDue[1] != t0+100 {
		t.Fatalf("minDue = %v, want {1: %d}", minDue, t0+100)
	}
	got := wantState(t, s, a[0], storeapi.StatePending, t0+500)
	if got.ID != a[0] || string(got.Payload) != "payload "+a[0] || got.Route != "orders" {
		t.Fatalf("stored envelope = %+v", got)
	}

	// Put one id in each other state: inflight, dead, done.
	mustPark(t, s, env(a[2], t0), env(a[3], t0), env(a[4], t0))
	tok := mustLease(t, s, 1, "i1")
	items, _ := mustClaim(t, s, 1, tok, t0, 10) // claims a2, a3, a4 (due t0)
	if len(items) != 3 {
		t.Fatalf("claimed %v", ids(items))
	}
	if err := s.Retry(ctx, 1, []storeapi.RetryItem{{Env: env(a[3], t0), Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, 1, []string{a[4]}, t0); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a[2], storeapi.StateInflight, t0+30_000)
	wantState(t, s, a[3], storeapi.StateDead, t0)
	wantState(t, s, a[4], storeapi.StateDelivered, t0)

	// A replay of every record: nothing is parked again, nothing is changed.
	parked, minDue, err = s.Park(ctx, []*envelope.Envelope{env(a[0], 1), env(a[1], 1), env(a[2], 1), env(a[3], 1), env(a[4], 1)})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(parked, true) || len(minDue) != 0 {
		t.Fatalf("replay parked %v minDue %v, want all duplicates", parked, minDue)
	}
	wantState(t, s, a[0], storeapi.StatePending, t0+500)
	wantState(t, s, a[2], storeapi.StateInflight, t0+30_000)
	wantState(t, s, a[3], storeapi.StateDead, t0)
	wantState(t, s, a[4], storeapi.StateDelivered, t0)
}

func caseClaimOrderLimitNextDue(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	a := idsOnShard(s, 2, 6, "c")
	// Parked out of order; claim must return them earliest first.
	mustPark(t, s, env(a[0], t0+300), env(a[1], t0+100), env(a[2], t0+200), env(a[3], t0+400), env(a[4], t0+5000), env(a[5], t0+100))
	tok := mustLease(t, s, 2, "i1")

	items, next := mustClaim(t, s, 2, tok, t0+99, 10)
	if len(items) != 0 || next != t0+100 {
		t.Fatalf("nothing due yet: got %v next %d", ids(items), next)
	}
	items, next = mustClaim(t, s, 2, tok, t0+1000, 3)
	wantOrder := []string{a[1], a[5], a[2]}
	if a[5] < a[1] { // equal scores come back in member order
		wantOrder = []string{a[5], a[1], a[2]}
	}
	if !slices.Equal(ids(items), wantOrder) || next != t0+300 {
		t.Fatalf("claim = %v next %d, want %v next %d", ids(items), next, wantOrder, t0+300)
	}
	for _, e := range items {
		if string(e.Key) != "k-"+e.ID || len(e.Headers) != 1 {
			t.Fatalf("claimed envelope %+v", e)
		}
		wantState(t, s, e.ID, storeapi.StateInflight, t0+1000+30_000)
	}
	items, next = mustClaim(t, s, 2, tok, t0+1000, 10)
	if !slices.Equal(ids(items), []string{a[0], a[3]}) || next != t0+5000 {
		t.Fatalf("claim = %v next %d", ids(items), next)
	}
	items, next = mustClaim(t, s, 2, tok, t0+10_000, 10)
	if !slices.Equal(ids(items), []string{a[4]}) || next != -1 {
		t.Fatalf("claim = %v next %d, want last item and -1", ids(items), next)
	}
}

func caseClaimDueAtIsScore(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	id := idsOnShard(s, 0, 1, "r")[0]
	mustPark(t, s, env(id, t0+10_000))
	if st, err := s.Reschedule(ctx, id, t0+50); err != nil || st != storeapi.StatePending {
		t.Fatalf("Reschedule = %q, %v", st, err)
	}
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, t0+100, 10)
	if len(items) != 1 || items[0].DueAt != t0+50 {
		t.Fatalf("claimed %+v, want DueAt %d from the rescheduled score", items, t0+50)
	}
}

func caseClaimFenced(t *testing.T, newSubject func(Config) Subject) {
	sub := newSubject(defaults)
	s := sub.Store
	ctx := storeCtx(t)
	id := idsOnShard(s, 3, 1, "f")[0]
	mustPark(t, s, env(id, t0))

	// Nobody holds the lease.
	if _, _, err := s.Claim(ctx, 3, "i1", 1, t0, t0+1, 10); !errors.Is(err, storeapi.ErrFenced) {
		t.Fatalf("claim without lease: %v, want ErrFenced", err)
	}
	old := mustLease(t, s, 3, "i1")
	// The lease expires and another instance takes it: its token is larger, and the
	// stale holder can no longer claim.
	sub.ExpireLease(3)
	newTok := mustLease(t, s, 3, "i2")
	if newTok <= old {
		t.Fatalf("new token %d not above old %d", newTok, old)
	}
	_, _, err := s.Claim(ctx, 3, "i1", old, t0, t0+1, 10)
	if !errors.Is(err, storeapi.ErrFenced) || fault.IsTransient(err) {
		t.Fatalf("stale claim: %v (transient %v), want permanent ErrFenced", err, fault.IsTransient(err))
	}
	// Same instance name, wrong token: still fenced.
	if _, _, err := s.Claim(ctx, 3, "i2", old, t0, t0+1, 10); !errors.Is(err, storeapi.ErrFenced) {
		t.Fatalf("wrong token: %v", err)
	}
	wantState(t, s, id, storeapi.StatePending, t0)
	items, _, err := s.Claim(ctx, 3, "i2", newTok, t0, t0+1, 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("claim by holder: %v %v", ids(items), err)
	}
}

// caseAckAndDoneTrim: acked ids are remembered for at least the done window, forgotten
// once the done slice holding their time (storeapi.DoneSliceMs wide) ended a window ago,
// and each ack forgets at most max(2*batch, 16) of them; seen through Get (the
// Redis-layout version, counting keys, stays in store/redisstore).
func caseAckAndDoneTrim(t *testing.T, newSubject func(Config) Subject) {
	const window = 10 * time.Second
	s := newSubject(Config{Shards: 4, DoneWindow: window}).Store
	ctx := storeCtx(t)
	const minTrim = 16
	slice := storeapi.DoneSliceMs(window.Milliseconds())
	a := idsOnShard(s, 0, 40, "a")
	for _, id := range a {
		mustPark(t, s, env(id, t0))
	}
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, t0, 100)
	if len(items) != 40 {
		t.Fatalf("claimed %d", len(items))
	}
	// Ack 30 at t0; one of them twice, and an id that was never claimed: both no-ops.
	if err := s.Ack(ctx, 0, append(slices.Clone(a[:30]), a[0], "never-claimed"), t0); err != nil {
		t.Fatal(err)
	}
	if n := countStates(t, s, a); n[storeapi.StateDelivered] != 30 || n[storeapi.StateInflight] != 10 {
		t.Fatalf("states after the ack %v, want 30 delivered and the 10 unacked in flight", n)
	}
	wantState(t, s, "never-claimed", storeapi.StateUnknown, -1)
	// Within the window, the acked ids stay remembered (a replay is a duplicate); an ack
	// a whole window later forgets none of them.
	if p := mustPark(t, s, env(a[0], t0)); p[0] {
		t.Fatal("acked id re-parked inside the done window")
	}
	if err := s.Ack(ctx, 0, []string{a[30]}, t0+window.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	if n := countStates(t, s, a[:31]); n[storeapi.StateDelivered] != 31 {
		t.Fatalf("%d of 31 delivered a window after the ack, want all", n[storeapi.StateDelivered])
	}
	// A window and a slice later, each ack forgets at most max(2*batch, minTrim).
	later := t0 + window.Milliseconds() + slice
	if err := s.Ack(ctx, 0, []string{a[31]}, later); err != nil {
		t.Fatal(err)
	}
	if n := countStates(t, s, a[:32]); n[storeapi.StateDelivered] != 32-minTrim {
		t.Fatalf("%d delivered after one bounded trim, want %d", n[storeapi.StateDelivered], 32-minTrim)
	}
	if err := s.Ack(ctx, 0, a[32:], later); err != nil {
		t.Fatal(err)
	}
	if n := countStates(t, s, a); n[storeapi.StateDelivered] != 10 || n[storeapi.StateUnknown] != 30 {
		t.Fatalf("states %v, want only the 10 acked after t0 remembered", n)
	}
	// Forgotten ids may be parked again.
	if p := mustPark(t, s, env(a[0], t0)); !p[0] {
		t.Fatal("id forgotten after the window was not parked")
	}
}

func caseAckManyAndNoDoneWindow(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(Config{Shards: 4, DoneWindow: 0}).Store
	ctx := storeCtx(t)
	var envs []*envelope.Envelope
	for i := range 50 {
		envs = append(envs, env(fmt.Sprintf("am-%d", i), t0))
	}
	mustPark(t, s, envs...)
	var claimed []string
	for sh := range 4 {
		tok := mustLease(t, s, sh, "i1")
		items, _ := mustClaim(t, s, sh, tok, t0, 100)
		claimed = append(claimed, ids(items)...)
	}
	if len(claimed) != 50 {
		t.Fatalf("claimed %d", len(claimed))
	}
	if err := s.AckMany(ctx, claimed, t0); err != nil {
		t.Fatal(err)
	}
	stats, err := s.ShardStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		if st.Pending+st.Inflight+st.Dead != 0 {
			t.Fatalf("shard %+v not empty after AckMany", st)
		}
	}
	// Done window 0: no acked id is remembered.
	if n := countStates(t, s, claimed); n[storeapi.StateUnknown] != 50 {
		t.Fatalf("done window 0 but states %v", n)
	}
	wantState(t, s, "am-1", storeapi.StateUnknown, 0)
}

func caseRetry(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 3, "rt")
	mustPark(t, s, env(a[0], t0), env(a[1], t0), env(a[2], t0+9999))
	tok := mustLease(t, s, 1, "i1")
	items, _ := mustClaim(t, s, 1, tok, t0, 10)
	if len(items) != 2 {
		t.Fatalf("claimed %v", ids(items))
	}
	again, dead := items[0], items[1]
	again.Attempt, again.DueAt = 1, t0+1000
	dead.Attempt, dead.Reason = 10, "publish: unroutable"
	pending := env(a[2], t0) // not in flight: must be left alone
	pending.Reason = "should not be written"
	err := s.Retry(ctx, 1, []storeapi.RetryItem{
		{Env: again, Due: t0 + 1000},
		{Env: dead, Dead: true},
		{Env: pending, Due: t0},
	}, t0+5)
	if err != nil {
		t.Fatal(err)
	}
	if e := wantState(t, s, again.ID, storeapi.StatePending, t0+1000); e.Attempt != 1 {
		t.Fatalf("retried envelope attempt %d", e.Attempt)
	}
	if e := wantState(t, s, dead.ID, storeapi.StateDead, t0+5); e.Reason != "publish: unroutable" || e.Attempt != 10 {
		t.Fatalf("dead envelope %+v", e)
	}
	if e := wantState(t, s, a[2], storeapi.StatePending, t0+9999); e.Reason != "" {
		t.Fatalf("retry touched a message not in flight: %+v", e)
	}
	// The retried one is claimable again when due.
	items, _ = mustClaim(t, s, 1, tok, t0+1000, 10)
	if !slices.Equal(ids(items), []string{again.ID}) || items[0].Attempt != 1 {
		t.Fatalf("reclaimed %v", ids(items))
	}
}

// RetryMany writes the outcomes of several shards in one call, each exactly as Retry
// would: retried ones pending again with their new attempt, dead ones dead.
func caseRetryMany(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	byShard := map[int][]storeapi.RetryItem{}
	for sh := 0; sh < 3; sh++ {
		ids := idsOnShard(s, sh, 2, "rm")
		mustPark(t, s, env(ids[0], t0), env(ids[1], t0))
		tok := mustLease(t, s, sh, "i1")
		items, _ := mustClaim(t, s, sh, tok, t0, 10)
		if len(items) != 2 {
			t.Fatalf("shard %d: claimed %v", sh, ids)
		}
		items[0].Attempt = 2
		items[1].Attempt, items[1].Reason = 10, "publish: unroutable"
		byShard[sh] = []storeapi.RetryItem{{Env: items[0], Due: t0 + 500}, {Env: items[1], Dead: true}}
	}
	if err := s.RetryMany(ctx, byShard, t0+5); err != nil {
		t.Fatal(err)
	}
	for sh, items := range byShard {
		if e := wantState(t, s, items[0].Env.ID, storeapi.StatePending, t0+500); e.Attempt != 2 {
			t.Errorf("shard %d: retried envelope attempt %d, want 2", sh, e.Attempt)
		}
		if e := wantState(t, s, items[1].Env.ID, storeapi.StateDead, t0+5); e.Reason != "publish: unroutable" {
			t.Errorf("shard %d: dead envelope reason %q", sh, e.Reason)
		}
	}
	if err := s.RetryMany(ctx, nil, t0); err != nil {
		t.Errorf("RetryMany of nothing: %v", err)
	}
}

func caseRecover(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 2, 5, "rc")
	var envs []*envelope.Envelope
	for _, id := range a {
		envs = append(envs, env(id, t0))
	}
	mustPark(t, s, envs...)
	tok := mustLease(t, s, 2, "i1")
	// Two claims with different lease deadlines.
	if _, _, err := s.Claim(ctx, 2, "i1", tok, t0, t0+1000, 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Claim(ctx, 2, "i1", tok, t0, t0+2000, 3); err != nil {
		t.Fatal(err)
	}
	if n, more, err := s.Recover(ctx, 2, t0+999, 10); err != nil || n != 0 || more {
		t.Fatalf("recover before any deadline = %d %v %v", n, more, err)
	}
	n, more, err := s.Recover(ctx, 2, t0+1000, 2)
	if err != nil || n != 2 || !more {
		t.Fatalf("recover limited = %d %v %v, want 2 and more", n, more, err)
	}
	n, more, err = s.Recover(ctx, 2, t0+1000, 2)
	if err != nil || n != 1 || more {
		t.Fatalf("recover rest = %d %v %v, want 1 and no more", n, more, err)
	}
	stats, _ := s.ShardStats(ctx)
	if st := stats[2]; st.Pending != 3 || st.Inflight != 2 || st.NextDue != t0+1000 {
		t.Fatalf("stats after recover %+v", st)
	}
	// Recovered messages are queued at the recovery time and fire then (their due times
	// have passed), keeping their own DueAt for headers and lateness.
	items, _ := mustClaim(t, s, 2, tok, t0+1000, 10)
	if len(items) != 3 || items[0].FireTime() != t0+1000 || items[0].DueAt > t0+1000 {
		t.Fatalf("reclaimed %v", ids(items))
	}
	// A new owner takes over everything in flight, deadline or not.
	n, more, err = s.RecoverAll(ctx, 2, t0+1001, 4)
	if err != nil || n != 4 || !more {
		t.Fatalf("RecoverAll limited = %d %v %v, want 4 and more", n, more, err)
	}
	n, more, err = s.RecoverAll(ctx, 2, t0+1001, 4)
	if err != nil || n != 1 || more {
		t.Fatalf("RecoverAll rest = %d %v %v, want 1 and no more", n, more, err)
	}
	stats, _ = s.ShardStats(ctx)
	if st := stats[2]; st.Pending != 5 || st.Inflight != 0 || st.NextDue != t0+1001 {
		t.Fatalf("stats after RecoverAll %+v", st)
	}
}
