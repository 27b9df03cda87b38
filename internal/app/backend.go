package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

var _ admin.Backend = (*Bridge)(nil)

// parts returns the running shardStore and scheduler, or ErrUnavailable before Run has
// connected to Redis.
func (b *Bridge) parts() (storeapi.Store, *scheduler.Scheduler, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shardStore == nil || !b.running {
		return nil, nil, fmt.Errorf("%w: %w", admin.ErrUnavailable, errNotRunning)
	}
	return b.shardStore, b.sched, nil
}

// storeErr maps shardStore errors onto the admin API's sentinels.
func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storeapi.ErrNotFound):
		return fmt.Errorf("%w: %w", admin.ErrNotFound, err)
	case fault.IsTransient(err):
		return fmt.Errorf("%w: redis: %w", admin.ErrUnavailable, err)
	}
	return err
}

// dueOf turns an admin When into a due time in unix ms, checking limits.max_delay.
func (b *Bridge) dueOf(w admin.When) (int64, error) {
	now := clock.NowMs(b.clk)
	due := now + w.Delay.Milliseconds()
	field := "delay_ms"
	if !w.DeliverAt.IsZero() {
		due, field = w.DeliverAt.UnixMilli(), "deliver_at"
	}
	if due < now {
		due = now
	}
	if due-now > b.cfg.Limits.MaxDelay.Milliseconds() {
		return 0, admin.Invalid(field, "due time is %d ms ahead, beyond limits.max_delay (%s)", due-now, b.cfg.Limits.MaxDelay)
	}
	return due, nil
}

// Schedule implements admin.Backend.
func (b *Bridge) Schedule(ctx context.Context, req admin.ScheduleRequest) (admin.Scheduled, error) {
	shardStore, sched, err := b.parts()
	if err != nil {
		return admin.Scheduled{}, err
	}
	rules, ok := b.rules[req.Route]
	if !ok {
		return admin.Scheduled{}, admin.Invalid("route", "no route named %q", req.Route)
	}
	if len(req.Payload) > b.cfg.Limits.MaxPayloadBytes {
		return admin.Scheduled{}, admin.Invalid("payload", "%d bytes, beyond limits.max_payload_bytes (%d)", len(req.Payload), b.cfg.Limits.MaxPayloadBytes)
	}
	due, err := b.dueOf(req.When)
	if err != nil {
		return admin.Scheduled{}, err
	}
	id := req.ID
	if id == "" {
		var r [16]byte
		_, _ = rand.Read(r[:])
		id = "http-" + hex.EncodeToString(r[:])
	}
	if len(id) > ingress.MaxIDBytes {
		return admin.Scheduled{}, admin.Invalid("id", "longer than %d bytes", ingress.MaxIDBytes)
	}
	keys := make([]string, 0, len(req.Headers))
	for k := range req.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := &envelope.Envelope{
		ID: id, Route: rules.Route, SourceBroker: envelope.BrokerHTTP, Source: "http",
		DueAt: due, ReceivedAt: clock.NowMs(b.clk), Key: req.Key, RoutingKey: req.RoutingKey, Payload: req.Payload,
	}
	for _, k := range keys {
		env.Headers = append(env.Headers, envelope.Header{Key: k, Value: req.Headers[k]})
	}
	b.obs.Received(rules.Route, 1)
	// The answer comes from the park script's own verdict for this id, not from reading
	// the state back (by then a pump may have claimed a message due soon).
	prior, err := sched.Park(ctx, []*envelope.Envelope{env}, nil)
	if err != nil {
		return admin.Scheduled{}, storeErr(fmt.Errorf("park: %w", err))
	}
	if prior[0] == storeapi.StateUnknown {
		return admin.Scheduled{ID: id, DueAt: due}, nil
	}
	out := admin.Scheduled{ID: id, Duplicate: true}
	if prior[0] == storeapi.StatePending {
		if st, score, _, err := shardStore.Get(ctx, id); err == nil && st == storeapi.StatePending {
			out.DueAt = score
		}
	}
	return out, nil
}

// Get implements admin.Backend.
func (b *Bridge) Get(ctx context.Context, id string) (admin.Message, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.Message{}, err
	}
	st, score, env, err := shardStore.Get(ctx, id)
	if err != nil && !errors.Is(err, envelope.ErrCorrupt) {
		return admin.Message{}, storeErr(err)
	}
	if st == storeapi.StateUnknown {
		return admin.Message{}, fmt.Errorf("%w: no message %q", admin.ErrNotFound, id)
	}
	m := admin.Message{ID: id, State: string(st)}
	if env != nil {
		m = messageOf(env, st)
	}
	switch st {
	case storeapi.StatePending:
		m.DueAt = score
	case storeapi.StateDead:
		m.DeadAt = score
	}
	return m, nil
}

func messageOf(env *envelope.Envelope, st storeapi.State) admin.Message {
	m := admin.Message{
		ID: env.ID, State: string(st), DueAt: env.DueAt, Route: env.Route, Source: env.Source,
		SourceBroker: env.SourceBroker, Target: env.Target, ReceivedAt: env.ReceivedAt,
		Attempt: int(env.Attempt), Reason: env.Reason, PayloadSize: len(env.Payload),
		RoutingKey: env.RoutingKey, RawKey: env.Key, RawPayload: append([]byte{}, env.Payload...),
	}
	if len(env.Headers) > 0 {
		m.Headers = make(map[string]string, len(env.Headers))
		for _, h := range env.Headers {
			m.Headers[h.Key] = string(egress.HeaderBytes(h.Value))
		}
	}
	return m
}

// Cancel implements admin.Backend.
func (b *Bridge) Cancel(ctx context.Context, id string) (string, error) {
	_, sched, err := b.parts()
	if err != nil {
		return "", err
	}
	// Whatever its route; an unknown id is answered 404 and leaves no tombstone.
	prior, err := sched.Cancel(ctx, id, storeapi.CancelOptions{})
	if err != nil {
		return "", storeErr(err)
	}
	switch prior {
	case storeapi.StateUnknown:
		return "", fmt.Errorf("%w: no message %q", admin.ErrNotFound, id)
	case storeapi.StateDelivered, storeapi.StateCancelled:
		return string(prior), fmt.Errorf("%w: %q was already %s", admin.ErrConflict, id, prior)
	}
	return string(prior), nil
}

// Reschedule implements admin.Backend.
func (b *Bridge) Reschedule(ctx context.Context, id string, when admin.When) (admin.Scheduled, error) {
	shardStore, sched, err := b.parts()
	if err != nil {
		return admin.Scheduled{}, err
	}
	due, err := b.dueOf(when)
	if err != nil {
		return admin.Scheduled{}, err
	}
	_, _, before, _ := shardStore.Get(ctx, id) // its route, for the count
	prior, err := shardStore.Reschedule(ctx, id, due)
	if err != nil {
		return admin.Scheduled{}, storeErr(err)
	}
	switch prior {
	case storeapi.StatePending, storeapi.StateDead:
		route := ""
		if before != nil {
			route = before.Route
		}
		b.obs.Rescheduled(route, 1)
		sched.Wake(ctx, map[int]int64{shardStore.ShardOf(id): due})
		return admin.Scheduled{ID: id, DueAt: due}, nil
	case storeapi.StateUnknown:
		return admin.Scheduled{}, fmt.Errorf("%w: no message %q", admin.ErrNotFound, id)
	}
	return admin.Scheduled{}, fmt.Errorf("%w: %q is %s", admin.ErrConflict, id, prior)
}

// Stats implements admin.Backend.
func (b *Bridge) Stats(ctx context.Context) (admin.Stats, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.Stats{}, err
	}
	shards, err := shardStore.ShardStats(ctx)
	if err != nil {
		return admin.Stats{}, storeErr(err)
	}
	out := admin.Stats{Instance: b.cfg.Instance, Shards: make([]admin.ShardStats, 0, len(shards))}
	for _, s := range shards {
		ss := admin.ShardStats{Shard: s.Shard, Counts: admin.Counts{Pending: s.Pending, Inflight: s.Inflight, Dead: s.Dead}, Owner: s.Owner}
		if s.NextDue > 0 {
			ss.NextDue = s.NextDue
		}
		out.Shards = append(out.Shards, ss)
		out.Totals.Pending += s.Pending
		out.Totals.Inflight += s.Inflight
		out.Totals.Dead += s.Dead
	}
	c, routes, _, err := b.routeCounts(ctx, shardStore, shards)
	if err != nil {
		return admin.Stats{}, storeErr(err)
	}
	for i, sc := range c.Shards {
		if i < len(out.Shards) && len(sc.Routes) > 0 {
			out.Shards[i].Routes = make(map[string]admin.Counts, len(sc.Routes))
			for r, n := range sc.Routes {
				out.Shards[i].Routes[r] = adminCounts(n)
			}
		}
	}
	exact := c.Exact()
	out.Routes = make(map[string]admin.Counts, len(routes))
	for _, r := range b.cfg.Routes {
		out.Routes[r.Name] = admin.Counts{}
	}
	for r, n := range routes {
		out.Routes[r] = adminCounts(n)
	}
	out.CountsExact = &exact
	members, err := shardStore.Members(ctx, clock.NowMs(b.clk), b.cfg.Scheduler.LeaseTTL)
	if err != nil {
		return admin.Stats{}, storeErr(err)
	}
	out.Members = members
	return out, nil
}

// RequeueDead implements admin.Backend.
func (b *Bridge) RequeueDead(ctx context.Context, id string) (admin.Scheduled, error) {
	shardStore, sched, err := b.parts()
	if err != nil {
		return admin.Scheduled{}, err
	}
	due := clock.NowMs(b.clk)
	if err := shardStore.RequeueDead(ctx, id, due); err != nil {
		return admin.Scheduled{}, storeErr(err)
	}
	sched.Wake(ctx, map[int]int64{shardStore.ShardOf(id): due})
	return admin.Scheduled{ID: id, DueAt: due}, nil
}
