package metrics

import (
	"context"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/prometheus/client_golang/prometheus"
)

// ChecksFunc runs the readiness checks (what /readyz reports), for the ready gauges.
type ChecksFunc func(ctx context.Context) []admin.Check

// SetChecks installs the source of the readiness gauges:
//
//	delaybridge_ready                 1 when every check passes, else 0
//	delaybridge_ready_check{check}    1 per passing check, 0 per failing one
//
// so a not-ready instance shows in Prometheus (and its alerts) as well as in /readyz,
// without kube-state-metrics. Until it is called the gauges are absent. Checks run at
// most once per StatsCacheTTL however many scrapes arrive.
func (m *Metrics) SetChecks(f ChecksFunc) {
	m.ready.set(func(ctx context.Context) ([]admin.Check, error) { return f(ctx), nil })
}

type readyCollector struct {
	ready, check *prometheus.Desc
	scrapeCache[[]admin.Check]
}

func newReadyCollector() *readyCollector {
	return &readyCollector{
		ready: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "ready"),
			"1 when every readiness check passes (what /readyz answers 200 for), else 0.", nil, nil),
		check: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "ready_check"),
			"1 per passing readiness check, 0 per failing one (redis, shards, ingress <route>, egress <broker>, amqp ...).",
			[]string{"check"}, nil),
		scrapeCache: newScrapeCache[[]admin.Check](nil),
	}
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
