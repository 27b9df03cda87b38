package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// liveFake is the fake with counts and next due computed from its messages, as a
// backend that keeps them incrementally reports them.
type liveFake struct{ *fakeBackend }

func (f liveFake) counts() (map[string]*Counts, map[string]int64) {
	c, next := map[string]*Counts{}, map[string]int64{}
	for _, m := range f.msgs {
		if m.Route == "" {
			continue
		}
		if c[m.Route] == nil {
			c[m.Route] = &Counts{}
		}
		switch m.State {
		case StatePending:
			c[m.Route].Pending++
			if n := next[m.Route]; n == 0 || m.DueAt < n {
				next[m.Route] = m.DueAt
			}
		case StateInflight:
			c[m.Route].Inflight++
		case StateDead:
			c[m.Route].Dead++
		}
	}
	return c, next
}

func (f liveFake) Stats(context.Context) (Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, _ := f.counts()
	st := Stats{Routes: map[string]Counts{}, Instance: "bridge-0", Members: []string{"bridge-0", "bridge-1"}, Shards: []ShardStats{}}
	for r, n := range c {
		st.Routes[r] = *n
		st.Totals.Pending += n.Pending
		st.Totals.Inflight += n.Inflight
		st.Totals.Dead += n.Dead
	}
	return st, nil
}

func (f liveFake) Routes(context.Context) (RoutesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, next := f.counts()
	out := RoutesResponse{Instance: "bridge-0"}
	for _, r := range []struct{ name, src, state, target string }{
		{"billing", "amqp:billing.delay", "consuming", "billing"},
		{"orders", "kafka:orders.delay", "consuming", "orders"},
	} {
		rs := RouteStatus{Name: r.name, Ready: true, Counts: c[r.name], NextDue: next[r.name],
			Ingress: IngressStatus{Source: r.src, State: r.state, Lag: 0},
			Egress:  EgressStatus{Broker: strings.Split(r.src, ":")[0], Target: r.target, Reachable: true}}
		if rs.Counts == nil {
			rs.Counts = &Counts{}
		}
		out.Routes = append(out.Routes, rs)
	}
	return out, nil
}

// NewConsoleBackend is the backend of admin's console test (TestConsole, package
// admin_test): the in-memory model of the contract with per-route counts, two dead
// letters on route orders, and a lateness histogram.
func NewConsoleBackend() (Backend, prometheus.Gatherer) {
	f := newFake()
	f.msgs = map[string]*Message{}
	f.now = time.Now().Truncate(time.Second)
	for i, reason := range []string{"publish: unroutable", "bad_delay"} {
		id := fmt.Sprintf("orders.delay/0/%d", 90+i)
		f.msgs[id] = &Message{ID: id, State: StateDead, Route: "orders", Reason: reason, Attempt: 10,
			DueAt: f.now.Add(-time.Hour).UnixMilli(), DeadAt: f.now.Add(-time.Duration(30-i) * time.Minute).UnixMilli(),
			Source: "orders.delay", SourceBroker: "kafka", RawPayload: []byte(`{"order":1}`), PayloadSize: 11}
	}
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: LatenessMetric,
		Buckets: []float64{0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1}}, []string{"route"})
	reg.MustRegister(h)
	for i := range 200 {
		h.WithLabelValues("orders").Observe(0.0008 + float64(i%10)*0.0002)
		h.WithLabelValues("billing").Observe(0.002 + float64(i%20)*0.0005)
	}
	return liveFake{f}, reg
}
