package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Store is what the planner needs of the shard store.
type Store interface {
	storeapi.Sharding
	storeapi.Schedules
}

// Scheduler parks and cancels occurrences (scheduler.Scheduler: counts them, wakes the
// pumps, drops cancelled in-flight ones from the wheel).
type Scheduler interface {
	Park(ctx context.Context, envs []*envelope.Envelope, invalid []string) ([]storeapi.State, error)
	Cancel(ctx context.Context, id string, opt storeapi.CancelOptions) (storeapi.State, error)
}

// Options configure a Planner.
type Options struct {
	Store Store
	Sched Scheduler
	// Owns reports whether this instance owns a shard (the scheduler's leases): the
	// planner plans the schedules whose id's shard it owns, so a failover moves them
	// within the lease TTL.
	Owns func(shard int) bool
	// Route reports whether a route is configured.
	Route    func(name string) bool
	Clock    clock.Clock
	Observer observe.Observer
	Logger   *slog.Logger
	Interval time.Duration // between rounds; default 1s
	Horizon  time.Duration // slots are parked this far ahead; default 1m
	Grace    time.Duration // a slot older than this when first planned is catch-up; default 5s
	MaxSlots int           // slots parked per schedule and round; default 1000
}

// Planner parks the occurrences of the recurring schedules this instance owns ahead of
// their time, one round per Interval (or at once after Kick). Every round, for each
// owned schedule that changed, whose route came or went, or that has less than half the
// horizon planned (so a schedule costs two Redis calls per half horizon, not per round): a new generation (created, edited, paused, resumed) cancels the
// occurrences the previous one parked ahead; then the slots up to now+Horizon that
// were not decided yet are decided (Decide), the ones to publish parked with their
// deterministic ids, and the plan saved only if the schedule was not changed meanwhile
// (otherwise what was just parked is cancelled again). A paused schedule parks nothing.
type Planner struct {
	opt   Options
	kick  chan struct{}
	mu    sync.Mutex
	noted map[string]string // schedule id -> the problem last logged
}

// NewPlanner fills the defaults in.
func NewPlanner(opt Options) *Planner {
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	if opt.Observer == nil {
		opt.Observer = observe.Nop{}
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Interval <= 0 {
		opt.Interval = time.Second
	}
	if opt.Horizon <= 0 {
		opt.Horizon = time.Minute
	}
	if opt.Grace <= 0 {
		opt.Grace = 5 * time.Second
	}
	if opt.MaxSlots <= 0 {
		opt.MaxSlots = 1000
	}
	return &Planner{opt: opt, kick: make(chan struct{}, 1), noted: map[string]string{}}
}

// Kick runs a round soon (after a definition changed).
func (p *Planner) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run plans until ctx ends and returns ctx.Err(). A failed round is logged and the
// next one tries again.
func (p *Planner) Run(ctx context.Context) error {
	t := p.opt.Clock.NewTimer(0)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		case <-p.kick:
		}
		err := p.Round(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			p.opt.Logger.Warn("schedules: planning failed; retrying every round", "err", err)
			failing = true
		case err == nil && failing:
			p.opt.Logger.Info("schedules: planning works again")
			failing = false
		}
		t.Stop()
		t.Reset(p.opt.Interval)
	}
}

// Round plans every owned schedule once.
func (p *Planner) Round(ctx context.Context) error {
	recs, err := p.opt.Store.ListSchedules(ctx)
	if err != nil {
		return fmt.Errorf("list schedules: %w", err)
	}
	var errs []error
	for _, rec := range recs {
		if !p.opt.Owns(p.opt.Store.ShardOf(rec.ID)) {
			continue
		}
		if err := p.planOne(ctx, rec); err != nil {
			errs = append(errs, fmt.Errorf("schedule %s: %w", rec.ID, err))
		}
	}
	return errors.Join(errs...)
}

// note logs a schedule's problem once when it appears and once when it is gone.
func (p *Planner) note(id, problem string, args ...any) {
	p.mu.Lock()
	prev := p.noted[id]
	if problem == "" {
		delete(p.noted, id)
	} else {
		p.noted[id] = problem
	}
	p.mu.Unlock()
	switch {
	case problem != "" && prev != problem:
		p.opt.Logger.Warn("schedule: "+problem, append([]any{"schedule", id}, args...)...)
	case problem == "" && prev != "":
		p.opt.Logger.Info("schedule: planning again", "schedule", id, "was", prev)
	}
}

func (p *Planner) planOne(ctx context.Context, rec storeapi.ScheduleRecord) error {
	now := clock.NowMs(p.opt.Clock)
	def, err := Decode(rec.Def)
	var sp Spec
	if err == nil {
		sp, err = def.Validate()
	}
	if err != nil {
		p.note(rec.ID, "stored definition unreadable; not planned", "err", err)
		return nil
	}
	plan, err := DecodePlan(rec.Plan)
	if err != nil {
		p.note(rec.ID, "stored plan unreadable; planning from now", "err", err)
		plan, rec.PlanGen = Plan{}, 0
	}
	after := plan.Through
	routeOK := p.opt.Route(def.Route)
	if rec.PlanGen == rec.Gen && plan.RouteMissing == !routeOK && plan.Through-now >= p.opt.Horizon.Milliseconds()/2 {
		return nil // more than half the horizon still planned: refill later, in bulk
	}
	if rec.PlanGen != rec.Gen {
		// A new generation: what the previous one parked ahead goes; the new one
		// starts at its put, after any old slot already on its way out.
		after = rec.Updated - 1
		if taken, err := p.cancelParked(ctx, rec.ID, rec.PlanGen, plan); err != nil {
			return err
		} else if taken > after {
			after = taken
		}
		plan = Plan{Last: plan.Last}
	}
	plan.RouteMissing = !routeOK
	if !routeOK {
		p.note(rec.ID, "route is not configured; its slots are not published (outcome no_route)", "route", def.Route)
	} else {
		p.note(rec.ID, "")
	}
	w := Window{After: after, Now: now, Grace: p.opt.Grace.Milliseconds(), Horizon: p.opt.Horizon.Milliseconds(), Max: p.opt.MaxSlots}
	var decisions []Decision
	skipped := 0
	if def.Paused {
		plan.Through = now + w.Horizon // nothing parked; resuming is a new generation
	} else {
		decisions, skipped, plan.Through = Decide(&def, sp, w, routeOK)
	}
	parked, err := p.park(ctx, rec, &def, decisions, now)
	if err != nil {
		return err
	}
	plan.Route = def.Route
	plan.recordOutcomes(&def, decisions, parked, rec.Gen, now)
	raw, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	ok, err := p.opt.Store.SaveSchedulePlan(ctx, rec.ID, rec.Gen, raw)
	if err != nil {
		return err // parked ids are parked again, idempotently, next round
	}
	if !ok {
		// Changed or deleted while this round parked: take back what it parked (the
		// next round, or the delete, handles the rest).
		_, err := p.cancelParked(ctx, rec.ID, rec.Gen, Plan{Parked: parked, Route: def.Route})
		return err
	}
	if skipped > 0 {
		p.opt.Observer.ScheduleSlots(rec.ID, observe.SlotMissed, skipped)
	}
	for _, d := range decisions {
		p.opt.Observer.ScheduleSlots(rec.ID, d.Outcome, 1)
	}
	return nil
}

// park parks the decisions to publish and returns the future slots it parked.
func (p *Planner) park(ctx context.Context, rec storeapi.ScheduleRecord, def *Definition, ds []Decision, now int64) ([]int64, error) {
	var envs []*envelope.Envelope
	var future []int64
	for _, d := range ds {
		if d.Outcome != observe.SlotParked && d.Outcome != observe.SlotLate {
			continue
		}
		envs = append(envs, Occurrence(def, d.Slot, rec.Gen, now))
		if d.Slot > now {
			future = append(future, d.Slot)
		}
	}
	for len(envs) > 0 {
		n := min(len(envs), 500)
		if _, err := p.opt.Sched.Park(ctx, envs[:n], nil); err != nil {
			return nil, fmt.Errorf("park: %w", err)
		}
		envs = envs[n:]
	}
	return future, nil
}

// cancelParked cancels the occurrences plan parked ahead for generation gen (with a
// tombstone, so a late park of one by an instance that still plans the old generation
// is refused) and returns the latest of those slots that was already in flight or
// delivered (it stays published; 0 if none).
func (p *Planner) cancelParked(ctx context.Context, id string, gen int64, plan Plan) (int64, error) {
	var taken int64
	for _, slot := range plan.Parked {
		if plan.Route == "" {
			break
		}
		prior, err := p.opt.Sched.Cancel(ctx, OccurrenceID(id, slot, gen), storeapi.CancelOptions{Route: plan.Route, Tombstone: true})
		if err != nil && !errors.Is(err, storeapi.ErrOtherRoute) {
			return 0, err
		}
		if prior == storeapi.StateInflight || prior == storeapi.StateDelivered {
			taken = max(taken, slot)
		}
	}
	return taken, nil
}

// CancelParked is cancelParked for a deleted schedule (the admin backend's delete).
func CancelParked(ctx context.Context, sched Scheduler, rec storeapi.ScheduleRecord) error {
	plan, err := DecodePlan(rec.Plan)
	if err != nil {
		return err
	}
	p := &Planner{opt: Options{Sched: sched}}
	_, err = p.cancelParked(ctx, rec.ID, rec.PlanGen, plan)
	return err
}

// Occurrence is the message of one slot: an ordinary envelope with the deterministic
// id, due at the slot plus its jitter, from source "schedule/<id>".
func Occurrence(def *Definition, slot, gen, now int64) *envelope.Envelope {
	env := &envelope.Envelope{
		ID: OccurrenceID(def.ID, slot, gen), Route: def.Route, Target: def.Target,
		SourceBroker: envelope.BrokerHTTP, Source: SourcePrefix + def.ID,
		DueAt: def.Due(slot), ReceivedAt: now, RoutingKey: def.RoutingKey, Payload: []byte(def.Payload),
	}
	if def.Key != "" {
		env.Key = []byte(def.Key)
	}
	for _, k := range sortedHeaderKeys(def.Headers) {
		env.Headers = append(env.Headers, envelope.Header{Key: k, Value: def.Headers[k]})
	}
	return env
}

// SourcePrefix starts the source (x-delay-source) of every occurrence.
const SourcePrefix = "schedule/"

// recordOutcomes keeps the parked future slots (for a later cancel) and moves the
// slots that have passed, with every other decision, into Last.
func (pl *Plan) recordOutcomes(def *Definition, ds []Decision, future []int64, gen, now int64) {
	var last []Decision
	var ahead []int64
	for _, s := range pl.Parked {
		if s > now {
			ahead = append(ahead, s)
		} else {
			last = append(last, Decision{Slot: s, Due: def.Due(s), Outcome: observe.SlotParked, Gen: gen})
		}
	}
	for _, d := range ds {
		if d.Outcome == observe.SlotParked && d.Slot > now {
			continue // in future
		}
		d.Gen = gen
		last = append(last, d)
	}
	pl.Parked = append(ahead, future...)
	if len(last) > LastOutcomes {
		last = last[len(last)-LastOutcomes:]
	}
	pl.Last = append(pl.Last, last...)
	if len(pl.Last) > LastOutcomes {
		pl.Last = pl.Last[len(pl.Last)-LastOutcomes:]
	}
}
