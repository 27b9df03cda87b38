package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/membership"
)

// errFenced: the partition's lease is no longer held with our token (it expired or
// another instance took it). The worker stops; nothing more is committed or parked.
var errFenced = errors.New("ingress/kafka: partition lease not held (fenced)")

// partition is one owned partition: its lease and the worker reading it.
type partition struct {
	id    int
	lease membership.Held
	// leaseUntil is when the lease surely ends (mono ms): the start of the last
	// successful renewal + LeaseTTL.
	leaseUntil atomic.Int64
	fenced     atomic.Bool
	// next is the offset of the next record the reader hands out (-1 unknown: reading
	// from the first offset and nothing fetched yet).
	next   atomic.Int64
	cancel context.CancelFunc // stops the worker
	done   chan struct{}

	mu        sync.Mutex
	interrupt context.CancelFunc // ends the current reader's fetch
	why       string             // why it was interrupted (reset or replacement)
}

// reset asks the worker to replace its reader (reading from resetTo: the first offset
// for an offset out of range, the position it had for a stalled reader).
func (p *partition) reset(why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.why == "" {
		p.why = why
	}
	if p.interrupt != nil {
		p.interrupt()
	}
}

func (p *partition) takeReset() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	why := p.why
	p.why = ""
	return why
}

// leaseValid reports whether p's lease is surely still ours.
func (s *Source) leaseValid(p *partition) bool {
	return !p.fenced.Load() && s.mono() < p.leaseUntil.Load()
}

// work reads partition p until ctx ends or the lease is lost: it starts at the group's
// committed offset (the first offset when none), and starts over with a new reader on
// a reset.
func (s *Source) work(ctx context.Context, p *partition, client *kafka.Client, h ingress.Handler) {
	defer close(p.done)
	log := s.log.With("partition", p.id)
	bo := clock.NewBackoff(s.cfg.Clock, clock.BackoffPolicy{Initial: minBackoff, Max: maxBackoff})
	from := int64(fromCommitted)
	for ctx.Err() == nil && s.leaseValid(p) {
		start := from
		if start == fromCommitted || start == afterOutOfRange {
			var err error
			if start, err = s.startOffset(ctx, client, p.id, start == afterOutOfRange); err != nil {
				if ctx.Err() == nil {
					s.health.readFailed(p.id, err)
					log.Debug("fetch the committed offset; retrying", "err", err)
				}
				_ = bo.Wait(ctx)
				continue
			}
		}
		bo.Reset()
		s.health.started(p.id, start)
		var err error
		from, err = s.read(ctx, p, client, h, start, log)
		if err != nil {
			return // fenced, or ctx ended
		}
	}
}

// Where work starts a reader, besides an offset (-1: the partition's first offset).
const (
	fromCommitted   = -2 // the group's committed offset (none: the first offset)
	afterOutOfRange = -3 // the committed offset if within the partition, else the first
)

// startOffset is the group's committed offset of partition (-1: none, read from the
// first offset). After an offset out of range, a committed offset outside the
// partition's [first, end] (the topic was recreated after it was committed) gives -1
// too: the broker keeps committed offsets through an unclean leader election that cuts
// the end back, and drops them with a deleted topic, so the committed offset is where
// to resume when it is valid, and the new topic's first offset when it is not.
func (s *Source) startOffset(ctx context.Context, client *kafka.Client, partition int, outOfRange bool) (int64, error) {
	c, err := s.committedOffset(ctx, client, partition)
	if err != nil || !outOfRange || c < 0 {
		return c, err
	}
	offs, err := s.pollTopic(ctx, client)
	if err != nil {
		return 0, err
	}
	if o, ok := offs[partition]; !ok || c < o.first || c > o.end {
		return -1, nil
	}
	return c, nil
}

// read reads p with one reader from start (-1: the first offset) until the reader must
// be replaced (it returns where the next one starts) or the worker must stop (err).
func (s *Source) read(ctx context.Context, p *partition, client *kafka.Client, h ingress.Handler, start int64, log *slog.Logger) (int64, error) {
	r := kafka.NewReader(s.readerConfig(p.id))
	defer func() {
		if err := r.Close(); err != nil {
			log.Debug("close reader", "err", err)
		}
	}()
	off := start
	if off < 0 {
		off = kafka.FirstOffset
	}
	if err := r.SetOffset(off); err != nil {
		return start, nil // not reached for a new reader; start over
	}
	p.next.Store(start)
	rctx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	p.mu.Lock()
	p.interrupt = interrupt
	p.mu.Unlock()
	loop := ingress.NewLoop(h, ingress.LoopOptions{Clock: s.cfg.Clock, Logger: log,
		Busy:    func(running bool) { s.health.busy(p.id, running) },
		Backoff: clock.BackoffPolicy{Initial: minBackoff, Max: maxBackoff}})
	bo := clock.NewBackoff(s.cfg.Clock, clock.BackoffPolicy{Initial: minBackoff, Max: maxBackoff})
	failing := false
	for {
		msgs, err := s.fetch(rctx, r)
		switch {
		case ctx.Err() != nil:
			return 0, ctx.Err() // what was fetched is not committed: the next owner reads it again
		case rctx.Err() != nil:
			why := p.takeReset()
			s.health.reset(p.id, why)
			log.Info("kafka ingress: replacing the partition's reader", "reason", why)
			return s.resetTo(p, why), nil
		case errors.Is(err, kafka.OffsetOutOfRange) && len(msgs) == 0:
			why := fmt.Sprintf("offset %d out of range: the topic was deleted and recreated or truncated, or retention removed records before they were read; reading from the committed offset if within the partition, else from its first offset", p.next.Load())
			s.health.reset(p.id, why)
			log.Info("kafka ingress: resetting the partition's reader", "reason", why)
			return afterOutOfRange, nil
		}
		failing = s.logFetch(err, len(msgs) > 0, failing, log)
		if len(msgs) == 0 {
			s.health.readFailed(p.id, err)
			if bo.Wait(ctx) != nil {
				return 0, ctx.Err()
			}
			continue
		}
		bo.Reset()
		s.health.readOK(p.id)
		next := msgs[len(msgs)-1].Offset + 1
		p.next.Store(next)
		if !s.leaseValid(p) {
			log.Warn("partition lease lost; stopped reading it (the new owner resumes from the committed offset)")
			return 0, errFenced
		}
		items := s.convert(msgs)
		s.release(msgs)
		out, err := loop.Deliver(ctx, ingress.Batch{Items: items,
			Ack: func() error { return s.commit(ctx, p, client, next, log) },
			// A fenced owner parks nothing more: a failed batch is not handed again.
			BeforeRetry: func() error {
				if !s.leaseValid(p) {
					return errFenced
				}
				return nil
			}})
		switch {
		case errors.Is(err, errFenced):
			log.Warn("partition lease lost; nothing committed, stopped reading it (the new owner resumes from the committed offset and the idempotent park suppresses the replay)")
			return 0, errFenced
		case out != ingress.Acked:
			return 0, context.Canceled // ctx ended: a batch not handed over is read again by the next owner
		}
	}
}

// resetTo is where the next reader starts after a reset: see startOffset after an
// offset out of range, the current position after a stall.
func (s *Source) resetTo(p *partition, why string) int64 {
	if strings.HasPrefix(why, resetOutOfRange) {
		return afterOutOfRange
	}
	if n := p.next.Load(); n >= 0 {
		return n
	}
	return fromCommitted
}

// resetOutOfRange starts the reason of a reset for a read position beyond the end.
const resetOutOfRange = "read position beyond the end"

// logFetch logs a fetch error once per outage at Warn (then at Debug) and the recovery
// at Info; it returns whether fetching is failing now.
func (s *Source) logFetch(err error, got, failing bool, log *slog.Logger) bool {
	switch {
	case err != nil && !got:
		if !failing {
			log.Warn("fetch from kafka failed; retrying until the brokers answer", "err", err)
		} else {
			log.Debug("fetch from kafka failed", "err", err)
		}
		return true
	case failing && got:
		log.Info("fetching from kafka again")
		return false
	}
	return failing
}

// commit commits next (the offset after the batch's last record) for p, only while p's
// lease is still held: the lease is renewed with its fencing token first, and a lease
// found taken fences the partition (errFenced: nothing committed, the worker stops). A
// failed commit or renewal is logged, not fatal: the records are read again by the next
// owner and parking them is idempotent.
func (s *Source) commit(ctx context.Context, p *partition, client *kafka.Client, next int64, log *slog.Logger) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if !s.leaseValid(p) {
		return errFenced
	}
	start := s.mono()
	held, err := s.cfg.Membership.Renew(cctx, s.holder, []membership.Held{p.lease}, s.cfg.LeaseTTL)
	switch {
	case err != nil:
		log.Warn("renew the partition lease before committing failed; offset not committed (the records are read again after a failover; parking is idempotent)", "err", err)
		return nil
	case !held[0]:
		p.fenced.Store(true)
		p.leaseUntil.Store(0)
		return errFenced
	}
	if until := start + s.cfg.LeaseTTL.Milliseconds(); until > p.leaseUntil.Load() {
		p.leaseUntil.Store(until)
	}
	if s.beforeCommit != nil {
		s.beforeCommit(p.id)
	}
	if !s.leaseValid(p) {
		return errFenced
	}
	if err := s.commitOffset(cctx, client, p.id, next); err != nil {
		lvl := slog.LevelWarn
		if !s.health.commitFailed(p.id, err) {
			lvl = slog.LevelDebug // one warning per streak of failed commits
		}
		log.Log(ctx, lvl, "offset commit failed; the records are read again after a failover (parking is idempotent)",
			"offset", next, "err", err)
		return nil
	}
	if s.health.committed(p.id, next) {
		log.Info("offset commits succeed again")
	}
	return nil
}

// commitTimeout bounds one lease check and offset commit. It runs on a context detached
// from Run's, so a batch the handler accepted just before shutdown is still committed.
const commitTimeout = 3 * time.Second
