// Package kafka is the Kafka delay source (import it as kafkain): a consumer-group
// reader (segmentio/kafka-go) for one route's delay topic that hands batches of parsed
// records to an ingress.Handler and commits offsets only after the handler succeeded.
//
// Batching. Run fetches one record (blocking), then keeps fetching until BatchSize
// records are in hand or BatchWait has passed since the first, converts every record
// with ingress.Parse and hands the batch to the handler.
//
// Acknowledgement. Every batch goes through ingress.Loop: offsets are committed
// synchronously (CommitInterval 0) after the handler returned nil, for the last record
// of each partition in the batch. When the handler fails, the loop backs off (20ms
// doubling up to 1s, ±20%, on Config.Clock, aborted by ctx) and hands the same items
// again; Run fetches nothing beyond a failed batch. Records of a batch that never
// succeeded stay uncommitted and are consumed again by whichever group member owns their
// partition next (after a restart or a rebalance). Parking is idempotent by id, so such
// replays never duplicate.
//
// Record → Item. Raw.Headers carry Kafka header values as Go strings (the bytes
// unchanged; a string value marks Kafka origin to egress), Raw.BaseTime is the record
// timestamp (x-delay counts from it), and the default id is "topic/partition/offset",
// stable across redeliveries.
//
// Reader settings (docs/CONTRACT.md §8): MinBytes 1 with MaxWait 250ms (a long poll: the
// broker answers as soon as a record arrives) and ReadBackoffMin/Max 1ms/5ms (kafka-go's
// defaults add 40–260ms of latency to a caught-up consumer), StartOffset FirstOffset for
// a new group, partition changes watched.
//
// Health and the watchdog (health.go, watchdog.go): the source reports its state
// (ingress.Health) from the reader's group events, its commits and a lag poll every
// Config.StallTimeout/5, and rebuilds the reader (close, NewReader) when it has been out
// of the group, or without progress while there is lag, for StallTimeout: kafka-go
// readers can stay stuck after rebalances. A reader whose position is past its
// partition's end (the topic was deleted and recreated under it) is rebuilt at once.
//
// Time: every wait (batch window, backoffs, watchdog) is on Config.Clock, and so is the
// receive time of each record. Network timeouts (commit, lag poll, preflight) bound I/O
// and are left to the network's own clock.
//
// Metrics: the source counts received records once per fetched batch (a batch handed
// again after a handler failure is not counted twice); the Handler (internal/app)
// counts invalid, parked and dead-lettered records.
package kafka

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Defaults for Config.
const (
	DefaultBatchSize      = 1000
	DefaultBatchWait      = 2 * time.Millisecond
	DefaultStallTimeout   = 15 * time.Second
	DefaultSessionTimeout = 10 * time.Second
)

const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
	// commitTimeout bounds one offset commit. It runs on a context detached from Run's, so
	// a batch the handler accepted just before shutdown is still committed.
	commitTimeout = 3 * time.Second
)

// Config is one source: where to consume and how. internal/app builds it from the
// bridge's configuration (kafka.*, the route's from.kafka.topic, limits.*, ingress.*).
// Zero values take the defaults.
type Config struct {
	// Conn reaches the brokers (brokers, TLS, SASL).
	Conn Conn
	// GroupID is the consumer group (kafka.group_id). Required.
	GroupID string
	// SessionTimeout is the group session timeout (kafka.session_timeout); the
	// rebalance timeout is half of it, the heartbeat a tenth. Default 10s.
	SessionTimeout time.Duration
	// Topic is the route's delay topic (from.kafka.topic). Required.
	Topic string
	// Rules are the route's parsing limits; Rules.Route names the route.
	Rules ingress.Rules
	// BatchSize is the largest batch handed to the handler; default 1000.
	BatchSize int
	// BatchWait is how long a batch stays open after its first record; default 2ms.
	BatchWait time.Duration
	// StallTimeout is how long the consumer may stay out of the group, or joined without
	// progress while it has lag, before the watchdog rebuilds it (ingress.stall_timeout);
	// default DefaultStallTimeout.
	StallTimeout time.Duration
	// Clock is every wait and the receive time; default clock.Real.
	Clock  clock.Clock
	Logger *slog.Logger // default slog.Default()
	// Observer counts records received (once per batch fetched, not per handler
	// attempt). Default observe.Nop.
	Observer observe.Observer
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = observe.Nop{}
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchWait <= 0 {
		c.BatchWait = DefaultBatchWait
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	return c
}

// Validate checks c after defaults; its errors are permanent.
func (c Config) Validate() error {
	switch {
	case c.Topic == "":
		return fault.Permanent(fmt.Errorf("ingress/kafka: route %q: from.kafka.topic is required", c.Rules.Route))
	case c.GroupID == "":
		return fault.Permanent(fmt.Errorf("ingress/kafka: kafka.group_id is required"))
	case c.BatchSize <= 0 || c.BatchWait <= 0 || c.StallTimeout <= 0 || c.SessionTimeout <= 0:
		return fault.Permanent(fmt.Errorf("ingress/kafka: route %q: batch size, batch wait, stall and session timeouts must be > 0", c.Rules.Route))
	}
	if c.Conn == nil {
		return fault.Permanent(fmt.Errorf("ingress/kafka: route %q: no Kafka connection (Conn)", c.Rules.Route))
	}
	if err := c.Conn.Validate(); err != nil {
		return fmt.Errorf("ingress/kafka: %w", err)
	}
	return nil
}

// Source consumes one route's delay topic. It implements ingress.Source.
type Source struct {
	cfg    Config
	dialer *kafka.Dialer
	log    *slog.Logger
	// maxBytes is the reader's fetch limit. It is not a record size limit: a broker
	// returns the first record batch whole even when it is larger (KIP-74), so an
	// oversized payload still arrives to be dead-lettered. It must stay small: kafka-go
	// gives a fetch response only a quarter of MaxWait beyond the broker's wait to
	// arrive, and a lagging consumer asking for 16 MiB made kfake miss that every time
	// (with MaxWait 5 ms) and re-fetch the same offset forever (bench: 1.4k msgs/s at
	// 16 MiB, 750k at 1 MiB).
	maxBytes int
	health   *tracker
}

var (
	_ ingress.Source         = (*Source)(nil)
	_ ingress.HealthReporter = (*Source)(nil)
)

// New returns a source for cfg (defaults filled, then validated: errors are permanent).
// It dials nothing: Run does.
func New(cfg Config) (*Source, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dialer, err := cfg.Conn.NewDialer()
	if err != nil {
		return nil, fmt.Errorf("ingress/kafka: %w", err)
	}
	s := &Source{cfg: cfg, dialer: dialer, maxBytes: 1 << 20}
	s.log = cfg.Logger.With("source", s.Name(), "route", cfg.Rules.Route)
	s.health = newTracker(cfg.Rules.Route, cfg.Topic, cfg.Observer, s.log, cfg.Clock, cfg.StallTimeout)
	rc := s.readerConfig()
	if err := rc.Validate(); err != nil {
		return nil, fault.Permanent(fmt.Errorf("ingress/kafka: route %q: %w", cfg.Rules.Route, err))
	}
	return s, nil
}

// Health returns the last state the source published (see package doc, Health).
func (s *Source) Health() ingress.Health { return s.health.snapshot() }

// GroupID is the consumer group the source joins.
func (s *Source) GroupID() string { return s.cfg.GroupID }

// Name is "kafka:<topic>".
func (s *Source) Name() string { return "kafka:" + s.cfg.Topic }

// readerMaxWait is how long the broker may hold a fetch that finds nothing new. With
// MinBytes 1 the broker answers as soon as a record arrives, so a longer wait adds no
// latency; it only spares the idle polls. At 5 ms each partition's reader polled about
// 270 times a second when caught up, and a response later than kafka-go's read deadline
// (MaxWait; the broker is asked to wait three quarters of it) made it close the
// connection and dial, list offsets and seek again: 19 % of the bridge's CPU at 1k msgs/s (docs/BENCHMARKS.md, issue 11). A
// reader being stopped (rebalance, Close) may wait for its fetch up to this long.
const readerMaxWait = 250 * time.Millisecond

func (s *Source) readerConfig() kafka.ReaderConfig {
	session := s.cfg.SessionTimeout
	return kafka.ReaderConfig{
		Brokers:               s.cfg.Conn.Addrs(),
		GroupID:               s.cfg.GroupID,
		Topic:                 s.cfg.Topic,
		Dialer:                s.dialer,
		QueueCapacity:         s.cfg.BatchSize,
		MinBytes:              1,
		MaxBytes:              s.maxBytes,
		MaxWait:               readerMaxWait,
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
		SessionTimeout:    session,
		RebalanceTimeout:  session / 2,
		HeartbeatInterval: session / 10,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			s.log.Debug("kafka-go: " + fmt.Sprintf(msg, args...))
		}),
	}
}
