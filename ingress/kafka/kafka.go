// Package kafka is the Kafka delay source (import it as kafkain): a consumer-group
// reader (segmentio/kafka-go) for one route's delay topic that hands batches of parsed
// records to an ingress.Handler and commits offsets only after the handler succeeded.
//
// Batching. Run fetches one record (blocking), then keeps fetching until BatchSize
// records are in hand or BatchWait has passed since the first, converts every record
// with ingress.Parse and hands the batch to the handler.
//
// Acknowledgement. Offsets are committed synchronously (CommitInterval 0) after the
// handler returned nil, for the last record of each partition in the batch. When the
// handler fails, Run backs off (exponentially, 20ms doubling up to 1s, aborted by ctx)
// and hands the same batch again; it fetches nothing beyond a failed batch. Records of a
// batch that never succeeded stay uncommitted and are consumed again by whichever group
// member owns their partition next (after a restart or a rebalance). Parking is
// idempotent by id, so such replays never duplicate.
//
// Record → Item. Raw.Headers carry Kafka header values as Go strings (the bytes
// unchanged; a string value marks Kafka origin to egress), Raw.BaseTime is the record
// timestamp (x-delay counts from it), and the default id is "topic/partition/offset",
// stable across redeliveries.
//
// Reader settings (docs/CONTRACT.md §8): MaxWait 5ms and ReadBackoffMin/Max 1ms/5ms (kafka-go's
// defaults add 40–260ms of latency to a caught-up consumer), StartOffset FirstOffset for
// a new group, partition changes watched.
//
// Health and the watchdog (health.go, watchdog.go): the source reports its state
// (ingress.Health) from the reader's group events, its commits and a lag poll every
// Options.StallTimeout/5, and rebuilds the reader (close, NewReader) when it has been out
// of the group, or without progress while there is lag, for StallTimeout: kafka-go
// readers can stay stuck after rebalances. A reader whose position is past its
// partition's end (the topic was deleted and recreated under it) is rebuilt at once.
//
// Metrics: the source counts received records once per fetched batch (a batch handed
// again after a handler failure is not counted twice); the Handler (internal/app)
// counts invalid, parked and dead-lettered records.
package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Defaults for Options.
const (
	DefaultBatchSize    = 1000
	DefaultBatchWait    = 2 * time.Millisecond
	DefaultStallTimeout = 15 * time.Second
)

const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
	// commitTimeout bounds one offset commit. It runs on a context detached from Run's, so
	// a batch the handler accepted just before shutdown is still committed.
	commitTimeout = 3 * time.Second
)

// Options tunes a Source. Zero values take the defaults.
type Options struct {
	Logger *slog.Logger // default slog.Default()
	// Observer counts records received (once per batch fetched, not per handler
	// attempt). Default observe.Nop.
	Observer observe.Observer
	// BatchSize is the largest batch handed to the handler; default 1000.
	BatchSize int
	// BatchWait is how long a batch stays open after its first record; default 2ms.
	BatchWait time.Duration
	// Now is the receive clock; default time.Now.
	Now func() time.Time
	// Clock drives the watchdog (lag polls and stall timing); default clock.Real.
	Clock clock.Clock
	// StallTimeout is how long the consumer may stay out of the group, or joined without
	// progress while it has lag, before the watchdog rebuilds it (ingress.stall_timeout);
	// default DefaultStallTimeout.
	StallTimeout time.Duration
}

// Source consumes one route's delay topic. It implements ingress.Source.
type Source struct {
	cfg    config.KafkaConfig
	topic  string
	rules  ingress.Rules
	dialer *kafka.Dialer
	opts   Options
	log    *slog.Logger
	// maxBytes is the reader's fetch limit. It is not a record size limit: a broker
	// returns the first record batch whole even when it is larger (KIP-74), so an
	// oversized payload still arrives to be dead-lettered. It must stay small: kafka-go
	// gives a fetch response only MaxWait (5 ms) to arrive, and a lagging consumer asking
	// for 16 MiB made kfake miss that every time and re-fetch the same offset forever
	// (bench: 1.4k msgs/s at 16 MiB, 750k at 1 MiB).
	maxBytes int
	health   *tracker
}

var (
	_ ingress.Source         = (*Source)(nil)
	_ ingress.HealthReporter = (*Source)(nil)
)

// New returns a source for route's `from.kafka.topic`, consuming in group cfg.GroupID.
// It checks the configuration (errors wrap ingress.ErrPermanent) and dials nothing: Run
// does.
func New(cfg config.KafkaConfig, route config.Route, limits config.LimitsConfig, opts Options) (*Source, error) {
	if route.From.Kafka == nil || route.From.Kafka.Topic == "" {
		return nil, fmt.Errorf("ingress/kafka: route %q: from.kafka.topic is required: %w", route.Name, ingress.ErrPermanent)
	}
	if cfg.GroupID == "" {
		return nil, fmt.Errorf("ingress/kafka: kafka.group_id is required: %w", ingress.ErrPermanent)
	}
	dialer, err := kafkaconn.Dialer(cfg)
	if err != nil {
		return nil, fmt.Errorf("ingress/kafka: %w: %w", ingress.ErrPermanent, err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Observer == nil {
		opts.Observer = observe.Nop{}
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.BatchWait <= 0 {
		opts.BatchWait = DefaultBatchWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	topic := route.From.Kafka.Topic
	s := &Source{
		cfg:    cfg,
		topic:  topic,
		dialer: dialer,
		opts:   opts,
		rules: ingress.Rules{
			Route:           route.Name,
			MaxDelay:        limits.MaxDelay,
			MaxPayloadBytes: limits.MaxPayloadBytes,
			AllowTargets:    route.AllowTargets,
		},
		maxBytes: 1 << 20,
	}
	s.log = opts.Logger.With("source", s.Name(), "route", route.Name)
	s.health = newTracker(route.Name, topic, opts.Observer, s.log, opts.Clock, opts.StallTimeout)
	rc := s.readerConfig()
	if err := rc.Validate(); err != nil {
		return nil, fmt.Errorf("ingress/kafka: route %q: %w: %w", route.Name, ingress.ErrPermanent, err)
	}
	return s, nil
}

// Health returns the last state the source published (see package doc, Health).
func (s *Source) Health() ingress.Health { return s.health.snapshot() }

// GroupID is the consumer group the source joins.
func (s *Source) GroupID() string { return s.cfg.GroupID }

// Name is "kafka:<topic>".
func (s *Source) Name() string { return "kafka:" + s.topic }

func (s *Source) readerConfig() kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers:               s.cfg.Brokers,
		GroupID:               s.cfg.GroupID,
		Topic:                 s.topic,
		Dialer:                s.dialer,
		QueueCapacity:         s.opts.BatchSize,
		MinBytes:              1,
		MaxBytes:              s.maxBytes,
		MaxWait:               5 * time.Millisecond,
		ReadBackoffMin:        time.Millisecond,
		ReadBackoffMax:        5 * time.Millisecond,
		CommitInterval:        0, // synchronous commits, issued after the handler succeeded
		StartOffset:           kafka.FirstOffset,
		WatchPartitionChanges: true,
		JoinGroupBackoff:      time.Second,
		// kafka-go's 30 s defaults leave a killed bridge's partitions unread for 30 s.
		// The rebalance timeout is half the session timeout and the heartbeat a tenth:
		// a coordinator that lets a rebalance run as long as the session can expire the
		// session of a live member waiting in JoinGroup (kfake does; the member's join
		// then hangs until kafka-go's own deadline, session + 5 s, and it joins anew,
		// which restarts the rebalance), and killed members that never rejoin are
		// dropped when the rebalance timeout ends. A tenth of the session as heartbeat
		// lets members notice a rebalance, and rejoin, well within it.
		SessionTimeout:    s.sessionTimeout(),
		RebalanceTimeout:  s.sessionTimeout() / 2,
		HeartbeatInterval: s.sessionTimeout() / 10,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			s.log.Debug("kafka-go: " + fmt.Sprintf(msg, args...))
		}),
	}
}

// Run consumes until ctx is cancelled (then returns nil) or the brokers refuse us for
// good (authentication, certificates: an error wrapping ingress.ErrPermanent).
// Unreachable brokers are retried by the reader itself. A watchdog goroutine, owned by
// Run, polls the lag and rebuilds the reader when it is stuck (see Health).
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
	backoff := minBackoff
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
		if err != nil && c.fctx.Err() == nil {
			if !failing {
				s.log.Warn("fetch from kafka failed; retrying until the brokers answer", "err", err)
				failing = true
			} else {
				s.log.Debug("fetch from kafka failed", "err", err)
			}
		}
		if len(msgs) == 0 {
			if c.fctx.Err() != nil {
				continue // the watchdog interrupted the fetch: rebuild
			}
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		if failing && err == nil {
			s.log.Info("fetching from kafka again")
			failing = false
		}
		backoff = minBackoff
		if !s.handle(ctx, h, msgs) {
			return nil // nothing of this batch is committed; it is consumed again
		}
		s.commit(ctx, c.r, msgs)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// handle hands a batch to h until it succeeds (true) or ctx ends (false).
func (s *Source) handle(ctx context.Context, h ingress.Handler, msgs []kafka.Message) bool {
	items := s.convert(msgs)
	s.health.handlerBegin()
	defer s.health.handlerEnd()
	backoff := minBackoff
	for attempt := 1; ; attempt++ {
		returned, err := ingress.Call(ctx, h, items)
		if returned && err == nil {
			return true // parked: committed by the caller even if shutdown began meanwhile
		}
		if ctx.Err() != nil {
			return false
		}
		lvl := slog.LevelWarn
		if attempt > 1 {
			lvl = slog.LevelDebug // one warning per failing batch, not one per retry
		}
		s.log.Log(ctx, lvl, "handler failed; retrying the same batch", "records", len(items), "attempt", attempt, "err", err)
		if !sleep(ctx, jitter(backoff)) {
			return false
		}
		backoff = min(2*backoff, maxBackoff)
	}
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
	err := kafkaconn.Ping(pctx, s.cfg)
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case kafkaconn.IsPermanent(err):
		return fmt.Errorf("%s: %w: %w", s.Name(), ingress.ErrPermanent, err)
	default:
		s.log.Warn("kafka brokers not reachable yet; the reader keeps retrying", "err", err)
		return nil
	}
}

// fetch blocks for one record, then collects more until BatchSize or BatchWait. It
// returns what it has together with the error that stopped it early.
func (s *Source) fetch(ctx context.Context, r *kafka.Reader) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	msgs := make([]kafka.Message, 1, min(s.opts.BatchSize, 64))
	msgs[0] = m
	if s.opts.BatchSize == 1 {
		return msgs, nil
	}
	bctx, cancel := context.WithTimeout(ctx, s.opts.BatchWait)
	defer cancel()
	for len(msgs) < s.opts.BatchSize {
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

// convert parses records into items (done once per batch: a retried batch is the same
// items).
func (s *Source) convert(msgs []kafka.Message) []ingress.Item {
	s.opts.Observer.Received(s.rules.Route, len(msgs))
	now := s.opts.Now()
	items := make([]ingress.Item, len(msgs))
	for i := range msgs {
		items[i] = ingress.Parse(s.raw(&msgs[i], now), s.rules)
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

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter spreads d by ±20% so that many sources do not retry in lockstep.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}

func (s *Source) sessionTimeout() time.Duration {
	if s.cfg.SessionTimeout > 0 {
		return s.cfg.SessionTimeout
	}
	return 10 * time.Second
}
