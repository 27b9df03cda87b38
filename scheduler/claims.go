package scheduler

import (
	"context"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// claimGroup sends the claims of pumps that want to claim at the same time in one
// Store.ClaimMany (one pipelined Redis round trip) — a group commit (commitgroup.go):
// a pump whose claim finds no claim under way sends it at once; claims that arrive
// while one is under way are queued, and when it returns the first of them sends them
// all. At a full-speed drain each park wakes most of the 64 pumps together, and a claim
// per pump was a round trip of its own: 20k claim calls of ~15 messages for 300k
// messages.
type claimGroup struct {
	commitGroup[storeapi.ClaimRequest, storeapi.ClaimResult]
}

// maxClaimsPerCall bounds one ClaimMany (one pipeline); more wait for the next.
const maxClaimsPerCall = 128

// claim runs req through st.ClaimMany together with the claims queued meanwhile.
// The call runs without the caller's cancellation (it answers other pumps too); it is
// as bounded as any Redis call, and a claim that completes after a pump stopped is
// handled as before (its messages are held and put back on shutdown or handover).
// need is the byte size of the first due message the request's byte budget left due
// (0: none); replayed reports an Idempotent request whose earlier run's reply was
// lost: items are what that run claimed (storeapi.ClaimRequest).
func (g *claimGroup) claim(ctx context.Context, st Store, req storeapi.ClaimRequest) (items []*envelope.Envelope, nextDue, need int64, replayed bool, err error) {
	res := g.do(req, func(q []storeapi.ClaimRequest) int { return maxClaimsPerCall },
		func(batch []storeapi.ClaimRequest) []storeapi.ClaimResult {
			return st.ClaimMany(context.WithoutCancel(ctx), batch)
		})
	return res.Items, res.NextDue, res.Need, res.Replayed, res.Err
}
