package adminapi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/ingress"
)

// Ready implements admin.Backend: nil when every check of Checks passes, otherwise an
// *admin.NotReadyError listing all of them, so /readyz names the failing ones.
func (b *Backend) Ready(ctx context.Context) error {
	checks := b.Checks(ctx)
	for _, c := range checks {
		if !c.OK {
			return &admin.NotReadyError{Checks: checks}
		}
	}
	return nil
}

// Checks runs the readiness checks, in this order: the bridge is running (connected to
// Redis once), Redis answers a PING, Redis accepts writes (not refusing them for lack
// of memory: store), no Redis primary's maxmemory-policy may evict messages (eviction;
// a passing check may carry a note), shard ownership is established, this instance's
// clock is within scheduler.max_clock_offset of Redis's (else it does not claim), every
// route's ingress is consuming (ingress.HealthReporter), every target broker is reachable
// (egress.HealthChecker) and the AMQP connections are up. Only the Redis PING calls a
// server; the rest read the last known state.
func (b *Backend) Checks(ctx context.Context) []admin.Check {
	var checks []admin.Check
	add := func(name string, err error) {
		c := admin.Check{Name: name, OK: err == nil}
		if err != nil {
			c.Detail = err.Error()
		}
		checks = append(checks, c)
	}
	_, sched, err := b.parts()
	if err != nil {
		add("bridge", err)
		return checks
	}
	add("redis", b.ping(ctx))
	if b.redis != nil {
		add("store", b.redis.WriteCheck())
		note, err := b.redis.PolicyCheck()
		add("eviction", err)
		if err == nil && note != "" {
			checks[len(checks)-1].Detail = note
		}
	}
	if sched.Ready() {
		add("shards", nil)
	} else {
		add("shards", fmt.Errorf("shard ownership not established yet"))
	}
	add("clock", sched.ClockCheck())
	for _, r := range b.routeStatuses() {
		if r.Ingress.State != stateUnknown {
			add("ingress "+r.Name, ingressErr(r.Ingress))
		}
	}
	checks = append(checks, b.egressChecks()...)
	for _, c := range b.runtime().Conns {
		if c.State.Connected() {
			add(c.Name, nil)
		} else {
			add(c.Name, fmt.Errorf("not connected: %v", c.State.LastError()))
		}
	}
	return checks
}

// stateUnknown is the ingress state of a source that does not report its health (none
// of the built-in ones): it is shown, and not checked.
const stateUnknown = "unknown"

// ingressErr is nil for a consuming ingress and otherwise says what it is doing.
func ingressErr(s admin.IngressStatus) error {
	if s.State == ingress.StateConsuming {
		return nil
	}
	if s.Detail != "" {
		return fmt.Errorf("%s %s (since %s): %s", s.Source, s.State, s.Since.UTC().Format(time.RFC3339), s.Detail)
	}
	return fmt.Errorf("%s %s (since %s)", s.Source, s.State, s.Since.UTC().Format(time.RFC3339))
}

// egressChecks reports one check per sink (per broker), not per route: routes to one
// broker share its sink.
func (b *Backend) egressChecks() []admin.Check {
	sinks := b.runtime().Sinks
	var out []admin.Check
	for _, broker := range slices.Sorted(maps.Keys(sinks)) {
		hc, ok := sinks[broker].(egress.HealthChecker)
		if !ok {
			continue
		}
		c := admin.Check{Name: "egress " + broker, OK: true}
		if err := hc.Healthy(); err != nil {
			c.OK, c.Detail = false, err.Error()
		}
		out = append(out, c)
	}
	return out
}

// Routes implements admin.RouteLister (GET /v1/routes) from the sources' and sinks' last
// known state; it calls no broker.
//
// Each route also gets its counts and next due time (counts.go): one HGETALL per shard,
// the shards' heads, and (every few seconds) a browse page per route. When Redis does
// not answer they are left out and the rest is still answered.
func (b *Backend) Routes(ctx context.Context) (admin.RoutesResponse, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.RoutesResponse{}, err
	}
	out := admin.RoutesResponse{Instance: b.cfg.Instance, Routes: b.routeStatuses()}
	shards, err := shardStore.ShardStats(ctx)
	if err != nil {
		b.log.Debug("routes: no counts", "err", err)
		return out, nil
	}
	_, counts, next, err := b.routeCounts(ctx, shardStore, shards)
	if err != nil {
		b.log.Debug("routes: no counts", "err", err)
		return out, nil
	}
	for i := range out.Routes {
		r := &out.Routes[i]
		c := adminCounts(counts[r.Name])
		r.Counts, r.NextDue = &c, next[r.Name]
	}
	return out, nil
}

// routeStatuses describes every configured route in configuration order.
func (b *Backend) routeStatuses() []admin.RouteStatus {
	rt := b.runtime()
	sources, routes := rt.Sources, rt.Routes
	out := make([]admin.RouteStatus, 0, len(b.cfg.Routes))
	for i, r := range b.cfg.Routes {
		st := admin.RouteStatus{Name: r.Name}
		st.Ingress = admin.IngressStatus{State: stateUnknown, Lag: -1}
		if i < len(sources) {
			st.Ingress.Source = sources[i].Name()
			if hr, ok := sources[i].(ingress.HealthReporter); ok {
				h := hr.Health()
				st.Ingress = admin.IngressStatus{
					Source: sources[i].Name(), State: h.State, Detail: h.Detail, Since: h.Since,
					Partitions: h.Partitions, Lag: h.Lag, Rebuilds: h.Rebuilds,
				}
				for _, p := range h.PartitionStates {
					st.Ingress.PartitionStates = append(st.Ingress.PartitionStates, admin.PartitionStatus{
						Partition: p.Partition, State: p.State, Detail: p.Detail, Since: p.Since,
						Lag: p.Lag, Committed: p.Committed, Resets: p.Resets})
				}
			}
		}
		st.Egress = egressStatus(r, routes[r.Name])
		st.Ready = (st.Ingress.State == ingress.StateConsuming || st.Ingress.State == stateUnknown) && st.Egress.Reachable
		out = append(out, st)
	}
	return out
}

func egressStatus(r config.Route, rs egress.RouteSink) admin.EgressStatus {
	es := admin.EgressStatus{Broker: rs.Broker, Reachable: true}
	switch {
	case r.To.Kafka != nil:
		es.Target = r.To.Kafka.Topic
	case r.To.AMQP != nil:
		es.Target = r.To.AMQP.Exchange
	}
	if hc, ok := rs.Sink.(egress.HealthChecker); ok {
		if err := hc.Healthy(); err != nil {
			es.Reachable, es.Detail = false, err.Error()
		}
	}
	return es
}
