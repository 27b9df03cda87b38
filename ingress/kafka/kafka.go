// Package kafka is the Kafka delay source (import it as kafkain): one route's delay
// topic, its partitions owned like the scheduler's shards and read by kafka-go
// partition readers, batches of parsed records handed to an ingress.Handler, offsets
// committed to the consumer group only after the handler succeeded.
//
// Ownership (owner.go). No consumer group membership: the bridge's instances split the
// topic's partitions themselves, the way Flink's and Spark's Kafka sources do. Every
// LeaseTTL/3 the source heartbeats its instance into the members set, reads the live
// members and the topic's partitions (metadata: partitions added later are picked up),
// renews the leases it holds, computes the partitions this instance should own by
// rendezvous hashing with bounded loads over the live members (membership.OwnersOf,
// salted with route and topic), stops and releases the ones it should no longer own
// and acquires the ones it should: one lease per partition, with a fencing token
// (membership.PartitionLease keys). A member killed without releasing is noticed when
// its heartbeat ages out and its leases expire: its partitions are read again within
// about the lease TTL.
//
// Reading (partition.go). The owner of a partition fetches the group's committed offset
// (OffsetFetch; the first offset when there is none) and reads from there with a
// kafka-go Reader for that one partition (no GroupID). Batching: one record (blocking),
// then more until BatchSize records or BatchWait has passed since the first. Every batch
// goes through ingress.Loop: the handler parks it; then the lease is renewed with its
// fencing token and, only if it is still held, the next offset is committed to the
// group (OffsetCommit with generation -1, as any client without group membership does),
// so `kafka-consumer-groups --describe` shows the group's lag. A fenced owner (lease
// expired or taken) commits nothing and parks nothing more for that partition; the new
// owner resumes from the committed offset and replays what was parked but not
// committed, which the idempotent park suppresses (the default id is stable). When the
// handler fails, the loop backs off (20ms doubling up to 1s, ±20%, on Config.Clock) and
// hands the same items again; nothing beyond a failed batch is fetched.
//
// An offset out of range (the topic was deleted and recreated, or truncated; or
// retention removed records before they were read) is reported, logged at info and
// counted, and the partition's reader resets to the partition's first offset. The
// reader's read position beyond the partition's end offset (kafka-go would wait there
// silently) is detected by the source's own offset poll and handled the same way.
//
// Record → Item. Raw.Headers carry Kafka header values as Go strings (the bytes
// unchanged; a string value marks Kafka origin to egress), Raw.BaseTime is the record
// timestamp (x-delay counts from it), and the default id is
// ingress.KafkaRecordID (topic/partition/offset/hash), stable across redeliveries.
//
// Reader settings (docs/CONTRACT.md §8): MinBytes Config.FetchMinBytes, 1 by default, with
// MaxWait 250ms (a long poll: the broker answers as soon as a record arrives, or once
// FetchMinBytes are there) and ReadBackoffMin/Max 1ms/5ms.
//
// Health (health.go): a state per owned partition (owned, fetching, lagging,
// unreachable) from the owner's own readers, commits, leases and offset polls — no log
// text, no reflection — summed up into the route's ingress.Health. A partition lagging
// without progress (outside the handler) for StallTimeout gets a new reader.
//
// Time: every wait (ownership rounds, batch window, backoffs) is on Config.Clock, and so
// is the receive time of each record. Network timeouts bound I/O and are left to the
// network's own clock.
//
// Metrics: the source counts received records once per fetched batch (a batch handed
// again after a handler failure is not counted twice); the Handler (app)
// counts invalid, parked and dead-lettered records.
package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/membership"
)

// Defaults for Config.
const (
	DefaultBatchSize    = 1000
	DefaultBatchWait    = 10 * time.Millisecond
	DefaultStallTimeout = 15 * time.Second
	DefaultLeaseTTL     = 3 * time.Second
)

// MaxFetchBytes is the readers' fetch limit (MaxBytes; Source.maxBytes says why it is
// small) and so the largest Config.FetchMinBytes.
const MaxFetchBytes = 1 << 20

const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// Config is one source: where to consume and how. app builds it from the
// bridge's configuration (kafka.*, the route's from.kafka.topic, limits.*, ingress.*).
// Zero values take the defaults.
type Config struct {
	// Conn reaches the brokers (brokers, TLS, SASL).
	Conn Conn
	// GroupID is the consumer group (kafka.group_id) the offsets are committed to, for
	// progress and monitoring; the source never joins it. Required.
	GroupID string
	// Membership is where the partitions' owners are decided: the live members and
	// the partition leases (membership.Redis in the bridge). Required.
	Membership Membership
	// Instance is this bridge instance's member name (the scheduler heartbeats the same
	// name). Required; the leases are held as Instance#<random incarnation>.
	Instance string
	// LeaseTTL is the partition leases' TTL and the age after which a member whose
	// heartbeat stopped is no longer live (scheduler.lease_ttl); default 3s.
	LeaseTTL time.Duration
	// Admission, shared with the scheduler and the other sources of the process, holds
	// a process that restarts under the name of an incarnation that died without
	// leaving back from heartbeating and taking partitions for a while
	// (membership.Admission); nil: it takes its share at once.
	Admission *membership.Admission
	// Topic is the route's delay topic (from.kafka.topic). Required.
	Topic string
	// Rules are the route's parsing limits; Rules.Route names the route.
	Rules ingress.Rules
	// BatchSize is the largest batch handed to the handler; default 1000.
	BatchSize int
	// BatchWait is how long a batch stays open after its first record; default 10ms.
	// A batch of a partition's records is one park script call (their default ids put
	// them in one shard), whose fixed cost in Redis is several records' own: at 20k
	// msgs/s over 6 partitions 2 ms gave about 39 records per call, 10 ms about 65
	// (docs/BENCHMARKS.md "Calls per message"). A record waits at most this long before it is parked, which
	// only a delay shorter than that can see.
	BatchWait time.Duration
	// FetchMinBytes is the readers' MinBytes, Kafka's fetch.min.bytes
	// (ingress.kafka_fetch_min_bytes): the broker answers a fetch once this much is
	// there or after readerMaxWait; default 1 (as soon as a record arrives), at most
	// MaxFetchBytes.
	FetchMinBytes int
	// StallTimeout is how long an owned partition may have lag without progress
	// (outside the handler) before its reader is replaced (ingress.stall_timeout); it is
	// reported lagging after a third of it. Default DefaultStallTimeout.
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
	if c.FetchMinBytes <= 0 {
		c.FetchMinBytes = 1
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
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
	case c.BatchSize <= 0 || c.BatchWait <= 0 || c.StallTimeout <= 0 || c.LeaseTTL < 3*time.Millisecond:
		return fault.Permanent(fmt.Errorf("ingress/kafka: route %q: batch size, batch wait and stall timeout must be > 0, the lease TTL at least 3ms", c.Rules.Route))
	case c.Membership == nil:
		return fault.Permanent(fmt.Errorf("ingress/kafka: route %q: no membership (Membership)", c.Rules.Route))
	case c.FetchMinBytes > MaxFetchBytes:
		return fault.Permanent(fmt.Errorf("ingress/kafka: route %q: fetch min bytes %d is more than a fetch's limit (%d)", c.Rules.Route, c.FetchMinBytes, MaxFetchBytes))
	}
	if err := membership.CheckInstance(c.Instance); err != nil {
		return fmt.Errorf("ingress/kafka: route %q: %w", c.Rules.Route, err)
	}
	if c.Conn == nil {
		return fault.Permanent(fmt.Errorf("ingress/kafka: route %q: no Kafka connection (Conn)", c.Rules.Route))
	}
	if err := c.Conn.Validate(); err != nil {
		return fmt.Errorf("ingress/kafka: %w", err)
	}
	return nil
}

// Membership is what the source needs of the bridge's membership (membership.Redis
// implements it): heartbeats and live members, and leases on partition keys.
type Membership interface {
	Heartbeat(ctx context.Context, instance string, now int64) error
	Live(ctx context.Context, now int64, maxAge time.Duration) ([]membership.Member, error)
	PartitionLease(route, topic string, partition int) membership.LeaseKey
	Acquire(ctx context.Context, keys []membership.LeaseKey, holder string, ttl time.Duration) ([]int64, error)
	Renew(ctx context.Context, holder string, held []membership.Held, ttl time.Duration) ([]bool, error)
	Release(ctx context.Context, holder string, h membership.Held) error
}

// Source consumes one route's delay topic. It implements ingress.Source.
type Source struct {
	cfg    Config
	dialer *kafka.Dialer
	log    *slog.Logger
	holder string // lease holder: Instance#incarnation
	epoch  time.Time
	// maxBytes is the reader's fetch limit. It is not a record size limit: a broker
	// returns the first record batch whole even when it is larger (KIP-74), so an
	// oversized payload still arrives to be dead-lettered. It must stay small: kafka-go
	// gives a fetch response only a quarter of MaxWait beyond the broker's wait to
	// arrive, and a lagging consumer asking for 16 MiB made kfake miss that every time
	// (with MaxWait 5 ms) and re-fetch the same offset forever (bench: 1.4k msgs/s at
	// 16 MiB, 750k at 1 MiB).
	maxBytes int
	health   *tracker
	// batches holds fetch's record slices (*[]kafka.Message) between batches: a
	// thousand records' slice is 152 KB, which grown anew per batch was the largest
	// allocation per message consumed (BenchmarkSource: 1,578 → ~1,130 B per record);
	// a pool shares them among the partitions and lets the GC take them back when idle.
	batches sync.Pool
	// For tests (export_test.go): beforeCommit is called before a commit is sent;
	// abandon makes Run return without releasing its leases, as a killed process does.
	beforeCommit func(partition int)
	abandon      atomic.Bool
}

var (
	_ ingress.Source         = (*Source)(nil)
	_ ingress.HealthReporter = (*Source)(nil)
	_ Membership             = (*membership.Redis)(nil)
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
	var inc [4]byte
	_, _ = rand.Read(inc[:])
	s := &Source{cfg: cfg, dialer: dialer, maxBytes: MaxFetchBytes, holder: cfg.Instance + "#" + hex.EncodeToString(inc[:]),
		epoch: cfg.Clock.Now()}
	s.log = cfg.Logger.With("source", s.Name(), "route", cfg.Rules.Route)
	s.health = newTracker(cfg.Rules.Route, cfg.Observer, s.log, cfg.Clock, cfg.StallTimeout)
	rc := s.readerConfig(0)
	if err := rc.Validate(); err != nil {
		return nil, fault.Permanent(fmt.Errorf("ingress/kafka: route %q: %w", cfg.Rules.Route, err))
	}
	return s, nil
}

// Health returns the last state the source published (see package doc, Health).
func (s *Source) Health() ingress.Health { return s.health.snapshot() }

// GroupID is the consumer group the offsets are committed to.
func (s *Source) GroupID() string { return s.cfg.GroupID }

// Name is "kafka:<topic>".
func (s *Source) Name() string { return "kafka:" + s.cfg.Topic }

// mono is the time in ms since the source was built, on the monotonic clock when the
// clock has one: lease validity is judged with it.
func (s *Source) mono() int64 { return s.cfg.Clock.Now().Sub(s.epoch).Milliseconds() }

// readerMaxWait is how long the broker may hold a fetch that finds nothing new. With
// MinBytes 1 the broker answers as soon as a record arrives, so a longer wait adds no
// latency; it only spares the idle polls (with a larger FetchMinBytes, a record waits up
// to this long while its partition receives less than that). At 5 ms each partition's
// reader polled about 270 times a second when caught up, and a response later than
// kafka-go's read deadline (MaxWait; the broker is asked to wait three quarters of it)
// made it close the connection and dial, list offsets and seek again: 19 % of the
// bridge's CPU at 1k msgs/s (a CPU profile of `bench -profile`). A reader being stopped
// (handover, Close) may wait for its fetch up to this long.
const readerMaxWait = 250 * time.Millisecond

// queueCapacity is how many fetched records a partition's reader holds ahead of the
// batch being parked: BatchSize, but no more than maxBatchBytes of records at
// limits.max_payload_bytes each (at least 4). kafka-go counts this queue in records, and
// 1000 records of 256 KiB per partition held the whole of a large burst in memory
// before any of it was parked.
func (s *Source) queueCapacity() int {
	n := s.cfg.BatchSize
	if p := s.cfg.Rules.MaxPayloadBytes; p > 0 {
		n = min(n, max(4, maxBatchBytes/p))
	}
	return n
}

// readerConfig is the reader of one partition: no GroupID (the source owns the
// partition through its lease and commits offsets itself), an offset out of range
// returned as an error rather than retried forever.
func (s *Source) readerConfig(partition int) kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers:               s.cfg.Conn.Addrs(),
		Topic:                 s.cfg.Topic,
		Partition:             partition,
		Dialer:                s.dialer,
		QueueCapacity:         s.queueCapacity(),
		MinBytes:              s.cfg.FetchMinBytes,
		MaxBytes:              s.maxBytes,
		MaxWait:               readerMaxWait,
		ReadBackoffMin:        time.Millisecond,
		ReadBackoffMax:        5 * time.Millisecond,
		OffsetOutOfRangeError: true,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			s.log.Debug("kafka-go: " + fmt.Sprintf(msg, args...))
		}),
	}
}
