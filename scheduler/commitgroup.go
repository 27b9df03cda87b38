package scheduler

import "sync"

// commitGroup is the group commit the pumps' claims (claims.go) and the intake's parks
// (parkgroup.go) share: calls that arrive while lanes calls are under way are queued,
// and when one of those returns, the first queued caller sends its own request with
// the others queued (as many as take allows) — no waiting added, no goroutine of its
// own. A caller that finds fewer than lanes calls under way sends at once; whichever
// caller leads makes the call, answers the others and hands the lead to the first
// caller still queued. Every queued call is answered.
//
// lanes (0 means 1) is how many calls may be under way at once. With one, the bridge's
// work between two calls (answering the callers, building the next call) leaves Redis
// idle; a second lane overlaps it with the other call's time in Redis.
// commitLanes is the scheduler's lanes for its claims and its parks.
const commitLanes = 2

type commitGroup[Req, Res any] struct {
	mu      sync.Mutex
	lanes   int
	running int                       // calls under way (leaders)
	queue   []*commitWaiter[Req, Res] // callers waiting: to be answered or to lead
}

type commitWaiter[Req, Res any] struct {
	req  Req
	done chan commitOutcome[Res] // capacity 1: answered once, or told to lead once
}

type commitOutcome[Res any] struct {
	res  Res
	lead bool
}

// do sends req together with the requests queued meanwhile: take says how many of the
// requests (in order, req's own first) one call takes, at least one; run makes that
// call and answers each request, in order.
func (g *commitGroup[Req, Res]) do(req Req, take func([]Req) int, run func([]Req) []Res) Res {
	w := &commitWaiter[Req, Res]{req: req, done: make(chan commitOutcome[Res], 1)}
	g.mu.Lock()
	lead := g.running < max(1, g.lanes)
	if lead {
		g.running++
	} else {
		g.queue = append(g.queue, w)
	}
	g.mu.Unlock()
	if !lead {
		if out := <-w.done; !out.lead {
			return out.res
		}
	}
	// w leads (it is no longer queued): its request first, then the queued ones.
	g.mu.Lock()
	reqs := make([]Req, 0, 1+len(g.queue))
	reqs = append(reqs, req)
	for _, q := range g.queue {
		reqs = append(reqs, q.req)
	}
	n := max(1, min(take(reqs), len(reqs)))
	others := append([]*commitWaiter[Req, Res](nil), g.queue[:n-1]...)
	g.queue = append(g.queue[:0:0], g.queue[n-1:]...)
	g.mu.Unlock()
	res := run(reqs[:n])
	for i, b := range others {
		b.done <- commitOutcome[Res]{res: res[i+1]}
	}
	g.mu.Lock()
	if len(g.queue) > 0 {
		next := g.queue[0]
		g.queue = g.queue[1:]
		next.done <- commitOutcome[Res]{lead: true} // running stays: the lead passes on
	} else {
		g.running--
	}
	g.mu.Unlock()
	return res[0]
}
