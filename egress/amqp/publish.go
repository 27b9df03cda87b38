package amqp

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

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
	submitted := s.submit(ctx, jobs)
	for k, j := range jobs {
		err := s.await(ctx, j, k < submitted)
		for n, o := range j.msgs {
			if err != nil {
				errs[o.idx] = err
			} else {
				errs[o.idx] = j.errs[n]
			}
		}
	}
	return errs
}

// submit hands jobs to the publisher pool in order until ctx ends or the sink closes;
// it returns how many were handed over.
func (s *Sink) submit(ctx context.Context, jobs []*job) int {
	for k, j := range jobs {
		select {
		case s.jobs <- j:
		case <-ctx.Done():
			return k
		case <-s.ctx.Done():
			return k
		}
	}
	return len(jobs)
}

// await waits for a job's outcome. It returns nil when the publisher finished it (the
// results are in j.errs), else the error of every message in it: ctx's or ErrClosed
// for a job never handed over, an unknown outcome for one handed over and unanswered.
func (s *Sink) await(ctx context.Context, j *job, submitted bool) error {
	if !submitted {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrClosed
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		select {
		case <-j.done:
		default:
			// Handed to a publisher: some of it may be on the wire.
			return fmt.Errorf("egress/amqp: no confirm from the broker: %w: %w", fault.ErrUnknownOutcome, ctx.Err())
		}
	case <-s.ctx.Done():
		// Closed while a publisher is stuck (a socket write the broker does not read).
		if !s.waitDone(j.done) {
			return fmt.Errorf("%w: %w", ErrClosed, fault.ErrUnknownOutcome)
		}
	}
	return nil
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
	table, err := s.headers(env, attempt)
	if err != nil {
		return o, fault.Permanent(fmt.Errorf("egress/amqp: message %q: headers: %w", env.ID, err))
	}
	o.pub = s.publishing(env, table)
	return o, nil
}

// headers is the outgoing header table: egress.OutgoingHeaders with attempt, x-delay
// as the plugin writes it, and on a dead-letter sink x-delay-dead-reason.
func (s *Sink) headers(env *envelope.Envelope, attempt int32) (amqp.Table, error) {
	if s.plain {
		return Table(env.Headers)
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
	return Table(hs)
}

// publishing carries body and properties: an AMQP-origin message's own properties
// (user_id only when it is the bridge's own user), else persistent with message_id =
// the bridge's id.
func (s *Sink) publishing(env *envelope.Envelope, headers amqp.Table) amqp.Publishing {
	pub := amqp.Publishing{Headers: headers, Body: env.Payload}
	p := env.AMQP
	if p == nil {
		pub.DeliveryMode = amqp.Persistent
		pub.MessageId = env.ID
		return pub
	}
	pub.ContentType = p.ContentType
	pub.ContentEncoding = p.ContentEncoding
	pub.DeliveryMode = p.DeliveryMode
	pub.Priority = p.Priority
	pub.CorrelationId = p.CorrelationID
	pub.ReplyTo = p.ReplyTo
	pub.Expiration = p.Expiration
	pub.MessageId = p.MessageID
	pub.Timestamp = p.Timestamp
	pub.Type = p.Type
	pub.AppId = p.AppID
	if p.UserID != "" && p.UserID == s.conn.Username() {
		pub.UserId = p.UserID
	}
	return pub
}
