package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

func init() {
	register("ClaimIdempotent", caseClaimIdempotent)
}

// caseClaimIdempotent: an Idempotent claim sent again after it ran (its reply lost)
// answers the same messages, never due earlier than the first answer said, and claims
// nothing more; one with a deadline of its own claims on; acked messages are not
// answered again; a holder that lost the lease is refused; a claim not marked
// Idempotent with the same deadline claims on as before.
func caseClaimIdempotent(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 6, "r")
	mustPark(t, s, env(a[0], t0), env(a[1], t0+10), env(a[2], t0+20), env(a[3], t0+30), env(a[4], t0+40), env(a[5], t0+5000))
	tok := mustLease(t, s, 1, "i1")
	req := storeapi.ClaimRequest{Shard: 1, Instance: "i1", Token: tok, UpTo: t0 + 100, LeaseDeadline: t0 + 30_000, Limit: 3, Idempotent: true}
	claim := func(r storeapi.ClaimRequest) storeapi.ClaimResult {
		t.Helper()
		out := s.ClaimMany(ctx, []storeapi.ClaimRequest{r})
		if len(out) != 1 || out[0].Err != nil {
			t.Fatalf("ClaimMany: %+v", out)
		}
		return out[0]
	}
	first := claim(req)
	if !slices.Equal(ids(first.Items), a[:3]) || first.Replayed {
		t.Fatalf("first claim: %v replayed %v, want %v", ids(first.Items), first.Replayed, a[:3])
	}
	again := claim(req)
	if !sameIDs(again.Items, a[:3]) || !again.Replayed || again.NextDue != 0 {
		t.Fatalf("the claim sent again: %v replayed %v next %d, want %v replayed, next 0", ids(again.Items), again.Replayed, again.NextDue, a[:3])
	}
	for _, e := range again.Items {
		f := first.Items[slices.Index(a, e.ID)]
		if e.FireAt < f.FireAt || e.FireAt != req.UpTo {
			t.Fatalf("%s answered again to fire at %d, first at %d; want the claim's horizon %d", e.ID, e.FireAt, f.FireAt, req.UpTo)
		}
		if e.ClaimedFrom != f.ClaimedFrom {
			t.Fatalf("%s answered again from shard %d, first from %d", e.ID, e.ClaimedFrom-1, f.ClaimedFrom-1)
		}
	}
	wantState(t, s, a[3], storeapi.StatePending, t0+30)
	if err := s.Ack(ctx, 1, []string{a[0]}, t0); err != nil {
		t.Fatal(err)
	}
	if got := claim(req); !sameIDs(got.Items, a[1:3]) || !got.Replayed {
		t.Fatalf("again after an ack: %v replayed %v, want %v", ids(got.Items), got.Replayed, a[1:3])
	}
	other := req
	other.Token = tok + 1
	if out := s.ClaimMany(ctx, []storeapi.ClaimRequest{other}); !errors.Is(out[0].Err, storeapi.ErrFenced) {
		t.Fatalf("a holder without the lease sending it again: %v, want ErrFenced", out[0].Err)
	}
	next := req
	next.LeaseDeadline++
	if got := claim(next); !slices.Equal(ids(got.Items), a[3:5]) || got.Replayed || got.NextDue != t0+5000 {
		t.Fatalf("a claim with a deadline of its own: %v replayed %v next %d, want %v next %d", ids(got.Items), got.Replayed, got.NextDue, a[3:5], t0+5000)
	}
	plain := req
	plain.Idempotent, plain.UpTo = false, t0+5000
	if got := claim(plain); !slices.Equal(ids(got.Items), a[5:]) || got.Replayed {
		t.Fatalf("not Idempotent, the same deadline: %v replayed %v, want %v", ids(got.Items), got.Replayed, a[5:])
	}
}

// sameIDs reports whether envs are the messages want, in any order (a claim answered
// again lists them by id: their due scores are gone).
func sameIDs(envs []*envelope.Envelope, want []string) bool {
	got := ids(envs)
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	return slices.Equal(got, want)
}
