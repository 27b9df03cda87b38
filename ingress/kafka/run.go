package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
)

// Run consumes until ctx is cancelled (then returns nil) or the brokers refuse us for
// good (authentication, certificates: a permanent error). Unreachable brokers are
// retried by the reader itself. Run owns two kinds of goroutine and waits for them: the
// watchdog, which polls the lag and asks for a rebuild when the reader is stuck (see
// Health), and the closing of a replaced reader.
func (s *Source) Run(ctx context.Context, h ingress.Handler) error {
	defer s.health.stop()
	if ctx.Err() != nil {
		return nil
	}
	if err := s.preflight(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup // the watchdog and readers being closed after a rebuild
	defer wg.Wait()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.watch(wctx)
	}()
	c := s.newConsumer(ctx)
	defer func() {
		s.health.retire()
		c.close(s.log)
	}()
	loop := ingress.NewLoop(h, ingress.LoopOptions{Clock: s.cfg.Clock, Logger: s.log, Busy: s.health.busy,
		Backoff: clock.BackoffPolicy{Initial: minBackoff, Max: maxBackoff}})
	fetchBackoff := clock.NewBackoff(s.cfg.Clock, clock.BackoffPolicy{Initial: minBackoff, Max: maxBackoff})
	failing := false // fetch errors are logged once per outage, at Warn, then at Debug
	for {
		if s.health.pendingRebuild() {
			old := c
			c = s.rebuild(ctx, old)
			wg.Add(1)
			go func() {
				defer wg.Done()
				old.close(s.log)
			}()
		}
		msgs, err := s.fetch(c.fctx, c.r)
		if ctx.Err() != nil {
			return nil // whatever was fetched is not committed and will be consumed again
		}
		failing = s.logFetch(err, c.fctx.Err() != nil, len(msgs) > 0, failing)
		if len(msgs) == 0 {
			if c.fctx.Err() != nil {
				continue // the watchdog interrupted the fetch: rebuild
			}
			if fetchBackoff.Wait(ctx) != nil {
				return nil
			}
			continue
		}
		fetchBackoff.Reset()
		r := c.r
		out, _ := loop.Deliver(ctx, ingress.Batch{Items: s.convert(msgs), Ack: func() error {
			s.commit(ctx, r, msgs) // a failed commit is logged, not fatal
			return nil
		}})
		if out != ingress.Acked || ctx.Err() != nil {
			return nil // a batch not handed over is not committed; it is consumed again
		}
	}
}

// logFetch logs a fetch error once per outage at Warn (then at Debug) and the recovery
// at Info; it returns whether fetching is failing now.
func (s *Source) logFetch(err error, interrupted, got, failing bool) bool {
	switch {
	case err != nil && !interrupted:
		if !failing {
			s.log.Warn("fetch from kafka failed; retrying until the brokers answer", "err", err)
		} else {
			s.log.Debug("fetch from kafka failed", "err", err)
		}
		return true
	case failing && err == nil && got:
		s.log.Info("fetching from kafka again")
		return false
	}
	return failing
}

// consumer is one kafka-go Reader with the context its fetches run under (cancelled by
// the watchdog to have it rebuilt).
type consumer struct {
	r      *kafka.Reader
	fctx   context.Context
	cancel context.CancelFunc
}

func (s *Source) newConsumer(ctx context.Context) *consumer {
	fctx, cancel := context.WithCancel(ctx)
	id := s.health.newReader(cancel)
	logger, errorLogger := s.health.hooks(id)
	rc := s.readerConfig()
	rc.Logger, rc.ErrorLogger = kafka.LoggerFunc(logger), kafka.LoggerFunc(errorLogger)
	return &consumer{r: kafka.NewReader(rc), fctx: fctx, cancel: cancel}
}

// rebuild replaces old with a new reader (the caller closes old). The records old
// fetched but did not commit are fetched again by whichever member owns their partition.
func (s *Source) rebuild(ctx context.Context, old *consumer) *consumer {
	old.cancel()
	reason := s.health.rebuilding()
	s.log.Info("kafka ingress watchdog: rebuilding the consumer", "reason", reason)
	c := s.newConsumer(ctx)
	s.health.publish() // not joined until the new reader is: not consuming meanwhile
	return c
}

func (c *consumer) close(log *slog.Logger) {
	c.cancel()
	if err := c.r.Close(); err != nil {
		log.Debug("close reader", "err", err)
	}
}

// preflight dials the brokers once so that a rejected login or an untrusted certificate
// ends Run with a permanent error instead of the reader retrying it forever.
func (s *Source) preflight(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, kafkaconn.DialTimeout)
	defer cancel()
	err := s.cfg.Conn.Ping(pctx)
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case fault.IsPermanent(err):
		return fmt.Errorf("%s: %w", s.Name(), err)
	default:
		s.log.Warn("kafka brokers not reachable yet; the reader keeps retrying", "err", err)
		return nil
	}
}

// fetch blocks for one record, then collects more until BatchSize or BatchWait (on the
// clock). It returns what it has together with the error that stopped it early.
func (s *Source) fetch(ctx context.Context, r *kafka.Reader) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	msgs := make([]kafka.Message, 1, min(s.cfg.BatchSize, 64))
	msgs[0] = m
	if s.cfg.BatchSize == 1 {
		return msgs, nil
	}
	bctx, cancel := windowContext(ctx, s.cfg.Clock, s.cfg.BatchWait)
	defer cancel()
	for len(msgs) < s.cfg.BatchSize {
		m, err := r.FetchMessage(bctx)
		if err != nil {
			if bctx.Err() != nil && ctx.Err() == nil {
				return msgs, nil // the batch window closed
			}
			return msgs, fmt.Errorf("fetch: %w", err)
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// windowContext returns a context that ends when d has passed on clk, or parent ends.
// Its goroutine belongs to the caller: it ends at the latest when cancel is called.
func windowContext(parent context.Context, clk clock.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	t := clk.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// convert parses records into items, once per batch: a batch handed again after a
// failure is the same items.
func (s *Source) convert(msgs []kafka.Message) []ingress.Item {
	s.cfg.Observer.Received(s.cfg.Rules.Route, len(msgs))
	now := s.cfg.Clock.Now()
	items := make([]ingress.Item, len(msgs))
	for i := range msgs {
		items[i] = ingress.Parse(s.raw(&msgs[i], now), s.cfg.Rules)
	}
	return items
}

func (s *Source) raw(m *kafka.Message, now time.Time) ingress.Raw {
	var headers []envelope.Header
	if len(m.Headers) > 0 {
		headers = make([]envelope.Header, len(m.Headers))
		for i, h := range m.Headers {
			headers[i] = envelope.Header{Key: h.Key, Value: string(h.Value)}
		}
	}
	var base time.Time
	if m.Time.UnixMilli() > 0 { // no timestamp (-1) or the epoch: count from receipt
		base = m.Time
	}
	return ingress.Raw{
		Broker:     envelope.BrokerKafka,
		Source:     m.Topic,
		Key:        m.Key,
		Payload:    m.Value,
		Headers:    headers,
		BaseTime:   base,
		ReceivedAt: now,
		DefaultID:  ingress.KafkaRecordID(m.Topic, m.Partition, m.Offset, m.Time, m.Key, m.Value, headers),
	}
}

// commit commits the last offset of every partition in msgs. A failed commit is logged,
// not fatal: the records are consumed again later and parking them is idempotent.
func (s *Source) commit(ctx context.Context, r *kafka.Reader, msgs []kafka.Message) {
	last := map[int]int{} // partition -> index of its last record
	for i := range msgs {
		last[msgs[i].Partition] = i
	}
	commits := make([]kafka.Message, 0, len(last))
	for _, i := range last {
		commits = append(commits, msgs[i])
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if err := r.CommitMessages(cctx, commits...); err != nil {
		first, state := s.health.commitFailed(err)
		lvl := slog.LevelWarn
		if !first {
			lvl = slog.LevelDebug // one warning per streak of failed commits
		}
		s.log.Log(ctx, lvl, "offset commit failed; the records will be consumed again (parking is idempotent); the watchdog rebuilds the consumer if commits keep failing",
			"records", len(msgs), "err", err, "ingress_state", state)
		return
	}
	if s.health.committed() {
		s.log.Info("offset commits succeed again")
	}
}
