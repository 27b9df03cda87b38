package scheduler

import (
	"context"
	"sync"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

// claimGroup sends the claims of pumps that want to claim at the same time in one
// Store.ClaimMany (one pipelined Redis round trip) — a group commit, with no waiting
// added: a pump whose claim finds no claim under way sends it at once; claims that
// arrive while one is under way are queued, and when it returns the first of them sends
// them all. At a full-speed drain each park wakes most of the 64 pumps together, and a
// claim per pump was a round trip of its own: 20k claim calls of ~15 messages for 300k
// messages (issue 17).
//
// No goroutine of its own: whichever pump leads does the call, answers the others, and
// hands the lead to the first claim queued meanwhile. Every queued claim is answered.
type claimGroup struct {
	mu    sync.Mutex
	busy  bool
	queue []*claimWaiter
}

// maxClaimsPerCall bounds one ClaimMany (one pipeline); more wait for the next.
const maxClaimsPerCall = 128

type claimWaiter struct {
	req  storeapi.ClaimRequest
	done chan claimOutcome // capacity 1: answered once, or told to lead once
}

type claimOutcome struct {
	res  storeapi.ClaimResult
	lead bool
}

// claim runs req through st.ClaimMany together with the claims queued meanwhile.
// The call runs without the caller's cancellation (it answers other pumps too); it is
// as bounded as any Redis call, and a claim that completes after a pump stopped is
// handled as before (its messages are held and put back on shutdown or handover).
func (g *claimGroup) claim(ctx context.Context, st Store, req storeapi.ClaimRequest) ([]*envelope.Envelope, int64, error) {
	w := &claimWaiter{req: req, done: make(chan claimOutcome, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !lead {
		if out := <-w.done; !out.lead {
			return out.res.Items, out.res.NextDue, out.res.Err
		}
	}
	g.mu.Lock()
	n := min(len(g.queue), maxClaimsPerCall)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()
	reqs := make([]storeapi.ClaimRequest, len(batch))
	for i, b := range batch {
		reqs[i] = b.req
	}
	res := st.ClaimMany(context.WithoutCancel(ctx), reqs)
	var mine storeapi.ClaimResult
	for i, b := range batch {
		if b == w {
			mine = res[i]
		} else {
			b.done <- claimOutcome{res: res[i]}
		}
	}
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].done <- claimOutcome{lead: true} // busy stays true: the lead passes on
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return mine.Items, mine.NextDue, mine.Err
}
