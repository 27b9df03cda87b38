// Package amqp is the RabbitMQ (AMQP 0-9-1) delay source: it consumes one durable queue
// with manual acknowledgements and hands batches of parsed messages to an
// ingress.Handler, acknowledging them only once the handler has them in Redis.
//
// Topology. For a route `from: { amqp: { queue, exchange, exchange_type, binding_key } }`
// the source declares, on every (re)connection: the exchange (durable, exchange_type
// default "topic") when set, the durable queue, and the binding (binding_key default "#").
// exchange_type direct with binding_key "#" is refused (permanent): "#" is no wildcard
// on a direct exchange, so every message published with another key would be dropped.
// An existing exchange of another type is a configuration error (permanent): the
// plugin's x-delayed-message exchange of the same name must be deleted first. An existing
// queue with other arguments (quorum queue, length limit...) is used as it is.
//
// Delivery. QoS prefetch = amqp.prefetch. Deliveries are batched (up to prefetch, or what
// arrived within BatchWait of the first), parsed once with ingress.Parse and handed to
// ingress.Loop: on success the batch is acknowledged with one multiple basic.ack up to
// its last delivery tag; on failure the loop backs off on Config.Clock and hands the same
// items again, and after RetryInPlace failures the source gives the batch back by
// closing the channel (every delivery not acknowledged, the batch and those after it,
// returns to the queue at its place), so the broker delivers them again, in queue order,
// to a healthy consumer; the source consumes again after a backoff. Nothing is
// acknowledged that the handler did not accept, and a delivery tag is only ever
// acknowledged on the channel that delivered it: when the channel or connection drops,
// the unacknowledged deliveries return to the queue by themselves and the source
// reconnects with backoff and consumes again.
//
// Health. Health reports starting, consuming, joining (set up again), stalled or
// unreachable, and the queue's ready messages as lag. A watchdog beside each session
// polls the depth and, when the registered consumer has received nothing for
// StallTimeout while the queue has ready messages and is not draining (time in the
// handler excluded), closes the channel and consumes on a new one (see stallWatch).
//
// Message ids. The id used for idempotency (so a redelivered message is not parked
// twice), cancel and lookup is, in order: the x-message-id header, the message_id
// property, else "<queue>/<hash>" where hash is a SHA-256 (first 128 bits, hex) over
// the message as published: exchange, routing key, every property, every header except
// the x-delivery-count that quorum queues add on redelivery, and the body. It survives
// redelivery, reconnection and a bridge crash. The trade-off: two messages identical in
// all of these, published without message_id or x-message-id, are one message to the
// bridge — the second is dropped as a duplicate while the first is pending and for
// scheduler.done_window after it fired. Producers that may publish byte-identical
// messages must set message_id (or x-message-id, or a timestamp property that differs).
package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// HeaderDeliveryCount is the header quorum queues add to redelivered messages; it is
// kept in the message but left out of the content-derived id.
const HeaderDeliveryCount = "x-delivery-count"

// Endpoint is the route's `from.amqp`: the queue consumed and, optionally, the exchange
// it is bound to.
type Endpoint struct {
	Queue        string // the durable queue consumed; required
	Exchange     string // exchange bound to the queue; "" binds nothing
	ExchangeType string // default "topic"
	BindingKey   string // default "#"
}

// Config is one source. app builds it from the bridge's configuration (the
// route's from.amqp, amqp.prefetch, limits.*, ingress.*). Zero values take the defaults
// shown.
type Config struct {
	Endpoint Endpoint
	// Rules are the route's parsing limits; Rules.Route names the route.
	Rules ingress.Rules
	// Prefetch is the QoS prefetch count and the largest batch (amqp.prefetch); default
	// 500, at most 65535.
	Prefetch int
	// BatchWait is how long a batch stays open after its first delivery; default 2ms.
	BatchWait time.Duration
	// MinBackoff and MaxBackoff bound the waits before reconnecting and between handler
	// calls for a failed batch; defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// RetryInPlace is how many times a failed batch is handed to the handler on the same
	// channel (after a backoff each time) before it goes back to the queue (the channel
	// is closed, so the deliveries after it go back too, in order), where any healthy
	// consumer may take it; default 5.
	RetryInPlace int
	// ConsumerTag prefix; default "delay-bridge". A random suffix is added.
	ConsumerTag string
	Observer    observe.Observer // default observe.Nop
	Logger      *slog.Logger     // default slog.Default()
	// LagPeriod bounds how often a consuming source refreshes its queue depth
	// (Health().Lag, the Observer's IngressLag): every StallTimeout/5 (200ms to 5s), at
	// most LagPeriod; default DefaultLagPeriod.
	LagPeriod time.Duration
	// StallTimeout is how long a registered consumer may receive nothing while its queue
	// has ready messages (time in the handler excluded) before the watchdog closes its
	// channel and consumes again (ingress.stall_timeout); it reports stalled after a
	// third of it. Default DefaultStallTimeout.
	StallTimeout time.Duration
	// Clock is every wait (batch window, backoffs, watchdog) and the receive time;
	// default clock.Real.
	Clock clock.Clock
}

func (c Config) withDefaults() Config {
	if c.Endpoint.ExchangeType == "" {
		c.Endpoint.ExchangeType = amqp.ExchangeTopic
	}
	if c.Endpoint.Exchange != "" && c.Endpoint.BindingKey == "" {
		c.Endpoint.BindingKey = "#"
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 500
	}
	c.Prefetch = min(c.Prefetch, 65535)
	if c.BatchWait <= 0 {
		c.BatchWait = 2 * time.Millisecond
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(5*time.Second, c.MinBackoff)
	}
	if c.RetryInPlace <= 0 {
		c.RetryInPlace = 5
	}
	if c.ConsumerTag == "" {
		c.ConsumerTag = "delay-bridge"
	}
	if c.Observer == nil {
		c.Observer = observe.Nop{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.LagPeriod <= 0 {
		c.LagPeriod = DefaultLagPeriod
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// Validate checks c after defaults; its errors are permanent.
func (c Config) Validate() error {
	ep := c.Endpoint
	switch {
	case ep.Queue == "":
		return fault.Permanent(fmt.Errorf("ingress/amqp: route %q: from.amqp.queue is required", c.Rules.Route))
	case ep.Exchange != "" && ep.ExchangeType == amqp.ExchangeDirect && ep.BindingKey == "#":
		// A direct exchange matches routing keys exactly: "#" is no wildcard there, and
		// RabbitMQ would silently drop every message published with another key (a
		// plugin user's natural config, x-delayed-type being "direct" most often).
		return fault.Permanent(fmt.Errorf("ingress/amqp: route %q: from.amqp.exchange_type direct with binding_key \"#\" receives only "+
			"messages published with the routing key \"#\" (a direct exchange has no wildcards; RabbitMQ drops the rest): "+
			"use exchange_type topic or fanout to take every routing key — the routing key is kept, so the target "+
			"exchange can be the direct one — or set binding_key to the one key to delay", c.Rules.Route))
	case c.Prefetch <= 0 || c.BatchWait <= 0 || c.MinBackoff <= 0 || c.RetryInPlace <= 0 || c.StallTimeout <= 0 || c.LagPeriod <= 0:
		return fault.Permanent(fmt.Errorf("ingress/amqp: route %q: prefetch, batch wait, backoff, retries, stall timeout and lag period must be > 0", c.Rules.Route))
	}
	return nil
}

// Source consumes one AMQP queue. It implements ingress.Source.
type Source struct {
	conn    Conn
	cfg     Config
	log     *slog.Logger
	running atomic.Bool
	warned  atomic.Bool
	health  *health
	stall   *stallWatch
	// wedge makes the running session stop reading deliveries (the consumer stays
	// registered, the channel open). Only tests send on it (export_test.go): it injects
	// the "deliveries stop arriving" fault the watchdog must heal.
	wedge chan struct{}
}

var (
	_ ingress.Source         = (*Source)(nil)
	_ ingress.HealthReporter = (*Source)(nil)
)

// New returns a source for cfg (defaults filled, then validated: errors are permanent).
// conn is shared and owned by the caller (close it after Run returned). Nothing is
// dialed before Run.
func New(conn Conn, cfg Config) (*Source, error) {
	if conn == nil {
		return nil, fault.Permanent(errors.New("ingress/amqp: nil connection manager"))
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{
		conn:  conn,
		cfg:   cfg,
		log:   cfg.Logger.With("component", "ingress/amqp", "route", cfg.Rules.Route, "queue", cfg.Endpoint.Queue),
		wedge: make(chan struct{}),
	}
	s.health = newHealth(cfg.Rules.Route, cfg.Observer, s.log, cfg.Clock)
	s.stall = newStallWatch(cfg.Clock, cfg.StallTimeout)
	return s, nil
}

// Name is "amqp:<queue>".
func (s *Source) Name() string { return "amqp:" + s.cfg.Endpoint.Queue }

// Run consumes until ctx is cancelled (returns nil) or an unrecoverable error: a
// permanent configuration or authentication problem (fault.Permanent) or the connection
// manager being closed. Connection and channel losses are retried with backoff. Each
// session (one channel's lifetime) owns the watchdog goroutine beside it and waits for
// it before returning.
func (s *Source) Run(ctx context.Context, h ingress.Handler) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("ingress/amqp: %s: Run called twice", s.Name())
	}
	defer s.running.Store(false)
	defer s.health.set(ingress.StateStopped, "Run returned")
	bo := clock.NewBackoff(s.cfg.Clock, clock.BackoffPolicy{Initial: s.cfg.MinBackoff, Max: s.cfg.MaxBackoff})
	loop := ingress.NewLoop(h, ingress.LoopOptions{Clock: s.cfg.Clock, Logger: s.log, GiveUpAfter: s.cfg.RetryInPlace,
		Backoff: clock.BackoffPolicy{Initial: s.cfg.MinBackoff, Max: s.cfg.MaxBackoff}, Busy: s.stall.busy})
	for {
		progressed, err := s.session(ctx, loop)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, amqpconn.ErrClosed):
			return fmt.Errorf("ingress/amqp: %s: %w", s.Name(), err)
		case fault.IsPermanent(err): // refused topology here, credentials or TLS in amqpconn
			return fmt.Errorf("ingress/amqp: %s: %w", s.Name(), err)
		}
		if progressed {
			bo.Reset()
		}
		st := s.health.snapshot().State
		s.health.interrupted(err, s.conn.Connected(), st == ingress.StateConsuming || st == ingress.StateStalled)
		d := bo.Next()
		if errors.Is(err, errStalled) {
			s.stall.rebuilt()
			d = s.cfg.MinBackoff
			s.log.Info("amqp ingress watchdog: rebuilding the consumer", "reason", err, "rebuilds", s.Health().Rebuilds)
		} else {
			s.log.Warn("amqp consumer interrupted; resuming", "err", err, "retry_in", d.Round(time.Millisecond))
		}
		if clock.Sleep(ctx, s.cfg.Clock, d) != nil {
			return nil
		}
		if !s.conn.Connected() { // the manager may notice a lost connection after the channel
			s.health.interrupted(err, false, false)
		}
	}
}

// session runs one channel's lifetime: declare, consume, batch, ack. It returns when the
// channel or connection fails (error), or ctx is done. progressed reports whether a batch
// was acknowledged (which resets the reconnect backoff).
func (s *Source) session(ctx context.Context, loop *ingress.Loop) (progressed bool, err error) {
	ch, err := s.setup(ctx)
	if err != nil {
		return false, err
	}
	// Closing the channel returns every unacknowledged delivery to the queue.
	defer s.conn.CloseChannel(ch, time.Second)

	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	deliveries, err := s.consume(ctx, ch)
	if err != nil {
		return false, err
	}
	s.log.Debug("consuming")
	s.health.set(ingress.StateConsuming, "")
	s.stall.consuming()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	rebuild := make(chan string, 1)
	go func() { // owned by this consume session: stopped and waited for when it returns
		defer close(watched)
		s.watch(watchCtx, rebuild)
	}()
	defer func() {
		stopWatch()
		<-watched
	}()

	batch := make([]amqp.Delivery, 0, s.cfg.Prefetch)
	recv := make([]time.Time, 0, s.cfg.Prefetch)
	lost := channelLost
	for {
		batch, recv = batch[:0], recv[:0]
		select {
		case <-ctx.Done():
			return progressed, nil
		case e := <-closed:
			return progressed, lost(e)
		case t, ok := <-cancelled:
			if !ok {
				return progressed, lost(nil)
			}
			return progressed, fmt.Errorf("consumer %s cancelled by the server (queue deleted?)", t)
		case why := <-rebuild:
			return progressed, fmt.Errorf("%w: %s", errStalled, why)
		case <-s.wedge:
			deliveries = nil // test fault: deliveries stop arriving
			continue
		case d, ok := <-deliveries:
			if !ok {
				return progressed, lost(nil)
			}
			batch, recv = append(batch, d), append(recv, s.cfg.Clock.Now())
			s.stall.delivered()
		}
		var open bool
		if batch, recv, open = s.fill(ctx, deliveries, batch, recv); !open {
			if ctx.Err() != nil {
				return progressed, nil
			}
			// The channel died: nothing of this batch can be acknowledged any more, the
			// broker delivers it again.
			return progressed, lost(nil)
		}

		s.cfg.Observer.Received(s.cfg.Rules.Route, len(batch))
		acked, stop, err := s.handle(ctx, ch, loop, batch, recv)
		progressed = progressed || acked
		if stop {
			return progressed, err
		}
	}
}

// consume sets the QoS and registers the consumer.
func (s *Source) consume(ctx context.Context, ch *amqp.Channel) (<-chan amqp.Delivery, error) {
	if err := s.conn.Do(ctx, func() error { return ch.Qos(s.cfg.Prefetch, 0, false) }); err != nil {
		return nil, fmt.Errorf("basic.qos: %w", err)
	}
	tag := s.cfg.ConsumerTag + "-" + strconv.FormatUint(rand.Uint64(), 36)
	var deliveries <-chan amqp.Delivery
	if err := s.conn.Do(ctx, func() error {
		var err error
		deliveries, err = ch.Consume(s.cfg.Endpoint.Queue, tag, false, false, false, false, nil)
		return err
	}); err != nil {
		return nil, fmt.Errorf("basic.consume %s: %w", s.cfg.Endpoint.Queue, classify(err))
	}
	return deliveries, nil
}

// fill adds to a batch holding its first delivery what arrives within BatchWait (on the
// clock), up to Prefetch deliveries. open is false when the deliveries channel closed
// (the channel died) or ctx ended.
func (s *Source) fill(ctx context.Context, deliveries <-chan amqp.Delivery,
	batch []amqp.Delivery, recv []time.Time) ([]amqp.Delivery, []time.Time, bool) {
	if len(batch) >= s.cfg.Prefetch {
		return batch, recv, true
	}
	timer := s.cfg.Clock.NewTimer(s.cfg.BatchWait)
	defer timer.Stop()
	for len(batch) < s.cfg.Prefetch {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch, recv, false
			}
			batch, recv = append(batch, d), append(recv, s.cfg.Clock.Now())
		case <-timer.C():
			return batch, recv, true
		case <-ctx.Done():
			return batch, recv, false
		}
	}
	return batch, recv, true
}

func channelLost(e *amqp.Error) error {
	if e == nil {
		return errors.New("channel closed")
	}
	return fmt.Errorf("channel closed: %w", e)
}

// errGaveUp marks a session ended because the handler failed one batch RetryInPlace
// times: closing the channel gives that batch, and every later delivery on it, back to
// the queue in order (handle).
var errGaveUp = errors.New("handler failed the same batch too often; its deliveries go back to the queue")

// handle parses one batch once and hands it to the delivery loop: acknowledged with one
// multiple basic.ack once the handler accepted it (acked), or, after RetryInPlace failed
// calls, given back to the queue by ending the session (errGaveUp). stop reports that
// the session must end: shutdown (nil error), the channel lost, or errGaveUp.
func (s *Source) handle(ctx context.Context, ch *amqp.Channel, loop *ingress.Loop, batch []amqp.Delivery,
	recv []time.Time) (acked, stop bool, err error) {
	last := batch[len(batch)-1].DeliveryTag
	items := make([]ingress.Item, len(batch))
	for i := range batch {
		items[i] = ingress.Parse(s.raw(&batch[i], recv[i]), s.cfg.Rules)
	}
	out, err := loop.Deliver(ctx, ingress.Batch{
		Items: items,
		// Acknowledged even when shutdown began meanwhile, so a graceful stop leaves
		// nothing it parked to be delivered again.
		Ack: func() error {
			if err := ch.Ack(last, true); err != nil {
				return fmt.Errorf("basic.ack: %w", err)
			}
			return nil
		},
		// A delivery tag is only valid on the channel that delivered it.
		BeforeRetry: func() error {
			if ch.IsClosed() {
				return channelLost(nil)
			}
			return nil
		},
	})
	switch out {
	case ingress.Acked:
		return true, false, nil
	case ingress.GaveUp:
		// Back to the queue, in order, for whichever consumer is healthy; the broker
		// delivers it again (then it is parsed again, from the broker's copy). Not with
		// basic.nack of the batch: the deliveries that came after it, already on this
		// channel, would be handled before the requeued batch came back, out of queue
		// order. Ending the session closes the channel, which requeues all of them at
		// their places.
		return false, true, fmt.Errorf("%w (%d deliveries)", errGaveUp, len(batch))
	}
	// Stopped: shutdown, or the channel lost. Closing the channel requeues the batch; if
	// the handler did park it, the redelivery is recognised by id and not parked twice.
	return false, true, err
}

// setup opens a channel and declares the topology. A declaration the server refuses
// closes the channel, so fallbacks use a new one.
func (s *Source) setup(ctx context.Context) (*amqp.Channel, error) {
	ch, err := s.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	fail := func(what string, err error) (*amqp.Channel, error) {
		s.conn.CloseChannel(ch, time.Second)
		return nil, fmt.Errorf("%s: %w", what, classify(err))
	}
	ep := s.cfg.Endpoint
	if ep.Exchange != "" {
		if err := s.conn.Do(ctx, func() error {
			return ch.ExchangeDeclare(ep.Exchange, ep.ExchangeType, true, false, false, false, nil)
		}); err != nil {
			return fail(fmt.Sprintf("declare exchange %q (type %s)", ep.Exchange, ep.ExchangeType), err)
		}
	}
	err = s.conn.Do(ctx, func() error {
		_, err := ch.QueueDeclare(ep.Queue, true, false, false, false, nil)
		return err
	})
	var aerr *amqp.Error
	if err != nil && errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed {
		// The queue exists with other arguments (x-queue-type: quorum, limits...):
		// use it as it is.
		s.conn.CloseChannel(ch, time.Second)
		if ch, err = s.conn.Channel(ctx); err != nil {
			return nil, err
		}
		err = s.conn.Do(ctx, func() error {
			_, err := ch.QueueDeclarePassive(ep.Queue, true, false, false, false, nil)
			return err
		})
		if err == nil && !s.warned.Swap(true) {
			s.log.Info("queue exists with other arguments; using it as declared", "reason", aerr.Reason)
		}
	}
	if err != nil {
		return fail(fmt.Sprintf("declare queue %q", ep.Queue), err)
	}
	if ep.Exchange != "" {
		if err := s.conn.Do(ctx, func() error {
			return ch.QueueBind(ep.Queue, ep.BindingKey, ep.Exchange, false, nil)
		}); err != nil {
			return fail(fmt.Sprintf("bind queue %q to %q with %q", ep.Queue, ep.Exchange, ep.BindingKey), err)
		}
	}
	return ch, nil
}

// classify marks the server's refusals that no retry fixes (inequivalent exchange,
// access refused) as permanent.
func classify(err error) error {
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Server {
		switch aerr.Code {
		case amqp.PreconditionFailed, amqp.AccessRefused, amqp.NotAllowed, amqp.CommandInvalid, amqp.NotImplemented:
			return fault.Permanent(err)
		}
	}
	return err
}
