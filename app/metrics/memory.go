package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Memory is what the scheduler holds in memory against scheduler.max_in_memory_bytes.
type Memory struct {
	HeldBytes        int64   // bytes of the claimed messages in memory (wheel, egress)
	BudgetBytes      int64   // scheduler.max_in_memory_bytes
	Throttled        int64   // claims held back by the byte budget
	ThrottledSeconds float64 // total time they waited
	ClaimedAtPark    int64   // messages claimed as they were parked
	ClaimedByPump    int64   // messages claimed by the shards' claim calls
}

// SetMemory installs the source of the memory series, read at scrape time:
//
//	delaybridge_memory_held_bytes              bytes of claimed messages held in memory
//	delaybridge_memory_budget_bytes            scheduler.max_in_memory_bytes
//	delaybridge_claims_throttled_total         claims held back by the byte budget
//	delaybridge_claims_throttled_seconds_total how long they waited
//	delaybridge_messages_claimed_total{via}    messages claimed into memory, via="park"
//	                                           (as they were parked) or "claim"
//
// f reports false while there is nothing to read (the scheduler is not running yet);
// the series are absent then.
func (m *Metrics) SetMemory(f func() (Memory, bool)) { m.memory.f.Store(&f) }

type memoryCollector struct {
	f                                      atomic.Pointer[func() (Memory, bool)]
	held, budget, throttled, throttledTime *prometheus.Desc
	claimed                                *prometheus.Desc
}

func newMemoryCollector() *memoryCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, nil, nil)
	}
	return &memoryCollector{
		held: desc("memory_held_bytes",
			"Bytes of the claimed messages this instance holds in memory (wheel and egress): encoded envelope + 1 KiB each."),
		budget: desc("memory_budget_bytes", "scheduler.max_in_memory_bytes: the bound of memory_held_bytes."),
		throttled: desc("claims_throttled_total",
			"Claims held back because the messages due did not fit in scheduler.max_in_memory_bytes."),
		throttledTime: desc("claims_throttled_seconds_total", "Time claims waited for scheduler.max_in_memory_bytes."),
		claimed: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "messages_claimed_total"),
			"Messages claimed into memory to fire: via=\"park\" as they were parked (due within the lookahead), via=\"claim\" by the shards' claims.",
			[]string{"via"}, nil),
	}
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.budget
	ch <- c.throttled
	ch <- c.throttledTime
	ch <- c.claimed
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.f.Load()
	if f == nil {
		return
	}
	m, ok := (*f)()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(m.HeldBytes))
	ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, float64(m.BudgetBytes))
	ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, float64(m.Throttled))
	ch <- prometheus.MustNewConstMetric(c.throttledTime, prometheus.CounterValue, m.ThrottledSeconds)
	ch <- prometheus.MustNewConstMetric(c.claimed, prometheus.CounterValue, float64(m.ClaimedAtPark), "park")
	ch <- prometheus.MustNewConstMetric(c.claimed, prometheus.CounterValue, float64(m.ClaimedByPump), "claim")
}
