package admin

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ChecksFunc runs the readiness checks (what /readyz reports), for the ready gauges.
type ChecksFunc func(ctx context.Context) []Check

// SetChecks installs the source of the readiness gauges:
//
//	delaybridge_ready                 1 when every check passes, else 0
//	delaybridge_ready_check{check}    1 per passing check, 0 per failing one
//
// so a not-ready instance shows in Prometheus (and its alerts) as well as in /readyz,
// without kube-state-metrics. Until it is called the gauges are absent. Checks run at
// most once per StatsCacheTTL however many scrapes arrive.
func (m *Metrics) SetChecks(f ChecksFunc) { m.ready.set(f) }

type readyCollector struct {
	ready, check *prometheus.Desc
	ttl          time.Duration
	now          func() time.Time

	mu      sync.Mutex // held while refreshing, so concurrent scrapes share one call
	f       ChecksFunc
	last    []Check
	fetched time.Time
}

func newReadyCollector() *readyCollector {
	return &readyCollector{
		ready: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "ready"),
			"1 when every readiness check passes (what /readyz answers 200 for), else 0.", nil, nil),
		check: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "ready_check"),
			"1 per passing readiness check, 0 per failing one (redis, shards, ingress <route>, egress <broker>, amqp ...).",
			[]string{"check"}, nil),
		ttl: StatsCacheTTL,
		now: time.Now,
	}
}

func (c *readyCollector) set(f ChecksFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f, c.last, c.fetched = f, nil, time.Time{}
}

func (c *readyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	ch <- c.check
}

func (c *readyCollector) Collect(ch chan<- prometheus.Metric) {
	checks, ok := c.get()
	if !ok {
		return
	}
	all := 1.0
	for _, k := range checks {
		v := 1.0
		if !k.OK {
			v, all = 0, 0
		}
		ch <- prometheus.MustNewConstMetric(c.check, prometheus.GaugeValue, v, k.Name)
	}
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, all)
}

func (c *readyCollector) get() ([]Check, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil, false
	}
	now := c.now()
	if c.fetched.IsZero() || now.Sub(c.fetched) >= c.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.last, c.fetched = c.f(ctx), now
		cancel()
	}
	return c.last, true
}
