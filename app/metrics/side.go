package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delay-bridge/internal/observe"
)

// sideMetrics are one side queue's series (egress.SidePublisher), named after the
// queue: <queue>_backlog{target}, <queue>_published_total{target},
// <queue>_failed_total{target}, <queue>_dropped_total{target,reason}.
type sideMetrics struct {
	backlog                    *prometheus.GaugeVec
	published, failed, dropped *prometheus.CounterVec
}

func newSideMetrics(queue string) *sideMetrics {
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: queue + "_" + name, Help: help}, labels)
	}
	return &sideMetrics{
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: queue + "_backlog",
			Help: "Copies waiting to be published to the target (bounded; see *_dropped_total)."}, []string{"target"}),
		published: c("published_total", "Copies the target accepted.", "target"),
		failed:    c("failed_total", "Copies whose publish failed; they are retried with backoff.", "target"),
		dropped: c("dropped_total",
			"Copies given up (the originals are kept): full = the backlog was full, permanent = refused by the target, shutdown = still queued at stop.",
			"target", "reason"),
	}
}

func (s *sideMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.backlog, s.published, s.failed, s.dropped}
}

func newSides() map[string]*sideMetrics {
	out := map[string]*sideMetrics{}
	for _, q := range observe.SideQueues {
		out[q] = newSideMetrics(q)
	}
	return out
}

// SideBacklog implements observe.Observer (an unknown queue is ignored).
func (m *Metrics) SideBacklog(queue, target string, n int) {
	if s := m.sides[queue]; s != nil {
		s.backlog.WithLabelValues(target).Set(float64(n))
	}
}

// SidePublished implements observe.Observer.
func (m *Metrics) SidePublished(queue, target string, n int) {
	if s := m.sides[queue]; s != nil {
		s.published.WithLabelValues(target).Add(float64(n))
	}
}

// SideFailed implements observe.Observer.
func (m *Metrics) SideFailed(queue, target string, n int) {
	if s := m.sides[queue]; s != nil {
		s.failed.WithLabelValues(target).Add(float64(n))
	}
}

// SideDropped implements observe.Observer.
func (m *Metrics) SideDropped(queue, target, reason string, n int) {
	if s := m.sides[queue]; s != nil {
		s.dropped.WithLabelValues(target, reason).Add(float64(n))
	}
}
