package storetest

import (
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

func init() {
	register("ClaimNow", caseClaimNow)
}

// caseClaimNow: a ClaimRequest's Now changes no message's fire time that matters. A
// message due by Now is due at the claim: its FireAt is the later of score and DueAt,
// or DueAt alone (the store need not read the score). One due after Now fires at the
// later of score and DueAt exactly: a retry's backoff beyond Now is kept. The claim
// stays in (score, id) order across Now, takes a message due at Now exactly once,
// counts Limit over both sides of it, and a Now past UpTo claims nothing beyond UpTo.
func caseClaimNow(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	id := idsOnShard(s, 1, 8, "cn")
	tok := mustLease(t, s, 1, "i1")
	mustPark(t, s, env(id[0], t0), env(id[1], t0+10))
	// id[0] and id[1] go back with a backoff: due scores later than their DueAt, one
	// at or before Now, one after it.
	claimed, _ := mustClaim(t, s, 1, tok, t0+10, 10)
	if len(claimed) != 2 {
		t.Fatalf("claimed %v, want %v", ids(claimed), id[:2])
	}
	items := []storeapi.RetryItem{{Env: claimed[0], Due: t0 + 20}, {Env: claimed[1], Due: t0 + 65}}
	if err := s.Retry(ctx, 1, items, t0+10); err != nil {
		t.Fatal(err)
	}
	mustPark(t, s, env(id[2], t0+40), env(id[3], t0+50), env(id[4], t0+60), env(id[5], t0+70))
	req := storeapi.ClaimRequest{Shard: 1, Instance: "i1", Token: tok, UpTo: t0 + 100, LeaseDeadline: t0 + 30_000, Limit: 4, Now: t0 + 40}
	out := s.ClaimMany(ctx, []storeapi.ClaimRequest{req})
	if out[0].Err != nil {
		t.Fatal(out[0].Err)
	}
	// (score, id) order: id[0] at 20, id[2] at 40 (= Now), id[3] at 50, id[4] at 60;
	// id[1] (65) and id[5] (70) are past the limit.
	if got, want := ids(out[0].Items), []string{id[0], id[2], id[3], id[4]}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v (score order across Now, each once, Limit over both sides)", got, want)
	}
	if out[0].NextDue != t0+65 {
		t.Fatalf("next due %d, want %d", out[0].NextDue, t0+65)
	}
	fire := map[string]int64{}
	for _, e := range out[0].Items {
		fire[e.ID] = e.FireAt
	}
	if f := fire[id[0]]; f != t0 && f != t0+20 {
		t.Fatalf("%s (due %d, backoff to %d, at or before Now) fires at %d, want its DueAt or its score", id[0], t0, t0+20, f)
	}
	if fire[id[2]] != t0+40 || fire[id[3]] != t0+50 || fire[id[4]] != t0+60 {
		t.Fatalf("fire times %v, want each message's due time", fire)
	}
	req.Limit, req.LeaseDeadline = 10, t0+30_001
	out = s.ClaimMany(ctx, []storeapi.ClaimRequest{req})
	if out[0].Err != nil || !slices.Equal(ids(out[0].Items), []string{id[1], id[5]}) {
		t.Fatalf("second claim: %v %v, want %v", ids(out[0].Items), out[0].Err, []string{id[1], id[5]})
	}
	if f := out[0].Items[0].FireAt; f != t0+65 {
		t.Fatalf("%s (due %d, backoff to %d, after Now) fires at %d, want %d: never before its backoff", id[1], t0+10, t0+65, f, t0+65)
	}
	mustPark(t, s, env(id[6], t0+90), env(id[7], t0+120))
	req.Now, req.LeaseDeadline = t0+150, t0+30_002
	out = s.ClaimMany(ctx, []storeapi.ClaimRequest{req})
	if out[0].Err != nil || !slices.Equal(ids(out[0].Items), id[6:7]) || out[0].NextDue != t0+120 {
		t.Fatalf("Now past UpTo: %v next %d %v, want %v next %d", ids(out[0].Items), out[0].NextDue, out[0].Err, id[6:7], t0+120)
	}
	wantState(t, s, id[7], storeapi.StatePending, t0+120)
}
