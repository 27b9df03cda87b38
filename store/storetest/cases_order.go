package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Strict per-key order (storeapi/order.go).

func init() {
	register("OrderKeyShard", caseOrderKeyShard)
	register("OrderHeadOnly", caseOrderHeadOnly)
	register("OrderRetryRecoverDead", caseOrderRetryRecoverDead)
	register("OrderCancelAndByID", caseOrderCancelAndByID)
	register("OrderKeyMessages", caseOrderKeyMessages)
	register("OrderReplayKeepsItsPlace", caseOrderReplayKeepsItsPlace)
}

// KeyMessages lists a key's pending and in-flight messages in its order, head marked.
func caseOrderKeyMessages(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ctx := storeCtx(t)
	ks := storeapi.ShardOfKey("orders", "K", 8)
	mustPark(t, s, keyed("a", "K", t0+5), keyed("b", "K", t0+5), keyed("c", "K", t0+1), keyed("x", "X", t0))
	claimAll(t, s, ks, t0+1000)
	got, err := s.KeyMessages(ctx, "orders", "K")
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, m := range got {
		desc = append(desc, fmt.Sprintf("%s:%s:%v", m.Env.ID, m.State, m.Head))
	}
	want := []string{"c:inflight:true", "a:pending:false", "b:pending:false"}
	if !slices.Equal(desc, want) {
		t.Fatalf("KeyMessages(orders, K) = %v, want %v", desc, want)
	}
	if got[1].Score != t0+5 {
		t.Fatalf("a waiting reads score %d, want its due time %d", got[1].Score, t0+5)
	}
	for _, q := range [][2]string{{"orders", "none"}, {"billing", "K"}} {
		if got, err := s.KeyMessages(ctx, q[0], q[1]); err != nil || len(got) != 0 {
			t.Fatalf("KeyMessages(%s, %s) = %v, %v, want nothing", q[0], q[1], got, err)
		}
	}
}

var ordered = Config{Shards: 8, DoneWindow: time.Hour, Ordered: []string{"orders"}}

// keyed is a message of route "orders" with ordering key key (the Kafka record key).
func keyed(id, key string, due int64) *envelope.Envelope {
	e := env(id, due)
	e.Key = []byte(key)
	return e
}

// claimAll claims everything due by upTo on shard (a lease per call).
func claimAll(t *testing.T, s storeapi.Store, shard int, upTo int64) ([]string, []*envelope.Envelope, int64) {
	t.Helper()
	tok := mustLease(t, s, shard, "i1")
	items, next := mustClaim(t, s, shard, tok, upTo, 100)
	return ids(items), items, next
}

// A message with an ordering key on an ordered route lives in its key's shard; one
// without a key, or of another route, in its id's.
func caseOrderKeyShard(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ks := storeapi.ShardOfKey("orders", "K", 8)
	a, b := keyed("a", "K", t0), keyed("b", "K", t0)
	a.ID = idsOnShard(s, (ks+1)%8, 1, "a")[0]
	b.ID = idsOnShard(s, (ks+2)%8, 1, "b")[0]
	noKey := keyed(idsOnShard(s, (ks+3)%8, 1, "n")[0], "", t0)
	other := keyed(idsOnShard(s, (ks+4)%8, 1, "o")[0], "K", t0)
	other.Route = "billing"
	hdr := keyed(idsOnShard(s, (ks+5)%8, 1, "h")[0], "not-K", t0)
	hdr.SetHeader(storeapi.HeaderOrderKey, "K")
	mustPark(t, s, a, b, noKey, other, hdr)
	for _, c := range []struct {
		e    *envelope.Envelope
		want int
	}{{a, ks}, {b, ks}, {hdr, ks}, {noKey, s.ShardOf(noKey.ID)}, {other, s.ShardOf(other.ID)}} {
		if got := s.ShardOfEnv(c.e); got != c.want {
			t.Fatalf("ShardOfEnv(%s) = %d, want %d", c.e.ID, got, c.want)
		}
		wantState(t, s, c.e.ID, storeapi.StatePending, t0) // found wherever it lives
	}
	got, items, _ := claimAll(t, s, ks, t0)
	if !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("claim of the key's shard = %v, want only the head %s", got, a.ID)
	}
	if items[0].ClaimedFrom != ks+1 || s.ShardOfEnv(items[0]) != ks {
		t.Fatalf("claimed envelope's shard = %d (ClaimedFrom %d), want %d", s.ShardOfEnv(items[0]), items[0].ClaimedFrom, ks)
	}
	if err := s.AckEnvelopes(storeCtx(t), items, t0); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a.ID, storeapi.StateDelivered, -1) // remembered in its key's shard, found by id
	if got, _, _ := claimAll(t, s, ks, t0); !slices.Equal(got, []string{b.ID}) {
		t.Fatalf("after the head's ack claim = %v, want [%s]", got, b.ID)
	}
	if got, _, _ := claimAll(t, s, s.ShardOf(noKey.ID), t0); !slices.Contains(got, noKey.ID) {
		t.Fatalf("a message without a key is claimed from its id's shard: %v", got)
	}
}

// Only a key's head is claimable; an earlier arrival takes the place of an unclaimed
// head; equal due times go in receive order; an ack lets the next be claimed.
func caseOrderHeadOnly(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ctx := storeCtx(t)
	ks := storeapi.ShardOfKey("orders", "K", 8)
	mustPark(t, s, keyed("a", "K", t0+100), keyed("b", "K", t0+100))
	mustPark(t, s, keyed("c", "K", t0+50), keyed("d", "K", t0+200))
	u1, u2 := keyed("u1", "K", t0), keyed("u2", "K", t0)
	u1.Route, u2.Route = "billing", "billing"
	mustPark(t, s, u1, u2)
	wantState(t, s, "a", storeapi.StatePending, t0+100) // waiting reads at its due time
	if got, _, next := claimAll(t, s, ks, t0+1000); !slices.Equal(got, []string{"c"}) || next != -1 {
		t.Fatalf("claim = %v next %d, want [c] (the earliest, the only head) and nothing else claimable (-1)", got, next)
	}
	for _, want := range []string{"a", "b", "d"} {
		if got, _, _ := claimAll(t, s, ks, t0+1000); len(got) != 0 {
			t.Fatalf("claimed %v while the head was in flight", got)
		}
		if err := s.AckMany(ctx, nil, t0); err != nil {
			t.Fatal(err)
		}
		prev := map[string]string{"a": "c", "b": "a", "d": "b"}[want]
		if err := s.Ack(ctx, ks, []string{prev}, t0+1); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := claimAll(t, s, ks, t0+1000); !slices.Equal(got, []string{want}) {
			t.Fatalf("after acking %s claim = %v, want [%s]", prev, got, want)
		}
	}
	for _, id := range []string{"u1", "u2"} { // an unordered route: both at once
		if st, _, _, _ := s.Get(ctx, id); st != storeapi.StatePending {
			t.Fatalf("%s = %s", id, st)
		}
	}
	if got, _, _ := claimAll(t, s, s.ShardOf("u1"), t0+1000); !slices.Contains(got, "u1") {
		t.Fatalf("unordered u1 not claimable: %v", got)
	}
}

// A retried or recovered head stays the head (a later arrival, even an earlier due
// time, waits); a dead-lettered head unblocks its key.
func caseOrderRetryRecoverDead(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ctx := storeCtx(t)
	ks := storeapi.ShardOfKey("orders", "K", 8)
	mustPark(t, s, keyed("a", "K", t0+100), keyed("b", "K", t0+100))
	_, items, _ := claimAll(t, s, ks, t0+1000)
	mustPark(t, s, keyed("f", "K", t0+10)) // earlier than the claimed head
	if err := s.Retry(ctx, ks, []storeapi.RetryItem{{Env: items[0], Due: t0 + 5000}}, t0); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := claimAll(t, s, ks, t0+1000); len(got) != 0 {
		t.Fatalf("claim while the retried head waits = %v, want nothing (f must not overtake a claimed head)", got)
	}
	got, items, _ := claimAll(t, s, ks, t0+6000)
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("claim = %v, want the retried head [a]", got)
	}
	if _, _, err := s.RecoverAll(ctx, ks, t0+7000, 100); err != nil { // a failover
		t.Fatal(err)
	}
	mustPark(t, s, keyed("g", "K", t0+1))
	if got, items, _ = claimAll(t, s, ks, t0+8000); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after recovery claim = %v, want the recovered head [a] again", got)
	}
	if err := s.Retry(ctx, ks, []storeapi.RetryItem{{Env: items[0], Dead: true}}, t0+8000); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "a", storeapi.StateDead, -1)
	for _, want := range []string{"g", "f", "b"} { // (due, receive order) of what is left
		got, _, _ := claimAll(t, s, ks, t0+9000)
		if !slices.Equal(got, []string{want}) {
			t.Fatalf("claim = %v, want [%s]", got, want)
		}
		if err := s.Ack(ctx, ks, got, t0+9000); err != nil {
			t.Fatal(err)
		}
	}
	// A requeued dead letter joins its key's queue anew.
	mustPark(t, s, keyed("h", "K", t0+9500))
	if err := s.RequeueDead(ctx, "a", t0+9000); err != nil {
		t.Fatal(err)
	}
	got, items, _ = claimAll(t, s, ks, t0+20000)
	if len(got) != 1 {
		t.Fatalf("claim after requeue = %v, want one head", got)
	}
}

// Cancel of a waiting message or of the head; reschedule refused; idempotency by id
// within the key.
func caseOrderCancelAndByID(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ctx := storeCtx(t)
	ks := storeapi.ShardOfKey("orders", "K", 8)
	mustPark(t, s, keyed("a", "K", t0), keyed("b", "K", t0+1), keyed("c", "K", t0+2))
	if parked := mustPark(t, s, keyed("b", "K", t0)); parked[0] {
		t.Fatal("a replay of b (same id, same key) was parked again")
	}
	if _, err := s.Reschedule(ctx, "b", t0+99); !errors.Is(err, storeapi.ErrOrdered) {
		t.Fatalf("Reschedule of a waiting ordered message: %v, want ErrOrdered", err)
	}
	if st, _, err := s.Cancel(ctx, "b", t0, storeapi.CancelOptions{}); err != nil || st != storeapi.StatePending {
		t.Fatalf("Cancel(b) = %s, %v", st, err)
	}
	if st, _, err := s.Cancel(ctx, "a", t0, storeapi.CancelOptions{}); err != nil || st != storeapi.StatePending {
		t.Fatalf("Cancel(a) = %s, %v", st, err)
	}
	wantState(t, s, "b", storeapi.StateCancelled, -1)
	if got, _, _ := claimAll(t, s, ks, t0+1000); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("claim after cancelling the head and a waiting one = %v, want [c]", got)
	}
	if st, _, err := s.Cancel(ctx, "c", t0, storeapi.CancelOptions{}); err != nil || st != storeapi.StateInflight {
		t.Fatalf("Cancel(c) = %s, %v", st, err)
	}
	mustPark(t, s, keyed("d", "K", t0))
	if got, _, _ := claimAll(t, s, ks, t0+1000); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("claim after cancelling the in-flight head = %v, want [d]", got)
	}
}

// A refused park of a keyed message (a replay of one still waiting, earlier this
// time) leaves its key's queue as it was: the head stays the head and claimable.
func caseOrderReplayKeepsItsPlace(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ks := storeapi.ShardOfKey("orders", "K", 8)
	mustPark(t, s, keyed("a", "K", t0), keyed("b", "K", t0+1))
	if parked := mustPark(t, s, keyed("b", "K", t0-5)); parked[0] {
		t.Fatal("a replay of b (same id, same key) was parked again")
	}
	if got, _, _ := claimAll(t, s, ks, t0+1000); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("claim after a refused replay of b = %v, want [a] (the head)", got)
	}
}
