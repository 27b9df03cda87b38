package scheduler

import "sync"

// commitGroup is the group commit the pumps' claims (claims.go) and the intake's parks
// (parkgroup.go) share: calls that arrive while one is under way are queued, and when
// it returns the first of them sends them all (as many as take allows) — no waiting
// added, no goroutine of its own. A caller that finds none under way sends at once;
// whichever caller leads makes the call, answers the others and hands the lead to the
// first caller queued meanwhile. Every queued call is answered.
type commitGroup[Req, Res any] struct {
	mu    sync.Mutex
	busy  bool
	queue []*commitWaiter[Req, Res]
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
// queued requests (in order, req's own first when it leads) one call takes, at least
// one; run makes that call and answers each request, in order.
func (g *commitGroup[Req, Res]) do(req Req, take func([]Req) int, run func([]Req) []Res) Res {
	w := &commitWaiter[Req, Res]{req: req, done: make(chan commitOutcome[Res], 1)}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !lead {
		if out := <-w.done; !out.lead {
			return out.res
		}
	}
	g.mu.Lock()
	reqs := make([]Req, len(g.queue))
	for i, q := range g.queue {
		reqs[i] = q.req
	}
	n := max(1, min(take(reqs), len(reqs)))
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()
	res := run(reqs[:n])
	var mine Res
	for i, b := range batch {
		if b == w {
			mine = res[i]
		} else {
			b.done <- commitOutcome[Res]{res: res[i]}
		}
	}
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].done <- commitOutcome[Res]{lead: true} // busy stays true: the lead passes on
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return mine
}
