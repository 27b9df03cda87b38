// Package amqp is the RabbitMQ (AMQP 0-9-1) delay source: it consumes one durable queue
// with manual acknowledgements and hands batches of parsed messages to an
// ingress.Handler, acknowledging them only once the handler has them in Redis.
//
// Topology. For a route `from: { amqp: { queue, exchange, exchange_type, binding_key } }`
// the source declares, on every (re)connection: the exchange (durable, exchange_type
// default "topic") when set, the durable queue, and the binding (binding_key default "#").
// exchange_type direct with binding_key "#" is refused (ErrPermanent): "#" is no wildcard
// on a direct exchange, so every message published with another key would be dropped.
// An existing exchange of another type is a configuration error (ErrPermanent): the
// plugin's x-delayed-message exchange of the same name must be deleted first. An existing
// queue with other arguments (quorum queue, length limit...) is used as it is.
//
// Delivery. QoS prefetch = amqp.prefetch. Deliveries are batched (up to prefetch, or what
// arrived within BatchWait of the first), parsed with ingress.Parse and handed to the
// handler; on success the batch is acknowledged with one multiple basic.ack up to its
// last delivery tag; on failure the source backs off and hands the same batch again,
// and after RetryInPlace failures rejects it with basic.nack(multiple, requeue), so the
// broker delivers it again, in order, to a healthy consumer. Nothing is acknowledged
// that the handler did not accept, and a delivery tag is only ever acknowledged on the
// channel that delivered it: when the channel or connection drops, the unacknowledged
// deliveries return to the queue by themselves and the source reconnects with backoff and
// consumes again.
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

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// HeaderDeliveryCount is the header quorum queues add to redelivered messages; it is
// kept in the message but left out of the content-derived id.
const HeaderDeliveryCount = "x-delivery-count"

// Options tunes a Source. Zero values take the defaults shown.
type Options struct {
	// Rules are the route's parsing limits; Rules.Route names the route.
	Rules ingress.Rules
	// Prefetch is the QoS prefetch count and the largest batch (amqp.prefetch); default 500.
	Prefetch int
	// BatchWait is how long a batch stays open after its first delivery; default 2ms.
	BatchWait time.Duration
	// MinBackoff and MaxBackoff bound the waits before reconnecting and before
	// rejecting a batch the handler failed; defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// RetryInPlace is how many times a failed batch is handed to the handler again on
	// the same channel (after a backoff each time) before it is rejected back to the
	// queue with basic.nack(requeue), where any healthy consumer may take it; default 5.
	RetryInPlace int
	// ConsumerTag prefix; default "delay-bridge". A random suffix is added.
	ConsumerTag string
	Observer    observe.Observer // default observe.Nop
	Logger      *slog.Logger     // default slog.Default()
	// Now is the receive clock (default time.Now).
	Now func() time.Time
	// LagPeriod bounds how often a consuming source refreshes its queue depth
	// (Health().Lag, the Observer's IngressLag): every StallTimeout/5 (200ms to 5s), at
	// most LagPeriod; default DefaultLagPeriod.
	LagPeriod time.Duration
	// StallTimeout is how long a registered consumer may receive nothing while its queue
	// has ready messages (time in the handler excluded) before the watchdog closes its
	// channel and consumes again (ingress.stall_timeout); it reports stalled after a
	// third of it. Default DefaultStallTimeout.
	StallTimeout time.Duration
	// Clock times the watchdog; default clock.Real.
	Clock clock.Clock
}

// Source consumes one AMQP queue. It implements ingress.Source.
type Source struct {
	conn    *amqpconn.Manager
	ep      config.AMQPEndpoint
	opts    Options
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

// New returns a source for the route's `from.amqp` endpoint. conn is shared and owned by
// the caller (close it after Run returned). Nothing is dialed before Run.
func New(conn *amqpconn.Manager, ep config.AMQPEndpoint, opts Options) (*Source, error) {
	if conn == nil {
		return nil, fmt.Errorf("ingress/amqp: nil connection manager: %w", ingress.ErrPermanent)
	}
	if ep.Queue == "" {
		return nil, fmt.Errorf("ingress/amqp: route %q: from.amqp.queue is required: %w", opts.Rules.Route, ingress.ErrPermanent)
	}
	if ep.ExchangeType == "" {
		ep.ExchangeType = amqp.ExchangeTopic
	}
	if ep.Exchange != "" && ep.BindingKey == "" {
		ep.BindingKey = "#"
	}
	if ep.Exchange != "" && ep.ExchangeType == amqp.ExchangeDirect && ep.BindingKey == "#" {
		// A direct exchange matches routing keys exactly: "#" is no wildcard there, and
		// RabbitMQ would silently drop every message published with another key (a
		// plugin user's natural config, x-delayed-type being "direct" most often).
		return nil, fmt.Errorf("ingress/amqp: route %q: from.amqp.exchange_type direct with binding_key \"#\" receives only "+
			"messages published with the routing key \"#\" (a direct exchange has no wildcards; RabbitMQ drops the rest): "+
			"use exchange_type topic or fanout to take every routing key — the routing key is kept, so the target "+
			"exchange can be the direct one — or set binding_key to the one key to delay: %w", opts.Rules.Route, ingress.ErrPermanent)
	}
	if opts.Prefetch <= 0 {
		opts.Prefetch = 500
	}
	if opts.Prefetch > 65535 {
		opts.Prefetch = 65535
	}
	if opts.BatchWait <= 0 {
		opts.BatchWait = 2 * time.Millisecond
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(5*time.Second, opts.MinBackoff)
	}
	if opts.RetryInPlace <= 0 {
		opts.RetryInPlace = 5
	}
	if opts.ConsumerTag == "" {
		opts.ConsumerTag = "delay-bridge"
	}
	if opts.Observer == nil {
		opts.Observer = observe.Nop{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LagPeriod <= 0 {
		opts.LagPeriod = DefaultLagPeriod
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	s := &Source{
		conn: conn,
		ep:   ep,
		opts: opts,
		log:  opts.Logger.With("component", "ingress/amqp", "route", opts.Rules.Route, "queue", ep.Queue),
	}
	s.health = newHealth(opts.Rules.Route, opts.Observer, s.log, opts.Clock.Now)
	s.stall = newStallWatch(opts.Clock, opts.StallTimeout)
	s.wedge = make(chan struct{})
	return s, nil
}

// Name is "amqp:<queue>".
func (s *Source) Name() string { return "amqp:" + s.ep.Queue }

// Run consumes until ctx is cancelled (returns nil) or an unrecoverable error: a
// permanent configuration or authentication problem (wrapped with ingress.ErrPermanent)
// or the connection manager being closed. Connection and channel losses are retried with
// backoff.
func (s *Source) Run(ctx context.Context, h ingress.Handler) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("ingress/amqp: %s: Run called twice", s.Name())
	}
	defer s.running.Store(false)
	defer s.health.set(ingress.StateStopped, "Run returned")
	bo := clock.NewBackoff(s.opts.Clock, clock.BackoffPolicy{Initial: s.opts.MinBackoff, Max: s.opts.MaxBackoff})
	for {
		progressed, err := s.session(ctx, h)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, amqpconn.ErrClosed):
			return fmt.Errorf("ingress/amqp: %s: %w", s.Name(), err)
		case errors.Is(err, ingress.ErrPermanent):
			return err
		case fault.IsPermanent(err):
			return fmt.Errorf("ingress/amqp: %s: %w: %w", s.Name(), err, ingress.ErrPermanent)
		}
		if progressed {
			bo.Reset()
		}
		st := s.health.snapshot().State
		s.health.interrupted(err, s.conn.Connected(), st == ingress.StateConsuming || st == ingress.StateStalled)
		d := bo.Next()
		if errors.Is(err, errStalled) {
			s.stall.rebuilt()
			d = s.opts.MinBackoff
			s.log.Info("amqp ingress watchdog: rebuilding the consumer", "reason", err, "rebuilds", s.Health().Rebuilds)
		} else {
			s.log.Warn("amqp consumer interrupted; resuming", "err", err, "retry_in", d.Round(time.Millisecond))
		}
		if clock.Sleep(ctx, s.opts.Clock, d) != nil {
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
func (s *Source) session(ctx context.Context, h ingress.Handler) (progressed bool, err error) {
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
	go func() { // owned by this session: stopped and waited for when it returns
		defer close(watched)
		s.watch(watchCtx, rebuild)
	}()
	defer func() {
		stopWatch()
		<-watched
	}()

	handlerBackoff := clock.NewBackoff(s.opts.Clock, clock.BackoffPolicy{Initial: s.opts.MinBackoff, Max: s.opts.MaxBackoff})
	batch := make([]amqp.Delivery, 0, s.opts.Prefetch)
	recv := make([]time.Time, 0, s.opts.Prefetch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
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
			batch, recv = append(batch, d), append(recv, s.opts.Now())
			s.stall.delivered()
		}
		var open bool
		if batch, recv, open = s.fill(ctx, deliveries, timer, batch, recv); !open {
			if ctx.Err() != nil {
				return progressed, nil
			}
			// The channel died: nothing of this batch can be acknowledged any more, the
			// broker delivers it again.
			return progressed, lost(nil)
		}

		s.opts.Observer.Received(s.opts.Rules.Route, len(batch))
		s.stall.handlerBegin()
		acked, stop, err := s.handle(ctx, ch, h, batch, recv, handlerBackoff)
		s.stall.handlerEnd()
		progressed = progressed || acked
		if stop {
			return progressed, err
		}
	}
}

// consume sets the QoS and registers the consumer.
func (s *Source) consume(ctx context.Context, ch *amqp.Channel) (<-chan amqp.Delivery, error) {
	if err := s.conn.Do(ctx, func() error { return ch.Qos(s.opts.Prefetch, 0, false) }); err != nil {
		return nil, fmt.Errorf("basic.qos: %w", err)
	}
	tag := s.opts.ConsumerTag + "-" + strconv.FormatUint(rand.Uint64(), 36)
	var deliveries <-chan amqp.Delivery
	if err := s.conn.Do(ctx, func() error {
		var err error
		deliveries, err = ch.Consume(s.ep.Queue, tag, false, false, false, false, nil)
		return err
	}); err != nil {
		return nil, fmt.Errorf("basic.consume %s: %w", s.ep.Queue, classify(err))
	}
	return deliveries, nil
}

// fill adds to a batch holding its first delivery what arrives within BatchWait, up to
// Prefetch deliveries. open is false when the deliveries channel closed (the channel
// died) or ctx ended.
func (s *Source) fill(ctx context.Context, deliveries <-chan amqp.Delivery, timer *time.Timer,
	batch []amqp.Delivery, recv []time.Time) ([]amqp.Delivery, []time.Time, bool) {
	timer.Reset(s.opts.BatchWait)
	defer func() {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}()
	for len(batch) < s.opts.Prefetch {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch, recv, false
			}
			batch, recv = append(batch, d), append(recv, s.opts.Now())
		case <-timer.C:
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

// handle hands one batch to the handler until it is parked and acknowledged (acked) or
// rejected back to the queue. stop reports that the session must end: shutdown (nil
// error) or the channel lost.
func (s *Source) handle(ctx context.Context, ch *amqp.Channel, h ingress.Handler, batch []amqp.Delivery, recv []time.Time,
	handlerBackoff *clock.Backoff) (acked, stop bool, err error) {
	last := batch[len(batch)-1].DeliveryTag
	for failures := 1; ; failures++ {
		// Parsed afresh for every attempt, so a handler that modified the items of a
		// failed attempt is handed the records as they were.
		items := make([]ingress.Item, len(batch))
		for i := range batch {
			items[i] = ingress.Parse(s.raw(&batch[i], recv[i]), s.opts.Rules)
		}
		returned, herr := ingress.Call(ctx, h, items)
		if !returned {
			// Shutting down while h is still blocked: closing the channel requeues the
			// batch; if h did park it, the redelivery is recognised by id and not parked
			// twice.
			return false, true, nil
		}
		if herr == nil {
			// Parked: acknowledged even when shutdown began meanwhile, so a graceful stop
			// leaves nothing it parked to be delivered again.
			if err := ch.Ack(last, true); err != nil {
				return false, true, fmt.Errorf("basic.ack: %w", err)
			}
			handlerBackoff.Reset()
			return true, false, nil
		}
		if ctx.Err() != nil {
			return false, true, nil
		}
		d := handlerBackoff.Next()
		requeue := failures >= s.opts.RetryInPlace
		s.log.Warn("handler failed; batch will be handed over again", "err", herr, "messages", len(batch),
			"attempt", failures, "requeue", requeue, "retry_in", d.Round(time.Millisecond))
		if clock.Sleep(ctx, s.opts.Clock, d) != nil {
			return false, true, nil
		}
		if ch.IsClosed() {
			return false, true, channelLost(nil)
		}
		if requeue {
			// Back to the queue, in order, for whichever consumer is healthy.
			if err := ch.Nack(last, true, true); err != nil {
				return false, true, fmt.Errorf("basic.nack: %w", err)
			}
			return false, false, nil
		}
	}
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
	ep := s.ep
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
// access refused) with ingress.ErrPermanent.
func classify(err error) error {
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Server {
		switch aerr.Code {
		case amqp.PreconditionFailed, amqp.AccessRefused, amqp.NotAllowed, amqp.CommandInvalid, amqp.NotImplemented:
			return fmt.Errorf("%w: %w", err, ingress.ErrPermanent)
		}
	}
	return err
}
