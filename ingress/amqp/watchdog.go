package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
)

// DefaultStallTimeout is Options.StallTimeout's default (ingress.stall_timeout).
const DefaultStallTimeout = 15 * time.Second

// errStalled marks a session ended by the watchdog (the consumer is rebuilt).
var errStalled = errors.New("consumer stalled")

// pollPeriod is how often the watchdog polls the queue depth and evaluates the state: a
// fifth of the stall timeout, between 200ms and 5s, and at most LagPeriod.
func pollPeriod(stall, lagPeriod time.Duration) time.Duration {
	return min(max(stall/5, 200*time.Millisecond), 5*time.Second, lagPeriod)
}

// stallWatch is the no-progress rule of one source. A registered consumer can stop
// receiving deliveries while its queue has ready messages (a wedged channel on the
// broker or in the client) and nothing else reports it: the channel stays open and the
// consumer is not cancelled. The session loop reports deliveries and handler calls, the
// watchdog reports queue depths, and evaluate decides.
//
// Progress is a delivery, a depth poll finding the queue empty, or a poll finding fewer
// ready messages than the previous one (another consumer of the queue takes them: a
// competing bridge instance, or the active consumer of a single-active-consumer queue
// while this one waits as standby — rebuilding ours would not help). Time in the handler
// (Redis slow or down, prefetch exhausted until it returns) never counts towards a
// stall: the consumer is not asked for more then, and the handler has its own retries.
type stallWatch struct {
	clk   clock.Clock
	stall time.Duration

	mu         sync.Mutex
	consumedAt time.Time // when the current consumer was registered
	progressAt time.Time // last progress, moved forward by time spent in the handler
	handlerAt  time.Time // when the running handler call began (zero: none)
	lag        int64     // ready messages at the last poll, -1 unknown
	streak     int       // rebuilds since the consumer last received a delivery
}

func newStallWatch(clk clock.Clock, stall time.Duration) *stallWatch {
	return &stallWatch{clk: clk, stall: stall, lag: -1}
}

// consuming starts the rule for a newly registered consumer.
func (w *stallWatch) consuming() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clk.Now()
	w.consumedAt, w.progressAt, w.handlerAt, w.lag = now, now, time.Time{}, -1
}

// delivered records that deliveries arrived (progress; the rebuild streak ends).
func (w *stallWatch) delivered() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.progressAt, w.streak = w.clk.Now(), 0
}

// busy brackets the handling of one batch, retries included (ingress.LoopOptions.Busy).
func (w *stallWatch) busy(running bool) {
	if running {
		w.handlerBegin()
	} else {
		w.handlerEnd()
	}
}

func (w *stallWatch) handlerBegin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlerAt = w.clk.Now()
}

func (w *stallWatch) handlerEnd() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.handlerAt.IsZero() {
		return
	}
	if w.handlerAt.After(w.progressAt) {
		w.progressAt = w.progressAt.Add(w.clk.Now().Sub(w.handlerAt))
	} else {
		w.progressAt = w.clk.Now()
	}
	w.handlerAt = time.Time{}
}

// polled records a queue depth (-1: the poll failed).
func (w *stallWatch) polled(n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n == 0 || (n > 0 && w.lag >= 0 && n < w.lag) {
		w.progressAt = w.clk.Now()
	}
	w.lag = n
}

// rebuilt records that the watchdog rebuilt the consumer.
func (w *stallWatch) rebuilt() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.streak++
}

// verdict is evaluate's answer: stalled (report it), rebuild (end the session; implies
// stalled) and why.
type verdict struct {
	stalled, rebuild bool
	detail           string
}

// evaluate applies the rule at the clock's now. The consumer is stalled once it has had
// ready messages in its queue and no progress outside the handler for a third of the
// stall timeout (at least 1s); it is rebuilt at the full timeout. After rebuilds that
// did not help, the next waits 2 and then 4 stall timeouts from the rebuild.
func (w *stallWatch) evaluate() verdict {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clk.Now()
	if w.lag <= 0 || !w.handlerAt.IsZero() {
		return verdict{}
	}
	d := now.Sub(w.progressAt)
	if d < max(w.stall/3, time.Second) {
		return verdict{}
	}
	v := verdict{stalled: true, detail: fmt.Sprintf("registered consumer received nothing for %s while the queue has %d ready messages",
		d.Round(time.Second), w.lag)}
	v.rebuild = d >= w.stall && now.Sub(w.consumedAt) >= w.stall<<min(w.streak, 2)
	return v
}

// watch is the watchdog of one session: every poll period it refreshes the queue depth
// (Health().Lag, the Observer's IngressLag), publishes consuming or stalled, and ends
// the session through rebuild when the consumer has been stalled for the stall timeout.
// It runs beside the consuming loop, so the lag keeps moving while the handler holds a
// batch. A failed depth poll is logged at debug level and leaves the lag unknown (-1):
// the consumer's own channel reports a deleted queue. It returns when ctx ends.
func (s *Source) watch(ctx context.Context, rebuild chan<- string) {
	timer := s.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	period := pollPeriod(s.cfg.StallTimeout, s.cfg.LagPeriod)
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		n, err := s.queueDepth(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Debug("queue depth unknown", "err", err)
			n = -1
		}
		s.health.setLag(n)
		s.stall.polled(n)
		switch v := s.stall.evaluate(); {
		case v.rebuild:
			s.health.set(ingress.StateStalled, v.detail)
			rebuild <- v.detail // buffered; the session ends on it
			return
		case v.stalled:
			s.health.set(ingress.StateStalled, v.detail)
		default:
			s.health.set(ingress.StateConsuming, "")
		}
		timer.Reset(period)
	}
}
