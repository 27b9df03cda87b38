// Package config holds the bridge configuration (docs/CONTRACT.md §6): defaults, loading
// (defaults < YAML file < env DELAYBRIDGE_… with "__" between levels < flags) and
// validation. Every error names the offending key. Layout: load.go (koanf layers, source
// tracking), decode.go (the mapstructure hook), keys.go (the key space, did-you-mean),
// validate*.go (one validator per section), secrets.go (masking), marshal.go (output).
package config

import "time"

// Config is the whole configuration. Field tags are the YAML/env key names.
type Config struct {
	Cluster  string `koanf:"cluster"`
	Shards   int    `koanf:"shards"`
	Prefix   string `koanf:"prefix"`   // Redis key prefix, default "delaybridge"
	Instance string `koanf:"instance"` // this instance's name in `members`, default hostname-pid

	Redis      RedisConfig      `koanf:"redis"`
	Kafka      KafkaConfig      `koanf:"kafka"`
	AMQP       AMQPConfig       `koanf:"amqp"`
	Ingress    IngressConfig    `koanf:"ingress"`
	Scheduler  SchedulerConfig  `koanf:"scheduler"`
	Limits     LimitsConfig     `koanf:"limits"`
	Retry      RetryConfig      `koanf:"retry"`
	Delivery   string           `koanf:"delivery"` // at-least-once | at-most-once
	Routes     []Route          `koanf:"routes"`
	Schedules  []Schedule       `koanf:"schedules"`
	DeadLetter DeadLetterConfig `koanf:"dead_letter"`
	// ReceiptsBacklog bounds the receipts waiting per receipts broker (docs/CONTRACT.md
	// "Receipts", docs/OPERATIONS.md "Receipts").
	ReceiptsBacklog ReceiptsBacklogConfig `koanf:"receipts_backlog"`
	Admin           AdminConfig           `koanf:"admin"`
	Log             LogConfig             `koanf:"log"`
}

type TLSConfig struct {
	Enabled            bool   `koanf:"enabled"`
	CAFile             string `koanf:"ca_file"`
	CertFile           string `koanf:"cert_file"`
	KeyFile            string `koanf:"key_file"`
	InsecureSkipVerify bool   `koanf:"insecure_skip_verify"`
}

type RedisConfig struct {
	Addrs      []string `koanf:"addrs"`
	Username   string   `koanf:"username"`
	Password   string   `koanf:"password"`
	DB         int      `koanf:"db"`
	MasterName string   `koanf:"master_name"` // Sentinel
	// SentinelUsername and SentinelPassword authenticate to the sentinels themselves
	// (their requirepass / ACL), apart from the data servers' username and password.
	SentinelUsername string    `koanf:"sentinel_username"`
	SentinelPassword string    `koanf:"sentinel_password"`
	MinReplicas      int       `koanf:"min_replicas"`
	TLS              TLSConfig `koanf:"tls"`
	// AllowEviction accepts a Redis whose maxmemory-policy may evict keys (anything but
	// noeviction), which loses the evicted messages without a trace: the bridge is
	// then ready anyway and warns once per node instead of failing /readyz.
	AllowEviction bool `koanf:"allow_eviction"`
}

type SASLConfig struct {
	Mechanism string `koanf:"mechanism"` // "", PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	Username  string `koanf:"username"`
	Password  string `koanf:"password"`
}

type KafkaConfig struct {
	Brokers []string   `koanf:"brokers"`
	GroupID string     `koanf:"group_id"`
	SASL    SASLConfig `koanf:"sasl"`
	TLS     TLSConfig  `koanf:"tls"`
}

type AMQPConfig struct {
	URL      string    `koanf:"url"`
	Prefetch int       `koanf:"prefetch"`
	TLS      TLSConfig `koanf:"tls"`
}

// IngressConfig tunes the consumers of the delay sources.
type IngressConfig struct {
	// StallTimeout is how long an owned Kafka partition, or a registered AMQP consumer,
	// may have lag without progress (time spent in the handler excluded) before its
	// reader, or its channel, is replaced; it is reported lagging (Kafka) or stalled
	// (AMQP) after a third of it.
	StallTimeout time.Duration `koanf:"stall_timeout"`
	// KafkaFetchMinBytes is the Kafka readers' fetch.min.bytes: the broker answers a
	// fetch of a delay topic's partition once this much is there, or after the readers'
	// wait (250 ms). 1, the default, answers as soon as a record arrives. More makes
	// fewer, larger fetches and parks (less bridge and Redis CPU per message at steady
	// rates) and holds a record up to 250 ms longer before it is parked, which only a
	// delay shorter than that sees (docs/OPERATIONS.md "Redis CPU").
	KafkaFetchMinBytes int `koanf:"kafka_fetch_min_bytes"`
}

// MaxKafkaFetchMinBytes bounds ingress.kafka_fetch_min_bytes: the Kafka readers fetch
// at most 1 MiB at a time (ingress/kafka), and a broker would wait out every fetch asked
// for more than that.
const MaxKafkaFetchMinBytes = 1 << 20

// DefaultMaxInMemoryBytes is scheduler.max_in_memory_bytes's default: 64 MiB, the
// messages' share of a 256 MiB pod (docs/OPERATIONS.md "Sizing" has the arithmetic).
const DefaultMaxInMemoryBytes = 64 << 20

type SchedulerConfig struct {
	Tick       time.Duration `koanf:"tick"`
	Lookahead  time.Duration `koanf:"lookahead"`
	ClaimBatch int           `koanf:"claim_batch"`
	// ParkClaimHorizon: a message parked due within it, in a shard this instance holds,
	// is claimed as it is parked (in flight, in the wheel) while half the memory budget
	// stays free, instead of waiting in Redis for the lookahead; 0 (the default): the
	// lookahead only. At most half of inflight_lease. docs/ARCHITECTURE.md "Claim at park".
	ParkClaimHorizon time.Duration `koanf:"park_claim_horizon"`
	InflightLease    time.Duration `koanf:"inflight_lease"`
	// LeaseTTL is how long a shard lease lives without renewal (failover time).
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// SafetyScan is the longest a pump sleeps without looking at Redis, in case a wake-up
	// notification was lost.
	SafetyScan time.Duration `koanf:"safety_scan"`
	// MaxInMemory bounds fired-but-not-yet-acknowledged plus wheel-held messages per
	// instance: the back-pressure that keeps memory flat.
	MaxInMemory int `koanf:"max_in_memory"`
	// MaxInMemoryBytes bounds the same messages by bytes: each counts its encoded
	// envelope (payload, key, headers, ids) plus 1 KiB of the bridge's own structures.
	// A claim asks Redis for at most what fits; a single message larger than the
	// budget goes through alone. The default keeps a pod with a 256 MiB memory limit
	// below it (docs/OPERATIONS.md "Sizing").
	MaxInMemoryBytes int64 `koanf:"max_in_memory_bytes"`
	// DoneWindow is how long fired/cancelled ids are remembered so a replayed ingress
	// record is not parked again.
	DoneWindow time.Duration `koanf:"done_window"`
	// ColdHorizon: a message due at least this far ahead is parked in the store's cold
	// tier (a list element per message instead of sorted-set members: ~0.45x the Redis
	// bytes, about twice the Redis work per message); 0 parks every message in the
	// sorted set. docs/ARCHITECTURE.md "Cold tier".
	ColdHorizon time.Duration `koanf:"cold_horizon"`
	// MaxClockOffset is how far this instance's clock may disagree with Redis's (TIME,
	// measured at every ownership round) before it stops claiming messages.
	MaxClockOffset time.Duration `koanf:"max_clock_offset"`
	// ScheduleHorizon is how far ahead the recurring schedules' occurrences are parked;
	// ScheduleInterval how often the planner looks (docs/CONTRACT.md "Recurring
	// schedules").
	ScheduleHorizon  time.Duration `koanf:"schedule_horizon"`
	ScheduleInterval time.Duration `koanf:"schedule_interval"`
}

type LimitsConfig struct {
	MaxDelay        time.Duration `koanf:"max_delay"`
	MaxPayloadBytes int           `koanf:"max_payload_bytes"`
}

type BackoffConfig struct {
	Initial time.Duration `koanf:"initial"`
	Max     time.Duration `koanf:"max"`
}

type RetryConfig struct {
	MaxAttempts int           `koanf:"max_attempts"`
	Backoff     BackoffConfig `koanf:"backoff"`
}

// Endpoint names one broker-side place. Exactly one of Kafka/AMQP is set.
type Endpoint struct {
	Kafka *KafkaEndpoint `koanf:"kafka"`
	AMQP  *AMQPEndpoint  `koanf:"amqp"`
}

type KafkaEndpoint struct {
	Topic string `koanf:"topic"`
}

type AMQPEndpoint struct {
	Queue        string `koanf:"queue"`         // from: the durable queue consumed
	Exchange     string `koanf:"exchange"`      // from: exchange bound to the queue; to: target exchange
	ExchangeType string `koanf:"exchange_type"` // from: default "topic"
	BindingKey   string `koanf:"binding_key"`   // from: default "#"
	RoutingKey   string `koanf:"routing_key"`   // to: fixed routing key; "" = keep the message's
	Declare      bool   `koanf:"declare"`       // to: declare the target exchange instead of checking it
}

type Route struct {
	Name string   `koanf:"name"`
	From Endpoint `koanf:"from"`
	To   Endpoint `koanf:"to"`
	// MaxRate limits publishes per second on this route (0 = unlimited).
	MaxRate float64 `koanf:"max_rate"`
	// Order: "" (none: no per-key promise) or "key": strict per-key order — one key's
	// messages (x-delay-key header, else the Kafka record key, else the AMQP routing
	// key) are published in due order, equal due times in receive order, each only
	// after the previous one was confirmed (README "Order"). Needs delivery
	// at-least-once.
	Order string `koanf:"order"`
	// AllowTargets lists the targets an x-delay-target header may name; empty = override
	// not allowed.
	AllowTargets []string `koanf:"allow_targets"`
	// OnInvalid: "dead_letter" (default) or "deliver" (publish at once).
	OnInvalid string `koanf:"on_invalid"`
	// Receipts, when set, publishes one receipt per outcome of this route's messages
	// (delivered, dead_lettered, cancelled) to a Kafka topic ({kafka: {topic}}) or an
	// AMQP exchange ({amqp: {exchange, routing_key}}); off by default (docs/CONTRACT.md
	// "Receipts").
	Receipts *Endpoint `koanf:"receipts"`
}

type DeadLetterConfig struct {
	Kafka KafkaEndpoint `koanf:"kafka"`
	AMQP  struct {
		Exchange string `koanf:"exchange"`
	} `koanf:"amqp"`
}

// ReceiptsBacklogConfig bounds the receipts queued per receipts broker (Kafka, AMQP) while
// it is slow or down: MaxMessages receipts and MaxBytes of memory (each receipt counts
// its JSON, key and headers plus egress.SideEntryOverhead). A receipt that does not fit
// is dropped and counted (receipts_dropped_total{reason="full"}). MaxBytes is part of
// the sum CheckMemoryLimit holds to the Go memory limit.
type ReceiptsBacklogConfig struct {
	MaxMessages int `koanf:"max_messages"`
	MaxBytes    int `koanf:"max_bytes"`
}

type AdminConfig struct {
	Listen string `koanf:"listen"`
	Token  string `koanf:"token"`
}

type LogConfig struct {
	Level  string `koanf:"level"`
	Format string `koanf:"format"`
}

const (
	DeliveryAtLeastOnce = "at-least-once"
	DeliveryAtMostOnce  = "at-most-once"
	// OrderKey is routes[].order for strict per-key order.
	OrderKey            = "key"
	OnInvalidDeadLetter = "dead_letter"
	OnInvalidDeliver    = "deliver"
)

// Default returns the configuration used when nothing overrides a key.
func Default() Config {
	return Config{
		Cluster: "default",
		Shards:  64,
		Prefix:  "delaybridge",
		Redis:   RedisConfig{Addrs: []string{"127.0.0.1:6379"}},
		Kafka:   KafkaConfig{Brokers: []string{"127.0.0.1:9092"}, GroupID: "delay-bridge"},
		AMQP:    AMQPConfig{URL: "amqp://guest:guest@127.0.0.1:5672/", Prefetch: 500},
		Ingress: IngressConfig{StallTimeout: 15 * time.Second, KafkaFetchMinBytes: 1},
		Scheduler: SchedulerConfig{
			Tick: time.Millisecond, Lookahead: 2 * time.Second, ClaimBatch: 1000,
			InflightLease: 30 * time.Second, LeaseTTL: 3 * time.Second, SafetyScan: time.Second,
			MaxClockOffset:  500 * time.Millisecond,
			ScheduleHorizon: time.Minute, ScheduleInterval: time.Second,
			MaxInMemory: 100000, MaxInMemoryBytes: DefaultMaxInMemoryBytes, DoneWindow: 10 * time.Minute, ColdHorizon: 5 * time.Minute,
		},
		Limits:          LimitsConfig{MaxDelay: 8760 * time.Hour, MaxPayloadBytes: 1 << 20},
		Retry:           RetryConfig{MaxAttempts: 10, Backoff: BackoffConfig{Initial: time.Second, Max: 5 * time.Minute}},
		Delivery:        DeliveryAtLeastOnce,
		ReceiptsBacklog: ReceiptsBacklogConfig{MaxMessages: 100_000, MaxBytes: DefaultReceiptsBacklogBytes},
		Admin:           AdminConfig{Listen: "127.0.0.1:8089"},
		Log:             LogConfig{Level: "info", Format: "json"},
	}
}

// RouteByName returns the route called name, or nil.
func (c *Config) RouteByName(name string) *Route {
	for i := range c.Routes {
		if c.Routes[i].Name == name {
			return &c.Routes[i]
		}
	}
	return nil
}

// OrderedRoutes names the routes with `order: key`.
func (c *Config) OrderedRoutes() []string {
	var out []string
	for _, r := range c.Routes {
		if r.Order == OrderKey {
			out = append(out, r.Name)
		}
	}
	return out
}
