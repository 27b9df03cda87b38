package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// problems collects validation problems, each a *FieldError naming its key; Load adds
// the source.
type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// brokers says which brokers the routes and the dead-letter store use: the settings of
// an unused one are not checked.
type brokers struct{ kafka, amqp bool }

// receiptsNeedBrokers names the routes whose Kafka receipts have no broker to go to
// (kafka.brokers says so too, but not that receipts are why).
func (c *Config) receiptsNeedBrokers(p *problems) {
	if len(c.Kafka.Brokers) > 0 {
		return
	}
	for i, r := range c.Routes {
		if r.Receipts != nil && r.Receipts.Kafka != nil {
			p.add(fmt.Sprintf("routes[%d].receipts.kafka", i), "needs a Kafka cluster: kafka.brokers is empty")
		}
	}
}

// Validate checks every key and returns all problems at once, each naming its key. It
// fills the defaults that depend on other keys: a route's on_invalid, an AMQP source's
// exchange_type and binding_key.
func (c *Config) Validate() error {
	var p problems
	c.validateIdentity(&p)
	c.Redis.validate(&p)
	c.Ingress.validate(&p)
	c.Scheduler.validate(&p)
	c.Limits.validate(&p)
	c.Retry.validate(&p)
	if c.Delivery != DeliveryAtLeastOnce && c.Delivery != DeliveryAtMostOnce {
		p.add("delivery", "must be %q or %q, got %q", DeliveryAtLeastOnce, DeliveryAtMostOnce, c.Delivery)
	}
	use := validateRoutes(c.Routes, &p)
	for i, r := range c.Routes {
		if r.Order == OrderKey && c.Delivery == DeliveryAtMostOnce {
			p.add(fmt.Sprintf("routes[%d].order", i), "%q needs delivery %q (at-most-once acks before the broker confirms)", OrderKey, DeliveryAtLeastOnce)
		}
	}
	c.validateSchedules(&p)
	use.kafka = use.kafka || c.DeadLetter.Kafka.Topic != ""
	use.amqp = use.amqp || c.DeadLetter.AMQP.Exchange != ""
	if use.kafka {
		c.Kafka.validate(&p)
		c.receiptsNeedBrokers(&p)
	}
	if use.amqp {
		c.AMQP.validate(&p)
	}
	c.validateCredentials(use.amqp, &p)
	c.ReceiptsBacklog.validate(&p)
	c.Admin.validate(&p)
	c.Log.validate(&p)
	return errors.Join(p...)
}

// validateIdentity checks the keys that name this bridge's data in Redis.
func (c *Config) validateIdentity(p *problems) {
	if c.Cluster == "" || strings.ContainsAny(c.Cluster, "{}: ") {
		p.add("cluster", "must be non-empty without '{', '}', ':' or spaces, got %q", c.Cluster)
	}
	if c.Shards < 1 || c.Shards > 16384 {
		p.add("shards", "must be between 1 and 16384, got %d", c.Shards)
	}
	if c.Prefix == "" || strings.ContainsAny(c.Prefix, "{} ") {
		p.add("prefix", "must be non-empty without '{', '}' or spaces, got %q", c.Prefix)
	}
}

// validate checks redis.*; the addresses' form is checked with the other credentials
// (validateCredentials).
func (r RedisConfig) validate(p *problems) {
	if len(r.Addrs) == 0 {
		p.add("redis.addrs", "at least one address is required")
	}
	if r.MinReplicas < 0 {
		p.add("redis.min_replicas", "must be >= 0, got %d", r.MinReplicas)
	}
	if r.MasterName == "" && (r.SentinelUsername != "" || r.SentinelPassword != "") {
		p.add("redis.sentinel_password", "set only with redis.master_name (Sentinel); without it redis.addrs are data servers")
	}
}

func (in IngressConfig) validate(p *problems) {
	if st := in.StallTimeout; st < time.Second || st > 10*time.Minute {
		p.add("ingress.stall_timeout", "must be in [1s, 10m], got %s", st)
	}
	if b := in.KafkaFetchMinBytes; b < 1 || b > MaxKafkaFetchMinBytes {
		p.add("ingress.kafka_fetch_min_bytes", "must be in [1, %d] (a fetch's own limit), got %d", MaxKafkaFetchMinBytes, b)
	}
}

func (s SchedulerConfig) validate(p *problems) {
	if s.Tick <= 0 || s.Tick > time.Second {
		p.add("scheduler.tick", "must be in (0, 1s], got %s", s.Tick)
	}
	if s.Lookahead < 0 || s.Lookahead > time.Minute {
		p.add("scheduler.lookahead", "must be in [0, 1m], got %s", s.Lookahead)
	}
	if h := s.ParkClaimHorizon; h != 0 && (h < s.Lookahead || h > s.InflightLease/2) {
		p.add("scheduler.park_claim_horizon", "must be 0 (the lookahead) or in [scheduler.lookahead (%s), scheduler.inflight_lease/2 (%s)], got %s", s.Lookahead, s.InflightLease/2, h)
	}
	if s.ClaimBatch < 1 || s.ClaimBatch > 100000 {
		p.add("scheduler.claim_batch", "must be between 1 and 100000, got %d", s.ClaimBatch)
	}
	if s.InflightLease < time.Second {
		p.add("scheduler.inflight_lease", "must be at least 1s, got %s", s.InflightLease)
	}
	if s.LeaseTTL < 100*time.Millisecond {
		p.add("scheduler.lease_ttl", "must be at least 100ms, got %s", s.LeaseTTL)
	}
	if s.SafetyScan <= 0 || s.SafetyScan > time.Second {
		p.add("scheduler.safety_scan", "must be in (0, 1s], got %s", s.SafetyScan)
	}
	if s.MaxInMemory < s.ClaimBatch {
		p.add("scheduler.max_in_memory", "must be >= scheduler.claim_batch (%d), got %d", s.ClaimBatch, s.MaxInMemory)
	}
	if s.MaxInMemoryBytes < 1<<20 {
		p.add("scheduler.max_in_memory_bytes", "must be at least 1048576 (1 MiB), got %d", s.MaxInMemoryBytes)
	}
	if s.DoneWindow < 0 {
		p.add("scheduler.done_window", "must be >= 0, got %s", s.DoneWindow)
	}
	if s.ColdHorizon != 0 && s.ColdHorizon < time.Second {
		p.add("scheduler.cold_horizon", "must be 0 (off) or at least 1s, got %s", s.ColdHorizon)
	}
	if s.ScheduleInterval < 10*time.Millisecond || s.ScheduleInterval > time.Minute {
		p.add("scheduler.schedule_interval", "must be in [10ms, 1m], got %s", s.ScheduleInterval)
	}
	if s.ScheduleHorizon < 2*s.ScheduleInterval || s.ScheduleHorizon > 24*time.Hour {
		p.add("scheduler.schedule_horizon", "must be at least twice scheduler.schedule_interval and at most 24h, got %s", s.ScheduleHorizon)
	}
	if s.MaxClockOffset < 10*time.Millisecond || s.MaxClockOffset > time.Minute {
		p.add("scheduler.max_clock_offset", "must be in [10ms, 1m], got %s", s.MaxClockOffset)
	}
}

func (l LimitsConfig) validate(p *problems) {
	if l.MaxDelay <= 0 {
		p.add("limits.max_delay", "must be > 0, got %s", l.MaxDelay)
	}
	if l.MaxPayloadBytes <= 0 {
		p.add("limits.max_payload_bytes", "must be > 0, got %d", l.MaxPayloadBytes)
	}
}

func (r RetryConfig) validate(p *problems) {
	if r.MaxAttempts < 1 {
		p.add("retry.max_attempts", "must be >= 1, got %d", r.MaxAttempts)
	}
	if r.Backoff.Initial <= 0 {
		p.add("retry.backoff.initial", "must be > 0, got %s", r.Backoff.Initial)
	}
	if r.Backoff.Max < r.Backoff.Initial {
		p.add("retry.backoff.max", "must be >= retry.backoff.initial, got %s", r.Backoff.Max)
	}
}

func (r ReceiptsBacklogConfig) validate(p *problems) {
	if r.MaxMessages <= 0 {
		p.add("receipts_backlog.max_messages", "must be > 0, got %d", r.MaxMessages)
	}
	if r.MaxBytes <= 0 {
		p.add("receipts_backlog.max_bytes", "must be > 0, got %d", r.MaxBytes)
	}
}

func (a AdminConfig) validate(p *problems) {
	if a.Listen != "" {
		if _, port, err := net.SplitHostPort(a.Listen); err != nil || port == "" {
			p.add("admin.listen", "want host:port (or \"\" to disable the admin API), got %q", a.Listen)
		}
	}
}

func (l LogConfig) validate(p *problems) {
	switch strings.ToLower(l.Level) {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", "must be debug, info, warn or error, got %q", l.Level)
	}
	if l.Format != "json" && l.Format != "text" {
		p.add("log.format", "must be json or text, got %q", l.Format)
	}
}
