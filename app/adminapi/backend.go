// Package adminapi implements admin.Backend — the HTTP API's view of a running
// bridge — over the shard store, the scheduler and the sources' and sinks' health.
// app builds it and attaches the running parts (Attach); it starts nothing.
package adminapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/app/series"
	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

var _ admin.Backend = (*Backend)(nil)

// Options are what the backend needs from the composition root for its whole life.
type Options struct {
	Config   config.Config            // the effective configuration (instance name filled in)
	Rules    map[string]ingress.Rules // each route's parsing rules, by route name
	Ping     func(ctx context.Context) error
	Clock    clock.Clock
	Observer observe.Observer
	Logger   *slog.Logger
	// Series is this instance's charts ring (GET /v1/series); nil = no history.
	Series *series.Recorder
	// Redis is Redis's state as a database (store/redisstore.Health), for the readiness
	// checks store and eviction; nil = not checked.
	Redis RedisHealth
}

// RedisHealth is what /readyz asks about Redis beyond PING (redisstore.Health).
type RedisHealth interface {
	// WriteCheck is nil unless Redis refuses writes for lack of memory.
	WriteCheck() error
	// PolicyCheck fails while a primary's maxmemory-policy may evict messages (or before
	// it was read); note is a caveat on a passing check.
	PolicyCheck() (note string, err error)
}

// Scheduler is what the backend asks of the running scheduler (scheduler.Scheduler).
type Scheduler interface {
	Park(ctx context.Context, envs []*envelope.Envelope, invalid []string) ([]storeapi.State, error)
	Replace(ctx context.Context, envs []*envelope.Envelope) ([]storeapi.ReplaceResult, error)
	Cancel(ctx context.Context, id string, opt storeapi.CancelOptions) (storeapi.State, error)
	Wake(ctx context.Context, minDue map[int]int64)
	Ready() bool
	// ClockCheck is nil while this instance's clock is within scheduler.max_clock_offset
	// of Redis's, otherwise why it is not claiming.
	ClockCheck() error
}

// ConnState is a broker connection as /readyz reads it (amqpconn.Manager).
type ConnState interface {
	Connected() bool
	LastError() error
}

// Conn is one named connection checked by /readyz ("amqp ingress", "amqp egress").
type Conn struct {
	Name  string
	State ConnState
}

// Runtime is what a running bridge hands the backend (Attach): the store, the
// scheduler, the job runner, and the sources, sinks and connections whose last known
// state /readyz and /v1/routes report.
type Runtime struct {
	Store   storeapi.Store
	Sched   Scheduler
	Jobs    interface{ Kick() }         // the bulk job runner, told to look at once
	Sources []ingress.Source            // one per route, in configuration order
	Sinks   map[string]egress.Sink      // by broker
	Routes  map[string]egress.RouteSink // by route name
	Conns   []Conn
	Planner interface{ Kick() } // the recurring schedules' planner, told to plan at once
}

// Backend implements admin.Backend (and admin.RouteLister) over a running bridge.
// Before Attach and after Detach every call answers admin.ErrUnavailable.
type Backend struct {
	cfg    config.Config
	rules  map[string]ingress.Rules
	ping   func(ctx context.Context) error
	clk    clock.Clock
	obs    observe.Observer
	log    *slog.Logger
	series *series.Recorder
	redis  RedisHealth

	mu      sync.Mutex
	rt      Runtime
	running bool
	due     nextDueCache // per-route next due times (counts.go)
}

// New builds a backend; it serves nothing until Attach.
func New(opts Options) *Backend {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Observer == nil {
		opts.Observer = observe.Nop{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Backend{cfg: opts.Config, rules: opts.Rules, ping: opts.Ping, clk: opts.Clock, obs: opts.Observer, log: opts.Logger, series: opts.Series,
		redis: opts.Redis}
}

// Attach makes the backend serve the running parts in rt.
func (b *Backend) Attach(rt Runtime) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rt, b.running = rt, true
}

// Detach makes the backend answer admin.ErrUnavailable again (the bridge stopped).
func (b *Backend) Detach() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running = false
}

var errNotRunning = errors.New("bridge is not running (waiting for Redis)")

// parts returns the running store and scheduler, or ErrUnavailable before the bridge
// has connected to Redis.
func (b *Backend) parts() (storeapi.Store, Scheduler, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rt.Store == nil || !b.running {
		return nil, nil, fmt.Errorf("%w: %w", admin.ErrUnavailable, errNotRunning)
	}
	return b.rt.Store, b.rt.Sched, nil
}

// runtime returns what Attach gave (zero before).
func (b *Backend) runtime() Runtime {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rt
}

// storeErr maps shardStore errors onto the admin API's sentinels.
func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storeapi.ErrNotFound):
		return fmt.Errorf("%w: %w", admin.ErrNotFound, err)
	case errors.Is(err, storeapi.ErrOrdered):
		return fmt.Errorf("%w: %w", admin.ErrConflict, err)
	case fault.IsTransient(err):
		return fmt.Errorf("%w: redis: %w", admin.ErrUnavailable, err)
	}
	return err
}

// dueOf turns an admin When into a due time in unix ms, checking limits.max_delay.
func (b *Backend) dueOf(w admin.When) (int64, error) {
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
func (b *Backend) Schedule(ctx context.Context, req admin.ScheduleRequest) (admin.Scheduled, error) {
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
	var prior []storeapi.State
	if req.Replace {
		res, err := sched.Replace(ctx, []*envelope.Envelope{env})
		if err != nil {
			return admin.Scheduled{}, storeErr(fmt.Errorf("replace: %w", err))
		}
		switch res[0].Outcome {
		case storeapi.ReplaceParked:
			return admin.Scheduled{ID: id, DueAt: due}, nil
		case storeapi.ReplaceReplaced:
			return admin.Scheduled{ID: id, DueAt: due, Replaced: true}, nil
		}
		prior = []storeapi.State{res[0].Prior}
	} else if prior, err = sched.Park(ctx, []*envelope.Envelope{env}, nil); err != nil {
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
func (b *Backend) Get(ctx context.Context, id string) (admin.Message, error) {
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
func (b *Backend) Cancel(ctx context.Context, id string) (string, error) {
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
func (b *Backend) Reschedule(ctx context.Context, id string, when admin.When) (admin.Scheduled, error) {
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
func (b *Backend) Stats(ctx context.Context) (admin.Stats, error) {
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
	out.Routes = make(map[string]admin.Counts, len(routes))
	for _, r := range b.cfg.Routes {
		out.Routes[r.Name] = admin.Counts{}
	}
	for r, n := range routes {
		out.Routes[r] = adminCounts(n)
	}
	members, err := shardStore.Members(ctx, clock.NowMs(b.clk), b.cfg.Scheduler.LeaseTTL)
	if err != nil {
		return admin.Stats{}, storeErr(err)
	}
	out.Members = members
	return out, nil
}

// RequeueDead implements admin.Backend.
func (b *Backend) RequeueDead(ctx context.Context, id string) (admin.Scheduled, error) {
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
