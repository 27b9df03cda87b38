package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Namespace prefixes every metric name.
const Namespace = "delaybridge"

// Histogram buckets, in seconds.
var (
	// LatencyBuckets resolve the sub-millisecond to second range a millisecond-accurate
	// scheduler lives in (fire lateness, publish duration).
	LatencyBuckets = []float64{0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// ScriptBuckets are for single Redis script calls.
	ScriptBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
	// DelayBuckets span a second to a year of requested delay.
	DelayBuckets = []float64{0.1, 1, 5, 10, 30, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400, 365 * 86400}
)

// StatsCacheTTL is how long the pending/inflight/dead gauges reuse one Stats answer, so
// frequent or concurrent scrapes do not each scan Redis.
const StatsCacheTTL = time.Second

// CountsFunc reports the current message counts per route for the gauges (typically
// the Routes of Backend.Stats).
type CountsFunc func(ctx context.Context) (map[string]admin.Counts, error)

// Metrics is the Prometheus implementation of observe.Observer (docs/CONTRACT.md §6). Metric
// names start with "delaybridge_"; labels are route, broker, reason and script, all
// low-cardinality (route names come from the configuration).
//
//	counters   messages_received_total{route}, messages_parked_total{route},
//	           messages_fired_total{route}, messages_published_total{route,broker},
//	           messages_dead_lettered_total{route}, messages_invalid_total{route,reason},
//	           messages_duplicate_total{route,reason}, messages_replaced_total{route},
//	           messages_cancelled_total{route},
//	           messages_rescheduled_total{route}, messages_dropped_total{route,reason},
//	           publish_failures_total{route,broker,reason}, publish_retries_total{route},
//	           redis_retries_total{reason} (observe.RetryReasons, all at 0 from start),
//	           messages_recovered_total{reason} (observe.RecoverReasons, likewise)
//	gauges     messages_pending{route}, messages_inflight{route}, messages_dead{route} (from SetCounts,
//	           collected at scrape time, cached StatsCacheTTL), shards_owned, clock_offset_seconds,
//	           ingress_consuming{route}, ingress_lag_messages{route},
//	           build_info{version,goversion} (always 1), and per side queue (side.go)
//	           <queue>_backlog{target}; counters <queue>_published_total{target},
//	           <queue>_failed_total{target}, <queue>_dropped_total{target,reason},
//	           redis_maxmemory_policy{node,policy} (redis_health.go); counters
//	           redis_oom_refusals_total, lost_claims_healed_total
//	histograms delivery_lateness_seconds{route}, fire_lateness_seconds{route},
//	           egress_wait_seconds{route},
//	           requested_delay_seconds{route}, publish_duration_seconds{route,broker},
//	           redis_script_duration_seconds{script}
//
// Declare creates the labelled series of the configured routes at 0 from start.
type Metrics struct {
	received, parked, fired, deadLettered *prometheus.CounterVec
	published, invalid                    *prometheus.CounterVec
	duplicate, cancelled, rescheduled     *prometheus.CounterVec
	replaced                              *prometheus.CounterVec
	dropped, publishFailures, retries     *prometheus.CounterVec
	shardsOwned, clockOffset              prometheus.Gauge
	ingressConsuming, ingressLag          *prometheus.GaugeVec
	lateness, requestedDelay, delivery    *prometheus.HistogramVec
	egressWait                            *prometheus.HistogramVec
	publishDuration, scriptDuration       *prometheus.HistogramVec
	slots, redisRetries, recovered        *prometheus.CounterVec
	counts                                *countsCollector
	sides                                 map[string]*sideMetrics // by queue (side.go)
	ready                                 *readyCollector
	redis                                 *redisHealth
	memory                                *memoryCollector // memory.go
	perMessage                            sync.Map         // route -> *routeSeries (perMessageOf)
}

// routeSeries are one route's series of the observations made once per message (park,
// fire, egress, delivery). Looking a series up by label (WithLabelValues: hash the
// label, lock, map) cost more than the observation itself, five times per message; the
// series are never deleted, so they are looked up once per route
// (BenchmarkPerMessageObservations).
type routeSeries struct {
	fired                                          prometheus.Counter
	lateness, egressWait, delivery, requestedDelay prometheus.Observer
}

func (m *Metrics) perMessageOf(route string) *routeSeries {
	if r, ok := m.perMessage.Load(route); ok {
		return r.(*routeSeries)
	}
	r, _ := m.perMessage.LoadOrStore(route, &routeSeries{
		fired:          m.fired.WithLabelValues(route),
		lateness:       m.lateness.WithLabelValues(route),
		egressWait:     m.egressWait.WithLabelValues(route),
		delivery:       m.delivery.WithLabelValues(route),
		requestedDelay: m.requestedDelay.WithLabelValues(route),
	})
	return r.(*routeSeries)
}

var _ observe.Observer = (*Metrics)(nil)

// NewRegistry returns a registry with the Go runtime and process collectors, ready for
// NewMetrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// NewMetrics creates the metrics and registers them on reg. version is the bridge's
// version for build_info. logger (nil = slog.Default()) hears about failing counts.
func NewMetrics(reg prometheus.Registerer, version string, logger *slog.Logger) (*Metrics, error) {
	if logger == nil {
		logger = slog.Default()
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		received:     counter("messages_received_total", "Records consumed from delay sources, before parsing.", "route"),
		parked:       counter("messages_parked_total", "Messages newly stored in Redis (duplicates excluded).", "route"),
		fired:        counter("messages_fired_total", "Messages handed to egress at their due time.", "route"),
		published:    counter("messages_published_total", "Messages the target broker confirmed.", "route", "broker"),
		deadLettered: counter("messages_dead_lettered_total", "Messages moved to the dead letters.", "route"),
		invalid:      counter("messages_invalid_total", "Invalid records, by reason.", "route", "reason"),
		duplicate: counter("messages_duplicate_total",
			"Parks refused because the id was already known, by the state it was in.", "route", "reason"),
		cancelled: counter("messages_cancelled_total", "Messages cancelled.", "route"),
		replaced: counter("messages_replaced_total",
			"Messages that replaced the pending, in-flight or dead message with their id (x-delay-replace).", "route"),
		rescheduled: counter("messages_rescheduled_total", "Messages given a new due time.", "route"),
		dropped: counter("messages_dropped_total",
			"Messages given up without delivery (at-most-once publish failures), by reason.", "route", "reason"),
		publishFailures: counter("publish_failures_total", "Failed publish attempts, by reason.", "route", "broker", "reason"),
		retries:         counter("publish_retries_total", "Messages put back for another publish attempt.", "route"),
		ingressConsuming: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "ingress_consuming",
			Help: "1 while a route's ingress is consuming, 0 while joining, stalled or unreachable."}, []string{"route"}),
		ingressLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "ingress_lag_messages",
			Help: "Records a route's ingress is behind (Kafka: end offset minus committed; AMQP: queue depth)."}, []string{"route"}),
		delivery: histogram("delivery_lateness_seconds",
			"Broker-confirmed time minus due time: what consumers see. The service-level metric.", LatencyBuckets, "route"),
		shardsOwned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "shards_owned",
			Help: "Shards this instance currently owns."}),
		clockOffset: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "clock_offset_seconds",
			Help: "This instance's clock minus Redis's (TIME), measured at every ownership round; beyond scheduler.max_clock_offset the instance stops claiming."}),
		lateness: histogram("fire_lateness_seconds",
			"Wheel fire time minus due time (before max_rate and the publish; see delivery_lateness_seconds).", LatencyBuckets, "route"),
		egressWait: histogram("egress_wait_seconds",
			"Publish start minus wheel fire time: the egress queue and max_rate wait (see delivery_lateness_seconds).", LatencyBuckets, "route"),
		requestedDelay: histogram("requested_delay_seconds",
			"Delay producers asked for (due time minus receive time).", DelayBuckets, "route"),
		publishDuration: histogram("publish_duration_seconds",
			"Duration of one publish batch until the broker confirmed it.", LatencyBuckets, "route", "broker"),
		scriptDuration: histogram("redis_script_duration_seconds",
			"Duration of one Redis script call.", ScriptBuckets, "script"),
		redisRetries: counter("redis_retries_total",
			"Script calls Redis Cluster refused while their slot was being migrated (tryagain, moved, ask), sent again after a backoff.", "reason"),
		recovered: counter("messages_recovered_total",
			"In-flight messages fired again (at-least-once; each may be a second copy): lease_expired = their in-flight deadline passed under a live owner (an outcome not recorded, a publish held past scheduler.inflight_lease), shard_acquired = left in flight by the shard's previous owner.", "reason"),
		slots: counter("schedule_slots_total",
			"Slots of recurring schedules by outcome: parked, late (catch-up), missed, no_route, published.", "schedule", "outcome"),
		counts: newCountsCollector(logger),
		sides:  newSides(),
		ready:  newReadyCollector(),
		redis:  newRedisHealth(),
		memory: newMemoryCollector(),
	}
	atZero(m.redisRetries, observe.RetryReasons)
	atZero(m.recovered, observe.RecoverReasons)
	all := []prometheus.Collector{
		m.received, m.parked, m.fired, m.published, m.deadLettered, m.invalid, m.shardsOwned, m.clockOffset,
		m.duplicate, m.cancelled, m.replaced, m.rescheduled, m.dropped, m.publishFailures, m.retries,
		m.ingressConsuming, m.ingressLag, m.delivery, m.slots, m.redisRetries, m.recovered,
		m.lateness, m.egressWait, m.requestedDelay, m.publishDuration, m.scriptDuration, m.counts, m.ready, m.memory,
		newBuildInfo(version),
	}
	for _, q := range observe.SideQueues {
		all = append(all, m.sides[q].collectors()...)
	}
	all = append(all, m.redis.collectors()...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: registering metrics: %w", err)
		}
	}
	return m, nil
}

// RouteSeries names one configured route and the broker its target is on, for Declare.
type RouteSeries struct {
	Name   string
	Broker string // target broker: envelope.BrokerKafka or envelope.BrokerAMQP
}

// Declare creates every labelled series of the given routes at 0, so that a scrape
// lists them before their first event (an increase() alert then sees the first one):
// the per-route counters, gauges and histograms; messages_invalid_total for each of
// invalidReasons; messages_duplicate_total for observe.DuplicateReasons;
// messages_dropped_total and publish_failures_total (with the route's broker) for
// observe.FailReasons. Call it once at start, before the bridge runs; calling it
// again only adds series (existing values are kept).
func (m *Metrics) Declare(routes []RouteSeries, invalidReasons []string) {
	for _, r := range routes {
		for _, c := range []*prometheus.CounterVec{m.received, m.parked, m.fired, m.deadLettered, m.cancelled, m.replaced, m.rescheduled, m.retries} {
			c.WithLabelValues(r.Name)
		}
		m.published.WithLabelValues(r.Name, r.Broker)
		m.publishDuration.WithLabelValues(r.Name, r.Broker)
		for _, h := range []*prometheus.HistogramVec{m.lateness, m.egressWait, m.delivery, m.requestedDelay} {
			h.WithLabelValues(r.Name)
		}
		m.ingressConsuming.WithLabelValues(r.Name)
		m.ingressLag.WithLabelValues(r.Name)
		for _, reason := range invalidReasons {
			m.invalid.WithLabelValues(r.Name, reason)
		}
		for _, reason := range observe.DuplicateReasons {
			m.duplicate.WithLabelValues(r.Name, reason)
		}
		for _, reason := range observe.FailReasons {
			m.dropped.WithLabelValues(r.Name, reason)
			m.publishFailures.WithLabelValues(r.Name, r.Broker, reason)
		}
	}
}

// SetCounts installs the source of the messages_pending, messages_inflight and
// messages_dead gauges. Until it is called (or while f fails without an earlier
// success) those gauges are absent from scrapes.
func (m *Metrics) SetCounts(f CountsFunc) { m.counts.set(f) }

func (m *Metrics) Received(route string, n int) { m.received.WithLabelValues(route).Add(float64(n)) }
func (m *Metrics) Parked(route string, n int)   { m.parked.WithLabelValues(route).Add(float64(n)) }
func (m *Metrics) Invalid(route, reason string) { m.invalid.WithLabelValues(route, reason).Inc() }
func (m *Metrics) RequestedDelay(route string, d time.Duration) {
	m.perMessageOf(route).requestedDelay.Observe(d.Seconds())
}
func (m *Metrics) Fired(route string, lateness time.Duration) {
	r := m.perMessageOf(route)
	r.fired.Inc()
	r.lateness.Observe(lateness.Seconds())
}
func (m *Metrics) EgressWait(route string, wait time.Duration) {
	m.perMessageOf(route).egressWait.Observe(wait.Seconds())
}
func (m *Metrics) Published(route, broker string, n int, took time.Duration) {
	m.published.WithLabelValues(route, broker).Add(float64(n))
	m.publishDuration.WithLabelValues(route, broker).Observe(took.Seconds())
}
func (m *Metrics) DeadLettered(route string, n int) {
	m.deadLettered.WithLabelValues(route).Add(float64(n))
}
func (m *Metrics) ScriptDuration(script string, took time.Duration) {
	m.scriptDuration.WithLabelValues(script).Observe(took.Seconds())
}

// atZero creates the series of a one-label counter for each of values, at 0.
func atZero(c *prometheus.CounterVec, values []string) {
	for _, v := range values {
		c.WithLabelValues(v)
	}
}

// newBuildInfo is build_info: always 1, labelled with the bridge's and Go's versions.
func newBuildInfo(version string) *prometheus.GaugeVec {
	b := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1; labels carry the bridge version and the Go version it was built with."}, []string{"version", "goversion"})
	b.WithLabelValues(version, runtime.Version()).Set(1)
	return b
}

// RedisRetried implements observe.Observer; the script is not a label (the series exist
// at 0 from start, one per reason).
func (m *Metrics) RedisRetried(_, reason string) {
	m.redisRetries.WithLabelValues(reason).Inc()
}

// Recovered implements observe.Observer (the series exist at 0 from start, one per
// reason).
func (m *Metrics) Recovered(reason string, n int) {
	m.recovered.WithLabelValues(reason).Add(float64(n))
}
func (m *Metrics) ShardsOwned(n int) { m.shardsOwned.Set(float64(n)) }

// ScheduleSlots implements observe.Observer. A schedule's first count creates all its
// outcome series at 0 (schedules are few; a deleted schedule's series stay until
// restart).
func (m *Metrics) ScheduleSlots(schedule, outcome string, n int) {
	for _, o := range observe.SlotOutcomes {
		m.slots.WithLabelValues(schedule, o)
	}
	m.slots.WithLabelValues(schedule, outcome).Add(float64(n))
}

// ClockOffset implements observe.Observer.
func (m *Metrics) ClockOffset(d time.Duration) { m.clockOffset.Set(d.Seconds()) }
func (m *Metrics) Duplicate(route, reason string, n int) {
	m.duplicate.WithLabelValues(route, reason).Add(float64(n))
}
func (m *Metrics) Delivered(route string, lateness time.Duration) {
	m.perMessageOf(route).delivery.Observe(lateness.Seconds())
}
func (m *Metrics) PublishFailed(route, broker, reason string, n int) {
	m.publishFailures.WithLabelValues(route, broker, reason).Add(float64(n))
}
func (m *Metrics) PublishRetried(route string, n int) {
	m.retries.WithLabelValues(route).Add(float64(n))
}
func (m *Metrics) Dropped(route, reason string, n int) {
	m.dropped.WithLabelValues(route, reason).Add(float64(n))
}
func (m *Metrics) Cancelled(route string, n int) { m.cancelled.WithLabelValues(route).Add(float64(n)) }

// Replaced implements observe.Observer.
func (m *Metrics) Replaced(route string, n int) { m.replaced.WithLabelValues(route).Add(float64(n)) }
func (m *Metrics) Rescheduled(route string, n int) {
	m.rescheduled.WithLabelValues(route).Add(float64(n))
}
func (m *Metrics) IngressConsuming(route string, consuming bool) {
	v := 0.0
	if consuming {
		v = 1
	}
	m.ingressConsuming.WithLabelValues(route).Set(v)
}
func (m *Metrics) IngressLag(route string, lag int64) {
	m.ingressLag.WithLabelValues(route).Set(float64(lag))
}

// countsCollector emits the message-count gauges from a CountsFunc, calling it at most
// once per StatsCacheTTL however many scrapes arrive.
type countsCollector struct {
	pending, inflight, dead *prometheus.Desc
	scrapeCache[map[string]admin.Counts]
}

func newCountsCollector(logger *slog.Logger) *countsCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, []string{"route"}, nil)
	}
	return &countsCollector{
		pending:  desc("messages_pending", "Messages parked in Redis waiting for their due time, per route (all shards)."),
		inflight: desc("messages_inflight", "Messages claimed and not yet acknowledged, per route (all shards)."),
		dead:     desc("messages_dead", "Messages in the dead letters, per route (all shards)."),
		scrapeCache: newScrapeCache[map[string]admin.Counts](func(err error) {
			logger.Warn("metrics: reading message counts failed", "err", err)
		}),
	}
}

func (c *countsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.inflight
	ch <- c.dead
}

func (c *countsCollector) Collect(ch chan<- prometheus.Metric) {
	counts, ok := c.get()
	if !ok {
		return
	}
	for route, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(n.Pending), route)
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(n.Inflight), route)
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(n.Dead), route)
	}
}
