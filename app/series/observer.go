package series

import (
	"time"

	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Observe returns an observer that tells next everything and r the received,
// delivered and dead-lettered messages (for the charts), so the one stream of events
// the bridge reports feeds both the metrics and the ring.
func Observe(next observe.Observer, r *Recorder) observe.Observer {
	return &tee{Observer: next, r: r}
}

type tee struct {
	observe.Observer
	r *Recorder
}

func (t *tee) Received(route string, n int) {
	t.Observer.Received(route, n)
	t.r.Received(route, n)
}

func (t *tee) Delivered(route string, lateness time.Duration) {
	t.Observer.Delivered(route, lateness)
	t.r.Delivered(route, lateness)
}

func (t *tee) DeadLettered(route string, n int) {
	t.Observer.DeadLettered(route, n)
	t.r.DeadLettered(route, n)
}
