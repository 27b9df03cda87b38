package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

func init() {
	register("ClaimMany", caseClaimMany)
}

// caseClaimMany: ClaimMany answers each request as Claim would, in request order —
// each shard's own messages, its own next due, a fenced shard refused while the others
// in the same call are claimed, and a bad request refused alone.
func caseClaimMany(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 0, 3, "m0")
	b := idsOnShard(s, 2, 2, "m2")
	f := idsOnShard(s, 3, 1, "m3")
	mustPark(t, s, env(a[0], t0), env(a[1], t0+10), env(a[2], t0+5000), env(b[0], t0+1), env(b[1], t0+2), env(f[0], t0))
	tok0, tok2 := mustLease(t, s, 0, "i1"), mustLease(t, s, 2, "i1")
	req := func(shard int, tok int64, limit int) storeapi.ClaimRequest {
		return storeapi.ClaimRequest{Shard: shard, Instance: "i1", Token: tok, UpTo: t0 + 100, LeaseDeadline: t0 + 30_000, Limit: limit}
	}
	out := s.ClaimMany(ctx, []storeapi.ClaimRequest{req(2, tok2, 10), req(3, 1, 10), req(0, tok0, 1), req(1, 1, 0), req(0, tok0, 10)})
	if len(out) != 5 {
		t.Fatalf("%d results for 5 requests", len(out))
	}
	if out[0].Err != nil || !slices.Equal(ids(out[0].Items), b) || out[0].NextDue != -1 {
		t.Fatalf("shard 2: %v next %d %v, want %v next -1", ids(out[0].Items), out[0].NextDue, out[0].Err, b)
	}
	if !errors.Is(out[1].Err, storeapi.ErrFenced) || len(out[1].Items) != 0 {
		t.Fatalf("shard 3 without its lease: %v %v, want ErrFenced", ids(out[1].Items), out[1].Err)
	}
	wantState(t, s, f[0], storeapi.StatePending, t0)
	if out[2].Err != nil || !slices.Equal(ids(out[2].Items), a[:1]) || out[2].NextDue != t0+10 {
		t.Fatalf("shard 0, limit 1: %v next %d %v, want %v next %d", ids(out[2].Items), out[2].NextDue, out[2].Err, a[:1], t0+10)
	}
	if !errors.Is(out[3].Err, storeapi.ErrInvalid) {
		t.Fatalf("limit 0: %v, want ErrInvalid", out[3].Err)
	}
	// The second request for shard 0 runs after the first, in the same call.
	if out[4].Err != nil || !slices.Equal(ids(out[4].Items), a[1:2]) || out[4].NextDue != t0+5000 {
		t.Fatalf("shard 0 again: %v next %d %v, want %v next %d", ids(out[4].Items), out[4].NextDue, out[4].Err, a[1:2], t0+5000)
	}
	wantState(t, s, a[0], storeapi.StateInflight, t0+30_000)
	if out := s.ClaimMany(ctx, nil); len(out) != 0 {
		t.Fatalf("no requests: %d results", len(out))
	}
}
