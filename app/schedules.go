package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/schedules"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Recurring schedules: the planner (a goroutine of Run, stopped with the bulk jobs,
// before the scheduler), the reconciliation of the config file's schedules at start,
// and the count of published occurrences.

// ScheduleFromConfig is the definition of a config-file schedule (origin config),
// validated; errors name the key (schedules[i].spec).
func ScheduleFromConfig(i int, s config.Schedule) (schedules.Definition, error) {
	d := schedules.Definition{
		ID: s.ID, Route: s.Route, Target: s.Target, Spec: s.Spec, Payload: s.Payload, Headers: s.Headers,
		Key: s.Key, RoutingKey: s.RoutingKey, JitterMs: s.Jitter.Milliseconds(), CatchUp: s.CatchUp,
		CatchUpLimit: s.CatchUpLimit, Paused: s.Paused, Origin: schedules.OriginConfig,
	}
	if len(d.Headers) == 0 {
		d.Headers = nil
	}
	d.Start, _ = time.Parse(time.RFC3339, s.Start) // config.Validate checked the form
	d.End, _ = time.Parse(time.RFC3339, s.End)
	d.Normalize()
	if _, err := d.Validate(); err != nil {
		field, msg, _ := strings.Cut(err.Error(), ": ")
		return d, &config.FieldError{Key: fmt.Sprintf("schedules[%d].%s", i, field), Msg: msg}
	}
	return d, nil
}

// CheckSchedules validates every config-file schedule's spec (what config.Validate,
// a leaf without the cron parser, cannot): run and check-config refuse a bad one.
func CheckSchedules(cfg config.Config) error {
	var errs []error
	for i, s := range cfg.Schedules {
		if _, err := ScheduleFromConfig(i, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// newPlanner builds the schedules' planner over the scheduler's ownership.
func (b *Bridge) newPlanner(st storeapi.Store, sched *scheduler.Scheduler) *schedules.Planner {
	return schedules.NewPlanner(schedules.Options{
		Store: st, Sched: sched, Owns: sched.OwnsShard,
		Route: func(name string) bool { return b.cfg.RouteByName(name) != nil },
		Clock: b.clk, Observer: b.obs, Logger: b.log,
		Interval: b.cfg.Scheduler.ScheduleInterval, Horizon: b.cfg.Scheduler.ScheduleHorizon,
	})
}

// runSchedules reconciles the config file's schedules (retrying while Redis is away),
// then plans until ctx ends.
func (b *Bridge) runSchedules(ctx context.Context, st storeapi.Store, p *schedules.Planner) {
	bo := clock.NewBackoff(b.clk, clock.BackoffPolicy{Initial: 200 * time.Millisecond, Max: 5 * time.Second})
	for {
		err := b.reconcileSchedules(ctx, st, p)
		if err == nil {
			break
		}
		b.log.Warn("schedules: reconciling the config file's schedules failed; retrying", "err", err)
		if bo.Wait(ctx) != nil {
			return
		}
	}
	_ = p.Run(ctx)
}

// reconcileSchedules makes the stored config-origin schedules those of the config
// file: adds new ones, rewrites changed ones (a new generation: their future slots are
// replaced), deletes the ones no longer there (their parked future slots cancelled).
// Schedules created over the API are left alone; one with the id of a config schedule
// is taken over by the config.
func (b *Bridge) reconcileSchedules(ctx context.Context, st storeapi.Store, p *schedules.Planner) error {
	stored, err := st.ListSchedules(ctx)
	if err != nil {
		return err
	}
	have := map[string]storeapi.ScheduleRecord{}
	for _, r := range stored {
		have[r.ID] = r
	}
	want := map[string]bool{}
	var added, changed, removed int
	for i, s := range b.cfg.Schedules {
		d, err := ScheduleFromConfig(i, s)
		if err != nil {
			return err // New checked them: a bug
		}
		want[d.ID] = true
		if r, ok := have[d.ID]; ok {
			if old, err := schedules.Decode(r.Def); err == nil && schedules.Same(old, d) {
				continue
			}
			changed++
		} else {
			added++
		}
		raw, err := d.Encode()
		if err != nil {
			return err
		}
		if _, err := st.PutSchedule(ctx, d.ID, raw, clock.NowMs(b.clk)); err != nil {
			return err
		}
	}
	sched := b.currentScheduler()
	for id, r := range have {
		old, err := schedules.Decode(r.Def)
		if want[id] || err != nil || old.Origin != schedules.OriginConfig {
			continue
		}
		rec, err := st.DeleteSchedule(ctx, id)
		if errors.Is(err, storeapi.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		removed++
		if err := schedules.CancelParked(ctx, sched, rec); err != nil {
			return err
		}
	}
	if added+changed+removed > 0 {
		b.log.Info("schedules: config file reconciled", "added", added, "changed", changed, "removed", removed)
		p.Kick()
	}
	return nil
}

func (b *Bridge) currentScheduler() *scheduler.Scheduler {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sched
}

// slotCounter is the dispatcher's Completer: the scheduler's, counting published
// occurrences of recurring schedules per schedule (schedule_slots_total{outcome=
// "published"}).
type slotCounter struct {
	egress.Completer
	obs observe.Observer
}

func (c slotCounter) Published(ctx context.Context, envs []*envelope.Envelope) {
	for _, e := range envs {
		if id, ok := strings.CutPrefix(e.Source, schedules.SourcePrefix); ok && e.SourceBroker == envelope.BrokerHTTP {
			c.obs.ScheduleSlots(id, observe.SlotPublished, 1)
		}
	}
	c.Completer.Published(ctx, envs)
}
