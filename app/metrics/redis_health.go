package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// redisHealth are the series of Redis as a database (store/redisstore: Health):
//
//	redis_maxmemory_policy{node,policy}  1 per Redis primary, labelled with its
//	                                     maxmemory-policy ("unknown" where it could not
//	                                     be read); a primary that left has no series
//	redis_oom_refusals_total             commands Redis refused for lack of memory
//	                                     (0 from start)
//	lost_claims_healed_total             claims whose reply was lost that their owner
//	                                     sent again and found in flight (0 from start)
type redisHealth struct {
	mu     sync.Mutex
	policy *prometheus.GaugeVec
	oom    prometheus.Counter
	healed prometheus.Counter
}

func newRedisHealth() *redisHealth {
	return &redisHealth{
		policy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "redis_maxmemory_policy",
			Help: "1 per Redis primary, labelled with its maxmemory-policy as last checked (every ownership round); any policy but noeviction may evict pending messages, unknown = neither CONFIG GET nor INFO answered."},
			[]string{"node", "policy"}),
		oom: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "redis_oom_refusals_total",
			Help: "Commands Redis refused because it is out of memory (used memory above maxmemory under noeviction); nothing was written and the bridge retries."}),
		healed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "lost_claims_healed_total",
			Help: "Claims whose reply was lost (timeout, reset connection, failed pipeline, migrating slot) that their owner sent again and found its messages in flight: fired at once rather than at the in-flight lease."}),
	}
}

func (r *redisHealth) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.policy, r.oom, r.healed}
}

// RedisPolicies implements observe.Observer: the series are replaced by the given set.
func (m *Metrics) RedisPolicies(policies map[string]string) {
	r := m.redis
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policy.Reset()
	for node, policy := range policies {
		r.policy.WithLabelValues(node, policy).Set(1)
	}
}

// RedisOOM implements observe.Observer.
func (m *Metrics) RedisOOM(n int) { m.redis.oom.Add(float64(n)) }

// ClaimHealed implements observe.Observer.
func (m *Metrics) ClaimHealed() { m.redis.healed.Inc() }
