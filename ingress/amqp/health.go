package amqp

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// DefaultLagPeriod is how often a consuming source refreshes its queue depth.
const DefaultLagPeriod = 5 * time.Second

// health is the state of one AMQP source, published for Health, the Observer and an
// info log line per change. Run sets it: starting until the first basic.consume
// succeeded, consuming while a consumer is registered, joining while the channel or the
// consumer is being set up again (consumer cancelled by the server, queue deleted,
// channel closed, or rebuilt by the watchdog), stalled while a registered consumer
// receives nothing although its queue has ready messages (stallWatch), unreachable while
// the connection is down, stopped after Run.
type health struct {
	route string
	obs   observe.Observer
	log   *slog.Logger
	clk   clock.Clock

	mu sync.Mutex
	h  ingress.Health
}

func newHealth(route string, obs observe.Observer, log *slog.Logger, clk clock.Clock) *health {
	obs.IngressConsuming(route, false)
	return &health{route: route, obs: obs, log: log, clk: clk,
		h: ingress.Health{State: ingress.StateStarting, Detail: "not started", Since: clk.Now(), Lag: -1}}
}

func (hs *health) snapshot() ingress.Health {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.h
}

// set changes the state; a change is logged once and reported to the Observer.
func (hs *health) set(state, detail string) {
	hs.mu.Lock()
	old := hs.h.State
	if state == old && detail == hs.h.Detail {
		hs.mu.Unlock()
		return
	}
	hs.h.State, hs.h.Detail = state, detail
	if state != old {
		hs.h.Since = hs.clk.Now()
	}
	h := hs.h
	hs.mu.Unlock()
	if state == old {
		return
	}
	hs.obs.IngressConsuming(hs.route, state == ingress.StateConsuming)
	attrs := []any{"state", state, "was", old, "lag", h.Lag, "reconsumes", h.Rebuilds}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	hs.log.Info("amqp ingress state", attrs...)
}

// interrupted records that a consumer was lost and is set up again; a session that had
// consumed counts as one rebuild.
func (hs *health) interrupted(err error, connected, hadConsumer bool) {
	hs.mu.Lock()
	if hadConsumer {
		hs.h.Rebuilds++
	}
	hs.mu.Unlock()
	switch {
	case !connected:
		hs.set(ingress.StateUnreachable, fmt.Sprintf("connection to the broker lost, reconnecting: %v", err))
	case hs.snapshot().State == ingress.StateStarting:
		hs.set(ingress.StateStarting, fmt.Sprintf("setting up the consumer: %v", err))
	default:
		hs.set(ingress.StateJoining, fmt.Sprintf("declaring the queue and consuming again: %v", err))
	}
}

func (hs *health) setLag(n int64) {
	hs.mu.Lock()
	hs.h.Lag = n
	hs.mu.Unlock()
	hs.obs.IngressLag(hs.route, n)
}

// Health returns the source's last published state; Lag is the queue's ready messages
// at the last refresh (every poll period while consuming), -1 before the first.
func (s *Source) Health() ingress.Health { return s.health.snapshot() }

// queueDepth is the number of ready messages in the queue, from a passive declare on a
// channel of its own (a missing queue closes the channel it is asked on).
func (s *Source) queueDepth(ctx context.Context) (int64, error) {
	ch, err := s.conn.Channel(ctx)
	if err != nil {
		return -1, err
	}
	defer s.conn.CloseChannel(ch, time.Second)
	var q amqp.Queue
	if err := s.conn.Do(ctx, func() error {
		var err error
		q, err = ch.QueueDeclarePassive(s.cfg.Endpoint.Queue, true, false, false, false, nil)
		return err
	}); err != nil {
		return -1, fmt.Errorf("queue depth of %q: %w", s.cfg.Endpoint.Queue, err)
	}
	return int64(q.Messages), nil
}
