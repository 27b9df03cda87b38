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
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
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

// Options tunes a Sink. Zero values take the defaults shown.
type Options struct {
	// Channels is the number of confirm channels, one publisher goroutine each; default 4.
	Channels int
	// MaxInflight bounds unconfirmed publishes per channel (the chunk size); default 256.
	MaxInflight int
	// ConnectWait is how long a publish waits for a connection before failing its chunk
	// with ErrUnavailable; default 5s.
	ConnectWait time.Duration
	// CloseWait bounds how long Close waits for publisher goroutines blocked in a
	// socket write (a broker that applies TCP back-pressure); default 5s. Past it they
	// stop when the connection manager is closed.
	CloseWait time.Duration
	// ProbeInterval is how often the health probe checks the connection and, while
	// there is none, dials one (so readiness recovers without a publish); default 5s.
	ProbeInterval time.Duration
	Logger        *slog.Logger // default slog.Default()
	// Clock times the probe and the CloseWait bounds; default clock.Real.
	Clock clock.Clock
}

// Sink publishes to RabbitMQ. It implements egress.Sink and egress.HealthChecker.
type Sink struct {
	conn   *amqpconn.Manager
	routes map[string]config.AMQPEndpoint
	dead   string // dead-letter mode: every message goes to this exchange
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
// (durable, topic) when to.amqp.declare is true, and starts the publisher pool. routes
// maps route name to its to.amqp endpoint. A missing exchange is an error wrapping
// fault.Permanent. conn is shared and owned by the caller: close it after Close.
func New(ctx context.Context, conn *amqpconn.Manager, routes map[string]config.AMQPEndpoint, opts Options) (*Sink, error) {
	s := newSink(conn, opts)
	s.routes = make(map[string]config.AMQPEndpoint, len(routes))
	for name, ep := range routes {
		if ep.Exchange == "" {
			return nil, fault.Permanent(fmt.Errorf("egress/amqp: route %q: to.amqp.exchange is required", name))
		}
		s.routes[name] = ep
	}
	for name, ep := range s.routes {
		if err := s.checkExchange(ctx, ep.Exchange, ep.Declare); err != nil {
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
func NewDeadLetter(ctx context.Context, conn *amqpconn.Manager, exchange string, opts Options) (*Sink, error) {
	if exchange == "" {
		return nil, fault.Permanent(errors.New("egress/amqp: dead_letter.amqp.exchange is empty"))
	}
	s := newSink(conn, opts)
	s.dead = exchange
	if err := s.checkExchange(ctx, exchange, false); err != nil {
		return nil, fmt.Errorf("egress/amqp: dead_letter.amqp.exchange: %w", err)
	}
	s.start()
	return s, nil
}

func newSink(conn *amqpconn.Manager, opts Options) *Sink {
	if opts.Channels <= 0 {
		opts.Channels = 4
	}
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = 256
	}
	if opts.ConnectWait <= 0 {
		opts.ConnectWait = 5 * time.Second
	}
	if opts.CloseWait <= 0 {
		opts.CloseWait = 5 * time.Second
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	s := &Sink{
		conn:  conn,
		opts:  opts,
		log:   opts.Logger.With("component", "egress/amqp"),
		jobs:  make(chan *job),
		known: map[string]bool{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
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

// outgoing is one message ready for basic.publish.
type outgoing struct {
	idx      int
	id       string
	exchange string
	key      string
	pub      amqp.Publishing
}

type job struct {
	ctx  context.Context
	msgs []outgoing
	errs []error // written by the worker, read after done
	done chan struct{}
}

// Publish publishes msgs and waits for the broker's confirms; see egress.Sink and the
// package documentation. It returns one error per message, in order.
func (s *Sink) Publish(ctx context.Context, msgs []*envelope.Envelope) []error {
	errs := make([]error, len(msgs))
	if s.closed.Load() || ctx.Err() != nil {
		err := ctx.Err()
		if s.closed.Load() {
			err = ErrClosed
		}
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	var todo []outgoing
	for i, env := range msgs {
		o, err := s.prepare(ctx, env)
		if err != nil {
			errs[i] = err
			continue
		}
		o.idx = i
		todo = append(todo, o)
	}
	var jobs []*job
	for len(todo) > 0 {
		n := min(len(todo), s.opts.MaxInflight)
		jobs = append(jobs, &job{ctx: ctx, msgs: todo[:n], errs: make([]error, n), done: make(chan struct{})})
		todo = todo[n:]
	}
	fail := func(j *job, err error) {
		for _, o := range j.msgs {
			errs[o.idx] = err
		}
	}
	submitted := 0
submit:
	for _, j := range jobs {
		select {
		case s.jobs <- j:
			submitted++
		case <-ctx.Done():
			break submit
		case <-s.ctx.Done():
			break submit
		}
	}
	for k, j := range jobs {
		if k >= submitted {
			if ctx.Err() != nil {
				fail(j, ctx.Err())
			} else {
				fail(j, ErrClosed)
			}
			continue
		}
		select {
		case <-j.done:
		case <-ctx.Done():
			select {
			case <-j.done:
			default:
				// Handed to a publisher: some of it may be on the wire.
				fail(j, fmt.Errorf("egress/amqp: no confirm from the broker: %w: %w", fault.ErrUnknownOutcome, ctx.Err()))
				continue
			}
		case <-s.ctx.Done():
			// Closed while a publisher is stuck (a socket write the broker does not read).
			if !s.waitDone(j.done) {
				fail(j, fmt.Errorf("%w: %w", ErrClosed, fault.ErrUnknownOutcome))
				continue
			}
		}
		for n, o := range j.msgs {
			errs[o.idx] = j.errs[n]
		}
	}
	return errs
}

// prepare resolves target and routing key and builds the publishing.
func (s *Sink) prepare(ctx context.Context, env *envelope.Envelope) (outgoing, error) {
	var o outgoing
	if env == nil {
		return o, fault.Permanent(errors.New("egress/amqp: nil envelope"))
	}
	o.id = env.ID
	ep, haveRoute := s.routes[env.Route]
	attempt := env.Attempt + 1
	switch {
	case s.dead != "":
		o.exchange = s.dead
		attempt = env.Attempt
	case env.Target != "":
		o.exchange = env.Target
	case haveRoute:
		o.exchange = ep.Exchange
	default:
		return o, fault.Permanent(fmt.Errorf("egress/amqp: message %q: unknown route %q", env.ID, env.Route))
	}
	if s.dead == "" {
		o.key = ep.RoutingKey
	}
	if o.key == "" {
		o.key = env.RoutingKey
	}
	if o.key == "" && env.SourceBroker == envelope.BrokerKafka {
		o.key = string(env.Key)
	}
	if len(o.key) > maxShortStr || len(o.exchange) > maxShortStr {
		return o, fault.Permanent(fmt.Errorf("egress/amqp: message %q: exchange %q or routing key %q is longer than %d bytes",
			env.ID, o.exchange, o.key, maxShortStr))
	}
	if !s.isKnown(o.exchange) {
		// A per-message target not seen yet (or one that vanished): check it on a
		// throwaway channel rather than letting a publish to a missing exchange close a
		// publisher channel.
		if err := s.checkExchange(ctx, o.exchange, false); err != nil {
			return o, fmt.Errorf("egress/amqp: message %q: %w", env.ID, err)
		}
	}
	hs := egress.OutgoingHeaders(env, attempt) // a fresh slice: changing it leaves env alone
	for i := range hs {
		if hs[i].Key == envelope.HeaderDelay {
			hs[i].Value = PluginDelay(hs[i].Value)
		}
	}
	if s.dead != "" {
		hs = append(hs, envelope.Header{Key: HeaderDeadReason, Value: env.Reason})
	}
	table, err := Table(hs)
	if err != nil {
		return o, fault.Permanent(fmt.Errorf("egress/amqp: message %q: headers: %w", env.ID, err))
	}
	o.pub = amqp.Publishing{Headers: table, Body: env.Payload}
	if p := env.AMQP; p != nil {
		o.pub.ContentType = p.ContentType
		o.pub.ContentEncoding = p.ContentEncoding
		o.pub.DeliveryMode = p.DeliveryMode
		o.pub.Priority = p.Priority
		o.pub.CorrelationId = p.CorrelationID
		o.pub.ReplyTo = p.ReplyTo
		o.pub.Expiration = p.Expiration
		o.pub.MessageId = p.MessageID
		o.pub.Timestamp = p.Timestamp
		o.pub.Type = p.Type
		o.pub.AppId = p.AppID
		if p.UserID != "" && p.UserID == s.conn.Username() {
			o.pub.UserId = p.UserID
		}
	} else {
		o.pub.DeliveryMode = amqp.Persistent
		o.pub.MessageId = env.ID
	}
	return o, nil
}

// Table converts envelope headers to an AMQP table (later keys win) and validates it.
func Table(hs []envelope.Header) (amqp.Table, error) {
	t := make(amqp.Table, len(hs))
	for _, h := range hs {
		t[h.Key] = ToAMQP(h.Value)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// ToAMQP converts one envelope header value to a type amqp091-go encodes.
func ToAMQP(v any) any {
	switch x := v.(type) {
	case envelope.Decimal:
		return amqp.Decimal{Scale: x.Scale, Value: x.Value}
	case map[string]any:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = ToAMQP(e)
		}
		return t
	case amqp.Table:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = ToAMQP(e)
		}
		return t
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = ToAMQP(e)
		}
		return a
	case int:
		return int64(x) // amqp091-go would write an int as 32 bits
	case uint:
		return ToAMQP(uint64(x))
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return strconv.FormatUint(x, 10)
	}
	return v
}

// PluginDelay renders the (already negated) x-delay value the way
// rabbitmq_delayed_message_exchange does when it delivers a delayed message: as a signed
// 32-bit integer (int64 when it does not fit), whatever type it arrived as (integer of any
// width, float or decimal truncated, numeric text). A value that is not a number is kept.
func PluginDelay(v any) any {
	n, err := envelope.Millis(v)
	if err != nil {
		return v
	}
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		return int32(n)
	}
	return n
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

// worker owns one confirm channel.
type worker struct {
	s       *Sink
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	closeE  *amqp.Error
}

func (w *worker) run() {
	defer w.s.wg.Done()
	defer w.discard()
	for {
		select {
		case <-w.s.ctx.Done():
			return
		case j := <-w.s.jobs:
			w.do(j)
			close(j.done)
		}
	}
}

// discard closes the channel (in the background if the server is slow).
func (w *worker) discard() {
	if w.ch != nil {
		w.s.conn.CloseChannel(w.ch, 100*time.Millisecond)
	}
	w.ch, w.returns, w.closes, w.closeE = nil, nil, nil, nil
}

// ensure opens a confirm channel when there is none or it died.
func (w *worker) ensure(ctx context.Context) error {
	if w.ch != nil && !w.ch.IsClosed() {
		return nil
	}
	w.discard()
	cctx, cancel := context.WithTimeout(ctx, w.s.opts.ConnectWait)
	defer cancel()
	ch, err := w.s.conn.Channel(cctx)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case fault.IsPermanent(err):
			return fmt.Errorf("egress/amqp: %w", err)
		case errors.Is(err, amqpconn.ErrClosed):
			return fmt.Errorf("egress/amqp: %w", err)
		}
		return fmt.Errorf("egress/amqp: %w: %w", ErrUnavailable, err)
	}
	// Every publish on this channel yields at most one return, and at most MaxInflight
	// are unresolved at a time: the buffer never fills, so amqp091-go never drops one.
	w.returns = ch.NotifyReturn(make(chan amqp.Return, w.s.opts.MaxInflight))
	w.closes = ch.NotifyClose(make(chan *amqp.Error, 1))
	w.ch = ch
	if err := w.s.conn.Do(cctx, func() error { return ch.Confirm(false) }); err != nil {
		w.discard()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("egress/amqp: confirm.select: %w: %w", ErrUnavailable, err)
	}
	return nil
}

type pending struct {
	n  int // index in job.msgs
	dc *amqp.DeferredConfirmation
}

// do publishes one chunk and waits for its confirms.
func (w *worker) do(j *job) {
	ctx, cancel := context.WithCancel(j.ctx)
	defer cancel()
	stop := context.AfterFunc(w.s.ctx, cancel)
	defer stop()
	if err := w.ensure(ctx); err != nil {
		for n := range j.errs {
			j.errs[n] = err
		}
		return
	}

	pend := make([]pending, 0, len(j.msgs))
	var broken error
	for n := range j.msgs {
		o := &j.msgs[n]
		if broken == nil {
			dc, err := w.ch.PublishWithDeferredConfirmWithContext(ctx, o.exchange, o.key, true, false, o.pub)
			switch {
			case err == nil && dc == nil:
				broken = fmt.Errorf("egress/amqp: channel not in confirm mode: %w", ErrChannelLost)
			case err == nil:
				pend = append(pend, pending{n: n, dc: dc})
				continue
			case ctx.Err() != nil:
				broken = ctx.Err()
			default:
				broken = fmt.Errorf("egress/amqp: publish to %q: %w: %w", o.exchange, ErrChannelLost, err)
			}
		}
		j.errs[n] = broken
	}

	returned := map[string][]amqp.Return{}
	record := func(r amqp.Return) {
		id, _ := r.Headers[envelope.HeaderMessageID].(string)
		returned[id] = append(returned[id], r)
	}
	aborted := false
wait:
	for _, p := range pend {
		for {
			select {
			case <-p.dc.Done():
				continue wait
			case r, ok := <-w.returns:
				if !ok {
					w.returns = nil
					continue
				}
				record(r)
			case <-ctx.Done():
				aborted = true
				break wait
			}
		}
	}
	// A basic.return precedes the basic.ack of its message, and amqp091-go hands it to
	// w.returns before it resolves the confirmation: every return for this chunk is
	// buffered by now.
	for drained := false; !drained && w.returns != nil; {
		select {
		case r, ok := <-w.returns:
			if !ok {
				w.returns = nil
				break
			}
			record(r)
		default:
			drained = true
		}
	}
	if w.closeE == nil && w.closes != nil {
		select {
		case e := <-w.closes:
			w.closeE = e
		default:
		}
	}

	for _, p := range pend {
		o := &j.msgs[p.n]
		select {
		case <-p.dc.Done():
		default:
			j.errs[p.n] = fmt.Errorf("egress/amqp: no confirm from the broker: %w: %w", fault.ErrUnknownOutcome, ctx.Err())
			continue
		}
		if rs := returned[o.id]; len(rs) > 0 {
			r := rs[0]
			returned[o.id] = rs[1:]
			j.errs[p.n] = fmt.Errorf("egress/amqp: exchange %q, routing key %q: %w: %d %s", o.exchange, o.key, ErrUnroutable, r.ReplyCode, r.ReplyText)
			continue
		}
		if p.dc.Acked() {
			continue
		}
		if w.ch.IsClosed() {
			e := w.closeE
			if e != nil && e.Code == amqp.NotFound && strings.Contains(e.Reason, "'"+o.exchange+"'") {
				w.s.forget(o.exchange)
				j.errs[p.n] = fault.Permanent(fmt.Errorf("egress/amqp: target exchange %q does not exist: %w", o.exchange, e))
				continue
			}
			if e != nil && e.Server && e.Recover {
				j.errs[p.n] = fmt.Errorf("egress/amqp: %w: %w: %w", ErrChannelLost, fault.ErrRejected, e)
			} else if e != nil {
				j.errs[p.n] = fmt.Errorf("egress/amqp: %w: %w", ErrChannelLost, e)
			} else {
				j.errs[p.n] = fmt.Errorf("egress/amqp: %w", ErrChannelLost)
			}
			continue
		}
		j.errs[p.n] = fmt.Errorf("egress/amqp: exchange %q: %w", o.exchange, ErrNacked)
	}
	if aborted || w.ch.IsClosed() {
		// Unresolved confirms (or returns) of this chunk must not be read as a later
		// chunk's: start the next one on a fresh channel.
		w.discard()
	}
}
