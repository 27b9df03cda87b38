package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/internal/testkit"
	"github.com/delaybridge/delay-bridge/lua"
)

const t0 = int64(1_700_000_000_000) // a fixed "now" in unix ms: scripts never read the clock

func storeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newTestStore starts a redis-server of its own and a Store on it.
func newTestStore(t *testing.T, opt Options) (*Store, *testkit.Redis, *redis.Client) {
	t.Helper()
	r := testkit.StartRedis(t)
	c := r.Client()
	if opt.Shards == 0 {
		opt.Shards = 4
	}
	if opt.DoneWindow == 0 {
		opt.DoneWindow = time.Hour
	}
	s, err := New(storeCtx(t), c, opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, r, c
}

func env(id string, due int64) *envelope.Envelope {
	return &envelope.Envelope{
		ID: id, Route: "orders", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
		DueAt: due, ReceivedAt: due - 1000, Key: []byte("k-" + id), Payload: []byte("payload " + id),
		Headers: []envelope.Header{{Key: "traceparent", Value: "00-abc-def-01"}},
	}
}

// idsOnShard returns n ids that all hash to shard.
func idsOnShard(s *Store, shard, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if s.ShardOf(id) == shard {
			out = append(out, id)
		}
	}
	return out
}

func mustPark(t *testing.T, s *Store, envs ...*envelope.Envelope) []bool {
	t.Helper()
	parked, _, err := s.Park(storeCtx(t), envs)
	if err != nil {
		t.Fatalf("Park: %v", err)
	}
	return parked
}

func mustLease(t *testing.T, s *Store, shard int, instance string) int64 {
	t.Helper()
	tok, err := s.AcquireLease(storeCtx(t), shard, instance, time.Minute)
	if err != nil || tok == 0 {
		t.Fatalf("AcquireLease(%d, %s) = %d, %v", shard, instance, tok, err)
	}
	return tok
}

func mustClaim(t *testing.T, s *Store, shard int, tok int64, upTo int64, limit int) ([]*envelope.Envelope, int64) {
	t.Helper()
	items, next, err := s.Claim(storeCtx(t), shard, "i1", tok, upTo, upTo+30_000, limit)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return items, next
}

func ids(envs []*envelope.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

func wantState(t *testing.T, s *Store, id string, want State, wantScore int64) *envelope.Envelope {
	t.Helper()
	st, score, e, err := s.Get(storeCtx(t), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if st != want || (wantScore >= 0 && score != wantScore) {
		t.Fatalf("Get(%s) = %q score %d, want %q score %d", id, st, score, want, wantScore)
	}
	return e
}

func TestStoreParkIdempotent(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
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
	got := wantState(t, s, a[0], StatePending, t0+500)
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
	if err := s.Retry(ctx, 1, []RetryItem{{Env: env(a[3], t0), Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, 1, []string{a[4]}, t0); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a[2], StateInflight, t0+30_000)
	wantState(t, s, a[3], StateDead, t0)
	wantState(t, s, a[4], StateDelivered, t0)

	// A replay of every record: nothing is parked again, nothing is changed.
	parked, minDue, err = s.Park(ctx, []*envelope.Envelope{env(a[0], 1), env(a[1], 1), env(a[2], 1), env(a[3], 1), env(a[4], 1)})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(parked, true) || len(minDue) != 0 {
		t.Fatalf("replay parked %v minDue %v, want all duplicates", parked, minDue)
	}
	wantState(t, s, a[0], StatePending, t0+500)
	wantState(t, s, a[2], StateInflight, t0+30_000)
	wantState(t, s, a[3], StateDead, t0)
	wantState(t, s, a[4], StateDelivered, t0)
}

func TestStoreParkManyShardsAndChunks(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 3})
	ctx := storeCtx(t)
	// More than maxItemsPerCall per shard, so every shard needs several script calls,
	// plus one payload large enough to force a chunk split by bytes.
	n := 2*maxItemsPerCall*3 + 7
	envs := make([]*envelope.Envelope, n)
	wantMin := map[int]int64{}
	for i := range envs {
		envs[i] = env(fmt.Sprintf("m-%d", i), t0+int64(n-i))
		sh := s.ShardOf(envs[i].ID)
		if d, ok := wantMin[sh]; !ok || envs[i].DueAt < d {
			wantMin[sh] = envs[i].DueAt
		}
	}
	envs[5].Payload = make([]byte, maxBytesPerCall)
	parked, minDue, err := s.Park(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parked {
		if !p {
			t.Fatalf("message %d not parked", i)
		}
	}
	if fmt.Sprint(minDue) != fmt.Sprint(wantMin) {
		t.Fatalf("minDue = %v, want %v", minDue, wantMin)
	}
	var total int64
	for sh := range 3 {
		total += c.ZCard(ctx, s.keys[sh].due).Val()
	}
	if total != int64(n) {
		t.Fatalf("%d pending, want %d", total, n)
	}
	e := wantState(t, s, envs[5].ID, StatePending, envs[5].DueAt)
	if len(e.Payload) != maxBytesPerCall {
		t.Fatalf("big payload came back with %d bytes", len(e.Payload))
	}
}

func TestStoreClaimOrderLimitNextDue(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
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
		wantState(t, s, e.ID, StateInflight, t0+1000+30_000)
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

func TestStoreClaimDueAtIsScore(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	id := idsOnShard(s, 0, 1, "r")[0]
	mustPark(t, s, env(id, t0+10_000))
	if st, err := s.Reschedule(ctx, id, t0+50); err != nil || st != StatePending {
		t.Fatalf("Reschedule = %q, %v", st, err)
	}
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, t0+100, 10)
	if len(items) != 1 || items[0].DueAt != t0+50 {
		t.Fatalf("claimed %+v, want DueAt %d from the rescheduled score", items, t0+50)
	}
}

func TestStoreClaimFenced(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	id := idsOnShard(s, 3, 1, "f")[0]
	mustPark(t, s, env(id, t0))

	// Nobody holds the lease.
	if _, _, err := s.Claim(ctx, 3, "i1", 1, t0, t0+1, 10); !errors.Is(err, ErrFenced) {
		t.Fatalf("claim without lease: %v, want ErrFenced", err)
	}
	old := mustLease(t, s, 3, "i1")
	// The lease expires (simulated by deleting the key) and another instance takes it:
	// its token is larger, and the stale holder can no longer claim.
	c.Del(ctx, s.keys[3].owner)
	newTok := mustLease(t, s, 3, "i2")
	if newTok <= old {
		t.Fatalf("new token %d not above old %d", newTok, old)
	}
	_, _, err := s.Claim(ctx, 3, "i1", old, t0, t0+1, 10)
	if !errors.Is(err, ErrFenced) || IsRetryable(err) {
		t.Fatalf("stale claim: %v (retryable %v), want permanent ErrFenced", err, IsRetryable(err))
	}
	// Same instance name, wrong token: still fenced.
	if _, _, err := s.Claim(ctx, 3, "i2", old, t0, t0+1, 10); !errors.Is(err, ErrFenced) {
		t.Fatalf("wrong token: %v", err)
	}
	wantState(t, s, id, StatePending, t0)
	items, _, err := s.Claim(ctx, 3, "i2", newTok, t0, t0+1, 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("claim by holder: %v %v", ids(items), err)
	}
}

func TestStoreAckAndDoneTrim(t *testing.T) {
	s, _, c := newTestStore(t, Options{DoneWindow: 10 * time.Second})
	ctx := storeCtx(t)
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
	k := s.keys[0]
	if n := c.ZCard(ctx, k.done).Val(); n != 30 {
		t.Fatalf("done has %d, want 30", n)
	}
	if n := c.HLen(ctx, k.msg).Val(); n != 10 {
		t.Fatalf("msg has %d, want the 10 unacked", n)
	}
	if c.ZScore(ctx, k.done, "never-claimed").Err() != redis.Nil {
		t.Fatal("an id that was not in flight was recorded as done")
	}
	// Within the window, the acked ids stay remembered (a replay is a duplicate).
	if p := mustPark(t, s, env(a[0], t0)); p[0] {
		t.Fatal("acked id re-parked inside the done window")
	}
	// Past the window, each ack forgets at most max(2*batch, minTrim) old entries.
	later := t0 + 10_001
	if err := s.Ack(ctx, 0, []string{a[30]}, later); err != nil {
		t.Fatal(err)
	}
	if n := c.ZCard(ctx, k.done).Val(); n != 30-minTrim+1 {
		t.Fatalf("done has %d after one bounded trim, want %d", n, 30-minTrim+1)
	}
	if err := s.Ack(ctx, 0, a[31:], later); err != nil {
		t.Fatal(err)
	}
	if n := c.ZCard(ctx, k.done).Val(); n != 10 {
		t.Fatalf("done has %d, want only the 10 acked at %d", n, later)
	}
	// Forgotten ids may be parked again.
	if p := mustPark(t, s, env(a[0], t0)); !p[0] {
		t.Fatal("id forgotten after the window was not parked")
	}
}

func TestStoreAckManyAndNoDoneWindow(t *testing.T) {
	r := testkit.StartRedis(t)
	c := r.Client()
	s, err := New(storeCtx(t), c, Options{Shards: 4, DoneWindow: 0})
	if err != nil {
		t.Fatal(err)
	}
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
		if n := c.ZCard(ctx, s.keys[st.Shard].done).Val(); n != 0 {
			t.Fatalf("done window 0 but %d ids remembered", n)
		}
	}
	wantState(t, s, "am-1", StateUnknown, 0)
}

func TestStoreRetry(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
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
	err := s.Retry(ctx, 1, []RetryItem{
		{Env: again, Due: t0 + 1000},
		{Env: dead, Dead: true},
		{Env: pending, Due: t0},
	}, t0+5)
	if err != nil {
		t.Fatal(err)
	}
	if e := wantState(t, s, again.ID, StatePending, t0+1000); e.Attempt != 1 {
		t.Fatalf("retried envelope attempt %d", e.Attempt)
	}
	if e := wantState(t, s, dead.ID, StateDead, t0+5); e.Reason != "publish: unroutable" || e.Attempt != 10 {
		t.Fatalf("dead envelope %+v", e)
	}
	if e := wantState(t, s, a[2], StatePending, t0+9999); e.Reason != "" {
		t.Fatalf("retry touched a message not in flight: %+v", e)
	}
	// The retried one is claimable again when due.
	items, _ = mustClaim(t, s, 1, tok, t0+1000, 10)
	if !slices.Equal(ids(items), []string{again.ID}) || items[0].Attempt != 1 {
		t.Fatalf("reclaimed %v", ids(items))
	}
}

func TestStoreRecover(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
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

func TestStoreCancel(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	a := idsOnShard(s, 0, 4, "x")
	mustPark(t, s, env(a[0], t0+50_000), env(a[1], t0), env(a[2], t0), env(a[3], t0))
	tok := mustLease(t, s, 0, "i1")
	mustClaim(t, s, 0, tok, t0, 10) // a1..a3 in flight
	if err := s.Retry(ctx, 0, []RetryItem{{Env: env(a[2], t0), Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, 0, []string{a[3]}, t0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		want State
	}{{a[0], StatePending}, {a[1], StateInflight}, {a[2], StateDead}, {a[3], StateDelivered}, {"nobody", StateUnknown}} {
		got, _, err := s.Cancel(ctx, tc.id, t0+1, CancelOptions{Route: "orders", Tombstone: true})
		if err != nil || got != tc.want {
			t.Fatalf("Cancel(%s) = %q, %v; want %q", tc.id, got, err, tc.want)
		}
		if tc.want == StateDelivered {
			wantState(t, s, tc.id, StateDelivered, -1)
		} else {
			wantState(t, s, tc.id, StateCancelled, -1)
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
	if got, _, _ := s.Cancel(ctx, a[0], t0+3, CancelOptions{}); got != StateCancelled {
		t.Fatalf("second cancel = %q, want cancelled", got)
	}
}

func TestStoreRescheduleAndRequeue(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	a := idsOnShard(s, 3, 3, "rs")
	mustPark(t, s, env(a[0], t0+100), env(a[1], t0), env(a[2], t0))
	tok := mustLease(t, s, 3, "i1")
	items, _ := mustClaim(t, s, 3, tok, t0, 10) // a1, a2
	d := items[1]
	d.Attempt, d.Reason = 10, "boom"
	if err := s.Retry(ctx, 3, []RetryItem{{Env: d, Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}

	if st, err := s.Reschedule(ctx, a[0], t0+7777); err != nil || st != StatePending {
		t.Fatalf("reschedule pending = %q %v", st, err)
	}
	if e := wantState(t, s, a[0], StatePending, t0+7777); e.DueAt != t0+7777 {
		t.Fatalf("reschedule must keep the envelope's DueAt equal to the score (recovery relies on it): DueAt %d", e.DueAt)
	}
	if st, err := s.Reschedule(ctx, items[0].ID, t0+5); err != nil || st != StateInflight {
		t.Fatalf("reschedule inflight = %q %v, want unchanged inflight", st, err)
	}
	wantState(t, s, items[0].ID, StateInflight, -1)
	if st, err := s.Reschedule(ctx, "nobody", t0); err != nil || st != StateUnknown {
		t.Fatalf("reschedule unknown = %q %v", st, err)
	}
	// A dead letter is requeued with a clean slate.
	if st, err := s.Reschedule(ctx, d.ID, t0+20); err != nil || st != StateDead {
		t.Fatalf("reschedule dead = %q %v", st, err)
	}
	if e := wantState(t, s, d.ID, StatePending, t0+20); e.Reason != "" || e.Attempt != 0 {
		t.Fatalf("requeued envelope %+v", e)
	}
	if err := s.RequeueDead(ctx, d.ID, t0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("requeue of a pending message: %v, want ErrNotFound", err)
	}
	// Through RequeueDead directly.
	items, _ = mustClaim(t, s, 3, tok, t0+20, 10)
	if err := s.Retry(ctx, 3, []RetryItem{{Env: items[0], Dead: true}}, t0+21); err != nil {
		t.Fatal(err)
	}
	if err := s.RequeueDead(ctx, d.ID, t0+30); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, d.ID, StatePending, t0+30)
}

func TestStoreGet(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	e := env("get-me", t0+42)
	e.AMQP = &envelope.AMQPProperties{ContentType: "application/json", MessageID: "get-me", DeliveryMode: 2}
	e.Headers = append(e.Headers, envelope.Header{Key: "n", Value: int32(7)})
	mustPark(t, s, e)
	got := wantState(t, s, "get-me", StatePending, t0+42)
	if got.AMQP == nil || got.AMQP.ContentType != "application/json" || got.Headers[1].Value != int32(7) {
		t.Fatalf("Get envelope %+v", got)
	}
	st, score, ge, err := s.Get(ctx, "missing")
	if err != nil || st != StateUnknown || score != 0 || ge != nil {
		t.Fatalf("Get(missing) = %q %d %v %v", st, score, ge, err)
	}
}

func TestStoreClaimSurvivesCorruption(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 3, "bad")
	mustPark(t, s, env(a[0], t0), env(a[1], t0+1), env(a[2], t0+2))
	k := s.keys[1]
	c.HDel(ctx, k.msg, a[0])                    // envelope lost
	c.HSet(ctx, k.msg, a[1], "\x01\x00garbage") // envelope undecodable
	tok := mustLease(t, s, 1, "i1")
	items, next := mustClaim(t, s, 1, tok, t0+10, 10)
	if !slices.Equal(ids(items), []string{a[2]}) || next != -1 {
		t.Fatalf("claimed %v next %d, want only the healthy message", ids(items), next)
	}
	wantState(t, s, a[0], StateUnknown, 0)
	st, _, _, err := s.Get(ctx, a[1])
	if st != StateDead || !errors.Is(err, envelope.ErrCorrupt) {
		t.Fatalf("corrupt message state %q err %v, want dead + ErrCorrupt", st, err)
	}
	dead, err := s.ListDead(ctx, 10)
	if err != nil || len(dead) != 1 || dead[0].ID != a[1] || !strings.Contains(dead[0].Reason, "corrupt") {
		t.Fatalf("ListDead = %+v %v", dead, err)
	}
}

func TestStoreBuryListPurgeDead(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
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
	wantState(t, s, "bd-25", StatePending, t0)
	wantState(t, s, "bd-05", StateDead, t0)
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
	wantState(t, s, "bd-05", StateUnknown, 0)
	wantState(t, s, "bd-25", StatePending, t0)
}

func TestStoreShardCountRefused(t *testing.T) {
	r := testkit.StartRedis(t)
	c := r.Client()
	ctx := storeCtx(t)
	if _, err := New(ctx, c, Options{Shards: 8, Cluster: "prod"}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, c, Options{Shards: 8, Cluster: "prod"}); err != nil {
		t.Fatalf("same count again: %v", err)
	}
	_, err := New(ctx, c, Options{Shards: 16, Cluster: "prod"})
	if !errors.Is(err, ErrShardCount) || IsRetryable(err) || !strings.Contains(err.Error(), "shards") {
		t.Fatalf("different count: %v, want a permanent ErrShardCount naming shards", err)
	}
	// Another bridge cluster in the same Redis records its own count.
	if _, err := New(ctx, c, Options{Shards: 16, Cluster: "staging"}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, c, Options{Cluster: "bad{tag"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cluster name with a brace: %v", err)
	}
}

func TestStoreRedisRestartNoScript(t *testing.T) {
	s, r, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	// SIGKILL loses what AOF has not fsynced yet; the test is about scripts, not that.
	if err := c.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	mustPark(t, s, env("before", t0))
	tok := mustLease(t, s, s.ShardOf("before"), "i1")

	r.Restart()
	// The first calls after a restart may meet a dead pooled connection; callers retry
	// on IsRetryable errors, and so does this test.
	var err error
	for range 5 {
		if _, _, _, err = s.Get(ctx, "before"); err == nil || !IsRetryable(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if n := c.Do(ctx, "script", "exists", s.park.Hash()).Val(); fmt.Sprint(n) != "[0]" {
		t.Fatalf("script cache survived the restart (%v): the NOSCRIPT path is not tested", n)
	}
	// Pipelined park across all shards: every EVALSHA meets NOSCRIPT and is re-sent.
	var envs []*envelope.Envelope
	for i := range 20 {
		envs = append(envs, env(fmt.Sprintf("after-%d", i), t0))
	}
	parked, _, err := s.Park(ctx, envs)
	if err != nil || slices.Contains(parked, false) {
		t.Fatalf("Park after restart = %v %v", parked, err)
	}
	c.ScriptFlush(ctx)
	if err := s.AckMany(ctx, []string{"x", "y", "z", "w", "v"}, t0); err != nil {
		t.Fatalf("AckMany after SCRIPT FLUSH: %v", err)
	}
	c.ScriptFlush(ctx)
	items, _, err := s.Claim(ctx, s.ShardOf("before"), "i1", tok, t0, t0+1, 100)
	if err != nil || !slices.Contains(ids(items), "before") {
		t.Fatalf("Claim after restart = %v %v", ids(items), err)
	}
}

func TestStoreErrorsRetryable(t *testing.T) {
	r := testkit.StartRedis(t)
	// No client-side retries, so the error surfaces at once.
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := storeCtx(t)
	s, err := New(ctx, c, Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	r.Kill()
	_, _, err = s.Park(ctx, []*envelope.Envelope{env("down", t0)})
	if err == nil || !IsRetryable(err) {
		t.Fatalf("park with Redis down: %v (retryable %v)", err, IsRetryable(err))
	}
	if _, _, err := s.Recover(ctx, 0, t0, 10); err == nil || !IsRetryable(err) {
		t.Fatalf("recover with Redis down: %v", err)
	}
	for _, e := range []error{ErrFenced, ErrShardCount, ErrInvalid, envelope.ErrCorrupt, context.Canceled, nil} {
		if IsRetryable(fmt.Errorf("wrapped: %w", e)) && e != nil {
			t.Fatalf("%v classified retryable", e)
		}
	}
	for _, e := range []error{ErrNotReplicated, context.DeadlineExceeded, errors.New("x")} {
		want := e != nil && e.Error() != "x"
		if IsRetryable(fmt.Errorf("wrapped: %w", e)) != want {
			t.Fatalf("IsRetryable(%v) != %v", e, want)
		}
	}
}

func TestStoreWakeFormat(t *testing.T) {
	m := map[int]int64{3: t0 + 5, 0: t0}
	p := FormatWake(m)
	if p != fmt.Sprintf("0:%d,3:%d", t0, t0+5) {
		t.Fatalf("FormatWake = %q", p)
	}
	back, err := ParseWake(p)
	if err != nil || fmt.Sprint(back) != fmt.Sprint(m) {
		t.Fatalf("ParseWake = %v %v", back, err)
	}
	if _, err := ParseWake("1:x"); err == nil {
		t.Fatal("bad payload accepted")
	}
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	sub := c.Subscribe(ctx, s.WakeChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishWake(ctx, m); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != p {
		t.Fatalf("received %v %v", msg, err)
	}
}

// TestStoreKeysShareHashTag checks, with Redis's own CLUSTER KEYSLOT, that all keys a
// script is given for one shard map to one slot, and that the scripts pass every key in
// KEYS (Redis Cluster refuses a script whose keys span slots).
func TestStoreKeysShareHashTag(t *testing.T) {
	r := testkit.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := r.Client()
	ctx := storeCtx(t)
	s, err := New(ctx, newSingleNodeCluster(t, r), Options{Shards: 5, Cluster: "a:b"})
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int64]bool{}
	for sh, k := range s.keys {
		var slot int64 = -1
		for _, key := range []string{k.due, k.msg, k.inflight, k.dead, k.done, k.cancelled, k.owner, k.fence} {
			got, err := c.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot >= 0 && got != slot {
				t.Fatalf("shard %d: key %s in slot %d, others in %d", sh, key, got, slot)
			}
			slot = got
		}
		slots[slot] = true
	}
	if len(slots) < 3 {
		t.Fatalf("5 shards map to only %d slots: the tag does not spread shards", len(slots))
	}
	a, _ := c.ClusterKeySlot(ctx, s.membersKey).Result()
	b, _ := c.ClusterKeySlot(ctx, s.metaKey).Result()
	if a != b {
		t.Fatalf("members and meta in slots %d and %d", a, b)
	}
	// Scripts must not reference keys beyond KEYS: look for key-building in the sources.
	for name, src := range lua.All() {
		if strings.Contains(src, "..':'") || strings.Contains(src, ".. ':'") || strings.Contains(src, "'{'") {
			t.Fatalf("script %s seems to build a key name", name)
		}
	}
}

// newSingleNodeCluster turns a cluster-enabled redis-server into a one-node cluster
// owning every slot and returns a ClusterClient for it.
func newSingleNodeCluster(t *testing.T, r *testkit.Redis) *redis.ClusterClient {
	t.Helper()
	c := r.Client()
	ctx := storeCtx(t)
	if err := c.Do(ctx, "cluster", "addslotsrange", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ok: %s", c.ClusterInfo(ctx).Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{r.Addr()}})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestStoreOnCluster runs the message lifecycle through a ClusterClient, where
// pipelines are split by slot and a script with keys in two slots is refused.
func TestStoreOnCluster(t *testing.T) {
	r := testkit.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	cc := newSingleNodeCluster(t, r)
	ctx := storeCtx(t)
	lc, err := New(ctx, cc, Options{Shards: 4, Cluster: "lifecycle", DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lifecycle(t, lc)
	s, err := New(ctx, cc, Options{Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var envs []*envelope.Envelope
	for i := range 100 {
		envs = append(envs, env(fmt.Sprintf("cl-%d", i), t0+int64(i)))
	}
	parked, minDue, err := s.Park(ctx, envs)
	if err != nil || slices.Contains(parked, false) || len(minDue) != 8 {
		t.Fatalf("Park = %v %v %v", parked, minDue, err)
	}
	var claimed []string
	for sh := range 8 {
		tok, err := s.AcquireLease(ctx, sh, "i1", time.Minute)
		if err != nil || tok == 0 {
			t.Fatalf("lease %d: %d %v", sh, tok, err)
		}
		if n, _, err := s.Recover(ctx, sh, t0, 100); err != nil || n != 0 {
			t.Fatalf("recover: %d %v", n, err)
		}
		items, next, err := s.Claim(ctx, sh, "i1", tok, t0+1000, t0+30_000, 1000)
		if err != nil || next != -1 {
			t.Fatalf("claim %d: %v next %d", sh, err, next)
		}
		claimed = append(claimed, ids(items)...)
		if len(items) > 1 {
			if err := s.Retry(ctx, sh, []RetryItem{{Env: items[0], Due: t0 + 5000}, {Env: items[1], Dead: true}}, t0); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := s.RenewLease(ctx, sh, "i1", tok, time.Minute); err != nil || !ok {
			t.Fatalf("renew: %v %v", ok, err)
		}
	}
	if len(claimed) != 100 {
		t.Fatalf("claimed %d", len(claimed))
	}
	if err := s.AckMany(ctx, claimed, t0); err != nil {
		t.Fatal(err)
	}
	stats, err := s.ShardStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pending, dead int64
	for _, st := range stats {
		pending += st.Pending
		dead += st.Dead
		if st.Owner != "i1" {
			t.Fatalf("stats %+v", st)
		}
	}
	if pending != 8 || dead != 8 {
		t.Fatalf("pending %d dead %d, want 8 and 8", pending, dead)
	}
	if st, _, err := s.Cancel(ctx, "cl-1", t0, CancelOptions{}); err != nil || st == StateUnknown {
		t.Fatalf("cancel = %q %v", st, err)
	}
	if _, err := s.Reschedule(ctx, "cl-2", t0); err != nil {
		t.Fatal(err)
	}
	stats, _ = s.ShardStats(ctx)
	dead = 0
	for _, st := range stats {
		dead += st.Dead
	}
	if dl, err := s.ListDead(ctx, 100); err != nil || int64(len(dl)) != dead || dead < 6 {
		t.Fatalf("ListDead = %d %v, stats say %d", len(dl), err, dead)
	}
	if _, err := s.PurgeDead(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "i1", t0); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Members(ctx, t0, time.Second); err != nil || !slices.Equal(m, []string{"i1"}) {
		t.Fatalf("Members = %v %v", m, err)
	}

	// MinReplicas on Cluster: WAIT runs per primary; this node has no replica.
	s2, err := New(ctx, cc, Options{Shards: 8, MinReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	parked, _, err = s2.Park(ctx, []*envelope.Envelope{env("w-1", t0), env("w-2", t0)})
	if !errors.Is(err, ErrNotReplicated) || !IsRetryable(err) || !slices.Equal(parked, []bool{true, true}) {
		t.Fatalf("Park with an unmet MinReplicas on cluster = %v %v", parked, err)
	}
}

func TestStoreMinReplicas(t *testing.T) {
	// Without a zero delay the primary waits 5s before the first full sync.
	primary := testkit.StartRedis(t, "--repl-diskless-sync-delay", "0")
	replica := testkit.StartRedis(t, "--replicaof", "127.0.0.1", fmt.Sprint(primary.Port))
	rc := replica.Client()
	ctx := storeCtx(t)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatal("replica did not connect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := primary.Client()
	s, err := New(ctx, c, Options{Shards: 4, MinReplicas: 1, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var envs []*envelope.Envelope
	for i := range 20 {
		envs = append(envs, env(fmt.Sprintf("rep-%d", i), t0))
	}
	if _, _, err := s.Park(ctx, envs); err != nil {
		t.Fatalf("Park with one replica: %v", err)
	}
	// The replica has them when Park returns.
	for sh := range 4 {
		if n := rc.ZCard(ctx, s.keys[sh].due).Val(); n != c.ZCard(ctx, s.keys[sh].due).Val() {
			t.Fatalf("replica shard %d has %d", sh, n)
		}
	}
	// After a script cache flush the re-sent EVALs are waited for too.
	c.ScriptFlush(ctx)
	if _, _, err := s.Park(ctx, []*envelope.Envelope{env("rep-x", t0)}); err != nil {
		t.Fatalf("Park after flush: %v", err)
	}
	if _, err := s.Bury(ctx, []*envelope.Envelope{env("rep-bad", t0)}, t0); err != nil {
		t.Fatalf("Bury: %v", err)
	}

	s2, err := New(ctx, c, Options{Shards: 4, MinReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	parked, minDue, err := s2.Park(ctx, []*envelope.Envelope{env("rep-y", t0+7)})
	if !errors.Is(err, ErrNotReplicated) || !IsRetryable(err) {
		t.Fatalf("Park wanting 2 replicas: %v, want retryable ErrNotReplicated", err)
	}
	if !parked[0] || len(minDue) != 1 {
		t.Fatalf("results not reported with ErrNotReplicated: %v %v", parked, minDue)
	}
}

// recorder is an Observer that remembers script timings and invalid counts.
type recorder struct {
	observe.Nop
	mu      sync.Mutex
	scripts map[string]int
	invalid map[string]int
}

func (r *recorder) ScriptDuration(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d <= 0 {
		panic("non-positive script duration")
	}
	r.scripts[name]++
}

func (r *recorder) Invalid(route, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.invalid[reason]++
}

func TestStoreObserver(t *testing.T) {
	rec := &recorder{scripts: map[string]int{}, invalid: map[string]int{}}
	s, _, c := newTestStore(t, Options{Observer: rec})
	ctx := storeCtx(t)
	a := idsOnShard(s, 0, 3, "o")
	mustPark(t, s, env(a[0], t0), env(a[1], t0), env(a[2], t0))
	c.HDel(ctx, s.keys[0].msg, a[0])
	c.HSet(ctx, s.keys[0].msg, a[1], "junk")
	tok := mustLease(t, s, 0, "i1")
	mustClaim(t, s, 0, tok, t0, 10)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, name := range []string{"park", "lease_acquire", "claim", "retry"} {
		if rec.scripts[name] != 1 {
			t.Fatalf("script timings %v: want one %s", rec.scripts, name)
		}
	}
	if rec.invalid["missing_envelope"] != 1 || rec.invalid["corrupt_envelope"] != 1 {
		t.Fatalf("invalid counts %v", rec.invalid)
	}
}

// lifecycle runs every store operation once, for servers other than the main tests'
// redis-server.
func lifecycle(t *testing.T, s *Store) {
	t.Helper()
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
	if _, _, err := s.Claim(ctx, 1, "i1", tok+1, t0, t0, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced claim: %v", err)
	}
	items, next, err := s.Claim(ctx, 1, "i1", tok, t0+10, t0+1000, 3)
	if err != nil || !slices.Equal(ids(items), a[:3]) || next != t0+3 || items[1].DueAt != t0+1 {
		t.Fatalf("Claim = %v %d %v", ids(items), next, err)
	}
	if err := s.Ack(ctx, 1, []string{a[0]}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Retry(ctx, 1, []RetryItem{{Env: items[1], Due: t0 + 5}, {Env: items[2], Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a[0], StateDelivered, t0)
	wantState(t, s, a[1], StatePending, t0+5)
	wantState(t, s, a[2], StateDead, t0)
	if st, _, err := s.Cancel(ctx, a[3], t0, CancelOptions{}); err != nil || st != StatePending {
		t.Fatalf("Cancel = %q %v", st, err)
	}
	if st, err := s.Reschedule(ctx, a[4], t0+4); err != nil || st != StatePending {
		t.Fatalf("Reschedule = %q %v", st, err)
	}
	if err := s.RequeueDead(ctx, a[2], t0+6); err != nil {
		t.Fatal(err)
	}
	items, _, err = s.Claim(ctx, 1, "i1", tok, t0+10, t0+1000, 10)
	if err != nil || len(items) != 3 {
		t.Fatalf("Claim = %v %v", ids(items), err)
	}
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
	wantState(t, s, items[2].ID, StatePending, t0+10)
}

// TestStoreOnEmbeddedMiniredis: `bridge dev` falls back to the embedded miniredis when
// there is no redis-server, and must run the very same scripts.
func TestStoreLifecycle(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	lifecycle(t, s)
}

func TestStoreOnEmbeddedMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	s, err := New(storeCtx(t), c, Options{Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lifecycle(t, s)
}

// RetryMany writes the outcomes of several shards in one round trip, each exactly as
// Retry would: retried ones pending again with their new attempt, dead ones in `dead`.
func TestStoreRetryMany(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	byShard := map[int][]RetryItem{}
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
		byShard[sh] = []RetryItem{{Env: items[0], Due: t0 + 500}, {Env: items[1], Dead: true}}
	}
	if err := s.RetryMany(ctx, byShard, t0+5); err != nil {
		t.Fatal(err)
	}
	for sh, items := range byShard {
		if e := wantState(t, s, items[0].Env.ID, StatePending, t0+500); e.Attempt != 2 {
			t.Errorf("shard %d: retried envelope attempt %d, want 2", sh, e.Attempt)
		}
		if e := wantState(t, s, items[1].Env.ID, StateDead, t0+5); e.Reason != "publish: unroutable" {
			t.Errorf("shard %d: dead envelope reason %q", sh, e.Reason)
		}
	}
	if err := s.RetryMany(ctx, nil, t0); err != nil {
		t.Errorf("RetryMany of nothing: %v", err)
	}
}
