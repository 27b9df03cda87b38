package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

func init() {
	register("ClaimManyBytes", caseClaimManyBytes)
}

// caseClaimManyBytes: a claim with a byte budget takes, in due order, the messages
// whose sizes (encoded envelope + MemOverhead, reported as ClaimedBytes) fit in it; the
// first that does not fit stays due with everything after it, its size is reported as
// Need, and with Alone the first message goes through whatever its size.
func caseClaimManyBytes(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 0, 60, "b0")
	var envs []*envelope.Envelope
	for i, id := range a {
		e := env(id, t0+int64(i))
		e.Payload = []byte(strings.Repeat(fmt.Sprint(i%10), 1000+37*i))
		envs = append(envs, e)
	}
	mustPark(t, s, envs...)
	tok := mustLease(t, s, 0, "i1")
	claim := func(maxBytes int64, alone bool) storeapi.ClaimResult {
		t.Helper()
		out := s.ClaimMany(ctx, []storeapi.ClaimRequest{{Shard: 0, Instance: "i1", Token: tok, UpTo: t0 + 1000,
			LeaseDeadline: t0 + 30_000, Limit: 1000, MaxBytes: maxBytes, Alone: alone}})
		if out[0].Err != nil {
			t.Fatalf("ClaimMany: %v", out[0].Err)
		}
		return out[0]
	}
	// Below one message's size, not alone: nothing, and the size it needs.
	r := claim(100, false)
	if len(r.Items) != 0 || r.Need <= int64(len(envs[0].Payload))+storeapi.MemOverhead || r.NextDue != t0 {
		t.Fatalf("budget 100: %d items, need %d, next %d; want none, need > %d, next %d", len(r.Items), r.Need, r.NextDue,
			len(envs[0].Payload)+storeapi.MemOverhead, t0)
	}
	need := r.Need
	// Alone: the first goes through although it is larger than the budget.
	r = claim(100, true)
	if !slices.Equal(ids(r.Items), a[:1]) || r.Items[0].ClaimedBytes != need {
		t.Fatalf("alone: %v, want %v with ClaimedBytes %d", ids(r.Items), a[:1], need)
	}
	// A budget of about 20 messages: exactly the prefix that fits.
	taken := 1
	for _, budget := range []int64{20 * need, 7*need + need/2, 1 << 30} {
		r = claim(budget, false)
		var sum int64
		for _, e := range r.Items {
			sum += e.ClaimedBytes
		}
		want := a[taken : taken+len(r.Items)]
		if len(r.Items) == 0 || !slices.Equal(ids(r.Items), want) || sum > budget {
			t.Fatalf("budget %d: %v (%d bytes), want a due-order prefix of %v within the budget", budget, ids(r.Items), sum, a[taken:])
		}
		taken += len(r.Items)
		if taken < len(a) && (r.Need == 0 || sum+r.Need <= budget) {
			t.Fatalf("budget %d: took %d bytes and left need %d: the next message would have fitted", budget, sum, r.Need)
		}
		if taken < len(a) {
			wantState(t, s, a[taken], storeapi.StatePending, t0+int64(taken))
		}
	}
	if taken != len(a) || r.Need != 0 || r.NextDue != -1 {
		t.Fatalf("took %d of %d, need %d, next %d; want all, need 0, next -1", taken, len(a), r.Need, r.NextDue)
	}
}
