package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

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
	pend := w.publishAll(ctx, j)
	returned, aborted := w.awaitConfirms(ctx, pend)
	for _, p := range pend {
		j.errs[p.n] = w.outcome(ctx, &j.msgs[p.n], p.dc, returned)
	}
	if aborted || w.ch.IsClosed() {
		// Unresolved confirms (or returns) of this chunk must not be read as a later
		// chunk's: start the next one on a fresh channel.
		w.discard()
	}
}

// publishAll sends the chunk's messages in order and returns the confirmations to
// wait for. Once a publish fails, it and every later message of the chunk fail with
// that error (nothing more is sent on a broken channel).
func (w *worker) publishAll(ctx context.Context, j *job) []pending {
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
	return pend
}

// returns are the basic.returns of a chunk by x-message-id, in arrival order.
type returns map[string][]amqp.Return

func (r returns) record(ret amqp.Return) {
	id, _ := ret.Headers[envelope.HeaderMessageID].(string)
	r[id] = append(r[id], ret)
}

// take removes and returns the first return for id.
func (r returns) take(id string) (amqp.Return, bool) {
	rs := r[id]
	if len(rs) == 0 {
		return amqp.Return{}, false
	}
	r[id] = rs[1:]
	return rs[0], true
}

// awaitConfirms waits until every confirmation in pend is resolved or ctx ends
// (aborted), collecting the channel's returns meanwhile, then drains the returns
// already buffered and notes how the channel closed, if it did.
func (w *worker) awaitConfirms(ctx context.Context, pend []pending) (returned returns, aborted bool) {
	returned = returns{}
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
				returned.record(r)
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
			returned.record(r)
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
	return returned, aborted
}

// outcome is the result of one sent message: nil when acked without a return, else
// unknown outcome (no confirm yet), unroutable (returned), a missing exchange
// (permanent), the channel lost, or nacked.
func (w *worker) outcome(ctx context.Context, o *outgoing, dc *amqp.DeferredConfirmation, returned returns) error {
	select {
	case <-dc.Done():
	default:
		return fmt.Errorf("egress/amqp: no confirm from the broker: %w: %w", fault.ErrUnknownOutcome, ctx.Err())
	}
	if r, ok := returned.take(o.id); ok {
		return fmt.Errorf("egress/amqp: exchange %q, routing key %q: %w: %d %s", o.exchange, o.key, ErrUnroutable, r.ReplyCode, r.ReplyText)
	}
	if dc.Acked() {
		return nil
	}
	if !w.ch.IsClosed() {
		return fmt.Errorf("egress/amqp: exchange %q: %w", o.exchange, ErrNacked)
	}
	switch e := w.closeE; {
	case e != nil && e.Code == amqp.NotFound && strings.Contains(e.Reason, "'"+o.exchange+"'"):
		w.s.forget(o.exchange)
		return fault.Permanent(fmt.Errorf("egress/amqp: target exchange %q does not exist: %w", o.exchange, e))
	case e != nil && e.Server && e.Recover:
		return fmt.Errorf("egress/amqp: %w: %w: %w", ErrChannelLost, fault.ErrRejected, e)
	case e != nil:
		return fmt.Errorf("egress/amqp: %w: %w", ErrChannelLost, e)
	}
	return fmt.Errorf("egress/amqp: %w", ErrChannelLost)
}
