// Package amqp is the RabbitMQ (AMQP 0-9-1) sink: it republishes fired messages to their
// target exchange with publisher confirms and the mandatory flag, so a message counts as
// published only when the broker confirmed it and routed it to at least one queue.
//
// Target. env.Target when set (an x-delay-target override the route allowed), else the
// route's to.amqp.exchange. Routing key: to.amqp.routing_key when set, else the message's
// original routing key; a Kafka-origin message has none, so its Kafka key is used as text
// ("" when it has no key).
//
// Message. The body is unchanged. Properties are the original ones for an AMQP-origin
// message (content type and encoding, delivery mode, priority, correlation id, reply-to,
// expiration, message id, timestamp, type, app id), except user_id, which is kept only when
// it names the user the bridge authenticates as: RabbitMQ rejects (closes the channel on)
// a publish whose user_id is another user. Other messages (Kafka, HTTP) are published
// persistent (delivery mode 2) with message_id = the bridge's message id. Headers are
// egress.OutgoingHeaders as an AMQP table, values keeping their AMQP types (int8..int64,
// uint8..uint32, floats, decimal, timestamps, nested tables, arrays, byte arrays);
// Kafka-origin header values, stored as strings, become long strings. A uint64 beyond the
// int64 range (AMQP has no unsigned 64-bit type) becomes its decimal text. When a Kafka
// message carried the same header key twice, the last value wins (an AMQP table is a map).
// One exception to "types kept": x-delay, already negated, is written as the delayed-
// message plugin writes it, a signed 32-bit integer (see PluginDelay), so consumers
// written against the plugin read the same type.
//
// Outcome. Each message is published on a confirm channel; the broker's ack is success.
// A basic.return (no queue bound for the routing key: ErrUnroutable), a basic.nack
// (ErrNacked) or the channel or connection closing before the confirm (ErrChannelLost)
// is a failed publish that a retry may fix. A missing target exchange is permanent
// (marked fault.Permanent), as is an unknown route or a header table that
// cannot be encoded. Returns are matched to messages by their x-message-id header.
//
// Concurrency. A fixed pool of publisher goroutines each owns one confirm channel
// (never shared); Publish splits its batch into chunks of at most MaxInflight messages
// and hands them to the pool. Channels are reopened on the next chunk after they die,
// reconnecting through the shared amqpconn.Manager.
package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// maxShortStr is the longest exchange name or routing key AMQP 0-9-1 can carry.
const maxShortStr = 255

// HeaderDeadReason carries env.Reason on messages published to the dead-letter exchange.
const HeaderDeadReason = "x-delay-dead-reason"

// Publish failures a retry may fix. Each returned error wraps one of them (or ctx's
// error, ErrClosed, or is marked fault.Permanent).
var (
	// ErrUnroutable: the broker returned the message (mandatory flag): no queue is bound
	// to the target exchange for its routing key. It wraps fault.ErrUnroutable.
	ErrUnroutable = fmt.Errorf("%w: returned by the broker", fault.ErrUnroutable)
	// ErrNacked: the broker nacked the publish (internal error in the queue). It wraps
	// fault.ErrRejected.
	ErrNacked = fmt.Errorf("nacked by the broker: %w", fault.ErrRejected)
	// ErrChannelLost: the channel or connection closed before the broker confirmed.
	// Whatever the broker had not applied it dropped with the channel, so a re-send
	// cannot meet a late first write: it wraps fault.ErrUnreachable (fault.ErrRejected
	// too when the broker closed the channel with an error of its own).
	ErrChannelLost = fmt.Errorf("channel closed before the confirm: %w", fault.ErrUnreachable)
	// ErrUnavailable: no connection to the broker could be made within ConnectWait.
	// Nothing was sent: it wraps fault.ErrUnreachable.
	ErrUnavailable = fmt.Errorf("broker unavailable: %w", fault.ErrUnreachable)
	// ErrClosed: Publish after Close.
	ErrClosed = errors.New("egress/amqp: sink closed")
)

// Sink publishes to RabbitMQ. It implements egress.Sink and egress.HealthChecker.
type Sink struct {
	conn   Conn
	routes map[string]Route
	dead   string // dead-letter mode: every message goes to this exchange
	plain  bool   // receipts mode: the message's own headers, nothing added (NewReceipts)
	opts   Options
	log    *slog.Logger

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	jobs   chan *job
	wg     sync.WaitGroup
	closed atomic.Bool

	mu    sync.Mutex
	known map[string]bool // exchanges seen to exist
}

var (
	_ egress.Sink          = (*Sink)(nil)
	_ egress.HealthChecker = (*Sink)(nil)
)

// New checks that every route's target exchange exists (exchange.declare passive on a
// throwaway channel, since a failed passive declare closes the channel), or declares it
// (durable, topic) when Route.Declare is set, and starts the publisher pool. routes
// maps route name to its target. Invalid options or routes and a missing exchange are
// errors marked fault.Permanent. conn is shared and owned by the caller: close it
// after Close.
func New(ctx context.Context, conn Conn, routes map[string]Route, opts Options) (*Sink, error) {
	return newRouted(ctx, conn, routes, opts, false)
}

func newRouted(ctx context.Context, conn Conn, routes map[string]Route, opts Options, plain bool) (*Sink, error) {
	for name, r := range routes {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("egress/amqp: route %q: %w", name, err)
		}
	}
	s, err := newSink(conn, opts)
	if err != nil {
		return nil, err
	}
	s.routes, s.plain = maps.Clone(routes), plain
	for name, r := range s.routes {
		if err := s.checkExchange(ctx, r.Exchange, r.Declare); err != nil {
			return nil, fmt.Errorf("egress/amqp: route %q: %w", name, err)
		}
	}
	s.start()
	return s, nil
}

// NewDeadLetter returns a sink that publishes every message to the dead-letter exchange
// (dead_letter.amqp.exchange, which must exist) with its original routing key (a Kafka
// message's key as text), its headers rewritten as for a normal publish with
// x-delay-attempt = the attempts made, and x-delay-dead-reason = env.Reason.
func NewDeadLetter(ctx context.Context, conn Conn, exchange string, opts Options) (*Sink, error) {
	if exchange == "" {
		return nil, fault.Permanent(errors.New("egress/amqp: dead_letter.amqp.exchange is empty"))
	}
	s, err := newSink(conn, opts)
	if err != nil {
		return nil, err
	}
	s.dead = exchange
	if err := s.checkExchange(ctx, exchange, false); err != nil {
		return nil, fmt.Errorf("egress/amqp: dead_letter.amqp.exchange: %w", err)
	}
	s.start()
	return s, nil
}

// NewReceipts returns a sink of delivery receipts (egress.Receipts): each receipt goes
// to routes[its route] (receipts.amqp: the exchange must exist; routing key the route's
// routing_key, else the receipt's own, which is the message id), with exactly the
// receipt's headers and properties — nothing added. Failures are classified as for
// New.
func NewReceipts(ctx context.Context, conn Conn, routes map[string]Route, opts Options) (*Sink, error) {
	return newRouted(ctx, conn, routes, opts, true)
}

func newSink(conn Conn, opts Options) (*Sink, error) {
	if conn == nil {
		return nil, fault.Permanent(errors.New("egress/amqp: nil connection manager"))
	}
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Sink{
		conn:  conn,
		opts:  opts,
		log:   opts.Logger.With("component", "egress/amqp"),
		jobs:  make(chan *job),
		known: map[string]bool{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

func (s *Sink) start() {
	for range s.opts.Channels {
		w := &worker{s: s}
		s.wg.Add(1)
		go w.run()
	}
	s.wg.Add(1)
	go s.probe()
}

// Healthy implements egress.HealthChecker: nil while the connection to the broker is
// open, else the reason it is not (the latest dial or connection error).
func (s *Sink) Healthy() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if s.conn.Connected() {
		return nil
	}
	if err := s.conn.LastError(); err != nil {
		return fmt.Errorf("rabbitmq unreachable: %w", err)
	}
	return errors.New("rabbitmq: not connected")
}

// probe dials a connection every ProbeInterval while there is none (nothing else
// reconnects while no message is published), until Close. A change of state is logged
// at info.
func (s *Sink) probe() {
	defer s.wg.Done()
	t := s.opts.Clock.NewTimer(s.opts.ProbeInterval)
	defer t.Stop()
	healthy := true
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C():
		}
		if !s.conn.Connected() {
			ctx, cancel := context.WithTimeout(s.ctx, s.opts.ConnectWait)
			_, _ = s.conn.Connection(ctx)
			cancel()
		}
		switch err := s.Healthy(); {
		case s.ctx.Err() != nil:
			return
		case err != nil && healthy:
			s.log.Info("egress broker unreachable", "err", err)
		case err == nil && !healthy:
			s.log.Info("egress broker reachable again")
		}
		healthy = s.Healthy() == nil
		t.Reset(s.opts.ProbeInterval)
	}
}

// checkExchange verifies (or declares) an exchange on a throwaway channel and caches
// the result.
func (s *Sink) checkExchange(ctx context.Context, name string, declare bool) error {
	if name == "" {
		return fault.Permanent(errors.New("the default exchange cannot be a target"))
	}
	ch, err := s.conn.Channel(ctx)
	if err != nil {
		if fault.IsPermanent(err) {
			return err
		}
		return fmt.Errorf("check exchange %q: %w: %w", name, ErrUnavailable, err)
	}
	defer s.conn.CloseChannel(ch, time.Second)
	err = s.conn.Do(ctx, func() error {
		if declare {
			return ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil)
		}
		return ch.ExchangeDeclarePassive(name, amqp.ExchangeTopic, true, false, false, false, nil)
	})
	var aerr *amqp.Error
	switch {
	case err == nil:
		s.mu.Lock()
		s.known[name] = true
		s.mu.Unlock()
		return nil
	case errors.As(err, &aerr) && aerr.Code == amqp.NotFound:
		return fault.Permanent(fmt.Errorf("target exchange %q does not exist (create it, or set to.amqp.declare: true)", name))
	case errors.As(err, &aerr) && aerr.Server && (aerr.Code == amqp.PreconditionFailed || aerr.Code == amqp.AccessRefused):
		return fault.Permanent(fmt.Errorf("declare exchange %q: %w", name, err))
	}
	return fmt.Errorf("check exchange %q: %w", name, err)
}

func (s *Sink) isKnown(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[name]
}

func (s *Sink) forget(name string) {
	s.mu.Lock()
	delete(s.known, name)
	s.mu.Unlock()
}

// Close stops the publisher pool and closes its channels; Publish afterwards fails with
// ErrClosed. It does not close the connection manager.
func (s *Sink) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	if !s.waitDone(done) {
		return errors.New("egress/amqp: publishers still blocked writing to the broker; they stop when the connection manager is closed")
	}
	return nil
}

// waitDone waits until done is closed or CloseWait has passed on the sink's clock; it
// reports whether done was closed.
func (s *Sink) waitDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
	}
	t := s.opts.Clock.NewTimer(s.opts.CloseWait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C():
		return false
	}
}
