package kafka

import (
	"context"
	"fmt"
	"strings"
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
// retried. Run's goroutine is the ownership loop (owner.go); it owns one worker
// goroutine per owned partition and waits for them: when ctx ends, every worker stops
// (a batch already parked is still committed) and the leases are released.
func (s *Source) Run(ctx context.Context, h ingress.Handler) error {
	defer s.health.stop()
	if ctx.Err() != nil {
		return nil
	}
	if err := s.preflight(ctx); err != nil {
		return err
	}
	transport, err := s.cfg.Conn.NewTransport()
	if err != nil {
		return fault.Permanent(fmt.Errorf("%s: %w", s.Name(), err))
	}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(s.cfg.Conn.Addrs()...), Timeout: pollTimeout, Transport: transport}
	s.own(ctx, client, h)
	return nil
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

// maxBatchBytes bounds one batch by the bytes of its records (values and keys) as
// BatchSize bounds it by records: a batch is parked in one Redis call, and 90 records of
// 256 KiB (23 MiB per partition, written at once by every partition) outlasted the Redis
// client's write timeout, so the same batch was sent again and again. A record larger
// than this still goes, alone.
const maxBatchBytes = 4 << 20

// fetch blocks for one record, then collects more until BatchSize records,
// maxBatchBytes or BatchWait (on the clock). It returns what it has together with the
// error that stopped it early.
func (s *Source) fetch(ctx context.Context, r *kafka.Reader) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	msgs := append(s.batchSlice(), m)
	if s.cfg.BatchSize == 1 {
		return msgs, nil
	}
	bctx, cancel := windowContext(ctx, s.cfg.Clock, s.cfg.BatchWait)
	defer cancel()
	size := len(m.Value) + len(m.Key)
	for len(msgs) < s.cfg.BatchSize && size < maxBatchBytes {
		m, err := r.FetchMessage(bctx)
		if err != nil {
			if bctx.Err() != nil && ctx.Err() == nil {
				return msgs, nil // the batch window closed
			}
			return msgs, fmt.Errorf("fetch: %w", err)
		}
		msgs = append(msgs, m)
		size += len(m.Value) + len(m.Key)
	}
	return msgs, nil
}

// batchSlice is an empty slice for fetch's records: one released before, or a new one.
func (s *Source) batchSlice() []kafka.Message {
	if p, ok := s.batches.Get().(*[]kafka.Message); ok {
		return (*p)[:0]
	}
	return make([]kafka.Message, 0, min(s.cfg.BatchSize, 64))
}

// release gives fetch's slice msgs back once the records were converted (nothing holds
// it or its elements then), its elements cleared so that it keeps no payload alive.
func (s *Source) release(msgs []kafka.Message) {
	clear(msgs)
	msgs = msgs[:0]
	s.batches.Put(&msgs)
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
		// The values are copied once into one string and sliced: one allocation for
		// them all, not one per header (they live and die with the message together).
		n := 0
		for _, h := range m.Headers {
			n += len(h.Value)
		}
		var b strings.Builder
		b.Grow(n)
		for _, h := range m.Headers {
			b.Write(h.Value)
		}
		all := b.String()
		headers = make([]envelope.Header, len(m.Headers))
		for i, h := range m.Headers {
			headers[i] = envelope.Header{Key: h.Key, Value: all[:len(h.Value)]}
			all = all[len(h.Value):]
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
