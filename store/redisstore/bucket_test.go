package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Due buckets (lua/includes/bucket.lua). The conformance suite runs with them
// (TestConformanceRedisBuckets); these check that its Kafka ids really went into
// buckets and the layout's own rules: a bucket claimed whole once it is all due, its
// ids acked, recovered, found, cancelled and rescheduled, and none parked into a bucket
// already claimed.

// bucketedAt parks n Kafka default ids of partition p due at due+i on a one-shard store
// with buckets and returns their envelopes, checking that they went into a bucket.
func bucketedAt(t *testing.T, s *Store, c *redis.Client, p, from, n int, due int64) []*envelope.Envelope {
	t.Helper()
	ctx := storeCtx(t)
	envs := make([]*envelope.Envelope, n)
	for i, id := range blockIDs(p, from, n) {
		envs[i] = env(id, due+int64(i))
	}
	prior, _, err := s.ParkEach(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range prior {
		if st != StateUnknown {
			t.Fatalf("park %s: prior %v", envs[i].ID, st)
		}
	}
	for _, e := range envs {
		if _, err := c.ZScore(ctx, s.keys[0].due, e.ID).Result(); err != redis.Nil {
			t.Fatalf("%s is in due (%v), want it in its bucket", e.ID, err)
		}
		if ok, _ := c.SIsMember(ctx, bucketKey(s, "hb", e.DueAt), e.ID).Result(); !ok {
			t.Fatalf("%s is not in bucket %d", e.ID, e.DueAt/bucketWidth)
		}
	}
	return envs
}

func bucketKey(s *Store, kind string, due int64) string {
	return s.keys[0].due[:len(s.keys[0].due)-3] + kind + ":" + strconv.FormatInt(due/bucketWidth, 10)
}

func wantGet(t *testing.T, s *Store, id string, st State, score int64) {
	t.Helper()
	got, sc, e, err := s.Get(storeCtx(t), id)
	if err != nil || got != st || (score >= 0 && sc != score) {
		t.Fatalf("Get(%s) = %v, %d, %v; want %v, %d", id, got, sc, err, st, score)
	}
	if (st == StatePending || st == StateInflight) && (e == nil || e.ID != id) {
		t.Fatalf("Get(%s): envelope %v", id, e)
	}
}

func bucketStats(t *testing.T, s *Store) ShardStat {
	t.Helper()
	st, err := s.ShardStats(storeCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return st[0]
}

func routeCount(t *testing.T, s *Store) storeapi.RouteCount {
	t.Helper()
	c, err := s.RouteCounts(storeCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return c.Routes()["orders"]
}

// TestBucketClaimedWholeAckedAndRecovered: a bucket is claimed once its middle is due
// by upTo, whole, in one claim, each message to fire at its DueAt; its ids read in flight,
// leave it when acked (delivered) and go back to due when its lease ends.
func TestBucketClaimedWholeAckedAndRecovered(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, Buckets: true, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	now := time.Now().UnixMilli()
	start := (now/bucketWidth + 5) * bucketWidth // a bucket four to five seconds ahead
	envs := bucketedAt(t, s, c, 1, 0, 10, start+10)
	wantGet(t, s, envs[3].ID, StatePending, envs[3].DueAt)
	if st := bucketStats(t, s); st.Pending != 10 || st.NextDue != start {
		t.Fatalf("stats: pending %d, next due %d; want 10, %d", st.Pending, st.NextDue, start)
	}
	tok := mustLease(t, s, 0, "i1")
	items, next := mustClaim(t, s, 0, tok, start+bucketWidth/2-1, 100)
	if len(items) != 0 || next != start {
		t.Fatalf("claim before the bucket's middle: %d items, next %d; want none, %d", len(items), next, start)
	}
	deadline := start + bucketWidth + 30_000
	items, _, err := s.Claim(ctx, 0, "i1", tok, start+bucketWidth/2, deadline, 100)
	if err != nil || len(items) != 10 {
		t.Fatalf("claim of the bucket: %d items, %v; want 10", len(items), err)
	}
	for _, e := range items {
		if e.FireAt != e.DueAt || e.ClaimedBytes == 0 {
			t.Fatalf("%s: fire at %d, due %d, claimed bytes %d", e.ID, e.FireAt, e.DueAt, e.ClaimedBytes)
		}
	}
	wantGet(t, s, envs[3].ID, StateInflight, deadline)
	if rc := routeCount(t, s); rc.Pending != 0 || rc.Inflight != 10 {
		t.Fatalf("counts %+v, want 10 in flight", rc)
	}
	if err := s.AckEnvelopes(ctx, items[:4], start+bucketWidth); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	for _, e := range items[:4] {
		acked[e.ID] = true
		wantGet(t, s, e.ID, StateDelivered, -1)
	}
	if st := bucketStats(t, s); st.Inflight != 6 || st.Pending != 0 {
		t.Fatalf("stats after the ack: pending %d, in flight %d; want 0, 6", st.Pending, st.Inflight)
	}
	moved, more, err := s.Recover(ctx, 0, deadline, 100)
	if err != nil || moved != 6 || more {
		t.Fatalf("recover: %d, %v, %v; want 6 moved", moved, more, err)
	}
	for _, e := range envs {
		if !acked[e.ID] {
			wantGet(t, s, e.ID, StatePending, deadline)
		}
	}
	if rc := routeCount(t, s); rc.Pending != 6 || rc.Inflight != 0 {
		t.Fatalf("counts %+v after recover, want 6 pending", rc)
	}
	if n, _ := c.Exists(ctx, bucketKey(s, "hf", start)).Result(); n != 0 {
		t.Fatal("the recovered bucket's set is left")
	}
	// A replay of the fetch parks nothing again.
	prior, _, err := s.ParkEach(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range prior {
		if want := map[bool]State{true: StateDelivered, false: StatePending}[acked[envs[i].ID]]; st != want {
			t.Fatalf("replay of %s: %v, want %v", envs[i].ID, st, want)
		}
	}
}

// TestBucketByID: a bucketed message is found, cancelled, rescheduled and retried by
// id as any other, and browse and counts by score see it.
func TestBucketByID(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, Buckets: true, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	now := time.Now().UnixMilli()
	start := (now/bucketWidth + 5) * bucketWidth
	envs := bucketedAt(t, s, c, 2, 0, 6, start)
	if prior, _, err := s.Cancel(ctx, envs[0].ID, now, storeapi.CancelOptions{}); err != nil || prior != StatePending {
		t.Fatalf("cancel: %v, %v", prior, err)
	}
	wantGet(t, s, envs[0].ID, StateCancelled, -1)
	if prior, err := s.Reschedule(ctx, envs[1].ID, start+60_000); err != nil || prior != StatePending {
		t.Fatalf("reschedule: %v, %v", prior, err)
	}
	wantGet(t, s, envs[1].ID, StatePending, start+60_000)
	if rc := routeCount(t, s); rc.Pending != 5 {
		t.Fatalf("counts %+v, want 5 pending", rc)
	}
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, start+bucketWidth, 100)
	if len(items) != 4 {
		t.Fatalf("claimed %d, want the bucket's 4 left", len(items))
	}
	if prior, _, err := s.Cancel(ctx, items[0].ID, now, storeapi.CancelOptions{}); err != nil || prior != StateInflight {
		t.Fatalf("cancel in flight: %v, %v", prior, err)
	}
	retried := *items[1]
	retried.Attempt = 1
	if err := s.Retry(ctx, 0, []RetryItem{{Env: &retried, Due: start + 90_000}}, now); err != nil {
		t.Fatal(err)
	}
	wantGet(t, s, items[1].ID, StatePending, start+90_000)
	if rc := routeCount(t, s); rc.Pending != 2 || rc.Inflight != 2 {
		t.Fatalf("counts %+v, want 2 pending, 2 in flight", rc)
	}
	// A later park into the same bucket: it was claimed, so the message goes to due.
	late := env(kafkaID(3, 0), start+5) // a block without marks: park's quick path
	if _, _, err := s.ParkEach(ctx, []*envelope.Envelope{late}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ZScore(ctx, s.keys[0].due, late.ID).Result(); err != nil {
		t.Fatalf("a park into a claimed bucket: not in due (%v)", err)
	}
	page, err := s.Browse(ctx, BrowseQuery{State: StateInflight, Limit: 10})
	if err != nil || len(page.Items) != 2 {
		t.Fatalf("browse in flight: %d, %v; want the bucket's 2", len(page.Items), err)
	}
	if n, err := s.CountRange(ctx, StateInflight, 0, 0); err != nil || n != 2 {
		t.Fatalf("count in flight: %d, %v", n, err)
	}
	if err := s.AckEnvelopes(context.Background(), items[2:], now); err != nil {
		t.Fatal(err)
	}
	if rc := routeCount(t, s); rc.Inflight != 0 {
		t.Fatalf("counts %+v after the acks of the flushed bucket", rc)
	}
}

// TestBucketLargerThanOneRead: a bucket of more ids than one envelope read takes
// (maxItemsPerCall) is claimed whole, each id once.
func TestBucketLargerThanOneRead(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, Buckets: true, DoneWindow: time.Minute})
	now := time.Now().UnixMilli()
	start := (now/bucketWidth + 5) * bucketWidth
	n := maxItemsPerCall + 300
	bucketedAt(t, s, c, 1, 0, n, start)
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, start+bucketWidth, 100)
	seen := map[string]bool{}
	for _, e := range items {
		if seen[e.ID] {
			t.Fatalf("%s claimed twice", e.ID)
		}
		seen[e.ID] = true
	}
	if len(seen) != n {
		t.Fatalf("claimed %d distinct of %d", len(seen), n)
	}
}

// TestBucketFlushGoesOnUntilEmpty: the readers by score see every bucketed message,
// however many buckets a shard holds (a flush call moves a few).
func TestBucketFlushGoesOnUntilEmpty(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, Buckets: true, DoneWindow: time.Minute})
	now := time.Now().UnixMilli()
	start := (now/bucketWidth + 5) * bucketWidth
	n := 3*bucketsPerFlush + 1
	for k := range n {
		bucketedAt(t, s, c, 1, k, 1, start+int64(k)*bucketWidth)
	}
	got, err := s.CountRange(storeCtx(t), StatePending, 0, 0)
	if err != nil || got != int64(n) {
		t.Fatalf("count of pending: %d, %v; want %d", got, err, n)
	}
	if left, _ := c.ZCard(storeCtx(t), s.keys[0].bucketIndex()).Result(); left != 0 {
		t.Fatalf("%d buckets left after the flush", left)
	}
}

// TestBucketBeforeDueEntriesUnderAByteBudget: a bucket a claim's byte budget cannot hold
// ends the claim with its size as the need, and the claim sized for it takes it before
// the due entries parked meanwhile (taken after them, each claim's new entries would
// use the budget first and leave the bucket behind while they came).
func TestBucketBeforeDueEntriesUnderAByteBudget(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, Buckets: true, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	now := time.Now().UnixMilli()
	start := (now/bucketWidth + 5) * bucketWidth
	bucketedAt(t, s, c, 1, 0, 10, start)
	tok := mustLease(t, s, 0, "i1")
	parkDue := func(id string) {
		t.Helper()
		if _, _, err := s.ParkEach(ctx, []*envelope.Envelope{env(id, start)}); err != nil { // not a Kafka id: due
			t.Fatal(err)
		}
	}
	claim := func(maxBytes int64, deadline int64) storeapi.ClaimResult {
		t.Helper()
		res := s.ClaimMany(ctx, []storeapi.ClaimRequest{{Shard: 0, Instance: "i1", Token: tok, UpTo: start + bucketWidth,
			LeaseDeadline: deadline, Limit: 100, MaxBytes: maxBytes}})[0]
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res
	}
	parkDue("user-1")
	first := claim(2000, start+60_000)
	if len(first.Items) != 0 || first.Need < 10*storeapi.MemOverhead {
		t.Fatalf("claim under 2,000 bytes: %d items, need %d; want none and the bucket's size", len(first.Items), first.Need)
	}
	parkDue("user-2")
	second := claim(first.Need, start+60_001)
	if len(second.Items) != 10 {
		t.Fatalf("claim sized for the bucket took %d messages, want its 10", len(second.Items))
	}
}
