// Package app is the composition root: it assembles one delay-bridge instance from its
// configuration — the Redis shard store, the scheduler, the egress dispatcher and
// sinks, one ingress source per route, the bulk job runner — runs it and shuts it down
// in order. cmd/bridge runs it; the admin API reaches it through Backend
// (app/adminapi), to which Run attaches the running parts.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/app/adminapi"
	"github.com/delaybridge/delay-bridge/app/series"
	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/jobs"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/schedules"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Options are the parts of a bridge that are not configuration.
type Options struct {
	Logger   *slog.Logger
	Observer observe.Observer
	Clock    clock.Clock
	// Series, when set, is the ring behind the console's charts (GET /v1/series): Run
	// closes its intervals and writes them to Redis for the cluster view. The caller
	// feeds it through the Observer (series.Observe).
	Series *series.Recorder
	// Version is the bridge's version, reported as service.version on its traces.
	Version string
}

// Bridge is one running instance.
type Bridge struct {
	cfg   config.Config
	log   *slog.Logger
	obs   observe.Observer
	clk   clock.Clock
	rdb   redis.UniversalClient
	rules map[string]ingress.Rules

	series  *series.Recorder // the charts' ring (series.go); nil = none
	version string
	api     *adminapi.Backend
	health  *redisstore.Health // Redis's eviction policy and memory (/readyz, metrics)
	// admission: when this process takes its share of shards and Kafka partitions,
	// one decision for the scheduler and every Kafka source (membership.Admission).
	admission *membership.Admission

	mu    sync.Mutex
	sched *scheduler.Scheduler         // set by Run before ingress starts (handle uses it)
	dlq   map[string]egress.SideTarget // dead-letter publishers, by broker
	side  *egress.SidePublisher        // their queue (nil without a dead-letter target)

	receiptTargets map[string]egress.SideTarget // receipts publishers, by broker (receipts.go)
	receipts       *egress.Receipts             // nil when no route has receipts
}

// New checks the configuration and builds a bridge. It does not connect to anything:
// Run does, and waits for Redis and the brokers to become reachable.
func New(cfg config.Config, opts Options) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := checkTracing(); err != nil {
		return nil, err
	}
	if err := CheckSchedules(cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Observer == nil {
		opts.Observer = observe.Nop{}
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	rdb, err := NewRedis(cfg.Redis)
	if err != nil {
		return nil, err
	}
	b := &Bridge{cfg: cfg, log: opts.Logger, obs: opts.Observer, clk: opts.Clock, rdb: rdb, rules: map[string]ingress.Rules{},
		series: opts.Series, version: opts.Version, health: newHealth(rdb, cfg, opts),
		admission: membership.NewAdmission(cfg.Scheduler.LeaseTTL)}
	for _, r := range cfg.Routes {
		b.rules[r.Name] = ingress.Rules{
			Route: r.Name, MaxDelay: cfg.Limits.MaxDelay, MaxPayloadBytes: cfg.Limits.MaxPayloadBytes, AllowTargets: r.AllowTargets,
		}
	}
	b.api = adminapi.New(adminapi.Options{
		Config: cfg, Rules: b.rules, Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		Clock: b.clk, Observer: b.obs, Logger: b.log, Series: opts.Series, Redis: b.health,
	})
	return b, nil
}

// Config returns the effective configuration (with the instance name filled in).
func (b *Bridge) Config() config.Config { return b.cfg }

// Backend is the admin API's backend of this bridge: it answers admin.ErrUnavailable
// until Run has connected to Redis and after Run stopped.
func (b *Bridge) Backend() *adminapi.Backend { return b.api }

// MemoryStats reports what the scheduler holds against scheduler.max_in_memory_bytes;
// false until Run has started the scheduler.
func (b *Bridge) MemoryStats() (scheduler.CreditStats, bool) {
	b.mu.Lock()
	sched := b.sched
	b.mu.Unlock()
	if sched == nil {
		return scheduler.CreditStats{}, false
	}
	return sched.MemoryStats(), true
}

// Run connects, owns shards, consumes and fires until ctx is cancelled, then shuts down
// in this order (docs/ARCHITECTURE.md "Shutdown"): stop ingress (nothing new is parked;
// unacknowledged records are redelivered to whoever consumes next); stop the scheduler
// (pumps stop claiming; the wheel's unfired messages go back to `due`; the dispatcher
// finishes in-flight publishes and records outcomes; leases are released); close the
// sinks; close Redis.
func (b *Bridge) Run(ctx context.Context) error {
	defer b.rdb.Close()
	shardStore, err := b.connectStore(ctx)
	if err != nil {
		return err
	}
	if shardStore == nil {
		return nil // cancelled while waiting for Redis
	}
	conns := &connections{}
	defer conns.close()
	sinks, routeSinks, err := b.buildSinks(ctx, conns)
	defer func() {
		for name, s := range sinks {
			if err := s.Close(); err != nil {
				b.log.Warn("close sink", "broker", name, "err", err)
			}
		}
	}()
	if err != nil {
		return err
	}
	stopSides, err := b.startSides()
	if err != nil {
		return err
	}
	defer stopSides() // before the sinks close: their last attempt still publishes
	sources, err := b.buildSources(conns)
	if err != nil {
		return err
	}
	sched, err := b.newScheduler(shardStore)
	if err != nil {
		return err
	}
	tracer, stopTracing, err := b.startTracing(ctx)
	if err != nil {
		return err
	}
	defer stopTracing() // after the scheduler's stop below: every span has ended
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes: routeSinks, Completer: slotCounter{Completer: sched, obs: b.obs}, AtMostOnce: b.cfg.Delivery == config.DeliveryAtMostOnce,
		Owned: sched.Owns, Observer: b.obs, Logger: b.log, Clock: b.clk,
		PublishTimeout: PublishTimeout(b.cfg.Scheduler.InflightLease, b.cfg.Scheduler.Lookahead), Tracer: tracer,
		OnDelivered: b.onDelivered(),
	})
	runner := b.newJobRunner(shardStore, sched)
	planner := b.newPlanner(shardStore, sched)
	b.mu.Lock()
	b.sched = sched
	b.mu.Unlock()
	b.api.Attach(adminapi.Runtime{
		Store: shardStore, Sched: sched, Jobs: runner, Sources: sources, Sinks: sinks, Routes: routeSinks,
		Conns: conns.states(), Planner: planner,
	})

	schedCtx, stopSched := context.WithCancel(context.WithoutCancel(ctx))
	schedDone := make(chan error, 1)
	go func() { schedDone <- sched.Run(schedCtx, disp) }()
	stopJobs := b.startBackground(schedCtx, shardStore, runner, planner)

	errc, stopIngress := b.startIngress(ctx, sources)
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		b.log.Error("ingress failed; shutting down", "err", runErr)
	}
	b.log.Info("shutting down: stopping ingress")
	stopIngress()
	stopJobs()
	b.log.Info("shutting down: stopping scheduler")
	stopSched()
	if err := <-schedDone; err != nil && runErr == nil {
		runErr = err
	}
	b.api.Detach()
	b.log.Info("stopped")
	return runErr
}

// startBackground runs the background work that stops with ingress, before the
// scheduler: the bulk jobs (one stopped mid-way is resumed from its cursor by another
// instance once its heartbeat is stale), the charts' intervals (series.go) and the
// schedules' planner (schedules.go). stop cancels them and waits for all three.
func (b *Bridge) startBackground(ctx context.Context, shardStore storeapi.Store, runner *jobs.Runner, planner *schedules.Planner) (stop func()) {
	jobsCtx, cancel := context.WithCancel(ctx)
	jobsDone := make(chan struct{})
	go func() { defer close(jobsDone); _ = runner.Run(jobsCtx) }()
	seriesDone := b.runSeries(jobsCtx, shardStore)
	plannerDone := make(chan struct{})
	go func() { defer close(plannerDone); b.runSchedules(jobsCtx, shardStore, planner) }()
	return func() {
		cancel()
		<-jobsDone
		<-seriesDone
		<-plannerDone
	}
}

// startIngress runs every source on its own goroutine. The first source to fail sends
// its error on errc; stop cancels them all and waits until every Run has returned.
func (b *Bridge) startIngress(ctx context.Context, sources []ingress.Source) (errc <-chan error, stop func()) {
	ingressCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ch := make(chan error, len(sources))
	for _, src := range sources {
		wg.Add(1)
		go func(src ingress.Source) {
			defer wg.Done()
			if err := src.Run(ingressCtx, b.handle); err != nil {
				ch <- fmt.Errorf("ingress %s: %w", src.Name(), err)
			}
		}(src)
	}
	return ch, func() { cancel(); wg.Wait() }
}

// startDeadLetterCopies starts the queue of dead-letter copies when a dead-letter
// target is configured (nil otherwise). Run stops it after the scheduler and ingress,
// which are the ones offering to it.
func (b *Bridge) startDeadLetterCopies() (*egress.SidePublisher, error) {
	if len(b.dlq) == 0 {
		return nil, nil
	}
	side, err := egress.NewSidePublisher(egress.SideOptions{
		Queue: observe.SideQueueDeadLetters, Targets: b.dlq, MaxBacklogBytes: config.DeadLetterCopiesMaxBytes,
		Clock: b.clk, Observer: b.obs, Logger: b.log,
	})
	if err != nil {
		return nil, fmt.Errorf("dead-letter copies: %w", err)
	}
	side.Start()
	b.mu.Lock()
	b.side = side
	b.mu.Unlock()
	return side, nil
}

// newScheduler builds the scheduler from the configuration.
func (b *Bridge) newScheduler(shardStore storeapi.Store) (*scheduler.Scheduler, error) {
	sc := b.cfg.Scheduler
	return scheduler.New(scheduler.Options{
		Store: shardStore, Clock: b.clk, Instance: b.cfg.Instance,
		Tick: sc.Tick, Lookahead: sc.Lookahead, ParkClaimHorizon: sc.ParkClaimHorizon, ClaimBatch: sc.ClaimBatch, InflightLease: sc.InflightLease,
		LeaseTTL: sc.LeaseTTL, SafetyScan: sc.SafetyScan, MaxInMemory: sc.MaxInMemory, MaxInMemoryBytes: sc.MaxInMemoryBytes,
		MaxClockOffset: sc.MaxClockOffset,
		MaxAttempts:    b.cfg.Retry.MaxAttempts, BackoffInitial: b.cfg.Retry.Backoff.Initial, BackoffMax: b.cfg.Retry.Backoff.Max,
		OnDead: b.offerDead, OnCancelled: b.receipts.Cancelled, OnReplaced: b.receipts.Replaced, Observer: b.obs, Logger: b.log,
		AckInterval: b.ackInterval(), OnOwnershipRound: b.health.Check, Admission: b.admission,
	})
}

// ackInterval batches acknowledgements (scheduler.Options.AckInterval) under
// at-least-once delivery: acks are off the consumer's path, and each shard's ack is a
// script call whose fixed cost in Redis is several messages' own. At 50 ms an ack call
// carried 22 messages at 20k msgs/s over 64 shards and 9 at `shards: 1024`; at 250 ms
// 86 and 39 (the bench's script calls per message by script, docs/BENCHMARKS.md
// "Calls per message"). The price is in crashes: a killed instance's messages published in
// its last quarter second are published again by the next owner (at-least-once), as a
// Kafka consumer's auto-commit interval replays what it consumed since its last commit.
// At-most-once acknowledges before publishing, so there it stays synchronous.
func (b *Bridge) ackInterval() time.Duration {
	if b.cfg.Delivery == config.DeliveryAtMostOnce {
		return 0
	}
	return 250 * time.Millisecond
}

// coldOptions maps scheduler.cold_horizon (0 = off) onto the store's cold tier.
func coldOptions(horizon time.Duration) redisstore.ColdOptions {
	if horizon == 0 {
		return redisstore.ColdOptions{Horizon: -1}
	}
	return redisstore.ColdOptions{Horizon: horizon}
}

// connectStore waits for Redis (logging while it is down, retrying with the clock's
// Backoff) and opens the shard store. A wrong shard count is permanent and returned at
// once; nil, nil means ctx ended first.
func (b *Bridge) connectStore(ctx context.Context) (storeapi.Store, error) {
	bo := clock.NewBackoff(b.clk, clock.BackoffPolicy{Initial: 100 * time.Millisecond, Max: 5 * time.Second})
	for {
		shardStore, err := redisstore.New(ctx, b.rdb, redisstore.Options{
			Prefix: b.cfg.Prefix, Cluster: b.cfg.Cluster, Shards: b.cfg.Shards,
			DoneWindow: b.cfg.Scheduler.DoneWindow, MinReplicas: b.cfg.Redis.MinReplicas, Observer: b.obs, Clock: b.clk,
			Logger: b.log, Ordered: b.cfg.OrderedRoutes(), Cold: coldOptions(b.cfg.Scheduler.ColdHorizon),
			// Due buckets claim a bucket once all of it is due within the lookahead.
			Buckets: b.cfg.Scheduler.Lookahead >= redisstore.BucketWidth,
		})
		if err == nil {
			return shardStore, nil
		}
		if !fault.IsTransient(err) {
			return nil, fmt.Errorf("redis: %w", err)
		}
		b.log.Warn("waiting for redis", "addrs", strings.Join(b.cfg.Redis.Addrs, ","), "err", err)
		if bo.Wait(ctx) != nil {
			return nil, nil
		}
	}
}

// handle is the ingress Handler: the scheduler's intake (Scheduler.Accept) makes the
// batch durable; handle only says which invalid messages their route delivers anyway.
func (b *Bridge) handle(ctx context.Context, items []ingress.Item) error {
	b.mu.Lock()
	sched := b.sched
	b.mu.Unlock()
	in := make([]scheduler.Incoming, len(items))
	for i, it := range items {
		in[i] = scheduler.Incoming{Env: it.Env, Invalid: it.Invalid, CancelID: it.CancelID, Replace: it.Replace}
		if it.Invalid != "" && it.CancelID == "" {
			r := b.cfg.RouteByName(it.Env.Route)
			in[i].Deliver = r != nil && r.OnInvalid == config.OnInvalidDeliver
		}
	}
	return sched.Accept(ctx, in)
}

// offerDead queues copies of dead letters for the dead-letter topic/exchange
// (egress.SidePublisher): it never waits for a broker, so neither the ingress handler
// nor a dispatcher worker (its callers, through scheduler.Options.OnDead) is held up
// by a slow or unreachable dead-letter target. Redis keeps the dead letters regardless.
func (b *Bridge) offerDead(envs []*envelope.Envelope) {
	b.mu.Lock()
	side := b.side
	b.mu.Unlock()
	if side != nil {
		side.Offer(envs)
	}
	b.receipts.DeadLettered(envs)
}
