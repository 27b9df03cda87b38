// Package config holds the bridge configuration (docs/CONTRACT.md §6): defaults, loading
// (defaults < YAML file < env DELAYBRIDGE_… with "__" between levels < flags) and
// validation. Every error names the offending key.
package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

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
	DeadLetter DeadLetterConfig `koanf:"dead_letter"`
	Admin      AdminConfig      `koanf:"admin"`
	Log        LogConfig        `koanf:"log"`
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
}

type SASLConfig struct {
	Mechanism string `koanf:"mechanism"` // "", PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	Username  string `koanf:"username"`
	Password  string `koanf:"password"`
}

type KafkaConfig struct {
	Brokers []string `koanf:"brokers"`
	GroupID string   `koanf:"group_id"`
	// SessionTimeout is how long the group coordinator waits for a silent consumer
	// (a killed bridge) before moving its partitions to the others; the rebalance
	// timeout is half of it, the heartbeat a tenth.
	SessionTimeout time.Duration `koanf:"session_timeout"`
	SASL           SASLConfig    `koanf:"sasl"`
	TLS            TLSConfig     `koanf:"tls"`
}

type AMQPConfig struct {
	URL      string    `koanf:"url"`
	Prefetch int       `koanf:"prefetch"`
	TLS      TLSConfig `koanf:"tls"`
}

// IngressConfig tunes the consumers of the delay sources.
type IngressConfig struct {
	// StallTimeout is how long a consumer may stay out of its group (or, for AMQP, without
	// a registered consumer), or joined without progress while it has lag, before the
	// watchdog tears it down and builds a new one.
	StallTimeout time.Duration `koanf:"stall_timeout"`
}

type SchedulerConfig struct {
	Tick          time.Duration `koanf:"tick"`
	Lookahead     time.Duration `koanf:"lookahead"`
	ClaimBatch    int           `koanf:"claim_batch"`
	InflightLease time.Duration `koanf:"inflight_lease"`
	// LeaseTTL is how long a shard lease lives without renewal (failover time).
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// SafetyScan is the longest a pump sleeps without looking at Redis, in case a wake-up
	// notification was lost.
	SafetyScan time.Duration `koanf:"safety_scan"`
	// MaxInMemory bounds fired-but-not-yet-acknowledged plus wheel-held messages per
	// instance: the back-pressure that keeps memory flat.
	MaxInMemory int `koanf:"max_in_memory"`
	// DoneWindow is how long fired/cancelled ids are remembered so a replayed ingress
	// record is not parked again.
	DoneWindow time.Duration `koanf:"done_window"`
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
	// AllowTargets lists the targets an x-delay-target header may name; empty = override
	// not allowed.
	AllowTargets []string `koanf:"allow_targets"`
	// OnInvalid: "dead_letter" (default) or "deliver" (publish at once).
	OnInvalid string `koanf:"on_invalid"`
}

type DeadLetterConfig struct {
	Kafka KafkaEndpoint `koanf:"kafka"`
	AMQP  struct {
		Exchange string `koanf:"exchange"`
	} `koanf:"amqp"`
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
		Kafka:   KafkaConfig{Brokers: []string{"127.0.0.1:9092"}, GroupID: "delay-bridge", SessionTimeout: 10 * time.Second},
		AMQP:    AMQPConfig{URL: "amqp://guest:guest@127.0.0.1:5672/", Prefetch: 500},
		Ingress: IngressConfig{StallTimeout: 15 * time.Second},
		Scheduler: SchedulerConfig{
			Tick: time.Millisecond, Lookahead: 2 * time.Second, ClaimBatch: 1000,
			InflightLease: 30 * time.Second, LeaseTTL: 3 * time.Second, SafetyScan: time.Second,
			MaxInMemory: 100000, DoneWindow: 10 * time.Minute,
		},
		Limits:   LimitsConfig{MaxDelay: 8760 * time.Hour, MaxPayloadBytes: 1 << 20},
		Retry:    RetryConfig{MaxAttempts: 10, Backoff: BackoffConfig{Initial: time.Second, Max: 5 * time.Minute}},
		Delivery: DeliveryAtLeastOnce,
		Admin:    AdminConfig{Listen: "127.0.0.1:8089"},
		Log:      LogConfig{Level: "info", Format: "json"},
	}
}

// Validate checks every key and returns all problems at once, each naming its key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if c.Cluster == "" || strings.ContainsAny(c.Cluster, "{}: ") {
		bad("cluster", "must be non-empty without '{', '}', ':' or spaces, got %q", c.Cluster)
	}
	if c.Shards < 1 || c.Shards > 16384 {
		bad("shards", "must be between 1 and 16384, got %d", c.Shards)
	}
	if c.Prefix == "" || strings.ContainsAny(c.Prefix, "{} ") {
		bad("prefix", "must be non-empty without '{', '}' or spaces, got %q", c.Prefix)
	}
	if len(c.Redis.Addrs) == 0 {
		bad("redis.addrs", "at least one address is required")
	}
	if c.Redis.MinReplicas < 0 {
		bad("redis.min_replicas", "must be >= 0, got %d", c.Redis.MinReplicas)
	}
	if c.Redis.MasterName == "" && (c.Redis.SentinelUsername != "" || c.Redis.SentinelPassword != "") {
		bad("redis.sentinel_password", "set only with redis.master_name (Sentinel); without it redis.addrs are data servers")
	}
	if st := c.Ingress.StallTimeout; st < time.Second || st > 10*time.Minute {
		bad("ingress.stall_timeout", "must be in [1s, 10m], got %s", st)
	}
	s := c.Scheduler
	if s.Tick <= 0 || s.Tick > time.Second {
		bad("scheduler.tick", "must be in (0, 1s], got %s", s.Tick)
	}
	if s.Lookahead < 0 || s.Lookahead > time.Minute {
		bad("scheduler.lookahead", "must be in [0, 1m], got %s", s.Lookahead)
	}
	if s.ClaimBatch < 1 || s.ClaimBatch > 100000 {
		bad("scheduler.claim_batch", "must be between 1 and 100000, got %d", s.ClaimBatch)
	}
	if s.InflightLease < time.Second {
		bad("scheduler.inflight_lease", "must be at least 1s, got %s", s.InflightLease)
	}
	if s.LeaseTTL < 100*time.Millisecond {
		bad("scheduler.lease_ttl", "must be at least 100ms, got %s", s.LeaseTTL)
	}
	if s.SafetyScan <= 0 || s.SafetyScan > time.Second {
		bad("scheduler.safety_scan", "must be in (0, 1s], got %s", s.SafetyScan)
	}
	if s.MaxInMemory < s.ClaimBatch {
		bad("scheduler.max_in_memory", "must be >= scheduler.claim_batch (%d), got %d", s.ClaimBatch, s.MaxInMemory)
	}
	if s.DoneWindow < 0 {
		bad("scheduler.done_window", "must be >= 0, got %s", s.DoneWindow)
	}
	if c.Limits.MaxDelay <= 0 {
		bad("limits.max_delay", "must be > 0, got %s", c.Limits.MaxDelay)
	}
	if c.Limits.MaxPayloadBytes <= 0 {
		bad("limits.max_payload_bytes", "must be > 0, got %d", c.Limits.MaxPayloadBytes)
	}
	if c.Retry.MaxAttempts < 1 {
		bad("retry.max_attempts", "must be >= 1, got %d", c.Retry.MaxAttempts)
	}
	if c.Retry.Backoff.Initial <= 0 {
		bad("retry.backoff.initial", "must be > 0, got %s", c.Retry.Backoff.Initial)
	}
	if c.Retry.Backoff.Max < c.Retry.Backoff.Initial {
		bad("retry.backoff.max", "must be >= retry.backoff.initial, got %s", c.Retry.Backoff.Max)
	}
	if c.Delivery != DeliveryAtLeastOnce && c.Delivery != DeliveryAtMostOnce {
		bad("delivery", "must be %q or %q, got %q", DeliveryAtLeastOnce, DeliveryAtMostOnce, c.Delivery)
	}
	if len(c.Routes) == 0 {
		bad("routes", "at least one route is required")
	}
	names := map[string]bool{}
	usesKafka, usesAMQP := false, false
	for i := range c.Routes {
		r := &c.Routes[i]
		key := fmt.Sprintf("routes[%d]", i)
		if r.Name == "" {
			bad(key+".name", "is required")
		} else if names[r.Name] {
			bad(key+".name", "duplicate route name %q", r.Name)
		}
		names[r.Name] = true
		for _, ep := range []struct {
			key string
			e   *Endpoint
		}{{key + ".from", &r.From}, {key + ".to", &r.To}} {
			switch {
			case ep.e.Kafka != nil && ep.e.AMQP != nil:
				bad(ep.key, "set exactly one of kafka or amqp, not both")
			case ep.e.Kafka != nil:
				usesKafka = true
				if ep.e.Kafka.Topic == "" {
					bad(ep.key+".kafka.topic", "is required")
				}
			case ep.e.AMQP != nil:
				usesAMQP = true
			default:
				bad(ep.key, "set one of kafka or amqp")
			}
		}
		if a := r.From.AMQP; a != nil {
			if a.Queue == "" {
				bad(key+".from.amqp.queue", "is required")
			}
			if a.ExchangeType == "" {
				a.ExchangeType = "topic"
			}
			switch a.ExchangeType {
			case "direct", "topic", "fanout", "headers":
			default:
				bad(key+".from.amqp.exchange_type", "must be direct, topic, fanout or headers, got %q", a.ExchangeType)
			}
			if a.Exchange != "" && a.BindingKey == "" {
				a.BindingKey = "#"
			}
			if a.Exchange != "" && a.ExchangeType == "direct" && a.BindingKey == "#" {
				bad(key+".from.amqp.exchange_type", "direct with binding_key \"#\" would drop every message: \"#\" is no wildcard on a direct exchange; use topic or fanout (the routing key is kept for the target)")
			}
		}
		if a := r.To.AMQP; a != nil && a.Exchange == "" {
			bad(key+".to.amqp.exchange", "is required (the default exchange cannot be checked or declared)")
		}
		if r.From.Kafka != nil && r.To.Kafka != nil && r.From.Kafka.Topic == r.To.Kafka.Topic {
			bad(key+".to.kafka.topic", "must differ from the source topic (it would loop)")
		}
		if r.MaxRate < 0 {
			bad(key+".max_rate", "must be >= 0, got %g", r.MaxRate)
		}
		if r.OnInvalid == "" {
			r.OnInvalid = OnInvalidDeadLetter
		}
		if r.OnInvalid != OnInvalidDeadLetter && r.OnInvalid != OnInvalidDeliver {
			bad(key+".on_invalid", "must be %q or %q, got %q", OnInvalidDeadLetter, OnInvalidDeliver, r.OnInvalid)
		}
	}
	if c.DeadLetter.Kafka.Topic != "" {
		usesKafka = true
	}
	if c.DeadLetter.AMQP.Exchange != "" {
		usesAMQP = true
	}
	if usesKafka {
		if len(c.Kafka.Brokers) == 0 {
			bad("kafka.brokers", "at least one broker is required by a kafka route")
		}
		if c.Kafka.SessionTimeout < time.Second || c.Kafka.SessionTimeout > 5*time.Minute {
			bad("kafka.session_timeout", "must be in [1s, 5m], got %s", c.Kafka.SessionTimeout)
		}
		if c.Kafka.GroupID == "" {
			bad("kafka.group_id", "is required by a kafka route")
		}
		switch c.Kafka.SASL.Mechanism {
		case "":
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
			if c.Kafka.SASL.Username == "" {
				bad("kafka.sasl.username", "is required with kafka.sasl.mechanism %s", c.Kafka.SASL.Mechanism)
			}
		default:
			bad("kafka.sasl.mechanism", "must be empty, PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", c.Kafka.SASL.Mechanism)
		}
	}
	if usesAMQP {
		if c.AMQP.Prefetch < 1 || c.AMQP.Prefetch > 65535 {
			bad("amqp.prefetch", "must be between 1 and 65535, got %d", c.AMQP.Prefetch)
		}
	}
	c.validateCredentials(usesAMQP, bad)
	if c.Admin.Listen != "" {
		if _, port, err := net.SplitHostPort(c.Admin.Listen); err != nil || port == "" {
			bad("admin.listen", "want host:port (or \"\" to disable the admin API), got %q", c.Admin.Listen)
		}
	}
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "text" {
		bad("log.format", "must be json or text, got %q", c.Log.Format)
	}
	return errors.Join(errs...)
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
