package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Replace on a route with `order: key` (docs/CONTRACT.md "Replace"): inside the key's
// shard, the key's order recomputed, never a second copy.

func init() {
	register("OrderReplacePending", caseOrderReplacePending)
	register("OrderReplaceInflightHead", caseOrderReplaceInflightHead)
	register("OrderReplaceOtherKey", caseOrderReplaceOtherKey)
}

// keyedV is keyed(id, key, due) with a payload naming the version.
func keyedV(id, key string, due int64, v string) *envelope.Envelope {
	e := keyed(id, key, due)
	e.Payload = []byte(v)
	return e
}

// claimIDs claims what is claimable on shard by upTo and returns ids and payloads.
func claimIDs(t *testing.T, s storeapi.Store, shard int, upTo int64) ([]string, []*envelope.Envelope) {
	t.Helper()
	got, items, _ := claimAll(t, s, shard, upTo)
	var desc []string
	for i, e := range items {
		desc = append(desc, got[i]+"="+string(e.Payload))
	}
	return desc, items
}

func wantReplace(t *testing.T, s storeapi.Store, e *envelope.Envelope, want rr) {
	t.Helper()
	if res, _ := mustReplace(t, s, e); res[0] != want {
		t.Fatalf("ReplaceEach(%s) = %+v, want %+v", e.ID, res[0], want)
	}
}

// A pending non-head replaced with an earlier due time becomes its key's head; an
// unclaimed head replaced with a later one stops being it; an unknown id parked by a
// replace joins its key; one copy each, the last version.
func caseOrderReplacePending(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ctx := storeCtx(t)
	ks := storeapi.ShardOfKey("orders", "K", 8)
	mustPark(t, s, keyedV("a", "K", t0+10, "a1"), keyedV("b", "K", t0+20, "b1"))
	replaced := rr{Prior: storeapi.StatePending, Outcome: storeapi.ReplaceReplaced}
	wantReplace(t, s, keyedV("b", "K", t0+5, "b2"), replaced)
	// b is the unclaimed head now: the same id twice in one call keeps it claimable.
	if res, _ := mustReplace(t, s, keyedV("b", "K", t0+6, "bx"), keyedV("b", "K", t0+5, "b2")); res[0] != replaced || res[1] != replaced {
		t.Fatalf("ReplaceEach(b, b) = %+v, want replaced twice", res)
	}
	wantState(t, s, "a", storeapi.StatePending, t0+10)
	got, items := claimIDs(t, s, ks, t0+1000)
	if !slices.Equal(got, []string{"b=b2"}) {
		t.Fatalf("claim after b moved before the head a = %v, want [b=b2]", got)
	}
	if err := s.AckEnvelopes(ctx, items, t0); err != nil {
		t.Fatal(err)
	}
	// a is the unclaimed head now: a later due time puts c (parked by a replace) first.
	wantReplace(t, s, keyedV("c", "K", t0+30, "c1"), rr{Prior: storeapi.StateUnknown, Outcome: storeapi.ReplaceParked})
	wantReplace(t, s, keyedV("a", "K", t0+40, "a2"), replaced)
	wantState(t, s, "a", storeapi.StatePending, t0+40)
	for _, want := range []string{"c=c1", "a=a2"} {
		got, items := claimIDs(t, s, ks, t0+1000)
		if !slices.Equal(got, []string{want}) {
			t.Fatalf("claim = %v, want [%s] (the key's order by the new due times)", got, want)
		}
		if err := s.AckEnvelopes(ctx, items, t0); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := claimIDs(t, s, ks, t0+1000); len(got) != 0 {
		t.Fatalf("claim after all acked = %v, want nothing (no second copy)", got)
	}
	wantCounts(t, s, "all delivered", map[string]rc{})
}

// A replace of the in-flight head keeps a successor: the key stays blocked until the
// successor, which keeps the head's place, is delivered too.
func caseOrderReplaceInflightHead(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ctx := storeCtx(t)
	ks := storeapi.ShardOfKey("orders", "K", 8)
	mustPark(t, s, keyedV("a", "K", t0, "a1"), keyedV("b", "K", t0+1, "b1"))
	got, items := claimIDs(t, s, ks, t0+1000)
	if !slices.Equal(got, []string{"a=a1"}) {
		t.Fatalf("first claim = %v, want [a=a1]", got)
	}
	wantReplace(t, s, keyedV("a", "K", t0+2, "a2"), rr{Prior: storeapi.StateInflight, Outcome: storeapi.ReplaceReplaced})
	if err := s.AckEnvelopes(ctx, items, t0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a=a2", "b=b1"} {
		got, items := claimIDs(t, s, ks, t0+1000)
		if !slices.Equal(got, []string{want}) {
			t.Fatalf("claim = %v, want [%s] (the successor keeps the key's head)", got, want)
		}
		if err := s.AckEnvelopes(ctx, items, t0); err != nil {
			t.Fatal(err)
		}
	}
	wantState(t, s, "a", storeapi.StateDelivered, -1)
	wantCounts(t, s, "all delivered", map[string]rc{})
}

// A replace naming a stored message of another key (in another shard or the same), or
// without a key, is refused with its state: the stored message is left as it was.
func caseOrderReplaceOtherKey(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(ordered).Store
	ctx := storeCtx(t)
	ks := storeapi.ShardOfKey("orders", "K", 8)
	same, other := "", ""
	for i := 0; same == "" || other == ""; i++ {
		k := fmt.Sprintf("L%d", i)
		if storeapi.ShardOfKey("orders", k, 8) == ks {
			same = k
		} else if other == "" {
			other = k
		}
	}
	mustPark(t, s, keyedV("a", "K", t0, "a1"), keyedV("n", "", t0, "n1"))
	refused := rr{Prior: storeapi.StatePending, Outcome: storeapi.ReplaceRefused}
	for _, e := range []*envelope.Envelope{keyedV("a", other, t0+5, "x"), keyedV("a", same, t0+5, "x"), keyedV("a", "", t0+5, "x")} {
		wantReplace(t, s, e, refused)
	}
	wantReplace(t, s, keyedV("n", "K", t0+5, "x"), refused)
	wantPayload(t, wantState(t, s, "a", storeapi.StatePending, t0), "a1")
	wantPayload(t, wantState(t, s, "n", storeapi.StatePending, t0), "n1")
	for _, k := range []string{other, same} {
		if got, err := s.KeyMessages(ctx, "orders", k); err != nil || len(got) != 0 {
			t.Fatalf("KeyMessages(%s) = %v, %v, want nothing", k, got, err)
		}
	}
	got, items := claimIDs(t, s, ks, t0+1000)
	if !slices.Contains(got, "a=a1") {
		t.Fatalf("claim of K's shard = %v, want a=a1", got)
	}
	// In flight, the same: refused, no successor.
	wantReplace(t, s, keyedV("a", other, t0+5, "x"), rr{Prior: storeapi.StateInflight, Outcome: storeapi.ReplaceRefused})
	if err := s.AckEnvelopes(ctx, items, t0); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "a", storeapi.StateDelivered, -1)
}
