package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Leases, membership, the wake/cancel channel, and every operation once in sequence.

func init() {
	register("Lease", caseLease)
	register("Members", caseMembers)
	register("WakeAndCancelThroughListen", caseWakeAndCancelThroughListen)
	register("Lifecycle", caseLifecycle)
	register("Time", caseTime)
}

func caseLease(t *testing.T, newSubject func(Config) Subject) {
	sub := newSubject(defaults)
	s := sub.Store
	ctx := storeCtx(t)
	ttl := 400 * time.Millisecond

	tok, err := s.AcquireLease(ctx, 0, "i1", ttl)
	if err != nil || tok < 1 {
		t.Fatalf("acquire = %d %v", tok, err)
	}
	if other, err := s.AcquireLease(ctx, 0, "i2", ttl); err != nil || other != 0 {
		t.Fatalf("acquire of a held lease = %d %v, want 0", other, err)
	}
	if again, err := s.AcquireLease(ctx, 0, "i1", ttl); err != nil || again != tok {
		t.Fatalf("re-acquire by holder = %d %v, want its token %d", again, err, tok)
	}
	if ok, err := s.RenewLease(ctx, 0, "i1", tok, ttl); err != nil || !ok {
		t.Fatalf("renew = %v %v", ok, err)
	}
	if ok, _ := s.RenewLease(ctx, 0, "i1", tok+1, ttl); ok {
		t.Fatal("renew with a wrong token succeeded")
	}
	if ok, _ := s.RenewLease(ctx, 0, "i2", tok, ttl); ok {
		t.Fatal("renew by another instance succeeded")
	}
	// Renewals keep it alive past the original TTL.
	for range 3 {
		sub.Elapse(ttl / 4) // well inside the TTL even on a loaded machine
		if ok, err := s.RenewLease(ctx, 0, "i1", tok, ttl); err != nil || !ok {
			t.Fatalf("renew before expiry = %v %v", ok, err)
		}
	}
	held, err := s.RenewLeases(ctx, "i1", []storeapi.Lease{{Shard: 0, Token: tok}, {Shard: 1, Token: 99}}, ttl)
	if err != nil || !slices.Equal(held, []bool{true, false}) {
		t.Fatalf("RenewLeases = %v %v", held, err)
	}
	stats, _ := s.ShardStats(ctx)
	if stats[0].Owner != "i1" || stats[0].Token != tok || stats[1].Owner != "" {
		t.Fatalf("owners in stats: %+v %+v", stats[0], stats[1])
	}

	// Expiry: without renewal the lease frees itself and the next holder gets a larger
	// token.
	sub.Elapse(ttl + 100*time.Millisecond)
	if ok, _ := s.RenewLease(ctx, 0, "i1", tok, ttl); ok {
		t.Fatal("renewed an expired lease")
	}
	tok2, err := s.AcquireLease(ctx, 0, "i2", ttl)
	if err != nil || tok2 <= tok {
		t.Fatalf("acquire after expiry = %d %v, want > %d", tok2, err, tok)
	}

	// Release: a stale holder cannot free it; the holder can.
	if err := s.ReleaseLease(ctx, 0, "i1", tok); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.AcquireLease(ctx, 0, "i3", ttl); again != 0 {
		t.Fatal("stale release freed the lease")
	}
	if err := s.ReleaseLease(ctx, 0, "i2", tok2); err != nil {
		t.Fatal(err)
	}
	tok3, err := s.AcquireLease(ctx, 0, "i3", time.Minute)
	if err != nil || tok3 <= tok2 {
		t.Fatalf("acquire after release = %d %v", tok3, err)
	}
	// AcquireLeases: per shard a token, 0 where another holds it.
	toks, err := s.AcquireLeases(ctx, []int{0, 1, 2}, "i4", time.Minute)
	if err != nil || len(toks) != 3 || toks[0] != 0 || toks[1] < 1 || toks[2] < 1 {
		t.Fatalf("AcquireLeases = %v %v, want 0 for the held shard 0", toks, err)
	}

	if _, err := s.AcquireLease(ctx, 0, "bad|name", ttl); !errors.Is(err, storeapi.ErrInvalid) {
		t.Fatalf("instance with '|': %v", err)
	}
	if _, err := s.AcquireLease(ctx, 99, "i1", ttl); !errors.Is(err, storeapi.ErrInvalid) {
		t.Fatalf("shard out of range: %v", err)
	}
}

func caseMembers(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	for i, name := range []string{"b", "a", "c", "ancient"} {
		at := t0 - int64(i)*1000
		if name == "ancient" {
			at = t0 - 1_000_000
		}
		if err := s.Heartbeat(ctx, name, at); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Members(ctx, t0, 1500*time.Millisecond)
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Members = %v %v, want [a b]", got, err)
	}
	// "c" is stale but young enough to keep; "ancient" was deleted.
	if got, _ := s.Members(ctx, t0, time.Hour); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Members(1h) = %v", got)
	}
	live, err := s.LiveMembers(ctx, t0, time.Hour)
	if err != nil || len(live) != 3 || live[0] != (storeapi.Member{Name: "a", Heartbeat: t0 - 1000}) {
		t.Fatalf("LiveMembers = %+v %v", live, err)
	}
	if err := s.Leave(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Members(ctx, t0, time.Hour); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Members after Leave = %v", got)
	}
	if err := s.Heartbeat(ctx, "x|y", t0); !errors.Is(err, storeapi.ErrInvalid) {
		t.Fatalf("heartbeat of a name with '|': %v", err)
	}
}

// Wake-ups and cancels published reach Listen (through the server's pub/sub). A
// notification may be lost while Listen subscribes, so each is published again until
// it arrives; what arrives must be exactly what was published.
func caseWakeAndCancelThroughListen(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	lctx, stop := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		wakes   []map[int]int64
		cancels []string
	)
	done := make(chan error, 1)
	go func() {
		done <- s.Listen(lctx, func(m map[int]int64) {
			mu.Lock()
			defer mu.Unlock()
			wakes = append(wakes, m)
		}, func(id string) {
			mu.Lock()
			defer mu.Unlock()
			cancels = append(cancels, id)
		})
	}()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v, want context.Canceled", err)
		}
	}()
	received := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(wakes), len(cancels)
	}
	want := map[int]int64{3: t0 + 5, 0: t0}
	until(t, func() bool { return must(t, s.PublishWake(ctx, want)) && firstOf(received) > 0 })
	until(t, func() bool { return must(t, s.PublishCancel(ctx, "gone")) && secondOf(received) > 0 })
	if err := s.PublishWake(ctx, nil); err != nil {
		t.Fatalf("PublishWake(nothing) = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, w := range wakes {
		if !maps.Equal(w, want) {
			t.Fatalf("wake-up %v, want %v", w, want)
		}
	}
	for _, id := range cancels {
		if id != "gone" {
			t.Fatalf("cancel of %q, want gone", id)
		}
	}
}

func must(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func firstOf(f func() (int, int)) int  { a, _ := f(); return a }
func secondOf(f func() (int, int)) int { _, b := f(); return b }

// until polls cond every 20ms for up to 10s (a subscription coming up); no timing is
// asserted, only that it happens.
func until(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// caseLifecycle runs every store operation once.
func caseLifecycle(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 6, "lc")
	parked, minDue, err := s.Park(ctx, []*envelope.Envelope{env(a[0], t0), env(a[1], t0+1), env(a[2], t0+2), env(a[3], t0+3), env(a[4], t0+50)})
	if err != nil || slices.Contains(parked, false) || minDue[1] != t0 {
		t.Fatalf("Park = %v %v %v", parked, minDue, err)
	}
	if p := mustPark(t, s, env(a[0], t0)); p[0] {
		t.Fatal("duplicate parked")
	}
	if _, err := s.Bury(ctx, []*envelope.Envelope{env(a[5], t0)}, t0); err != nil {
		t.Fatal(err)
	}
	tok := mustLease(t, s, 1, "i1")
	if _, _, err := s.Claim(ctx, 1, "i1", tok+1, t0, t0, 1); !errors.Is(err, storeapi.ErrFenced) {
		t.Fatalf("fenced claim: %v", err)
	}
	items, next, err := s.Claim(ctx, 1, "i1", tok, t0+10, t0+1000, 3)
	if err != nil || !slices.Equal(ids(items), a[:3]) || next != t0+3 || items[1].DueAt != t0+1 {
		t.Fatalf("Claim = %v %d %v", ids(items), next, err)
	}
	if err := s.Ack(ctx, 1, []string{a[0]}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Retry(ctx, 1, []storeapi.RetryItem{{Env: items[1], Due: t0 + 5}, {Env: items[2], Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a[0], storeapi.StateDelivered, t0)
	wantState(t, s, a[1], storeapi.StatePending, t0+5)
	wantState(t, s, a[2], storeapi.StateDead, t0)
	if st, _, err := s.Cancel(ctx, a[3], t0, storeapi.CancelOptions{}); err != nil || st != storeapi.StatePending {
		t.Fatalf("Cancel = %q %v", st, err)
	}
	if st, err := s.Reschedule(ctx, a[4], t0+4); err != nil || st != storeapi.StatePending {
		t.Fatalf("Reschedule = %q %v", st, err)
	}
	if err := s.RequeueDead(ctx, a[2], t0+6); err != nil {
		t.Fatal(err)
	}
	items, _, err = s.Claim(ctx, 1, "i1", tok, t0+10, t0+1000, 10)
	if err != nil || len(items) != 3 {
		t.Fatalf("Claim = %v %v", ids(items), err)
	}
	lifecycleEnd(t, s, tok, items)
}

// lifecycleEnd is the second half of caseLifecycle: three messages of shard 1 are in
// flight (lease deadline t0+1000) and a buried one is dead.
func lifecycleEnd(t *testing.T, s storeapi.Store, tok int64, items []*envelope.Envelope) {
	t.Helper()
	ctx := storeCtx(t)
	if n, more, err := s.Recover(ctx, 1, t0+1000, 2); err != nil || n != 2 || !more {
		t.Fatalf("Recover = %d %v %v", n, more, err)
	}
	if ok, err := s.RenewLease(ctx, 1, "i1", tok, time.Second); err != nil || !ok {
		t.Fatalf("Renew = %v %v", ok, err)
	}
	if err := s.ReleaseLease(ctx, 1, "i1", tok); err != nil {
		t.Fatal(err)
	}
	if dead, err := s.ListDead(ctx, 10); err != nil || len(dead) != 1 {
		t.Fatalf("ListDead = %v %v", dead, err)
	}
	if n, err := s.PurgeDead(ctx); err != nil || n != 1 {
		t.Fatalf("PurgeDead = %d %v", n, err)
	}
	stats, err := s.ShardStats(ctx)
	if err != nil || stats[1].Pending != 2 || stats[1].Inflight != 1 || stats[1].NextDue != t0+1000 {
		t.Fatalf("ShardStats = %+v %v", stats, err)
	}
	if n, more, err := s.RecoverAll(ctx, 1, t0+10, 10); err != nil || n != 1 || more {
		t.Fatalf("RecoverAll = %d %v %v", n, more, err)
	}
	wantState(t, s, items[2].ID, storeapi.StatePending, t0+10)
}

// caseTime: Time is a clock of this century that does not go backwards while time
// passes (Redis TIME; the clock check measures each instance against it).
func caseTime(t *testing.T, newSubject func(Config) Subject) {
	sub := newSubject(Config{Shards: 1})
	ctx := context.Background()
	first, err := sub.Store.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Before(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("Time = %v", first)
	}
	sub.Elapse(50 * time.Millisecond)
	second, err := sub.Store.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.Before(first) {
		t.Fatalf("Time went back: %v, then %v", first, second)
	}
}
